#!/usr/bin/env bash
# cluster_torch: torchrun --nnodes 2 across two namespaces of scripts/cluster.sh
# (1 Gbit/s uplinks), 2 processes per node: tests/torch/test_ddp.py's DDP under the
# mdring backend against gloo over TCP between the nodes (gradients within float32
# tolerance at every step, parameters bitwise equal across ranks after 10 steps,
# the two trainings within 1e-6). Exit 77 (skipped) without root and ip netns.
#
#   cluster_torch.sh PYTHON PYTHONPATH [VARIANT...]
set -uo pipefail
py=$1
pypath=$2
shift 2
here=$(cd "$(dirname "$0")/../.." && pwd)
cluster=("$here/scripts/cluster.sh" --name mdt)
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add mdt-probe 2>/dev/null; then
  echo "cluster_torch: skipped (needs root and ip netns)"
  exit 77
fi
ip netns del mdt-probe
trap '"${cluster[@]}" down' EXIT
"${cluster[@]}" up 2 --uplink 1gbit || exit 1
port=$((29700 + RANDOM % 200))
pids=()
for i in 0 1; do
  "${cluster[@]}" exec "$i" env PYTHONPATH="$pypath" GLOO_SOCKET_IFNAME=eth0 UCX_TLS=tcp OMP_NUM_THREADS=1 \
    MDRING_TIMEOUT=120 timeout 280 "$py" -m torch.distributed.run --nnodes 2 --node_rank "$i" --nproc_per_node 2 \
    --master_addr 10.213.0.1 --master_port "$port" --redirects 1 --tee 1 --monitor_interval 0.25 \
    "$here/tests/torch/test_ddp.py" "$@" 2>&1 | sed "s/^/[node $i] /" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
