#!/usr/bin/env bash
# cluster_torch_shrink: examples/torch_elastic.py (DDP, 20 steps) on a 4-node cluster of
# network namespaces (scripts/cluster.sh, 1 Gbit/s uplinks), 2 processes per node,
# under mdring-run --hosts --on-failure shrink: the last rank kills itself at step 5,
# the 6 processes of the other 3 nodes shrink (mdring_torch.shrink), reload the model
# from the new rank 0 and finish, each equal to a one-process run; its node-mate is
# left out; mdring-run exits 0. Exit 77 (skipped) without root and ip netns.
#
#   cluster_torch_shrink.sh MDRING_RUN PYTHON PYTHONPATH
set -uo pipefail
run=$1
python=$2
export PYTHONPATH=$3
here=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "cluster_torch_shrink: FAILED: $*" >&2; exit 1; }
source "$here/tests/cluster/cluster_lib.sh"
cluster_up cluster_torch_shrink mdt 4
export UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n MDRING_HANG_REPORT=0 OMP_NUM_THREADS=1
out=$(timeout 240 "$run" --hosts "$hosts" --agent "$agent" --on-failure shrink -x PYTHONPATH -x OMP_NUM_THREADS \
  -x UCX_TLS -x UCX_WARN_UNUSED_ENV_VARS -x MDRING_HANG_REPORT "$python" "$here/examples/torch_elastic.py" 2>&1)
rc=$?
echo "$out" | grep -v "UCX  WARN\|^\[" | grep -v ", step [45]: mdring" | cut -c1-200
[ "$rc" -eq 0 ] || fail "mdring-run exited $rc"
echo "$out" | grep -q "step [45]: shrunk to 6 ranks (old ranks \[0, 1, 2, 3, 4, 5\]), ucx, topology shm:2 x ethernet:3" ||
  fail "no 'shrunk to 6 ranks ... shm:2 x ethernet:3' line"
[ "$(echo "$out" | grep -o "of 6, 20 steps, largest difference from one process [0-9.e+-]*: ok" | wc -l)" -eq 6 ] ||
  fail "not 6 survivors equal to the one-process run"
echo "$out" | grep -q "process 6: left out" || fail "rank 6, the dead rank's node-mate, was not left out"
echo "cluster_torch_shrink: passed"
