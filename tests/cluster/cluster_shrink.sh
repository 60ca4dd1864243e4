#!/usr/bin/env bash
# cluster_shrink: a 4-node cluster of network namespaces (scripts/cluster.sh, 1 Gbit/s
# uplinks), 2 ranks per node, a loop of 1000 all_reduce calls under mdring-run
# --on-failure shrink (cluster_probe shrink), and a node lost in the middle of it:
#   1. node 3's ranks killed (SIGKILL), then in a second job node 0's (rank 0 among
#      them; the job's store lives in mdring-run's process there), with --replace: the
#      others shrink to shm:2 x ethernet:3, the 2 processes mdring-run starts in their place join, and the job
#      grows back to shm:2 x ethernet:4; every call exact; mdring-run exits 0;
#   2. node 2's uplink cut: the others time out (MDRING_TIMEOUT=3 s), shrink to
#      shm:2 x ethernet:3 without it, and finish with exact sums; the cut node, which
#      sees everyone else gone, is 2 of 8 ranks and stops (MDRING_SHRINK_QUORUM=majority):
#      its ranks are left out, and mdring-run exits 0.
# Exit 77 (skipped) where namespaces cannot be made (not root, no ip netns).
#
#   cluster_shrink.sh MDRING_RUN CLUSTER_PROBE
set -uo pipefail
run=$1
probe=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
fail() {
  echo "cluster_shrink: FAILED: $*" >&2
  [ -f "${err:-}" ] && grep -v "UCX  WARN\|mdring-state" "$err" | cut -c1-300 >&2
  exit 1
}
# The time from the failure ($failed_at, wall-clock ms) to the last survivor's first
# completed call after it (cluster_probe's "resumed at"), at most $2 ms (the issue's
# targets: 2 s after a kill; the call's deadline + 1 s after a cut link).
resume_ms() {
  local last
  last=$(grep -o "resumed at [0-9]*" "$err" | awk '{print $3}' | sort -n | tail -1)
  [ -n "$last" ] || fail "$1: no survivor resumed"
  echo "$1: from the failure to the last survivor's first call after it: $((last - failed_at)) ms (at most $2)"
  [ $((last - failed_at)) -le "$2" ] || fail "$1: resumed $((last - failed_at)) ms after the failure, over $2"
}
source "$here/tests/cluster/cluster_lib.sh"
cluster_up cluster_shrink mdk 4
export UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n MDRING_HANG_REPORT=0

# 1. node N's ranks killed about 3 s into a loop of 1000 calls, under --replace: the
#    others shrink to shm:2 x ethernet:3; mdring-run starts 2 processes in the dead
#    ranks' place on node N, which join, and the members grow back to shm:2 x ethernet:4.
#    Node 3, then node 0, whose ranks include rank 0: the job's store lives in
#    mdring-run's own process there, not in rank 0, so the job grows back all the same.
out=/tmp/cluster_shrink.out.$$ err=/tmp/cluster_shrink.err.$$
for victim in 3 0; do
  MDRING_TIMEOUT=20 timeout 150 "$run" --hosts "$hosts" --agent "$agent" --on-failure shrink --replace "$probe" shrink \
    1000 grow >"$out" 2>"$err" &
  job=$!
  sleep 4
  failed_at=$(date +%s%3N)
  for pid in $(ip netns pids "mdk-n$victim"); do
    [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *cluster_probe* ]] && kill -9 "$pid"
  done
  wait $job
  rc=$?
  grep -v "^\[\|mdring-state\|UCX  WARN\|stopped waiting" "$err" | cut -c1-200 | head -24
  grep -v "UCX  WARN" "$out"
  [ "$rc" -eq 0 ] || fail "node $victim killed: mdring-run exited $rc"
  [ "$(grep -c "shrunk: shm:2 x ethernet:3 (6 ranks" "$err")" -eq 6 ] || fail "node $victim killed: not 6 survivors shrunk alike"
  [ "$(grep -c "joined: shm:2 x ethernet:4" "$err")" -eq 2 ] || fail "node $victim killed: not 2 replacements joined"
  grep -q "^ok shm:2 x ethernet:4 8 calls 1000" "$out" || fail "node $victim killed: no 'ok shm:2 x ethernet:4 8 calls 1000' line"
  resume_ms "node $victim killed" 2000
  echo "node $victim killed, replaced: passed"
done

# 2. node 2's uplink cut about 3 s into the loop: the others time out (3 s), shrink
#    without it (each wait of the agreement 0.2 s: MDRING_SHRINK_TIMEOUT) and finish
#    as shm:2 x ethernet:3.
MDRING_TIMEOUT=3 MDRING_SHRINK_TIMEOUT=0.2 MDRING_SHRINK_QUORUM=majority timeout 150 "$run" --hosts "$hosts" --agent "$agent" --on-failure shrink "$probe" shrink 1000 \
  >"$out" 2>"$err" &
job=$!
sleep 4
failed_at=$(date +%s%3N)
"${cluster[@]}" uplink down 10.213.0.3
wait $job
rc=$?
"${cluster[@]}" uplink up 10.213.0.3
grep -v "^\[\|mdring-state\|UCX  WARN\|stopped waiting" "$err" | cut -c1-200 | head -24
grep -v "UCX  WARN" "$out"
[ "$rc" -eq 0 ] || fail "uplink cut: mdring-run exited $rc"
[ "$(grep -c "^left out$" "$out")" -eq 2 ] || fail "uplink cut: the cut node's 2 ranks were not left out (quorum)"
[ "$(grep -c "shrunk: shm:2 x ethernet:3 (6 ranks" "$err")" -eq 6 ] || fail "uplink cut: not 6 survivors shrunk alike"
grep -q "^ok shm:2 x ethernet:3 6 calls 1000" "$out" || fail "uplink cut: no 'ok shm:2 x ethernet:3 6 calls 1000' line"
resume_ms "uplink cut" 4000
rm -f "$out" "$err"
echo "cluster_shrink: passed"
