#!/usr/bin/env bash
# The small-call floor (issue: small calls against MPI's shared-memory path):
# benchmarks/latency_floor.cpp (mdring-latency) on 2 processes and on 4
# (oversubscribed on this 2-core machine), ROUNDS rounds of native MPI and mdring
# back to back. Writes docs/perf/latency.jsonl, docs/perf/latency.md (its section of
# docs/PERFORMANCE.md) and docs/perf/latency.png (latency against size: mdring,
# native, the floor).
#
#   scripts/bench_latency.sh [ROUNDS [ITERS]]      # default 5 rounds of 2000 calls
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}" "${MDRING_PLOT_PACKAGES[@]}"
mdring_build --target mdring-latency
mdring_mpi_env
rounds=${1:-5}
iters=${2:-2000}
json=docs/perf/latency.jsonl
: >"$json"
for np in 2 4; do
  mpirun -n "$np" ./build/benchmarks/mdring-latency --rounds "$rounds" --iters "$iters" --json "$json"
done
/usr/bin/python3 - "$json" "$rounds" "$iters" "$(date -u +%F)" "$(git rev-parse --short HEAD)" <<'PY'
import collections, json, sys
path, rounds, iters, day, commit = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]
by = collections.defaultdict(list)
for r in rows:
    by[(r["np"], r["op"])].append(r)
out = ["## Small calls: the floor and MPI's shared-memory path", "",
       f"`scripts/bench_latency.sh` ({day}, {commit}; {rounds} rounds of {iters} calls, native MPI and mdring "
       "back to back in each round; medians; float sum): each call against Open MPI's own on the same "
       "processes and against the floor, a cache-line ping-pong between two processes through node memory "
       "(one way), the least a 2-rank collective can cost. Rooted calls (broadcast, reduce) in a loop "
       "overlap one call's tail with the next one's start, so they can go below the floor. 4 processes run "
       "on 2 cores (oversubscribed): there each spin waits for a descheduled peer, and the spread is the "
       "rounds' (max - min).", "",
       "Up to `tune.one_shot_max_bytes` (16 KiB per rank) every call here runs one-shot over node memory "
       "(docs/USAGE.md, \"Small calls, one-shot\"): each rank copies what it gives into its staging buffer, "
       "arrives, waits for every rank and reads; larger calls run their programs. Rooted calls wait for every "
       "rank too (so that a failure or a mismatch reaches every rank in the same call): Open MPI's broadcast "
       "and reduce return at the root or the leaves as soon as their part is done, and a loop of them "
       "pipelines, which is why their 8-byte native times are below the floor.", ""]
for np in sorted({k[0] for k in by}):
    floor = next(r["floor_us"] for r in rows if r["np"] == np)
    out += [f"### {np} processes (floor {floor:.3f} us)", "",
            "| call | bytes | native us | mdring us | mdring / native | mdring / floor | spread native, mdring (us) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for op in ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"]:
        for r in by.get((np, op), []):
            flag = "" if r["correct"] else " WRONG"
            out.append(f"| {op} | {r['bytes']} | {r['native_us']:.3f} | {r['mdring_us']:.3f} | "
                       f"{r['mdring_us'] / r['native_us']:.2f} | {r['mdring_us'] / r['floor_us']:.1f} | "
                       f"{r['native_spread_us']:.3f}, {r['mdring_spread_us']:.3f}{flag} |")
    out.append("")
out += ["![latency against size](perf/latency.png)", ""]
open("docs/perf/latency.md", "w").write("\n".join(out))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nps = sorted({k[0] for k in by})
    fig, axes = plt.subplots(len(nps), 3, figsize=(13, 4 * len(nps)), squeeze=False)
    for i, np in enumerate(nps):
        for j, op in enumerate(["all_reduce", "broadcast", "reduce"]):
            ax = axes[i][j]
            rs = by.get((np, op), [])
            x = [r["bytes"] for r in rs]
            ax.loglog(x, [r["native_us"] for r in rs], "o-", label="native Open MPI")
            ax.loglog(x, [r["mdring_us"] for r in rs], "s-", label="mdring")
            ax.loglog(x, [r["floor_us"] for r in rs], "k--", label="floor (ping-pong)")
            ax.set_title(f"{op}, {np} processes")
            ax.set_xlabel("bytes")
            ax.set_ylabel("us per call")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("docs/perf/latency.png", dpi=80)
except ImportError:
    print("bench_latency: no matplotlib: no plot")
PY
/usr/bin/python3 scripts/perf_report.py --write
echo "bench_latency: docs/perf/latency.md, docs/perf/latency.png, docs/PERFORMANCE.md"
