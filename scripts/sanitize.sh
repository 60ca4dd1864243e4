#!/usr/bin/env bash
# Sanitizer runs of the host tests, through the CMake presets asan and tsan.
#
#   scripts/sanitize.sh thread    # ThreadSanitizer: the threads transport, the
#                                 # collectives and the nonblocking calls (their
#                                 # progress agent and the threads that wait)
#   scripts/sanitize.sh address   # AddressSanitizer + UBSan: every host unit test
#   scripts/sanitize.sh           # both
#   scripts/sanitize.sh --ci      # what CI runs in its time: TSan on the executor's
#                                 # tests (test_requests, test_hang_report), ASan +
#                                 # UBSan on test_hang_report and the store
#                                 # (test_tcp_store); the parsers get ASan + UBSan
#                                 # in the fuzz targets
#
# Builds in build-tsan/ and build-asan/; exits non-zero if any test fails or a
# sanitizer reports anything (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
ci=0
if [ "${1:-}" = --ci ]; then ci=1; shift; fi
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(thread address)
# One kind: configure, build its tests, run them; non-zero if any failed.
run_kind() {
  local kind=$1 preset tests t bin status=0
  case "$kind" in
    thread)
      preset=tsan
      tests=(test_transport test_requests test_collectives test_collectives_ops test_collectives_planning
             test_errors test_errors_bind test_errors_peers test_program test_hang_report test_tcp_store
             test_one_shot test_one_shot_timing test_p2p_mailbox)
      [ $ci = 1 ] && tests=(test_requests test_hang_report)
      export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
      ;;
    address)
      preset=asan
      tests=(test_topology test_topology_text test_plan test_plan_blocks test_plan_cost test_plan_algorithms test_plan_profile
             test_schedule test_program test_device_select test_reduce test_reduce_types test_reduce_ops
             test_memory test_transport
             test_collectives test_collectives_ops test_collectives_planning
             test_errors test_errors_bind test_errors_peers test_requests test_hang_report test_tcp_store)
      [ $ci = 1 ] && tests=(test_hang_report test_tcp_store)  # (the parsers: the fuzz targets, also ASan + UBSan)
      export ASAN_OPTIONS="detect_leaks=1 detect_stack_use_after_return=0" UBSAN_OPTIONS="print_stacktrace=1"
      ;;
    *) echo "usage: $0 [--ci] [thread|address]..." >&2; return 2 ;;
  esac
  cmake --preset "$preset" >/dev/null || return 1
  cmake --build --preset "$preset" -j "$(mdring_jobs)" --target "${tests[@]}" || return 1
  for t in "${tests[@]}"; do
    echo "== $kind: $t"
    bin=$(find "build-$preset/tests" -name "$t" -type f -perm -u+x | head -1)
    if ! MDRING_TIMEOUT=120 "$bin"; then
      echo "== $kind: $t FAILED"
      status=1
    fi
  done
  return $status
}

status=0
if [ ${#kinds[@]} -eq 1 ]; then
  run_kind "${kinds[0]}" || status=1
else
  # The kinds at once, each into its own log, printed when it ends: the Makefiles
  # build the targets named on one command line one after another, so each kind
  # alone keeps about one core busy (CI's sanitizer step: 3.0 minutes one after
  # the other).
  logs=() pids=()
  for kind in "${kinds[@]}"; do
    log=$(mktemp "${TMPDIR:-/tmp}/mdring-sanitize-$kind.XXXXXX")
    echo "== $kind: building and running (its output follows when it ends)"
    run_kind "$kind" >"$log" 2>&1 &
    logs+=("$log") pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "${logs[$i]}"
    rm -f "${logs[$i]}"
  done
fi
exit $status
