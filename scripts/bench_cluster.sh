#!/usr/bin/env bash
# mdring's claim on a real network stack: 4 "nodes" x 2 ranks, each node a
# network namespace of scripts/cluster.sh with its uplink shaped by tbf, all_reduce of
# float (sum) at 1, 16 and 64 MiB, in one run per size and uplink:
#   - mdring over UCX (`shm:2 x ethernet:4`, processes from mdring-run --hosts through
#     the cluster's agent) against Gloo (TCP, the faster of its ring_chunked and
#     halving_doubling) on the same processes and buffers (mdring-bench --baseline gloo);
#   - mdring over Open MPI against MPI_Allreduce (mpirun across the namespaces, its
#     plm_rsh_agent the same agent, TCP between nodes, shared memory inside one);
#   - both against the uplink bound 2 (N-1)/N x bytes / rate (each node sends and
#     receives that much through its uplink in any all-reduce that keeps node-local
#     data local), and explain()'s prediction with the uplink's figures.
# UCX_TLS=tcp: the namespaces share one kernel, so UCX's shared-memory transports
# would otherwise reach across "nodes" (and past the shaped links).
# ROUNDS rounds (default 3); medians. Writes docs/perf/cluster.md and its section of
# docs/PERFORMANCE.md. Needs root (namespaces, tc). About 10 minutes on 2 cores.
#
#   scripts/bench_cluster.sh [ROUNDS] [--uplinks "1gbit 4gbit"]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
rounds=3
uplinks="1gbit 4gbit"
while [ $# -gt 0 ]; do
  case "$1" in
    --uplinks) uplinks=$2; shift 2 ;;
    *) rounds=$1; shift ;;
  esac
done
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
mdring_build --target mdring-bench mdring-run mdring-calibrate mdring_torch_ext
mdring_mpi_env
root=$PWD
bench=$root/build/benchmarks/mdring-bench
run=$root/build/tools/mdring-run
agent="$root/scripts/cluster.sh --name mdb agent"
work=$(mktemp -d)
trap 'scripts/cluster.sh down --name mdb; rm -rf "$work"' EXIT
nodes=4
per=2
topo="shm:$per x ethernet:$nodes"
for up in $uplinks; do
  scripts/cluster.sh up $nodes --uplink "$up" --name mdb
  hosts=$(scripts/cluster.sh hosts $per --name mdb)
  # The cluster's links measured as a user would (mdring-calibrate on the same ranks);
  # explain() predicts with that profile, which bind() plans with too.
  profile=$work/profile-$up
  MDRING_TIMEOUT=300 timeout 900 "$run" --hosts "$hosts" --agent "$agent" -x UCX_TLS=tcp \
    "$root/build/tools/mdring-calibrate" --transport ucx --topology "$topo" --out "$profile" \
    | grep -v '^\[' >"$work/calibrate-$up"
  for r in $(seq "$rounds"); do
    for b in 1048576 16777216 67108864; do
      it=5; [ "$b" -ge 67108864 ] && it=3
      common=(--topology "$topo" --bytes "$b" --iters "$it" --warmup 1 --json)
      MDRING_TIMEOUT=300 MDRING_PROFILE="$profile" timeout 900 "$run" --hosts "$hosts" --agent "$agent" \
        -x UCX_TLS=tcp -x GLOO_SOCKET_IFNAME=eth0 "$bench" --transport ucx --baseline gloo "${common[@]}" \
        | grep '^{' >>"$work/ucx-$up"
      timeout 900 scripts/cluster.sh --name mdb exec 0 mpirun --host "$hosts" -n $((nodes * per)) \
        --mca plm_rsh_agent "$agent" --mca btl tcp,vader,self --mca btl_tcp_if_include eth0 \
        --mca oob_tcp_if_include eth0 -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
        -x MDRING_TIMEOUT=300 -x MDRING_PROFILE="$profile" -x OMPI_MCA_btl_vader_single_copy_mechanism=none \
        "$bench" --transport mpi --baseline mpi "${common[@]}" | grep '^{' >>"$work/mpi-$up"
    done
  done
  # torchrun --nnodes 4 across the namespaces: torch.distributed's all_reduce and a DDP
  # step (25.6 M parameters, batch 2) under mdring against gloo (benchmarks/torch_bench.py).
  port=$((29800 + RANDOM % 100))
  pids=()
  for ((i = 0; i < nodes; i++)); do
    scripts/cluster.sh --name mdb exec "$i" env PYTHONPATH="$root/build/python" GLOO_SOCKET_IFNAME=eth0 \
      UCX_TLS=tcp OMP_NUM_THREADS=1 MDRING_TIMEOUT=300 MDRING_PROFILE="$profile" timeout 900 "$(mdring_python)" \
      -m torch.distributed.run --nnodes $nodes --node_rank "$i" --nproc_per_node $per --master_addr 10.213.0.1 \
      --master_port "$port" --redirects 1 --tee 1 benchmarks/torch_bench.py --min-bytes 1048576 --max-bytes 16777216 --rounds 2 \
      --ddp-iters 3 --batches 2 --json "$work/torch-$up" >"$work/torch-$up-node$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { tail -n 20 "$work"/torch-"$up"-node*.log; exit 1; }; done
  scripts/cluster.sh down --name mdb
done
out=docs/perf/cluster.md
py=$(mdring_python)
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
$py - "$work" "$uplinks" "$rounds" "$nodes" "$per" "$(nproc)" "$cpu" "$(ucx_info -v | sed -n 's/^# Version //p' | head -1)" \
  "$(mpirun --version | head -1)" "$(uname -r)" >"$out" <<'PY'
import datetime, json, statistics, sys
work, uplinks, rounds, nodes, per, cores, cpu, ucx, mpi, kernel = sys.argv[1:11]
rounds, nodes, per = int(rounds), int(nodes), int(per)
def rows(path):
    out = {}
    for line in open(path):
        j = json.loads(line)
        out.setdefault(j["bytes"], []).append(j)
    return out
def med(xs):
    return statistics.median(xs)
def rate_of(up):
    r = float(up.rstrip("abcdefghijklmnopqrstuvwxyz"))
    return r * (1e9 if up.endswith("gbit") else 1e6) / 8
print("## A cluster of network namespaces\n")
print(f"Generated by `scripts/bench_cluster.sh {rounds}` on {datetime.date.today()}: {nodes} nodes x {per} ranks,")
print(f"each node a network namespace (scripts/cluster.sh) whose veth uplink tbf shapes in both directions;")
print(f"{cores} cores ({cpu}), kernel {kernel}, UCX {ucx} (`UCX_TLS=tcp`), {mpi}. float sum `all_reduce`,")
print(f"node-memory buffers, out of place, median of {rounds} rounds (each the median of 3 to 5 iterations, slowest rank).")
print(f"*bound*: the uplink bound 2 (N-1)/N x bytes / rate (N = {nodes} nodes). *mdring/UCX*: over UCX, processes")
print("from `mdring-run --hosts` through the cluster's agent; *Gloo*: the faster of its two algorithms on the same")
print("processes; *mdring/MPI* and *MPI_Allreduce*: Open MPI across the namespaces (mpirun's `plm_rsh_agent` the")
print("same agent, TCP between nodes, vader inside one); *predicted*: explain()'s time with the profile that")
print("`mdring-calibrate` measured on the same cluster just before (`MDRING_PROFILE`, which every run also plans with).")
print("Everything runs on this machine's 2 cores, so the 8 ranks are oversubscribed 4:1; the shaped links are the")
print("bottleneck from 16 MiB on (at 4 Gbit/s the 2 cores are: 8 ranks' TCP stacks and reductions).")
print("Gloo's one ring over all 8 ranks (node-major) sends 2 (P-1)/P = 1.75 x the bytes through each uplink,")
print("a per-node plan 2 (N-1)/N = 1.5 x, so at their bounds mdring would take 0.857 x Gloo's time; Open MPI's")
print("MPI_Allreduce (its tuned choice for 8 ranks over TCP) is far from its bound here.\n")
print("| uplink | size | bound ms | mdring/UCX ms | x bound | Gloo ms | mdring/Gloo | mdring/MPI ms | MPI_Allreduce ms | mdring/MPI ratio | predicted ms | measured/predicted |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for up in uplinks.split():
    u, m = rows(f"{work}/ucx-{up}"), rows(f"{work}/mpi-{up}")
    for b in sorted(u):
        bound = 2 * (nodes - 1) / nodes * b / rate_of(up)
        mu = med([j["mdring_s"] for j in u[b]])
        gl = med([j["baseline_s"] for j in u[b]])
        mm = med([j["mdring_s"] for j in m.get(b, [])]) if b in m else float("nan")
        mp = med([j["baseline_s"] for j in m.get(b, [])]) if b in m else float("nan")
        pr = med([j["predicted_s"] for j in u[b]])
        print(f"| {up} | {b >> 20} MiB | {bound * 1e3:.1f} | {mu * 1e3:.1f} | {mu / bound:.2f} | {gl * 1e3:.1f} | "
              f"{mu / gl:.3f} | {mm * 1e3:.1f} | {mp * 1e3:.1f} | {mm / mp:.3f} | {pr * 1e3:.1f} | {mu / pr:.2f} |")
print("\nPyTorch: `torchrun --nnodes 4 --nproc_per_node 2` on the same cluster (one torchrun per namespace),")
print("benchmarks/torch_bench.py: torch.distributed's all_reduce (float32 SUM) and a DDP step (25.6 M float32")
print("parameters, batch 2 per rank, median of 3 steps; the parameters of both trainings compared after 5 steps),")
print("mdring against gloo in the same processes.\n")
print("| uplink | what | mdring ms | gloo ms | mdring/gloo | notes |")
print("|---|---|---|---|---|---|")
for up in uplinks.split():
    for line in open(f"{work}/torch-{up}"):
        j = json.loads(line)
        if j["kind"] == "all_reduce":
            print(f"| {up} | all_reduce {j['bytes'] >> 20} MiB | {j['mdring_s'] * 1e3:.1f} | {j['gloo_s'] * 1e3:.1f} | {j['ratio']:.3f} | |")
        else:
            print(f"| {up} | DDP step | {j['mdring_s'] * 1e3:.1f} | {j['gloo_s'] * 1e3:.1f} | {j['ratio']:.3f} | "
                  f"computation alone {j['compute_s'] * 1e3:.1f} ms; largest parameter difference {j['max_param_diff']:.1e} |")
print("\nWhat `mdring-calibrate` measured and predicted on each cluster (its own table; the links it wrote):\n")
for up in uplinks.split():
    print(f"{up}:\n```")
    for line in open(f"{work}/calibrate-{up}"):
        if line.startswith("#") or line.strip()[:1].isdigit():
            print(line.rstrip())
    for line in open(f"{work}/profile-{up}"):
        if line.startswith("link "):
            print(line.rstrip())
    print("```")
PY
$py scripts/perf_report.py --write
echo "wrote $out"
