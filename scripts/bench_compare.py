#!/usr/bin/env python3
"""scripts/bench_compare.py: the table of scripts/bench_compare.sh's rows.

    scripts/bench_compare.py ROWS.jsonl [--limit 1.03]

Per configuration (collective, processes, buffers) and size: new/old of mdring's
median time over the rounds (the medians of each build's rounds), the spread of
that ratio over the rounds (min to max of each round's new/old), each build's
median ratio to MPI in the same runs, and the ratio of those two (new/MPI over
old/MPI: what the change did to the table's figure, with the machine's drift
between the two builds' runs taken out by MPI's time, measured alongside).
A size is "slower" when both its median new/old and its median
(new/MPI)/(old/MPI) are above --limit (default 1.03: no size more than 3 %
slower) in every round; the script then exits 1.
"""
import json
import statistics
import sys
from collections import defaultdict


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path = argv[0]
    limit = 1.03
    if "--limit" in argv:
        limit = float(argv[argv.index("--limit") + 1])
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip().startswith("{")]
    t = defaultdict(lambda: defaultdict(dict))  # key -> build -> round -> (mdring_s, ratio to MPI)
    for r in rows:
        if "build" not in r or "mdring_s" not in r:
            continue
        key = (r["op"], r["ranks"], r["alloc"], r["bytes"])
        t[key][r["build"]][r["round"]] = (r["mdring_s"], r.get("ratio"))
    slower = []
    print(f"{'collective':<15} {'np':>2} {'alloc':<5} {'bytes':>10} | {'new/old':>7} {'rounds':>13} | "
          f"{'old/MPI':>7} {'new/MPI':>7} {'vs MPI':>7}")
    for key in sorted(t):
        old, new = t[key].get("old", {}), t[key].get("new", {})
        common = sorted(set(old) & set(new))
        if not common:
            continue
        per_round = [new[k][0] / old[k][0] for k in common if old[k][0] > 0]
        med = statistics.median(new[k][0] for k in common) / statistics.median(old[k][0] for k in common)
        om = statistics.median(old[k][1] for k in common if old[k][1] is not None)
        nm = statistics.median(new[k][1] for k in common if new[k][1] is not None)
        vs = [new[k][1] / old[k][1] for k in common if old[k][1] and new[k][1] is not None]
        op, np_, alloc, size = key
        flag = ""
        if med > limit and per_round and min(per_round) > limit and vs and min(vs) > limit and nm / om > limit:
            flag = "  slower"
            slower.append(key)
        print(f"{op:<15} {np_:>2} {alloc:<5} {size:>10} | {med:7.3f} {min(per_round):6.3f}-{max(per_round):<6.3f} | "
              f"{om:7.3f} {nm:7.3f} {nm / om:7.3f}{flag}")
    if slower:
        print(f"bench_compare: {len(slower)} sizes slower than {limit:.2f} x the old build in every round")
        return 1
    print(f"bench_compare: no size slower than {limit:.2f} x the old build in every round")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
