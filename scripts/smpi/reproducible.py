#!/usr/bin/env python3
"""options.reproducible against the default mode on a simulated cluster (SimGrid SMPI):
one smpirun per point of build-smpi's mdring-bench --reproducible --baseline mdring
(both modes on the same buffers, alternating), the platform's natural topology with
mdring's default link traits. Prints one JSON line per point.

    reproducible.py [--platform paper] [--nodes 64] [--network ideal|smpi] [--bytes 1048576,...]
(scripts/bench_reproducible.sh --smpi runs it; scripts/simulate.sh builds build-smpi.)
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import simulate as S  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--platform", default="paper")
ap.add_argument("--nodes", type=int, default=64)
ap.add_argument("--network", choices=["ideal", "smpi"], default="ideal")
ap.add_argument("--bytes", default="1048576,4194304,16777216,102400000")
ap.add_argument("--out", default=str(S.ROOT / "out" / "reproducible"))
a = ap.parse_args()
sim = S.Simulator(argparse.Namespace(out=a.out, network=a.network, privatize=False, no_tmpfs=False, nice=10,
                                     timeout=0, min_free_gb=3.0, rerun="none"))
p = S.PLATFORMS[a.platform]
for nbytes in (int(b) for b in a.bytes.split(",")):
    args = ["--op", "all_reduce", "--dtype", "float", "--bytes", str(nbytes), "--iters", "1", "--warmup", "0",
            "--json", "--topology", p.natural_topology(a.nodes).replace(" ", ""), "--reproducible",
            "--baseline", "mdring"] + S.GPU_GAMMA
    rc, out, err, wall, guard, cmd = sim.smpirun(p, a.nodes, S.BENCH, args, nbytes=nbytes)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if rc != 0 or not rows:
        sys.exit(f"reproducible.py: {cmd} failed ({rc}, {guard}):\n{err[-3000:]}")
    r = rows[0]
    print(json.dumps({"platform": a.platform, "network": a.network, "ranks": a.nodes * p.gpus,
                      "topology": r["topology"], "bytes": nbytes, "reproducible_s": r["mdring_s"],
                      "default_s": r["baseline_s"], "ratio": r["ratio"], "wall_s": round(wall, 1)}), flush=True)
