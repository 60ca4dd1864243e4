#!/bin/sh
# expect_text.sh COUNT TEXT COMMAND...: runs COMMAND, prints its output, and passes
# when it exits 0 and its output holds TEXT COUNT times (what a test prints where
# it cannot exit non-zero itself, as on a completion thread at exit). Occurrences,
# not lines: two processes' lines may share one.
count=$1 text=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
got=$(printf '%s\n' "$out" | grep -o -F -- "$text" | wc -l)
[ "$rc" = 0 ] || { echo "expect_text.sh: the command exited $rc" >&2; exit 1; }
[ "$got" -eq "$count" ] || { echo "expect_text.sh: \"$text\" $got times, not $count" >&2; exit 1; }
