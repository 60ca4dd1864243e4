#!/usr/bin/env bash
# Sanitizer runs of the host tests (not part of CI: two extra builds of the
# template-heavy tests take longer than CI's budget on 2 cores).
#
#   scripts/sanitize.sh thread    # ThreadSanitizer: the threads transport, the
#                                 # collectives and the nonblocking calls (their
#                                 # progress agent and the threads that wait)
#   scripts/sanitize.sh address   # AddressSanitizer + UBSan: every host unit test
#   scripts/sanitize.sh           # both
#
# Builds in build-tsan/ and build-asan/; exits non-zero if any test fails or a
# sanitizer reports anything (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(thread address)
status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    thread)
      dir=build-tsan
      flags="-fsanitize=thread"
      tests=(test_transport test_requests test_collectives test_errors test_program)
      export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
      ;;
    address)
      dir=build-asan
      flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
      tests=(test_topology test_plan test_schedule test_program test_device_select test_reduce test_memory
             test_transport test_collectives test_errors test_requests)
      export ASAN_OPTIONS="detect_leaks=1 detect_stack_use_after_return=0" UBSAN_OPTIONS="print_stacktrace=1"
      ;;
    *) echo "usage: $0 [thread|address]..." >&2; exit 2 ;;
  esac
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g $flags -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DMDRING_CUDA=OFF -DMDRING_BUILD_EXAMPLES=OFF -DMDRING_BUILD_BENCHMARKS=OFF \
    -DMDRING_ENABLE_MPI=OFF >/dev/null
  cmake --build "$dir" -j "$(mdring_jobs)" --target "${tests[@]}"
  for t in "${tests[@]}"; do
    echo "== $kind: $t"
    if ! MDRING_TIMEOUT=120 "$dir/tests/$t"; then
      echo "== $kind: $t FAILED"
      status=1
    fi
  done
done
exit $status
