#!/bin/bash
# tests/ucx/hang_report.sh: the hang report end to end (mdring-run, UCX world, 3 processes on this machine):
#   1. a rank stopped (SIGSTOP) longer than the deadline: the others fail within
#      it with timeout_error naming the stopped rank, each writes its state line,
#      and mdring-run's table says the stopped rank wrote no line (behind);
#   2. MDRING_STATE_SIGNAL=USR1 sent to mdring-run while rank 1 is late: every
#      rank answers, the table shows ranks 0 and 2 waiting in call 2, rank 1 idle
#      at call 1, and says rank 1 is behind; the job then completes (exit 0).
# Neither shows the job's secret.
# usage: hang_report.sh MDRING_RUN HANG_PROBE
set -u
run=$1 probe=$2
out=$(mktemp -d /tmp/mdring-hang-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; echo "---- output"; cat "$out/log"; exit 1; }
# A known secret, to check that no line, table or error message shows it.
export MDRING_SECRET=hang-report-secret-5f2c9e0b7d1a4c38
no_secret() { ! grep -q "$MDRING_SECRET" "$out/log" || fail "the secret appears in the output"; }

# 1. stopped
HANG_PROBE_TIMEOUT=2 timeout 60 "$run" -n 3 --grace 1 "$probe" stop > "$out/log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "the job with a stopped rank exited 0"
[ $rc -ne 124 ] || fail "the job with a stopped rank hung (killed by timeout)"
for r in 0 2; do
  grep -q "hang_probe: rank $r failed: .*timed out after 2 s.*waiting for rank 1" "$out/log" ||
    fail "rank $r did not fail at its deadline naming rank 1"
  grep -Eq "^mdring-state: rank=$r size=3 .* call=2 done=1 state=failed collective=all_reduce type=float op=sum count=1000 .* link=ethernet:3 peer=1 " "$out/log" ||
    fail "rank $r wrote no state line naming peer 1"
done
grep -q "mdring-run: hang report (the job failed)" "$out/log" || fail "no table after the failure"
grep -Eq "^  1 +[0-9]+ +\(no line: the process did not answer" "$out/log" || fail "the table does not show rank 1 silent"
grep -q "mdring-run: behind: rank 1 wrote no line" "$out/log" || fail "the table does not name rank 1 behind"
no_secret
echo "stopped rank: ok"

# 2. on demand: once every rank is past call 1 (ready files), the signal; rank 1
# goes on only once the table is out (the go file).
MDRING_STATE_SIGNAL=USR1 timeout 120 "$run" -n 3 "$probe" late "$out" > "$out/log" 2>&1 &
job=$!
for i in $(seq 600); do [ -f "$out/ready.0" ] && [ -f "$out/ready.1" ] && [ -f "$out/ready.2" ] && break; sleep 0.1; done
sleep 0.5
pkill -USR1 -f -x "$run -n 3 $probe late $out" || kill -USR1 "$job"
for i in $(seq 300); do grep -q "mdring-run: behind:" "$out/log" && break; sleep 0.1; done
touch "$out/go"
wait "$job"
rc=$?
[ $rc -eq 0 ] || fail "the late job exited $rc"
grep -q "mdring-run: hang report (on SIGUSR1)" "$out/log" || fail "no table on SIGUSR1"
for r in 0 2; do
  # (recv: a program's message; group: the one-shot path's arrival, 1000 floats on one node)
  grep -Eq "^  $r +[0-9]+ +[0-9]+ +2 +waiting +all_reduce +1000 .*ethernet:3.* rank 1 (recv|group)" "$out/log" ||
    grep -Eq "^  $r +[0-9]+ +[0-9]+ +2 +waiting +all_reduce +1000 .*ethernet:3.* rank [02] (recv|send)" "$out/log" ||
    fail "rank $r is not shown waiting in call 2"
done
grep -Eq "^  1 +[0-9]+ +[0-9]+ +1 +idle " "$out/log" || fail "rank 1 is not shown idle at call 1"
grep -q "mdring-run: behind: rank 1 at call 1 while others reached call 2" "$out/log" || fail "rank 1 not named behind"
[ "$(grep -c '^mdring-state: ' "$out/log")" -ge 3 ] || fail "fewer than 3 state lines on stderr"
no_secret
echo "on demand: ok"
