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
mdring_build --target mdring-latency mdring_pmpi pmpi-loop pmpi-overhead
mdring_mpi_env
rounds=${1:-5}
iters=${2:-2000}
json=docs/perf/latency.jsonl
: >"$json"
for np in 2 4; do
  mpirun -n "$np" ./build/benchmarks/mdring-latency --rounds "$rounds" --iters "$iters" --json "$json"
done
# Through the interposer, 2 processes: an unmodified program (pmpi-loop: each call
# after a barrier, heap buffers, double) natively, preloaded as a user gets it (the
# measured choice) and preloaded with mdring taking every call; the three back to
# back in each round. And the wrapper's own cost on a call, in one process
# (pmpi-overhead: batches through the wrapper against batches straight to PMPI_).
work=$(mktemp -d)
lib=$PWD/build/libmdring-pmpi.so
for r in $(seq "$rounds"); do
  for c in allreduce bcast reduce; do
    mpirun -n 2 ./build/benchmarks/pmpi-loop "$c" 8 65536 8 | grep -v '^#' | sed "s/^/$c native /" >>"$work/pmpi"
    mpirun -n 2 -x LD_PRELOAD="$lib" ./build/benchmarks/pmpi-loop "$c" 8 65536 8 | grep -v '^#' |
      sed "s/^/$c measured /" >>"$work/pmpi"
    mpirun -n 2 -x LD_PRELOAD="$lib" -x MDRING_PMPI_MIN_BYTES=0 ./build/benchmarks/pmpi-loop "$c" 8 65536 8 |
      grep -v '^#' | sed "s/^/$c mdring /" >>"$work/pmpi"
  done
  for c in allreduce bcast; do
    mpirun -n 2 -x LD_PRELOAD="$lib" -x MDRING_PMPI_MIN_BYTES=$((1 << 30)) ./build/benchmarks/pmpi-overhead "$c" 8 \
      >>"$work/overhead"
  done
done
/usr/bin/python3 - "$json" "$rounds" "$iters" "$(date -u +%F)" "$(git rev-parse --short HEAD)" "$work" <<'PY'
import collections, json, statistics, sys
path, rounds, iters, day, commit, work = sys.argv[1:]
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
       "Up to `tune.one_shot_max_bytes` (8 KiB per rank) every call here runs one-shot over node memory "
       "(docs/USAGE.md, \"Small calls, one-shot\"): each rank copies what it gives into its staging buffer, "
       "arrives, waits for every rank and reads; larger calls run their programs. Rooted calls wait for every "
       "rank too (so that a failure or a mismatch reaches every rank in the same call). The *eager* column: "
       "broadcast and reduce on a communicator bound with `options.eager_rooted`, whose root (leaves) read "
       "nothing and return once their data is in node memory, up to 15 calls ahead of their slowest reader "
       "(docs/DESIGN.md), as Open MPI's return at the root or the leaves as soon as their part is done: a loop "
       "of them pipelines, which is why those 8-byte times can be below the floor. The *streamed* column: "
       "broadcast and reduce above the cap on a communicator bound with `tune.one_shot_stream_max_trip_ns` = "
       "SIZE_MAX, which runs them over node memory in steps of 8 KiB instead of their programs wherever the "
       "ranks are; by default (the *mdring* column) they stream at once where bind measured the ranks' cores "
       "close, and elsewhere (unless the ranks outnumber the cores) as each size class's first calls timed both "
       "ways, as each section's first line and the *default* column say (docs/DESIGN.md, \"Streamed rooted "
       "calls\"). The *timed* columns: the same calls on a communicator bound with a distance limit no trip meets "
       "(`tune.one_shot_stream_max_trip_ns` = 1), so that each size class's first 8 calls time the program against "
       "streaming wherever the ranks are (`tune.one_shot_stream_trials`), and the way it chose: what the timing "
       "gives against both ways in the same run (where the ranks outnumber the cores it times nothing and runs the "
       "programs).", ""]
for np in sorted({k[0] for k in by}):
    floor = next(r["floor_us"] for r in rows if r["np"] == np)
    first = next(r for r in rows if r["np"] == np)
    trip, streams = first.get("bind_trip_ns"), first.get("default_streams")
    if trip is None:
        decision = ""
    elif trip < 0:
        decision = (" Bind measured nothing (the ranks outnumber the cores): broadcasts and reduces above 8 KiB, up to 64 KiB, run "
                    + ("streamed" if streams else "their programs") + " by default.")
    else:
        decision = (f" Bind measured a cache line's trip of {trip} ns from rank 0 to its farthest peer (limit "
                    "`tune.one_shot_stream_max_trip_ns` = 100): broadcasts and reduces above 8 KiB, up to 64 KiB, "
                    + ("run streamed by default." if streams else
                       "run streamed or by their programs as each size class's first calls timed both ways "
                       "(`tune.one_shot_stream_trials`): the *default* column says which." if first.get("timed") else
                       "run their programs by default."))
    out += [f"### {np} processes (floor {floor:.3f} us)", ""]
    if decision:
        out += [decision.strip(), ""]
    out += [
            "| call | bytes | native us | mdring us | mdring / native | mdring / floor | spread native, mdring (us) "
            "| eager us | eager / native | streamed us | streamed / native | timed us | timed / native | timed chose "
            "| default |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for op in ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"]:
        for r in by.get((np, op), []):
            flag = "" if r["correct"] else " WRONG"
            e = r.get("eager_us", 0)
            eager = f"{e:.3f} | {e / r['native_us']:.2f}" if e > 0 else " | "
            st = r.get("streamed_us", 0)
            streamed = f"{st:.3f} | {st / r['native_us']:.2f}" if st > 0 else " | "
            way = ("streamed" if r.get("row_streams") else "program") if st > 0 else ""
            tm = r.get("timed_us", 0)
            timed = (f"{tm:.3f} | {tm / r['native_us']:.2f} | " + ("streamed" if r.get("timed_streams") else "program")
                     if tm > 0 else " | | ")
            out.append(f"| {op} | {r['bytes']} | {r['native_us']:.3f} | {r['mdring_us']:.3f} | "
                       f"{r['mdring_us'] / r['native_us']:.2f} | {r['mdring_us'] / r['floor_us']:.1f} | "
                       f"{r['native_spread_us']:.3f}, {r['mdring_spread_us']:.3f}{flag} | {eager} | {streamed} | {timed} | {way} |")
    out.append("")
# Through the interposer: per collective and size, the medians over the rounds.
pm = collections.defaultdict(list)
for line in open(f"{work}/pmpi"):
    c, how, b, t = line.split()
    pm[(c, how, int(b))].append(float(t))
names = {"allreduce": "MPI_Allreduce", "bcast": "MPI_Bcast", "reduce": "MPI_Reduce"}
out += ["### Through the interposer (libmdring-pmpi.so), 2 processes", "",
        "`benchmarks/pmpi_loop.c` (an unmodified MPI program; each call after a barrier, double, heap buffers), "
        "native, preloaded as a user gets it (*measured*: per size class MPI's collective or mdring's, whichever "
        "its first calls measured faster; a broadcast or reduce below 512 B always MPI's) and preloaded with mdring taking every call "
        "(`MDRING_PMPI_MIN_BYTES=0`), back to back in each of the rounds; medians. ratio = preloaded / native.", "",
        "| call | bytes | native us | measured us | ratio | mdring us | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
for c in ["allreduce", "bcast", "reduce"]:
    for b in sorted({k[2] for k in pm if k[0] == c}):
        n, m, a = (statistics.median(pm[(c, h, b)]) for h in ("native", "measured", "mdring"))
        out.append(f"| {names[c]} | {b} | {n:.2f} | {m:.2f} | {m / n:.2f} | {a:.2f} | {a / n:.2f} |")
ov = collections.defaultdict(list)
for line in open(f"{work}/overhead"):
    c, b, wrapped, direct, ratio = line.split()
    ov[c].append(float(wrapped) - float(direct))
out += ["", "The wrapper's own cost on an 8-byte call it passes to MPI (`pmpi-overhead`, one process, batches "
        "through the wrapper against batches straight to `PMPI_`; medians over the rounds of the difference): " +
        ", ".join(f"{names[c]} {statistics.median(v) * 1000:.0f} ns" for c, v in ov.items()) + ".", ""]
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
            if any(r.get("eager_us", 0) > 0 for r in rs):
                ax.loglog(x, [r["eager_us"] for r in rs], "^-", label="mdring, eager_rooted")
            if any(r.get("streamed_us", 0) > 0 for r in rs):
                xs = [r["bytes"] for r in rs if r.get("streamed_us", 0) > 0]
                ax.loglog(xs, [r["streamed_us"] for r in rs if r.get("streamed_us", 0) > 0], "v-",
                          label="mdring, always streamed")
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
