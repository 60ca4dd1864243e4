#!/bin/bash
# Runs a libFuzzer target for SECONDS on CORPUS (read only: new inputs go to a
# scratch directory, removed after). Exits non-zero on any finding (crash, leak,
# sanitizer report, timeout of one input over 10 s), and prints the run's figures.
# usage: run_fuzz.sh TARGET CORPUS SECONDS [libFuzzer options...]
set -u
target=$1 corpus=$2 seconds=$3
shift 3
work=$(mktemp -d /tmp/mdring-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir new
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" new "$corpus" \
  > log 2>&1
rc=$?
grep -E "^Done|stat::number_of_executed_units|stat::new_units_added" log
if [ $rc -ne 0 ]; then
  echo "FAIL: $(basename "$target") found something (exit $rc); the input:"
  ls crash-* leak-* timeout-* oom-* 2>/dev/null | head -3 | while read -r f; do xxd "$f" | head -20; done
  tail -60 log
  exit 1
fi
