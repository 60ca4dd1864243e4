#!/usr/bin/env bash
# cluster_smoke: a 2-node cluster of network namespaces (scripts/cluster.sh, 1 Gbit/s
# uplinks), 2 ranks per node, and what a user runs on it:
#   1. mdring-run --hosts through the cluster's agent: the ranks see 2 nodes
#      (topology shm:2 x ethernet:2, detected) and all_reduce exactly over TCP;
#   2. Open MPI across the same namespaces (plm_rsh_agent = the agent): its daemons
#      start on both nodes and each node's processes see that node's name;
#   3. a node's uplink cut during all_reduce: the other node's ranks fail within
#      their deadline (MDRING_TIMEOUT=3 s), naming a rank and its host, and mdring-run exits
#      non-zero naming the failed host; nothing is left running;
#   4. a node's ranks killed: the others name a dead rank and its host within 2 s (+ grace);
#   5. the store's host unreachable at rendezvous: a clear error naming it.
# Exit 77 (skipped) where namespaces cannot be made (not root, no ip netns).
#
#   cluster_smoke.sh MDRING_RUN CLUSTER_PROBE
set -uo pipefail
run=$1
probe=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
cluster=("$here/scripts/cluster.sh" --name mds)
agent="$here/scripts/cluster.sh --name mds agent"
fail() { echo "cluster_smoke: FAILED: $*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add mds-probe 2>/dev/null; then
  echo "cluster_smoke: skipped (needs root and ip netns)"
  exit 77
fi
ip netns del mds-probe
trap '"${cluster[@]}" down' EXIT
"${cluster[@]}" up 2 --uplink 1gbit || fail "cluster.sh up"
hosts=$("${cluster[@]}" hosts 2)
export UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n MDRING_TIMEOUT=60

# 1. exact all_reduce across the nodes, topology detected from the hosts.
out=$(timeout 120 "$run" --hosts "$hosts" --agent "$agent" "$probe" check) || fail "check exited $?: $out"
echo "$out"
[[ "$out" == "ok shm:2 x ethernet:2 "* ]] || fail "expected 'ok shm:2 x ethernet:2 ...', got '$out'"

# 2. Open MPI's daemons through the same agent: each node answers with its own name.
if command -v mpirun >/dev/null; then
  names=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 "${cluster[@]}" exec 0 mpirun \
    --host "$hosts" -n 4 --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include eth0 hostname | sort | uniq -c |
    awk '{ print $2 "x" $1 }' | tr '\n' ' ')
  [ "$names" = "mds-n0x2 mds-n1x2 " ] || fail "mpirun across the namespaces ran on '$names'"
  echo "mpirun: $names"
fi

# 3. node 1's uplink cut while every rank is in all_reduce.
start=$SECONDS
MDRING_TIMEOUT=3 timeout 60 "$run" --hosts "$hosts" --agent "$agent" --grace 2 "$probe" loop 30 \
  >/tmp/cluster_smoke.out.$$ 2>/tmp/cluster_smoke.err.$$ &
job=$!
sleep 3
"${cluster[@]}" uplink down 10.213.0.2
wait $job
rc=$?
took=$((SECONDS - start))
err=$(cat /tmp/cluster_smoke.err.$$)
rm -f /tmp/cluster_smoke.out.$$ /tmp/cluster_smoke.err.$$
echo "$err" | grep -v "^\[" | head -8
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "uplink cut: mdring-run exited $rc (124: it hung)"
echo "$err" | grep -q "cluster_probe: rank [0-3] failed: .*timed out .*waiting for rank [0-3] (host mds-n[01])" ||
  fail "uplink cut: no rank's error names the peer rank and its host"
echo "$err" | grep -q "mdring-run: host 10.213.0.[12] (ranks [0-3]-[0-3]) failed" || fail "uplink cut: the failed host is not named"
[ "$took" -lt 40 ] || fail "uplink cut: took $took s"
echo "uplink cut: exit $rc after $took s"
"${cluster[@]}" uplink up 10.213.0.2

# 4. node 1's ranks killed (SIGKILL) during all_reduce, no deadline near: node 0's
#    ranks fail naming a dead rank, well within 2 s of the kill plus the grace period.
MDRING_TIMEOUT=60 timeout 90 "$run" --hosts "$hosts" --agent "$agent" --grace 1 "$probe" loop 60 \
  >/dev/null 2>/tmp/cluster_smoke.err.$$ &
job=$!
sleep 3
killed=$SECONDS
for pid in $(ip netns pids mds-n1); do
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *cluster_probe* ]] && kill -9 "$pid"
done
wait $job
rc=$?
took=$((SECONDS - killed))
err=$(cat /tmp/cluster_smoke.err.$$)
rm -f /tmp/cluster_smoke.err.$$
echo "$err" | grep -v "^\[" | head -6
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "ranks killed: mdring-run exited $rc (124: it hung)"
echo "$err" | grep -q "cluster_probe: rank [01] failed: .*rank [23] (host mds-n1) failed" ||
  fail "ranks killed: node 0's ranks do not name a dead rank and its host"
echo "$err" | grep -q "timed out" && fail "ranks killed: a rank waited for its deadline instead of seeing the failure"
[ "$took" -le 6 ] || fail "ranks killed: the job took $took s to end after the kill"
echo "ranks killed: exit $rc, $took s after the kill"

# 5. the store's host (node 0, rank 0's) unreachable while node 1's ranks rendezvous.
"${cluster[@]}" uplink down 10.213.0.1
out=$(MDRING_TIMEOUT=3 MDRING_STORE_PORT=29611 timeout 60 "$run" --hosts "$hosts" --master-port 29610 --grace 8 \
  --agent "$agent" "$probe" check 2>&1)
rc=$?
echo "$out" | grep -v "^\[" | head -6
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "store unreachable: exited $rc (124: it hung)"
echo "$out" | grep -q "cluster_probe: rank [23] failed: .*10.213.0.1:29611" ||
  fail "store unreachable: node 1's ranks do not name the store 10.213.0.1:29611"
"${cluster[@]}" uplink up 10.213.0.1
echo "cluster_smoke: passed"
