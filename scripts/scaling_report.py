#!/usr/bin/env python3
"""Renders docs/SCALING.md from the committed data in docs/scaling, and nothing else:
the prose is docs/scaling/page.md, in which a line `{{KIND FILE ...}}` becomes the table
of that kind (TABLES below) made from those CSV files of docs/scaling, indented as the
line is. No clock, no environment: the same data always renders the same page.

    scaling_report.py [DIR]            print the page (DIR: docs/scaling)
    scaling_report.py --write [DIR]    write docs/SCALING.md
    scaling_report.py --check [DIR]    exit 1 when docs/SCALING.md is not the rendering, or when
                                       a CSV in DIR is named nowhere in page.md (ctest docs_scaling)

scripts/smpi/simulate.py --publish docs/scaling copies its CSVs there and runs --write.
docs/scaling/README.md says where each file comes from.
"""
import csv
import glob
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rendered_page import finish  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "smpi"))
from simulate import fmt_bytes as simulate_fmt_bytes  # noqa: E402

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
PAGE = os.path.join(DOCS, "SCALING.md")
TEMPLATE = "page.md"
PLACEHOLDER = re.compile(r"^(\s*)\{\{(\w+)((?: +[\w.+-]+)+) *\}\}\s*$")

NETWORK = {"ideal": "ideal", "smpi": "SMPI default"}


# ---- values ----------------------------------------------------------------
def num(s):
    """A CSV cell as a number: None when empty; "nan" is nan."""
    if s is None or s.strip() in ("", "None"):
        return None
    return float(s)


def bad(x):
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_ms(x, digits=2):
    return "-" if bad(x) else f"{x * 1e3:.{digits}f}"


def fmt_ms3(x):
    """Three decimals below 10 ms, two from there (sizes from 4 KiB to 100 MB in one column)."""
    return "-" if bad(x) else (f"{x * 1e3:.3f}" if x < 0.01 else f"{x * 1e3:.2f}")


def fmt_bytes(b):
    """A CSV's byte count as the simulation's own tables print it (smpi/simulate.py)."""
    return simulate_fmt_bytes(int(float(b)))


def ratio(a, b):
    return float("nan") if bad(a) or bad(b) or not b else a / b


def fmt_ratio(x):
    return "-" if bad(x) else f"{x:.3f}"


def recorded(r, key, computed, fmt):
    """A derived cell: the value the CSV records for it (a table copied from an old page records
    its ratios and errors as printed, because the rounded times it keeps would not give them
    back), else the one computed from the times."""
    v = num(r.get(key)) if isinstance(r.get(key), str) else r.get(key)
    return fmt(v if not bad(v) else computed)


def fmt_pct(x):
    return "-" if bad(x) else f"{x:+.1f}%"


def error_cell(r, key, pred, sim):
    return recorded(r, key, float("nan") if bad(pred) or bad(sim) else (ratio(pred, sim) - 1) * 100, fmt_pct)


def bold_min(cells):
    """Bold the smallest of the cells that hold a number (the fastest, or a model's pick)."""
    vals = [float(c) if re.fullmatch(r"[\d.]+", c) else None for c in cells]
    if not any(v is not None for v in vals):
        return cells
    best = min(v for v in vals if v is not None)
    return [f"**{c}**" if v == best else c for c, v in zip(cells, vals)]


def row(cells):
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def header(names, align):
    return [row(names), "| " + " | ".join({"l": ":---", "r": "---:"}[a] for a in align) + " |"]


def truthy(s):
    return (s or "").strip().lower() in ("true", "1", "yes")


# ---- tables ----------------------------------------------------------------
# Each takes the data directory and the CSV files its placeholder names, and returns the
# table's lines. Tables of columns that scripts/smpi/simulate.py writes format them as its
# tables.md does; the hand-made ones print the numbers with the digits the CSV records.
def read(d, name):
    with open(os.path.join(d, name), newline="") as f:
        return list(csv.DictReader(f))


def platforms_of(d):
    return {r["platform"]: r for r in read(d, "platforms.csv")}


def describe(p):
    g = lambda k: f"{float(p[k]):g}"  # noqa: E731
    return (f"{p['platform']}: {p['gpus_per_node']} GPUs/node at {g('intra_GBps')} GB/s each ({g('intra_us')} us), "
            f"{g('uplink_GBps')} GB/s uplink per node ({g('uplink_us')} us)")


def t_platforms(d, files):
    out = header(["platform", "GPUs per node", "per GPU inside a node", "uplink per node"], "lrrr")
    for name in files:
        for p in read(d, name):
            g = lambda k: f"{float(p[k]):g}"  # noqa: E731
            out.append(row([f"{p['platform']} ({p['label']})", p["gpus_per_node"], f"{g('intra_GBps')} GB/s, {g('intra_us')} us",
                            f"{g('uplink_GBps')} GB/s, {g('uplink_us')} us"]))
    return out


def t_links(d, files):
    plat = platforms_of(d)
    out = header(["platform", "intra: 1-byte message us, GB/s per rank, overhead us", "inter: the same",
                  "one message through the uplink: GB/s (B_node)"], "lrrr")
    for name in files:
        for r in read(d, name):
            v = {k: num(x) for k, x in r.items() if k != "platform"}
            out.append(row([describe(plat[r["platform"]]),
                            f"{v['alpha_intra'] * 1e6:.2f}, {v['bw_intra_rank'] / 1e9:.2f}, {v['o_intra'] * 1e6:.2f}",
                            f"{v['alpha_inter'] * 1e6:.2f}, {v['bw_inter_rank'] / 1e9:.3f}, {v['o_inter'] * 1e6:.2f}",
                            f"{v['bw_node'] / 1e9:.3f}"]))
    return out


def sweep_rows(d, files):
    rows = []
    for name in files:
        for r in read(d, name):
            rows.append({k: (x if k in ("platform", "mdring_runs_as", "best_builtin", "network", "topology") else num(x))
                         for k, x in r.items() if not k.startswith("mpi_")})
    return rows


def t_sweep(d, files):
    """mdring, one inter-node ring, the flat ring, the best built-in and the bound per point."""
    out = header(["ranks (nodes x GPUs)", "size", "mdring runs as", "mdring ms", "predicted ms", "one inter-node ring ms",
                  "flat ring ms", "best built-in", "ms", "bound ms", "mdring / bound", "mdring / best built-in"],
                 "rrlrrrrlrrrr")
    for r in sweep_rows(d, files):
        one = fmt_ms(r["one_ring_s"]) if r["mdring_runs_as"].count("x") == 2 else "(same)"
        out.append(row([f"{int(r['ranks'])} ({int(r['nodes'])}x{int(r['gpus_per_node'])})", fmt_bytes(r["bytes"]),
                        r["mdring_runs_as"], fmt_ms(r["mdring_s"]), fmt_ms(r["mdring_predicted_s"]), one,
                        fmt_ms(r["flat_s"]), r["best_builtin"] or "-", fmt_ms(r["best_builtin_s"]), fmt_ms(r["bound_s"]),
                        recorded(r, "mdring_per_bound", ratio(r["mdring_s"], r["bound_s"]), fmt_ratio),
                        recorded(r, "mdring_per_best", ratio(r["mdring_s"], r["best_builtin_s"]), fmt_ratio)]))
    return out


def t_cost_model(d, files):
    """explain()'s prediction against the simulated time, for the three ways mdring runs."""
    out = header(["platform", "ranks", "size", "mdring runs as", "mdring simulated ms", "predicted ms", "error",
                  "one inter-node ring simulated ms", "predicted ms", "error", "flat ring simulated ms", "predicted ms",
                  "error"], "lrrlrrrrrrrrr")
    for r in sweep_rows(d, files):
        def cells(who):
            sim, pred = r[f"{who}_s"], r[f"{who}_predicted_s"]
            return [fmt_ms(sim), fmt_ms(pred), error_cell(r, f"{who}_error_pct", pred, sim)]
        one = cells("one_ring") if r["mdring_runs_as"].count("x") == 2 else ["(same)", "", ""]
        out.append(row([r["platform"], int(r["ranks"]), fmt_bytes(r["bytes"]), r["mdring_runs_as"]]
                       + cells("mdring") + one + cells("flat")))
    return out


def t_paper(d, files):
    """The ResNet-50 efficiency of the PowerAI DDL paper, with the all_reduce exposed."""
    out = header(["GPUs", "PowerAI DDL (paper)", "mdring", "flat ring", "best built-in", "(which)", "at the bound",
                  "mdring all_reduce ms", "T_compute for mdring at 0.95"], "rrrrrlrrr")
    for name in files:
        for r in read(d, name):
            v = {k: num(x) for k, x in r.items() if k != "best_builtin_name"}
            e = lambda k: "-" if bad(v[k]) else f"{v[k]:.3f}"  # noqa: E731
            out.append(row([int(v["gpus"]), f"{v['paper']:.2f}", e("mdring"), e("flat_ring"), e("best_builtin"),
                            r["best_builtin_name"] or "-", e("at_bound"), fmt_ms(v["mdring_all_reduce_s"]),
                            f"{fmt_ms(19 * v['mdring_all_reduce_s'])} ms"]))
    return out


def t_ddl(d, files):
    """ResNet-50 training steps (benchmarks/smpi_ddl.cpp): efficiency and the all-reduce left
    after the backward pass, per bucket size, overlapped or exposed; with a calibrated
    column where the CSV has one."""
    paper = {int(num(r["gpus"])): num(r["paper"]) for r in read(d, "paper_table.csv")}
    get = {}
    for name in files:
        for r in read(d, name):
            if r.get("status", "ok") == "ok":
                get[(int(num(r["ranks"])), r["mode"], int(num(r["bucket_mb"])), truthy(r.get("calibrated")))] = r
    f = lambda r, k, m=1, dig=3: "-" if not r or bad(num(r[k])) else f"{num(r[k]) * m:.{dig}f}"  # noqa: E731
    cal = any(k[3] for k in get)
    if cal:
        out = header(["GPUs", "PowerAI DDL (paper)", "overlap, DDP's buckets", "tail ms", "calibrated", "tail ms",
                      "overlap, 4 MiB buckets", "exposed"], "rrrrrrrr")
    else:
        out = header(["GPUs", "PowerAI DDL (paper)", "overlap, DDP's buckets (25 MiB)", "tail ms", "overlap, 4 MiB buckets",
                      "tail ms", "exposed (no overlap)", "all-reduce of every bucket ms"], "rrrrrrrr")
    for g in sorted({k[0] for k in get}):
        o25, o4, ex, oc = (get.get((g, "overlap", 25, False)), get.get((g, "overlap", 4, False)),
                           get.get((g, "exposed", 25, False)), get.get((g, "overlap", 25, True)))
        p = f"{paper[g]:.2f}" if g in paper else "-"
        if cal:
            out.append(row([g, p, f(o25, "efficiency"), f(o25, "exposed_s", 1e3, 2), f(oc, "efficiency"),
                            f(oc, "exposed_s", 1e3, 2), f(o4, "efficiency"), f(ex, "efficiency")]))
        else:
            out.append(row([g, p, f(o25, "efficiency"), f(o25, "exposed_s", 1e3, 2), f(o4, "efficiency"),
                            f(o4, "exposed_s", 1e3, 2), f(ex, "efficiency"), f(ex, "all_reduce_s", 1e3, 2)]))
    return out


def t_sizes(d, files):
    """The natural input against the best built-in at every size."""
    out = header(["ranks", "size", "natural ms", "predicted ms", "best built-in", "ms", "natural / best",
                  "natural / bound"], "rrrrlrrr")
    for name in files:
        for r in read(d, name):
            v = {k: num(x) for k, x in r.items() if k != "best_builtin"}
            over = ratio(v["natural_s"], v["bound_s"])
            out.append(row([int(v["ranks"]), fmt_bytes(v["bytes"]), fmt_ms3(v["natural_s"]), fmt_ms3(v["predicted_s"]),
                            r["best_builtin"] or "-", fmt_ms3(v["best_builtin_s"]),
                            fmt_ratio(ratio(v["natural_s"], v["best_builtin_s"])),
                            f"{over:.1f}" if over >= 10 else fmt_ratio(over)]))
    return out


def natural_ratios(r):
    return [recorded(r, f"{who}_per_{to}", ratio(r[f"{who}_s"], r[f"{to}_s" if to == "bound" else "best_builtin_s"]),
                     fmt_ratio) for who in ("natural", "calibrated") for to in ("bound", "best")]


def t_natural(d, files):
    """The topology as a user writes it (default traits), calibrated, and with the fitted links."""
    out = header(["platform", "network", "ranks", "size", "natural input", "simulated ms", "predicted ms", "error",
                  "calibrated ms", "predicted ms", "error", "fitted links ms", "best built-in", "ms", "bound ms",
                  "natural / bound", "natural / best", "calibrated / bound", "calibrated / best"],
                 "llrrlrrrrrrrlrrrrrr")
    for r in sweep_rows(d, files):
        out.append(row([r["platform"], r["network"], int(r["ranks"]), fmt_bytes(r["bytes"]), f"`{r['topology']}`",
                        fmt_ms(r["natural_s"]), fmt_ms(r["natural_predicted_s"]),
                        error_cell(r, "natural_error_pct", r["natural_predicted_s"], r["natural_s"]),
                        fmt_ms(r["calibrated_s"]), fmt_ms(r["calibrated_predicted_s"]),
                        error_cell(r, "calibrated_error_pct", r["calibrated_predicted_s"], r["calibrated_s"]),
                        fmt_ms(r["fitted_s"]), r["best_builtin"] or "-", fmt_ms(r["best_builtin_s"]), fmt_ms(r["bound_s"])]
                       + natural_ratios(r)))
    return out


def t_calibrated(d, files):
    """One platform's natural-input row per network, the short form."""
    rows = sweep_rows(d, files)
    best = "/".join(sorted({r["best_builtin"] or "-" for r in rows}))
    out = header(["network", "natural ms", "predicted", "error", "calibrated ms", "predicted", "error", "fitted links ms",
                  f"{best} ms", "bound ms", "natural / bound", f"natural / {best}", "calibrated / bound",
                  f"calibrated / {best}"], "lrrrrrrrrrrrrr")
    for r in rows:
        out.append(row([NETWORK.get(r["network"], r["network"]), fmt_ms(r["natural_s"]), fmt_ms(r["natural_predicted_s"]),
                        error_cell(r, "natural_error_pct", r["natural_predicted_s"], r["natural_s"]),
                        fmt_ms(r["calibrated_s"]), fmt_ms(r["calibrated_predicted_s"]),
                        error_cell(r, "calibrated_error_pct", r["calibrated_predicted_s"], r["calibrated_s"]),
                        fmt_ms(r["fitted_s"]), fmt_ms(r["best_builtin_s"]), fmt_ms(r["bound_s"])] + natural_ratios(r)))
    return out


def t_huge(d, files):
    """4096 ranks against the bound, one row per network (the file's name: huge_NETWORK.csv)."""
    rows = []
    for name in files:
        net = re.sub(r"^huge_|\.csv$", "", name)
        rows += [(net, r) for r in read(d, name)]
    inputs = len({r["lib"] for _, r in rows}) > 1
    out = header(["network"] + (["input"] if inputs else []) + ["simulated ms", "predicted ms", "bound ms", "/ bound"],
                 "l" + ("l" if inputs else "") + "rrrr")
    for net, r in rows:
        v = {k: num(x) for k, x in r.items() if k != "lib"}
        out.append(row([NETWORK.get(net, net)] + ([r["lib"]] if inputs else [])
                       + [fmt_ms(v["sim_s"]), fmt_ms(v["predicted_s"]), fmt_ms(v["bound_s"]),
                          fmt_ratio(ratio(v["sim_s"], v["bound_s"]))]))
    return out


def t_pace(d, files):
    """Simulated and predicted times against the segment count, per case (bold: each row's
    smallest: the fastest count, and each model's pick)."""
    rows = [r for name in files for r in read(d, name)]
    segs = sorted({int(r["segments"]) for r in rows})
    order = []
    val = {}
    for r in rows:
        key = (r["case"], r["series"])
        if key not in val:
            order.append(key)
            val[key] = {}
        val[key][int(r["segments"])] = r["ms"]
    out = header(["case", "segments"] + [str(s) for s in segs], "ll" + "r" * len(segs))
    last = None
    for case, series in order:
        cells = bold_min([val[(case, series)].get(s, "") for s in segs])
        out.append(row([case if case != last else "", series] + cells))
        last = case
    return out


def t_forced(d, files):
    """Simulated ms (and / bound) against the segment count forced with --segment-bytes;
    bold: the fastest."""
    rows = [r for name in files for r in read(d, name)]
    segs = sorted({int(r["segments"]) for r in rows})
    order = []
    val = {}
    for r in rows:
        key = (r["network"], r["platform"])
        if key not in val:
            order.append(key)
            val[key] = {}
        val[key][int(r["segments"])] = (r["simulated_ms"], r["per_bound"])
    out = header(["network", "platform"] + [str(s) for s in segs], "ll" + "r" * len(segs))
    for key in order:
        ms = bold_min([val[key].get(s, ("", ""))[0] for s in segs])
        out.append(row(list(key) + [f"{m} ({val[key][s][1]})" if s in val[key] else "-" for m, s in zip(ms, segs)]))
    return out


def t_huge_segments(d, files):
    """4096 ranks against the segment count: simulated, / bound, and the two predictions
    (a prediction's smallest is its pick)."""
    rows = [r for name in files for r in read(d, name)]
    segs = [r["segments"] for r in rows]
    sim = [r["simulated_ms"] for r in rows]
    fastest = sim.index(min(sim, key=float))
    per = [f"**{r['per_bound']}**" if i == fastest else r["per_bound"] for i, r in enumerate(rows)]
    for col, who in (("traits_predicted_ms", "traits'"), ("profile_predicted_ms", "profile's")):
        vals = [float(r[col]) for r in rows]
        pick = vals.index(min(vals))
        per[pick] += f" ({who} pick)"
    out = header(["segments"] + segs, "r" * (len(segs) + 1))
    out.append(row(["simulated"] + bold_min(sim)))
    out.append(row(["/ bound"] + per))
    out.append(row(["predicted, traits"] + [r["traits_predicted_ms"] for r in rows]))
    out.append(row(["predicted, profile"] + [r["profile_predicted_ms"] for r in rows]))
    return out


def t_halving_doubling(d, files):
    """mdring with halving-doubling against the rings before it and the best built-in run
    (bold: above 1, slower than the built-in)."""
    out = header(["network", "input", "size", "mdring ms", "before (rings) ms", "best built-in (of those run)", "ms",
                  "mdring / best"], "llrrrlrr")
    seen = set()
    for name in files:
        for r in read(d, name):
            inp = r["input"]
            if r["topology"] and inp not in seen:
                inp = f"{inp} (`{r['topology']}`)"
            seen.add(r["input"])
            q = ratio(num(r["mdring_ms"]), num(r["best_builtin_ms"]))
            out.append(row([NETWORK.get(r["network"], r["network"]), inp, fmt_bytes(r["bytes"]), r["mdring_ms"],
                            r["rings_ms"] or "-", r["best_builtin"], r["best_builtin_ms"],
                            f"**{q:.3f}**" if q > 1 else f"{q:.3f}"]))
    return out


TABLES = {"platforms": t_platforms, "links": t_links, "sweep": t_sweep, "cost_model": t_cost_model, "paper": t_paper,
          "ddl": t_ddl, "sizes": t_sizes, "natural": t_natural, "calibrated": t_calibrated, "huge": t_huge,
          "pace": t_pace, "forced": t_forced, "huge_segments": t_huge_segments, "halving_doubling": t_halving_doubling}


# ---- the page --------------------------------------------------------------
def render(d):
    with open(os.path.join(d, TEMPLATE)) as f:
        template = f.read()
    out = ["<!-- Rendered by scripts/scaling_report.py from docs/scaling (the prose: docs/scaling/page.md). "
           "Do not edit: edit those, then run scripts/scaling_report.py --write. -->"]
    for no, line in enumerate(template.rstrip("\n").split("\n"), 1):
        m = PLACEHOLDER.match(line)
        if not m:
            out.append(line.rstrip())
            continue
        indent, kind, files = m.group(1), m.group(2), m.group(3).split()
        if kind not in TABLES:
            raise SystemExit(f"{TEMPLATE}:{no}: no table kind '{kind}' (known: {', '.join(sorted(TABLES))})")
        for name in files:
            if not os.path.isfile(os.path.join(d, name)):
                raise SystemExit(f"{TEMPLATE}:{no}: {name} is not in {d}")
        out += [indent + t for t in TABLES[kind](d, files)]
    return "\n".join(out) + "\n"


def unnamed(d):
    """The CSVs of DIR that page.md names nowhere: data the page would silently leave out."""
    with open(os.path.join(d, TEMPLATE)) as f:
        template = f.read()
    names = [os.path.basename(p) for p in sorted(glob.glob(os.path.join(d, "*.csv")))]
    return [n for n in names if not re.search(r"(?<![\w.-])" + re.escape(n) + r"(?![\w-])", template)]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    d = args[0] if args else os.path.join(DOCS, "scaling")
    page = render(d)
    orphans = unnamed(d)
    for name in orphans:
        sys.stderr.write(f"scaling_report: {name} is named nowhere in {TEMPLATE}: render it ({{{{KIND {name}}}}}) "
                         "or link it\n")
    return finish(page, PAGE, "docs/SCALING.md",
                  "scripts/scaling_report.py renders from docs/scaling (edit docs/scaling/page.md or the CSVs, "
                  "then run scripts/scaling_report.py --write)", clean=not orphans)


if __name__ == "__main__":
    sys.exit(main())
