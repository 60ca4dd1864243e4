#!/usr/bin/env python3
"""Renders docs/PERFORMANCE.md from the committed data in docs/perf, and nothing else:
the machine and date of the measurement (host.json, written by scripts/bench.sh when
it measures), the mdring-bench --json rows (op-npN[-heap].jsonl) as tables with the
targets checked, and the sections the other bench scripts write (SECTIONS below, in
that order). The same data always renders the same page.

    perf_report.py [DIR]            print the page (DIR: docs/perf)
    perf_report.py --write [DIR]    write docs/PERFORMANCE.md
    perf_report.py --check [DIR]    exit 1 when docs/PERFORMANCE.md is not the rendering
                                    (ctest docs_performance)
    perf_report.py --host [DIR]     record this machine in DIR/host.json (scripts/bench.sh)
"""
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rendered_page import finish  # noqa: E402

# The bench scripts' sections (a file each in docs/perf, starting with its "## " heading).
SECTIONS = ["nonblocking.md", "pmpi.md", "latency.md", "ucx.md", "planning.md", "torch.md", "reproducible.md", "cluster.md"]
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "PERFORMANCE.md")

BASELINE_OF = {"all_reduce": "MPI_Allreduce", "reduce_scatter": "MPI_Reduce_scatter_block",
               "all_gather": "MPI_Allgather"}


def load(d):
    rows = {}
    for path in sorted(glob.glob(os.path.join(d, "*-np*.jsonl"))):
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    # rows from before --alloc existed used the heap
                    rows.setdefault((r.get("alloc", "heap"), r["op"], r["ranks"]), {})[r["bytes"]] = r
    return rows


def human(b):
    for u in ["B", "KiB", "MiB", "GiB"]:
        if b < 1024:
            return f"{b:g} {u}"
        b /= 1024
    return f"{b:g} TiB"


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return "?"


def record_host(d):
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    host = {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(), "cpu": cpu,
            "system": f"{platform.system()} {platform.release()}", "mpi": sh("mpirun --version 2>/dev/null | head -1")}
    note = os.environ.get("MDRING_BENCH_NOTE")
    if note:
        host["note"] = note
    with open(os.path.join(d, "host.json"), "w") as f:
        json.dump(host, f, indent=1)
        f.write("\n")


def render(d):
    rows = load(d)
    with open(os.path.join(d, "host.json")) as f:
        host = json.load(f)
    out = []
    p = out.append
    p("# mdring performance on the host\n")
    p("Rendered by `scripts/perf_report.py` from the data in docs/perf (do not edit by hand: rerun the "
      "bench script that measures a section, or `scripts/bench.sh` for the tables). The tables were "
      f"measured {host['date']} on {host['cores']} cores ({host['cpu']}), {host['system']}, {host['mpi']}; "
      "each later section says when it was measured. What including mdring costs a translation unit: "
      "[perf/compile.md](perf/compile.md).\n")
    if host.get("note"):
        p("**Conditions of this run:** " + host["note"] + "\n")
    p("## Method\n")
    p("`mdring-bench --baseline mpi` runs mdring's collective and the MPI library's own one "
      "(MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather) on the same buffers in the same "
      "processes, alternating every iteration, after warm-up iterations of both. The time of one "
      "iteration is the slowest rank's (each rank's time, reduced with MPI_MAX); the table shows the "
      "median over iterations. ratio = mdring / MPI, below 1 means mdring is faster. algbw = bytes / "
      "time and busbw = algbw x 2(P-1)/P for all_reduce and (P-1)/P for reduce_scatter and "
      "all_gather, as nccl-tests defines them; bytes are the full buffer (all_reduce) or the "
      "gathered/scattered whole (reduce_scatter, all_gather). float sum. 4 KiB to 1 MiB use 50 "
      "iterations (10 warm-up), 4 MiB and up 10 (3 warm-up).\n")
    p("This machine is a shared 2-core VM: absolute times are noisy, and 4 processes oversubscribe "
      "the cores. Only the ratios, measured in the same run, mean something; expect a few percent "
      "of spread between runs.\n")
    p("What mdring does here: all processes are on one node and synchronize through an MPI shared "
      "window; `shm:2 x shm:*` on 4 processes is merged into one direct stage over 4 ranks "
      "(plan/merge.hpp), and each rank folds its quarter straight from its peers' send buffers and "
      "writes the result into every peer's receive buffer in one pass (the fused stage). Ranges up "
      "to 16 KiB go through per-rank staging buffers with one synchronization instead. How a rank "
      "reaches its peers' buffers depends on where they were allocated, so every table comes twice:\n")
    p("- **node_alloc buffers** (`mdring-bench --alloc node`, the default): the buffers come from "
      "`mdring::node_alloc` (mdring/memory.hpp, memory files). Peers map each other's buffers once "
      "and read and write them in place, with non-temporal stores for results of 1 MiB and more "
      "(`tuning::nontemporal_bytes`). MPI gets the same buffers.\n")
    p("- **heap buffers** (`--alloc heap`): ordinary memory, which peers reach by cross-memory "
      "attach (process_vm_readv / writev: one kernel copy per 256 KiB piece); an all_reduce from "
      "256 KiB (`tuning::stream_min_bytes`) instead streams them through node memory from its second "
      "call on: each rank copies the blocks its peers fold into a block of node memory they map, "
      "and the all-gather reads the peers' results from theirs (docs/DESIGN.md, the pull form).\n")
    p("With 4 processes on 2 cores a waiting rank yields its core at once instead of spinning "
      "first (the rank it waits for may need it).\n")
    names = {"node": "node_alloc buffers", "heap": "heap buffers"}
    targets = []
    for (alloc, op, np_), by in sorted(rows.items(), key=lambda kv: (kv[0][0] != "node",) + kv[0]):
        p(f"## {op}, {np_} processes ({next(iter(by.values()))['topology']}), {names.get(alloc, alloc)}, "
          f"against {BASELINE_OF.get(op, '?')}\n")
        p("| bytes | mdring µs | MPI µs | ratio | mdring busbw GB/s | MPI busbw GB/s |")
        p("| ---: | ---: | ---: | ---: | ---: | ---: |")
        worst = 0
        for b in sorted(by):
            r = by[b]
            p(f"| {human(b)} | {r['mdring_s']*1e6:.1f} | {r['baseline_s']*1e6:.1f} | {r['ratio']:.3f} | "
              f"{r['busbw']:.2f} | {r['baseline_busbw']:.2f} |")
            worst = max(worst, r["ratio"])
        p("")
        tag = f" ({names.get(alloc, alloc)})"
        targets.append((f"{op}, {np_} processes: no size from 4 KiB to 256 MiB above 1.1 x{tag}", worst, 1.1,
                        max(by) >= 256 << 20))
        # The heap's are the drop-in's ("never slower than what it replaces").
        heap = alloc == "heap"
        if op == "all_reduce" and np_ == 2 and (64 << 20) in by:
            limit = 0.40 if heap else 0.45
            targets.append((f"all_reduce, 2 processes, 64 MiB: at most {limit:.2f} x{tag}", by[64 << 20]["ratio"],
                            limit, True))
        if op == "all_reduce" and np_ == 4 and (16 << 20) in by:
            limit = 0.55 if heap else 0.6
            targets.append((f"all_reduce, 4 processes, 16 MiB: at most {limit:.2f} x{tag}", by[16 << 20]["ratio"],
                            limit, True))
    for alloc in sorted({k[0] for k in rows}, key=lambda a: a != "node"):
        suffix = "" if alloc == "node" else "-" + alloc
        for np_ in sorted({k[2] for k in rows if k[0] == alloc}):
            p(f"![busbw, {np_} processes, {names.get(alloc, alloc)}](perf/busbw-np{np_}{suffix}.png)\n")
    p("## Targets\n")
    p("| target | measured ratio | met |")
    p("| --- | ---: | :---: |")
    for name, value, limit, complete in targets:
        met = "yes" if value <= limit else "**no**"
        if not complete:
            met += " (sizes up to 256 MiB not run)"
        label = name if "no size" not in name else name + " (worst size)"
        p(f"| {label} | {value:.3f} | {met} |")
    p("")
    for name in SECTIONS:
        with open(os.path.join(d, name)) as f:
            p(f.read().rstrip())
        p("")
    return "\n".join(out).rstrip() + "\n"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    d = args[0] if args else os.path.join(os.path.dirname(PAGE), "perf")
    if "--host" in sys.argv:
        record_host(d)
        return 0
    page = render(d)
    return finish(page, PAGE, "docs/PERFORMANCE.md",
                  "scripts/perf_report.py renders from docs/perf (edit docs/perf, then run scripts/perf_report.py --write)")


if __name__ == "__main__":
    sys.exit(main())
