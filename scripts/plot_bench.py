#!/usr/bin/env python3
"""Plots mdring-bench --json output: bus bandwidth against message size, mdring and
its baseline, one line pair per (op, ranks, topology) found in the input.

    plot_bench.py OUT.png RESULTS.jsonl [MORE.jsonl ...] [--title TEXT]

Needs matplotlib (Debian: python3-matplotlib)."""
import json
import sys


def main(argv):
    title = None
    if "--title" in argv:
        i = argv.index("--title")
        title = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) < 2:
        sys.exit(__doc__)
    out, inputs = argv[0], argv[1:]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_bench.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)")
    series = {}
    for path in inputs:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                key = (r["op"], r["ranks"], r["topology"], r["dtype"])
                series.setdefault(key, []).append(r)
    if not series:
        sys.exit("plot_bench.py: no JSON rows in " + ", ".join(inputs))
    fig, ax = plt.subplots(figsize=(8, 5))
    for (op, ranks, topo, dtype), rows in sorted(series.items()):
        rows.sort(key=lambda r: r["bytes"])
        x = [r["bytes"] for r in rows]
        label = f"{op}, {ranks} ranks, {topo}"
        line, = ax.plot(x, [r["busbw"] for r in rows], marker="o", label="mdring " + label)
        if rows[0].get("baseline_s"):
            ax.plot(x, [r["baseline_busbw"] for r in rows], marker="x", linestyle="--", color=line.get_color(),
                    label=f"{rows[0]['baseline']} " + label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("bus bandwidth (GB/s, nccl-tests definition)")
    ax.set_title(title or "mdring-bench: bus bandwidth against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_bench.py: wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
