#!/usr/bin/env python3
"""mdring on simulated clusters with SimGrid SMPI (scripts/simulate.sh runs this).

Every point is one smpirun of build-smpi/benchmarks/mdring-bench on a platform
written by simplatform.py: mdring (the multi-dimensional ring, topology
"sim-intra:G x sim-inter:N"), a flat ring (mdring on "sim-flat:P", one ring over
all ranks) and SMPI's built-in MPI_Allreduce algorithms (--cfg=smpi/allreduce:X),
all on the same buffers and the same simulated network. See docs/SCALING.md.

Results are cached in OUT/results.jsonl: a built-in algorithm's point is reused
as long as the platform and SimGrid stay the same; mdring's and the flat ring's
are reused only while include/ and benchmarks/bench/ (mdring-bench) are unchanged,
so re-running after a library change re-simulates mdring and nothing else.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simplatform import Platform, hostfile, platform_xml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build-smpi"
BENCH = BUILD / "benchmarks" / "mdring-bench"
PINGPONG = BUILD / "benchmarks" / "smpi-pingpong"
DDL = BUILD / "benchmarks" / "smpi-ddl"
CALIBRATE = BUILD / "tools" / "mdring-calibrate"
# The natural and calibrated rows model GPUs (smpi/simulate-computation:no: folds
# cost no simulated time): mdring's cost model is told the same.
GPU_GAMMA = ["--host-gamma", "1e-12"]
SHIM_SRC = ROOT / "scripts" / "smpi" / "tmpfs_shmalloc.cpp"
SHIM = BUILD / "libtmpfs_shmalloc.so"

MB = 1_000_000
MiB = 1 << 20
RESNET50_BYTES = 25_600_000 * 4  # ResNet-50's 25.6 M fp32 gradients: 102.4 MB

PLATFORMS = {
    # The PowerAI DDL setup: 4 P100 per node on NVLink (2 bricks, 40 GB/s per GPU),
    # one 10 GB/s InfiniBand uplink per node.
    "paper": Platform("paper", 4, 40e9, 2e-6, 10e9, 5e-6,
                      "PowerAI DDL's: 4 P100 per node on NVLink, 10 GB/s InfiniBand per node"),
    # A DGX-like node: 8 GPUs on NVSwitch, 2 x 100 Gb/s per node.
    "dgx": Platform("dgx", 8, 150e9, 3e-6, 25e9, 5e-6, "8 GPUs per node on NVSwitch, 25 GB/s per node"),
    # Commodity: 4 GPUs on PCIe, 25 Gb/s Ethernet per node.
    "ethernet": Platform("ethernet", 4, 12e9, 5e-6, 3.125e9, 20e-6, "4 GPUs per node on PCIe, 25 Gb/s Ethernet",
                         "pcie:{g} x ethernet:{n}"),
    # Two GPUs per node behind one fast NIC: the inter-node link is not much slower.
    "fatnic": Platform("fatnic", 2, 40e9, 2e-6, 25e9, 3e-6, "2 GPUs per node, 25 GB/s per node"),
}

# SMPI 3.32's MPI_Allreduce algorithms (smpi/allreduce). Left out: "default",
# "redbcast" and "impi" (all reduce+broadcast at these sizes, 30x slower),
# "automatic" (runs them all), "smp_binomial_pipeline" (slow to simulate and
# slow), "rab" (refuses MPI_FLOAT in 3.32).
BUILTINS = ["ompi", "mpich", "mvapich2", "lr", "ompi_ring_segmented", "rab_rdb", "rab1", "rab2", "rdb",
            "smp_rdb", "smp_rsag", "smp_rsag_lr", "smp_rsag_rab", "smp_binomial", "mvapich2_two_level",
            "mvapich2_rs"]
# Above 256 ranks only these (the competitive ones at large sizes; the others
# take 10+ minutes of wall time each there, or too much memory).
BUILTINS_LARGE = ["ompi", "mvapich2", "lr", "ompi_ring_segmented", "smp_rsag", "smp_rsag_rab", "mvapich2_rs"]
# From 256 ranks on, these take from 7 minutes (102.4 MB) to more than 10 (1 MiB:
# SimGrid 3.32 spends it in a list scan of its pending communications) of wall
# time each, and are not competitive (at 128 ranks and 102.4 MB: 80, 80 and 107 ms
# against 21.6 ms for the best): left out there.
BUILTINS_SLOW = ["rab1", "rab2", "rdb"]

# SimGrid configuration of every run.
#  - smpi/simulate-computation:no  the host's computing (mdring's and MPI's
#    reductions, copies) takes no simulated time: GPUs whose fused reductions run
#    far faster than the links (mdring's cost model uses tuning::device_gamma).
#  - ideal links: smpi/bw-factor and lat-factor 1 (SMPI's defaults are a TCP
#    calibration), no TCP cross-traffic (acknowledgements on the reverse path).
COMMON_CFG = ["--cfg=smpi/simulate-computation:no", "--log=root.thres:error"]
IDEAL_CFG = ["--cfg=smpi/bw-factor:0:1", "--cfg=smpi/lat-factor:0:1", "--cfg=network/crosstraffic:0"]

# Paper table: scaling efficiency of ResNet-50 (PowerAI DDL, arXiv:1708.02188).
PAPER_GPUS = [4, 8, 16, 32, 64, 128, 256]
PAPER_EFFICIENCY = [1.00, 1.00, 0.98, 0.99, 0.97, 0.95, 0.95]
# One iteration: 32 images per GPU (the 8192-image global batch of the 256-GPU
# runs), then the exposed all_reduce of the gradients. The compute time comes from
# the paper's own run: ResNet-50, 90 epochs of ImageNet-1k (1,281,167 images) in
# 50 minutes on 256 GPUs is 150.1 images/s per GPU at 0.95 efficiency, so one GPU
# computes 158.0 images/s: 32 images take 202.5 ms.
PAPER_BATCH = 32
IMAGENET_IMAGES = 1_281_167
PAPER_EPOCHS, PAPER_MINUTES, PAPER_RUN_GPUS, PAPER_RUN_EFFICIENCY = 90, 50, 256, 0.95
PAPER_IMAGES_PER_S = IMAGENET_IMAGES * PAPER_EPOCHS / (PAPER_MINUTES * 60) / PAPER_RUN_GPUS / PAPER_RUN_EFFICIENCY
PAPER_COMPUTE_S = PAPER_BATCH / PAPER_IMAGES_PER_S


# The DDL table with overlap (benchmarks/smpi_ddl.cpp): two simulated processes
# per GPU (a trainer and a communicator: mdring's progress agent on a core of its
# own), so a node's hostfile line has 2 G slots.
DDL_BUCKETS_MB = (25, 4)  # DDP's bucket_cap_mb (MiB), and smaller buckets

MDRING_LIBS = ("mdring", "mdring2", "flat", "natural", "calibrated")
SPLIT_RING_EXTENT = 16  # mdring's tuning::split_ring_extent default


def split_factor(nodes: int) -> int:
    """mdring's split_factor (plan/merge.hpp): the a of the a x b grid that a ring of
    `nodes` runs as, 0 when it stays one ring."""
    if nodes < SPLIT_RING_EXTENT:
        return 0
    return max([d for d in range(2, math.isqrt(nodes) + 1) if nodes % d == 0], default=0)


# ---------------------------------------------------------------------------
def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha(*parts) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(repr(p).encode())
    return h.hexdigest()[:16]


def code_version() -> str:
    """Hash of what mdring's simulated time depends on."""
    h = hashlib.sha1()
    files = sorted((ROOT / "include").rglob("*.hpp")) + sorted((ROOT / "benchmarks" / "bench").glob("*.?pp"))
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def simgrid_version() -> str:
    try:
        out = subprocess.run(["smpirun", "-version"], capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0] if out.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def blocksize_for(ranks: int, nbytes: int) -> int:
    """smpi/shared-malloc-blocksize: SMPI maps every allocation block by block, and
    Linux allows vm.max_map_count (65530) mappings. About four allocations of
    nbytes per rank (send, receive, scratch, MPI's temporaries)."""
    bs = MiB
    while ranks * 4 * math.ceil(max(nbytes, 1) / bs) > 40000 and bs < (1 << 30):
        bs *= 2
    return bs


class Simulator:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "platforms").mkdir(exist_ok=True)
        self.cache_file = self.out / "results.jsonl"
        self.cache: dict[str, dict] = {}
        if self.cache_file.exists():
            for line in self.cache_file.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    self.cache[r["key"]] = r
        self.code = code_version()
        self.simgrid = simgrid_version()
        self.network_cfg = IDEAL_CFG if args.network == "ideal" else []
        self.shim = self._shim()
        self.wall_total = 0.0
        self.fresh: set[str] = set()  # keys simulated in this run

    # ---- running smpirun ---------------------------------------------------
    def _shim(self):
        if self.args.no_tmpfs or not Path("/dev/shm").is_dir():
            return None
        if not SHIM.exists() or SHIM.stat().st_mtime < SHIM_SRC.stat().st_mtime:
            cxx = shutil.which("g++") or shutil.which("c++")
            if not cxx:
                return None
            r = subprocess.run([cxx, "-O2", "-shared", "-fPIC", "-o", str(SHIM), str(SHIM_SRC), "-ldl"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                log(f"simulate: could not build {SHIM.name} (runs will be slower): {r.stderr.strip()}")
                return None
        return SHIM

    def platform_files(self, p: Platform, nodes: int):
        xml = self.out / "platforms" / f"{p.name}-{nodes}.xml"
        hf = self.out / "platforms" / f"{p.name}-{nodes}.hosts"
        text = platform_xml(p, nodes)
        if not xml.exists() or xml.read_text() != text:
            xml.write_text(text)
            hf.write_text(hostfile(p, nodes))
        return xml, hf

    def smpirun(self, p: Platform, nodes: int, program: Path, prog_args: list[str], extra_cfg=(), nbytes=0,
                hostfile=None, np=0):
        xml, hf = self.platform_files(p, nodes)
        hf = hostfile or hf
        ranks = np or nodes * p.gpus
        cmd = ["nice", "-n", str(self.args.nice), "smpirun"]
        if not self.args.privatize:
            cmd.append("-no-privatize")
        cmd += ["-np", str(ranks), "-platform", str(xml), "-hostfile", str(hf)]
        cmd += COMMON_CFG + self.network_cfg + [f"--cfg=smpi/shared-malloc-blocksize:{blocksize_for(ranks, nbytes)}"]
        cmd += list(extra_cfg) + [str(program)] + prog_args
        env = dict(os.environ)
        if self.shim:
            env["LD_PRELOAD"] = (str(self.shim) + " " + env.get("LD_PRELOAD", "")).strip()
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True, cwd=str(self.out))
        guard = None
        try:
            # Poll: stop the simulation before it takes the machine's last memory.
            while True:
                try:
                    out, err = proc.communicate(timeout=2)
                    break
                except subprocess.TimeoutExpired:
                    if mem_available() < self.args.min_free_gb * (1 << 30):
                        guard = f"stopped: less than {self.args.min_free_gb} GB of memory left"
                        os.killpg(proc.pid, signal.SIGKILL)
                    elif self.args.timeout and time.monotonic() - t0 > self.args.timeout:
                        guard = f"stopped after {self.args.timeout} s (--timeout)"
                        os.killpg(proc.pid, signal.SIGKILL)
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise
        wall = time.monotonic() - t0
        self.wall_total += wall
        return proc.returncode, out, err, wall, guard, " ".join(cmd)

    # ---- measured links ------------------------------------------------------
    def links(self, p: Platform) -> dict:
        """Latency, bandwidth and per-message overhead of each kind of link, measured
        with smpi-pingpong on two nodes: per rank while every rank of a ring sends
        (what a ring step of mdring sees), and one large message alone through an
        uplink (B_node). A message of b bytes takes alpha + o + b / B: B from the
        slope between MID and 64 MiB, o from what a MID-byte message takes beyond
        the 1-byte one and its bytes (0 on the ideal network; SMPI's default network
        multiplies the latency of larger messages)."""
        key = "links|" + sha(p, self.args.network, self.simgrid, "v3")
        if key in self.cache:
            return self.cache[key]
        G = p.gpus
        big, mid = 64 * MiB, 64 * 1024
        res = {"key": key, "kind": "links", "platform": p.name}

        def measure(pattern_flag, pattern):
            rc, out, err, wall, guard, cmd = self.smpirun(
                p, 2, PINGPONG, [pattern_flag, pattern, "--bytes", f"1,{mid},{big}", "--iters", "20"], nbytes=big)
            rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
            if rc != 0 or len(rows) != 3:
                raise SystemExit(f"simulate: smpi-pingpong failed ({cmd}):\n{err[-3000:]}")
            t1, tm, tb = (r["seconds"] for r in rows)
            bw = (big - mid) / (tb - tm)
            overhead = max(0.0, tm - t1 - mid / bw)
            return t1, bw, overhead

        if G > 1:
            res["alpha_intra"], res["bw_intra_rank"], res["o_intra"] = measure("--rings", ",".join(str(i) for i in range(G)))
        else:
            res["alpha_intra"], res["bw_intra_rank"], res["o_intra"] = 0.0, p.bw_gpu, 0.0
        res["alpha_inter"], res["bw_inter_rank"], res["o_inter"] = measure(
            "--rings", "/".join(f"{i},{G + i}" for i in range(G)))
        res["alpha_node"], res["bw_node"], res["o_node"] = measure("--pairs", f"0:{G}")
        self.store(res)
        return res

    # ---- one point -----------------------------------------------------------
    def point(self, p: Platform, nodes: int, nbytes: int, lib: str) -> dict:
        """lib: "mdring" (sim-intra:G x sim-inter:N with the library's defaults: from
        16 nodes on, the inter-node ring runs as a grid of two, tune.split_ring_extent),
        "mdring2" (the same with one inter-node ring: --split-ring-extent 0), "flat"
        (one ring over all ranks), "natural" (the topology as a user writes it,
        e.g. nvlink:4 x infiniband:64, with mdring's default link traits: nothing
        fitted to the platform) or "mpi:<algorithm>"."""
        ranks = nodes * p.gpus
        L = self.links(p)
        if lib == "mdring2" and split_factor(nodes) == 0:
            return self.point(p, nodes, nbytes, "mdring")  # nothing to split: the same run
        if lib in MDRING_LIBS:
            key = f"{lib}|" + sha(p, self.args.network, self.simgrid, nodes, nbytes, self.code)
        else:
            key = f"{lib}|" + sha(p, self.args.network, self.simgrid, nodes, nbytes)
        rerun = self.args.rerun == "all" or (self.args.rerun == "mdring" and lib in MDRING_LIBS)
        if key in self.fresh or (key in self.cache and not rerun):
            return self.cache[key]
        intra, inter = fitted_links(L)
        # The flat ring's step is limited by its one message per uplink direction.
        flat_link = (f"sim-flat={L['bw_node']:.9g},{max(0.0, L['alpha_inter'] - L['o_inter']):.9g},ring,device,"
                     f"overhead={L['o_inter']:.9g}" if nodes > 1 else
                     f"sim-flat={L['bw_intra_rank']:.9g},{max(0.0, L['alpha_intra'] - L['o_intra']):.9g},ring,device,"
                     f"overhead={L['o_intra']:.9g}")
        args = ["--op", "all_reduce", "--dtype", "float", "--bytes", str(nbytes), "--iters", "1", "--warmup", "0",
                "--json"]
        cfg = []
        if lib == "mdring":
            topo = f"sim-intra:{p.gpus}xsim-inter:{nodes}" if nodes > 1 else f"sim-intra:{p.gpus}"
            args += ["--topology", topo, "--link", intra, "--link", inter]
        elif lib == "mdring2":
            args += ["--topology", f"sim-intra:{p.gpus}xsim-inter:{nodes}", "--link", intra, "--link", inter,
                     "--split-ring-extent", "0"]
        elif lib == "natural":
            args += ["--topology", p.natural_topology(nodes).replace(" ", "")] + GPU_GAMMA  # smpirun splits at spaces
        elif lib == "calibrated":
            args += ["--topology", p.natural_topology(nodes).replace(" ", ""), "--profile",
                     str(self.profile(p, nodes))] + GPU_GAMMA
        elif lib == "flat":
            # A ring, as the column says: the link's figure is a ring step's (one message per
            # uplink direction), which halving-doubling's partners across nodes do not get.
            args += ["--topology", f"sim-flat:{ranks}", "--link", flat_link, "--split-ring-extent", "0",
                     "--algorithms", "ring"]
        else:
            alg = lib.split(":", 1)[1]
            topo = f"sim-intra:{p.gpus}xsim-inter:{nodes}" if nodes > 1 else f"sim-intra:{p.gpus}"
            args += ["--topology", topo, "--link", intra, "--link", inter, "--baseline", "mpi", "--baseline-only"]
            cfg = [f"--cfg=smpi/allreduce:{alg}"]
        log(f"simulate: {p.name} {nodes}x{p.gpus}={ranks} ranks, {nbytes} B, {lib} ...")
        for attempt in range(3):
            rc, out, err, wall, guard, cmd = self.smpirun(p, nodes, BENCH, args, cfg, nbytes=nbytes)
            if rc >= 0 or guard:
                break
            # Killed by a signal that we did not send: the machine's business, not the point's.
            log(f"simulate:   killed by signal {-rc} from outside, again")
        rows = [json.loads(l) for l in out.splitlines() if l.startswith('{"op"')]
        r = {"key": key, "kind": "point", "platform": p.name, "gpus": p.gpus, "nodes": nodes, "ranks": ranks,
             "bytes": nbytes, "lib": lib, "wall_s": round(wall, 2), "code": self.code if lib in MDRING_LIBS else None,
             "simgrid": self.simgrid, "network": self.args.network}
        if rc == 0 and len(rows) == 1:
            row = rows[0]
            r["status"] = "ok"
            r["sim_s"] = row["baseline_s"] if lib.startswith("mpi:") else row["mdring_s"]
            r["predicted_s"] = row["predicted_s"] if lib in MDRING_LIBS else None
        else:
            r["status"] = "failed"
            r["error"] = guard or (err.strip().splitlines() or ["exit code %d" % rc])[-1][:300]
            log(f"simulate:   failed: {r['error']}")
        log(f"simulate:   {r.get('sim_s', float('nan')) * 1e3 if r['status'] == 'ok' else float('nan'):.3f} ms simulated, "
            f"{wall:.1f} s wall")
        self.fresh.add(key)
        if r["status"] == "ok" or rc > 0 or guard:
            self.store(r)  # a signal from outside is not the point's result: not cached
        return r

    # ---- calibration ----------------------------------------------------------
    def profile(self, p: Platform, nodes: int) -> Path:
        """mdring-calibrate on the platform with the natural input: the profile that
        the "calibrated" rows bind with (collective/calibrate.hpp; what a user runs
        once per machine)."""
        path = self.out / "profiles" / f"{p.name}-{nodes}-{self.args.network}-{self.code}.profile"
        if path.exists():
            return path
        path.parent.mkdir(exist_ok=True)
        log(f"simulate: calibrating {p.name} {nodes}x{p.gpus} ({self.args.network}) ...")
        rc, out, err, wall, guard, cmd = self.smpirun(
            p, nodes, CALIBRATE, ["--topology", p.natural_topology(nodes).replace(" ", ""), "--out", str(path),
                                  "--no-check"], nbytes=8 * MiB)
        if rc != 0 or not path.exists():
            raise SystemExit(f"simulate: mdring-calibrate failed ({cmd}):\n{(guard or err)[-3000:]}")
        log(f"simulate:   {wall:.1f} s wall")
        return path

    # ---- one training step (the DDL table with overlap) ------------------------
    def ddl_point(self, p: Platform, nodes: int, mode: str, bucket_mb: float, calibrated: bool = False) -> dict:
        """A ResNet-50 step on nodes x G GPUs (benchmarks/smpi_ddl.cpp): mode "overlap"
        (each bucket all-reduced as soon as the backward pass has made it) or
        "exposed" (after the backward pass); mdring on the platform's measured links,
        as in the other fitted rows, or (calibrated) the natural input with the
        profile mdring-calibrate measured on the platform, as in the calibrated rows."""
        gpus = nodes * p.gpus
        key = ("ddlcal|" if calibrated else "ddl3|") + sha(
            p, self.args.network, self.simgrid, nodes, mode, bucket_mb, PAPER_COMPUTE_S, self.code,
            (ROOT / "benchmarks" / "smpi_ddl.cpp").read_bytes())
        if key in self.fresh or (key in self.cache and self.args.rerun == "none"):
            return self.cache[key]
        if calibrated:
            topo = ["--topology", p.natural_topology(nodes).replace(" ", ""), "--profile", str(self.profile(p, nodes)),
                    *GPU_GAMMA]
        else:
            intra, inter = fitted_links(self.links(p))
            topo = ["--topology", f"sim-intra:{p.gpus}xsim-inter:{nodes}" if nodes > 1 else f"sim-intra:{p.gpus}",
                    "--link", intra, "--link", inter]
        args = topo + ["--mode", mode, "--bucket-mb", str(bucket_mb), "--step-ms", f"{PAPER_COMPUTE_S * 1e3:.6f}"]
        xml, _ = self.platform_files(p, nodes)
        hf = self.out / "platforms" / f"{p.name}-{nodes}-ddl.hosts"
        hf.write_text("".join(f"node{i}:{2 * p.gpus}\n" for i in range(nodes)))
        log(f"simulate: ddl {p.name} {nodes}x{p.gpus}={gpus} GPUs, {mode}, buckets of {bucket_mb} MiB"
            f"{', calibrated' if calibrated else ''} ...")
        rc, out, err, wall, guard, cmd = self.smpirun(p, nodes, DDL, args, nbytes=RESNET50_BYTES, hostfile=hf,
                                                      np=2 * gpus)
        rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        r = {"key": key, "kind": "ddl", "platform": p.name, "nodes": nodes, "ranks": gpus, "mode": mode,
             "bucket_mb": bucket_mb, "calibrated": calibrated, "wall_s": round(wall, 2), "code": self.code, "simgrid": self.simgrid,
             "network": self.args.network}
        if rc == 0 and len(rows) == 1:
            r.update(status="ok", **{k: rows[0][k] for k in ("step_s", "exposed_s", "all_reduce_s", "efficiency",
                                                             "buckets")})
        else:
            r["status"] = "failed"
            r["error"] = guard or (err.strip().splitlines() or ["exit code %d" % rc])[-1][:300]
            log(f"simulate:   failed: {r['error']}")
        log(f"simulate:   efficiency {r.get('efficiency', float('nan')):.4f}, {wall:.1f} s wall")
        self.fresh.add(key)
        if r["status"] == "ok" or rc > 0 or guard:
            self.store(r)
        return r

    def store(self, r: dict) -> None:
        self.cache[r["key"]] = r
        with open(self.cache_file, "a") as f:
            f.write(json.dumps(r) + "\n")

    def builtins_for(self, ranks: int, nbytes: int) -> list[str]:
        names = self.args.builtins
        if not self.args.all_builtins_large:
            if ranks > 256:
                names = [b for b in names if b in BUILTINS_LARGE]
            if ranks >= 256:
                names = [b for b in names if b not in BUILTINS_SLOW]
        return ["mpi:" + b for b in names]

    def best_builtin(self, p, nodes, nbytes):
        best = None
        for lib in self.builtins_for(nodes * p.gpus, nbytes):
            r = self.point(p, nodes, nbytes, lib)
            if r["status"] == "ok" and (best is None or r["sim_s"] < best["sim_s"]):
                best = r
        return best


# ---------------------------------------------------------------------------
def fitted_links(L: dict) -> tuple[str, str]:
    """mdring-bench --link texts of the links measured on the platform (latency
    without the overhead, which the model counts apart)."""
    def text(name, bw, t1, o, shape):
        return f"{name}={bw:.9g},{max(0.0, t1 - o):.9g},{shape},device,overhead={o:.9g}"
    return (text("sim-intra", L["bw_intra_rank"], L["alpha_intra"], L["o_intra"], "full"),
            text("sim-inter", L["bw_inter_rank"], L["alpha_inter"], L["o_inter"], "ring"))


def bound_s(links: dict, nodes: int, nbytes: int) -> float:
    """Inter-node lower bound 2 (N-1)/N S / B_node: each node must send and receive
    that much through its uplink."""
    return 2 * (nodes - 1) / nodes * nbytes / links["bw_node"] if nodes > 1 else float("nan")


def fmt_ms(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.2f}"


def fmt_bytes(b: int) -> str:
    if b == RESNET50_BYTES:
        return "102.4 MB"
    if b % MiB == 0:
        return f"{b // MiB} MiB"
    if b % 1024 == 0 and b < MiB:
        return f"{b // 1024} KiB"
    return f"{b / MB:g} MB"


def runs_as(p: Platform, nodes: int) -> str:
    """The grid mdring runs the nodes as: G x N, or G x a x b when the ring is split."""
    a = split_factor(nodes)
    return f"{p.gpus} x {a} x {nodes // a}" if a else (f"{p.gpus} x {nodes}" if nodes > 1 else f"{p.gpus}")


def sweep(sim: Simulator, p: Platform, points: list[tuple[int, int]], builtins=True):
    """Rows for (nodes, bytes) points: mdring, flat ring, best built-in, bound."""
    L = sim.links(p)
    rows = []
    for nodes, nbytes in points:
        md = sim.point(p, nodes, nbytes, "mdring")
        md2 = sim.point(p, nodes, nbytes, "mdring2")
        fl = sim.point(p, nodes, nbytes, "flat")
        per_alg = {}
        best = None
        if builtins:
            for lib in sim.builtins_for(nodes * p.gpus, nbytes):
                r = sim.point(p, nodes, nbytes, lib)
                per_alg[lib[4:]] = r.get("sim_s") if r["status"] == "ok" else None
                if r["status"] == "ok" and (best is None or r["sim_s"] < best["sim_s"]):
                    best = r
        b = bound_s(L, nodes, nbytes)
        row = {"platform": p.name, "gpus_per_node": p.gpus, "nodes": nodes, "ranks": nodes * p.gpus, "bytes": nbytes,
               "mdring_s": md.get("sim_s"), "mdring_predicted_s": md.get("predicted_s"),
               "mdring_runs_as": runs_as(p, nodes),
               "one_ring_s": md2.get("sim_s"), "one_ring_predicted_s": md2.get("predicted_s"),
               "flat_s": fl.get("sim_s"), "flat_predicted_s": fl.get("predicted_s"),
               "best_builtin": best["lib"][4:] if best else None, "best_builtin_s": best["sim_s"] if best else None,
               "bound_s": b, "mdring_wall_s": md["wall_s"], "one_ring_wall_s": md2["wall_s"], "flat_wall_s": fl["wall_s"],
               "builtins_wall_s": round(sum(sim.point(p, nodes, nbytes, l)["wall_s"] for l in sim.builtins_for(nodes * p.gpus, nbytes)), 1) if builtins else 0,
               "builtins": per_alg}
        rows.append(row)
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    flat = []
    for r in rows:
        r = dict(r)
        b = r.pop("builtins", {}) or {}
        for k, v in b.items():
            r[f"mpi_{k}_s"] = v
        flat.append(r)
    keys = []
    for r in flat:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in flat:
            w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})


def ratio(a, b):
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else float("nan")


def table_scaling(rows, title) -> str:
    s = [f"### {title}", "",
         "| ranks (nodes x GPUs) | size | mdring runs as | mdring ms | predicted ms | one inter-node ring ms | "
         "flat ring ms | best built-in | ms | bound ms | mdring / bound | mdring / best built-in |",
         "| ---: | ---: | :--- | ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        one = fmt_ms(r["one_ring_s"]) if r["mdring_runs_as"].count("x") == 2 else "(same)"
        s.append(f"| {r['ranks']} ({r['nodes']}x{r['gpus_per_node']}) | {fmt_bytes(r['bytes'])} | {r['mdring_runs_as']} | "
                 f"{fmt_ms(r['mdring_s'])} | {fmt_ms(r['mdring_predicted_s'])} | {one} | {fmt_ms(r['flat_s'])} | "
                 f"{r['best_builtin'] or '-'} | "
                 f"{fmt_ms(r['best_builtin_s'])} | {fmt_ms(r['bound_s'])} | {ratio(r['mdring_s'], r['bound_s']):.3f} | "
                 f"{ratio(r['mdring_s'], r['best_builtin_s']):.3f} |")
    return "\n".join(s) + "\n"


def table_model(rows) -> str:
    s = ["| platform | ranks | size | mdring runs as | mdring simulated ms | predicted ms | error | "
         "one inter-node ring simulated ms | predicted ms | error | flat ring simulated ms | predicted ms | error |",
         "| :--- | ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def cells(sim_s, pred_s):
        return f"{fmt_ms(sim_s)} | {fmt_ms(pred_s)} | {ratio(pred_s, sim_s) - 1:+.1%}"

    for r in rows:
        one = (cells(r["one_ring_s"], r["one_ring_predicted_s"]) if r["mdring_runs_as"].count("x") == 2
               else "(same) | | ")
        s.append(f"| {r['platform']} | {r['ranks']} | {fmt_bytes(r['bytes'])} | {r['mdring_runs_as']} | "
                 f"{cells(r['mdring_s'], r['mdring_predicted_s'])} | {one} | "
                 f"{cells(r['flat_s'], r['flat_predicted_s'])} |")
    return "\n".join(s) + "\n"


def natural_rows(sim: Simulator, cases) -> list[dict]:
    """Per (platform, nodes, bytes): mdring on the natural input (the topology as a
    user writes it, default link traits), mdring with the links fitted to the
    platform (smpi-pingpong, --link), the best built-in and the bound."""
    rows = []
    for p, nodes, nbytes in cases:
        L = sim.links(p)
        nat = sim.point(p, nodes, nbytes, "natural")
        cal = sim.point(p, nodes, nbytes, "calibrated")
        fit = sim.point(p, nodes, nbytes, "mdring")
        best = sim.best_builtin(p, nodes, nbytes)
        rows.append({"platform": p.name, "network": sim.args.network, "nodes": nodes, "ranks": nodes * p.gpus,
                     "bytes": nbytes, "topology": p.natural_topology(nodes),
                     "natural_s": nat.get("sim_s"), "natural_predicted_s": nat.get("predicted_s"),
                     "calibrated_s": cal.get("sim_s"), "calibrated_predicted_s": cal.get("predicted_s"),
                     "fitted_s": fit.get("sim_s"), "fitted_predicted_s": fit.get("predicted_s"),
                     "best_builtin": best["lib"][4:] if best else None,
                     "best_builtin_s": best["sim_s"] if best else None, "bound_s": bound_s(L, nodes, nbytes)})
    return rows


def table_natural(rows) -> str:
    s = ["| platform | network | ranks | size | natural input | simulated ms | predicted ms | error "
         "| calibrated ms | predicted ms | error | fitted links ms | best built-in | ms | bound ms "
         "| natural / bound | natural / best | calibrated / bound | calibrated / best |",
         "| :--- | :--- | ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- | ---: | ---: "
         "| ---: | ---: | ---: | ---: |"]
    err = lambda p, t: f"{ratio(p, t) - 1:+.1%}" if p and t else "-"  # noqa: E731
    for r in rows:
        s.append(f"| {r['platform']} | {r['network']} | {r['ranks']} | {fmt_bytes(r['bytes'])} | `{r['topology']}` | "
                 f"{fmt_ms(r['natural_s'])} | {fmt_ms(r['natural_predicted_s'])} | "
                 f"{err(r['natural_predicted_s'], r['natural_s'])} | {fmt_ms(r.get('calibrated_s'))} | "
                 f"{fmt_ms(r.get('calibrated_predicted_s'))} | {err(r.get('calibrated_predicted_s'), r.get('calibrated_s'))} | "
                 f"{fmt_ms(r['fitted_s'])} | {r['best_builtin'] or '-'} | {fmt_ms(r['best_builtin_s'])} | "
                 f"{fmt_ms(r['bound_s'])} | {ratio(r['natural_s'], r['bound_s']):.3f} | "
                 f"{ratio(r['natural_s'], r['best_builtin_s']):.3f} | {ratio(r.get('calibrated_s'), r['bound_s']):.3f} | "
                 f"{ratio(r.get('calibrated_s'), r['best_builtin_s']):.3f} |")
    return "\n".join(s) + "\n"


def efficiency(t_all_reduce, t_compute=None):
    tc = PAPER_COMPUTE_S if t_compute is None else t_compute
    return tc / (tc + t_all_reduce) if t_all_reduce == t_all_reduce and t_all_reduce is not None else float("nan")


def table_paper(rows) -> str:
    by_gpus = {r["ranks"]: r for r in rows}
    s = [f"Efficiency = T_compute / (T_compute + T_all_reduce): one GPU computes {PAPER_BATCH} images in "
         f"T_compute = {PAPER_COMPUTE_S * 1e3:.1f} ms ({PAPER_IMAGES_PER_S:.1f} images/s: the paper's 90 epochs of "
         f"ImageNet-1k in {PAPER_MINUTES} minutes on {PAPER_RUN_GPUS} GPUs at {PAPER_RUN_EFFICIENCY}), then waits for "
         f"the all_reduce of {RESNET50_BYTES / 1e6:g} MB (25.6 M fp32 gradients), not overlapped. \"at the bound\": "
         "an all_reduce that takes exactly the inter-node lower bound 2 (N-1)/N S / B_node.", "",
         "| GPUs | PowerAI DDL (paper) | mdring | flat ring | best built-in | (which) | at the bound "
         "| mdring all_reduce ms | T_compute for mdring at 0.95 |",
         "| ---: | ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: |"]
    for g, e in zip(PAPER_GPUS, PAPER_EFFICIENCY):
        r = by_gpus.get(g)
        if not r:
            continue
        eff = lambda t: f"{efficiency(t):.3f}" if t else "-"  # noqa: E731
        bound = eff(r["bound_s"]) if r["bound_s"] == r["bound_s"] else "1.000"
        s.append(f"| {g} | {e:.2f} | {eff(r['mdring_s'])} | {eff(r['flat_s'])} | {eff(r['best_builtin_s'])} | "
                 f"{r['best_builtin'] or '-'} | {bound} | {fmt_ms(r['mdring_s'])} | "
                 f"{fmt_ms(19 * r['mdring_s'])} ms |")
    return "\n".join(s) + "\n"


def table_ddl(rows) -> str:
    get = {(r["ranks"], r["mode"], r["bucket_mb"], bool(r.get("calibrated"))): r for r in rows
           if r.get("status") == "ok"}
    cal = any(k[3] for k in get)
    s = ["One training step of ResNet-50 per GPU (benchmarks/smpi_ddl.cpp): 32 images in "
         f"{PAPER_COMPUTE_S * 1e3:.1f} ms of simulated compute (one third forward, two thirds backward, each layer "
         "its share of the multiply-adds), the 25.557 M fp32 gradients (102.2 MB) all-reduced (avg) in DDP's buckets "
         "(as its Reducer rebuilds them after the first step: tensors in the order the backward pass makes them, a "
         "bucket closed once it holds at least its limit, 1 MiB for the first, then bucket_cap_mb MiB). "
         "Overlap: each bucket is all-reduced as soon as the backward pass "
         "has made its last gradient, by a second simulated process on the GPU's node (mdring's progress agent on a "
         "core the GPU leaves free; calls on a communicator run one after the other). Exposed: the same buckets "
         "all-reduced after the backward pass. "
         "Efficiency = the step's compute / the step (the slowest rank's); \"tail\": the all-reduce left after the "
         "backward pass." + (" Calibrated: the natural input with the profile mdring-calibrate measured on the "
                             "platform instead of the measured links." if cal else ""), "",
         "| GPUs | PowerAI DDL (paper) | overlap, 25 MiB buckets (DDP) | tail ms | overlap, 4 MiB buckets | tail ms "
         "| exposed (no overlap) | all-reduce of every bucket ms |" + (" overlap, DDP's, calibrated | tail ms |" if cal else ""),
         "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if cal else "")]
    for g, e in zip(PAPER_GPUS, PAPER_EFFICIENCY):
        o25, o4, ex = (get.get((g, "overlap", 25, False)), get.get((g, "overlap", 4, False)),
                       get.get((g, "exposed", 25, False)))
        oc = get.get((g, "overlap", 25, True))
        if not (o25 or o4 or ex or oc):
            continue
        f = lambda r, k, m=1, d=3: f"{r[k] * m:.{d}f}" if r else "-"  # noqa: E731
        s.append(f"| {g} | {e:.2f} | {f(o25, 'efficiency')} | {f(o25, 'exposed_s', 1e3, 2)} | {f(o4, 'efficiency')} "
                 f"| {f(o4, 'exposed_s', 1e3, 2)} | {f(ex, 'efficiency')} | {f(ex, 'all_reduce_s', 1e3, 2)} |" +
                 (f" {f(oc, 'efficiency')} | {f(oc, 'exposed_s', 1e3, 2)} |" if cal else ""))
    return "\n".join(s) + "\n"


def plot(rows_ranks, rows_bytes, out: Path, suffix: str = "") -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("simulate: no matplotlib (apt-get install python3-matplotlib): no plots")
        return []
    made = []
    for rows, xkey, name, xlabel in ((rows_ranks, "ranks", f"scaling_ranks{suffix}.png", "ranks (4 GPUs per node)"),
                                     (rows_bytes, "bytes", f"scaling_bytes{suffix}.png", "bytes")):
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
        xs = [r[xkey] for r in rows]
        series = [("mdring", "mdring_s", "o-"), ("mdring, cost model", "mdring_predicted_s", "x:"),
                  ("mdring, one inter-node ring", "one_ring_s", "d-"), ("flat ring", "flat_s", "s-"), ("best SMPI built-in", "best_builtin_s", "^-"),
                  ("bound 2(N-1)/N S/B_node", "bound_s", "--")]
        for label, k, style in series:
            ys = [r[k] * 1e3 if r.get(k) and not math.isnan(r[k]) else float("nan") for r in rows]
            ax.plot(xs, ys, style, label=label)
        ax.set_xscale("log", base=2 if xkey == "ranks" else 10)
        if xkey == "bytes":
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("all_reduce time, ms (simulated)")
        p0 = rows[0]
        ax.set_title(f"{p0['platform']} platform, " + (f"{fmt_bytes(p0['bytes'])} fp32" if xkey == "ranks"
                                                        else f"{p0['ranks']} ranks"))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / name
        fig.savefig(path)
        plt.close(fig)
        made.append(path)
    return made


# ---------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="a tiny check (16 ranks, 1 MiB; and 16 ranks checked "
                    "element by element): about a minute with the build")
    ap.add_argument("--sections", default="links,ranks,bytes,model,natural,paper",
                    help="what to run: links, ranks, bytes, model, natural, paper, large, ddl (comma separated); "
                    "natural: the topology as a user writes it with default link traits, on each platform; "
                    "ddl: ResNet-50 training steps with the all-reduce overlapped; sizes: the natural input "
                    "against the built-ins from 4 KiB to 102.4 MB; huge: 4096 ranks at 102.4 MB (none of the "
                    "three in the default set)")
    ap.add_argument("--large", action="store_true", help="add the 1024-rank points (256 nodes x 4); long")
    ap.add_argument("--huge-inputs", default="natural,mdring",
                    help="the inputs of the huge section, in order: natural (the topology as a user writes it), "
                    "mdring (the fitted links: much slower to simulate)")
    ap.add_argument("--paper", action="store_true", help="only the paper's table (same as --sections paper)")
    ap.add_argument("--builtins", default=",".join(BUILTINS), help="SMPI allreduce algorithms to compare")
    ap.add_argument("--all-builtins-large", action="store_true",
                    help="every built-in at every point (default: fewer above 256 ranks, see BUILTINS_SLOW)")
    ap.add_argument("--rerun", choices=["none", "mdring", "all"], default="none",
                    help="ignore cached results (mdring: mdring's and the flat ring's)")
    ap.add_argument("--network", choices=["ideal", "smpi"], default="ideal",
                    help="ideal links (default) or SMPI's default TCP-calibrated factors")
    ap.add_argument("--privatize", action="store_true", help="SMPI privatization of globals (slower; "
                    "mdring-bench runs correctly without)")
    ap.add_argument("--no-tmpfs", action="store_true", help="do not LD_PRELOAD tmpfs_shmalloc (slower)")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=0, help="stop a run after this many seconds (0: never)")
    ap.add_argument("--min-free-gb", type=float, default=3.0, help="stop a run when less memory is left")
    ap.add_argument("--platforms", default="paper,dgx,ethernet,fatnic",
                    help="the platforms of the natural section (comma separated)")
    ap.add_argument("--out", default=str(ROOT / "out" / "simulate"))
    ap.add_argument("--publish", metavar="DIR", help="also copy the CSVs, plots and tables.md here "
                    "(docs/scaling for the repository's: then docs/SCALING.md is rendered again with "
                    "scripts/scaling_report.py --write)")
    args = ap.parse_args()
    args.builtins = [b for b in args.builtins.split(",") if b]
    args.platforms = [p for p in args.platforms.split(",") if p]
    args.huge_inputs = [i for i in args.huge_inputs.split(",") if i]
    if unknown := [i for i in args.huge_inputs if i not in ("natural", "mdring")]:
        ap.error(f"--huge-inputs: unknown {', '.join(unknown)} (known: natural, mdring)")
    if unknown := [p for p in args.platforms if p not in PLATFORMS]:
        ap.error(f"--platforms: unknown {', '.join(unknown)} (known: {', '.join(PLATFORMS)})")
    if not BENCH.exists() or not PINGPONG.exists():
        log(f"simulate: {BENCH} is missing: cmake --preset smpi && cmake --build --preset smpi")
        return 2
    sim = Simulator(args)
    out = sim.out
    log(f"simulate: {sim.simgrid}, network {args.network}, results in {out}"
        + ("" if sim.shim else " (without the tmpfs shim: slower)"))

    if args.smoke:
        return smoke(sim)

    sections = set(args.sections.split(","))
    if args.paper:
        sections = {"paper"}
    if args.large:
        sections.add("large")
    paper = PLATFORMS["paper"]
    report = [f"Simulated with {sim.simgrid} (network: {args.network}), mdring code {sim.code}.", ""]
    csvs = []
    # The ideal network's files keep their plain names; SMPI's network gets its own
    # (scaling_ranks_smpi.csv, ...), so that --publish of one does not overwrite the other.
    suffix = "" if args.network == "ideal" else f"_{args.network}"
    named = lambda stem, ext="csv": out / f"{stem}{suffix}.{ext}"  # noqa: E731

    if "links" in sections or "model" in sections:
        report += ["### Links (measured with smpi-pingpong on two nodes)", "",
                   "| platform | intra: 1-byte message us, GB/s per rank, overhead us | inter: the same "
                   "| one message through the uplink: GB/s (B_node) |",
                   "| :--- | ---: | ---: | ---: |"]
        links = []
        for name in ("paper", "dgx", "ethernet", "fatnic"):
            L = sim.links(PLATFORMS[name])
            report.append(f"| {PLATFORMS[name].describe()} | {L['alpha_intra'] * 1e6:.2f}, {L['bw_intra_rank'] / 1e9:.2f}, "
                          f"{L['o_intra'] * 1e6:.2f} | {L['alpha_inter'] * 1e6:.2f}, {L['bw_inter_rank'] / 1e9:.3f}, "
                          f"{L['o_inter'] * 1e6:.2f} | {L['bw_node'] / 1e9:.3f} |")
            links.append({"platform": name, **{k: L[k] for k in ("alpha_intra", "bw_intra_rank", "o_intra", "alpha_inter",
                                                                "bw_inter_rank", "o_inter", "bw_node")}})
        report.append("")
        write_csv(named("links"), links)
        csvs.append(named("links"))

    rows_ranks, rows_bytes = [], []
    nodes_list = [1, 2, 4, 8, 16, 32, 64] + ([256] if "large" in sections else [])
    if "ranks" in sections or "paper" in sections or "large" in sections:
        rows_ranks = sweep(sim, paper, [(n, RESNET50_BYTES) for n in nodes_list
                                        if "ranks" in sections or "large" in sections or n <= 64])
        write_csv(named("scaling_ranks"), rows_ranks)
        csvs.append(named("scaling_ranks"))
        report.append(table_scaling(rows_ranks, f"Time against ranks: {paper.describe()}, 102.4 MB"))
    if "bytes" in sections:
        rows_bytes = sweep(sim, paper, [(64, b) for b in (MiB, 4 * MiB, 16 * MiB, 64 * MiB)]
                           + [(64, RESNET50_BYTES)])
        write_csv(named("scaling_bytes"), rows_bytes)
        csvs.append(named("scaling_bytes"))
        report.append(table_scaling(rows_bytes, f"Time against bytes: {paper.describe()}, 256 ranks"))
    if "model" in sections:
        pts = []
        for name, nodes in (("paper", 64), ("dgx", 16), ("ethernet", 16), ("fatnic", 32)):
            pts += sweep(sim, PLATFORMS[name], [(nodes, b) for b in (MiB, 16 * MiB, RESNET50_BYTES)], builtins=False)
        write_csv(named("cost_model"), pts)
        csvs.append(named("cost_model"))
        report += ["### Cost model (explain()) against simulation", "", table_model(pts)]
    if "natural" in sections:
        cases = [(PLATFORMS[name], nodes, RESNET50_BYTES)
                 for name, nodes in (("paper", 64), ("dgx", 16), ("ethernet", 16), ("fatnic", 32))
                 if name in args.platforms]
        nat = natural_rows(sim, cases)
        write_csv(out / f"natural_{args.network}.csv", nat)
        csvs.append(out / f"natural_{args.network}.csv")
        report += [f"### Natural input (default link traits, nothing fitted) against fitted links, network "
                   f"{args.network}", "", table_natural(nat)]
    if "paper" in sections and rows_ranks:
        pr = [r for r in rows_ranks if r["ranks"] in PAPER_GPUS]
        write_csv(named("paper_table"), [{"gpus": r["ranks"], "paper": e, "compute_s": PAPER_COMPUTE_S,
                                          "mdring": efficiency(r["mdring_s"]),
                                          "flat_ring": efficiency(r["flat_s"]),
                                          "best_builtin": efficiency(r["best_builtin_s"]),
                                          "best_builtin_name": r["best_builtin"],
                                          "at_bound": efficiency(r["bound_s"]) if r["bound_s"] == r["bound_s"] else 1.0,
                                          "mdring_all_reduce_s": r["mdring_s"]}
                                         for r, e in zip(pr, PAPER_EFFICIENCY)])
        csvs.append(named("paper_table"))
        report += ["### ResNet-50 scaling efficiency (paper platform)", "", table_paper(pr)]
    if "sizes" in sections:
        # The natural input at every size (target: at most the best built-in at
        # 256 and 1024 ranks, 4 KiB to 100 MB, on SMPI's default network).
        rows = []
        for nodes in [64] + ([256] if "large" in sections else []):
            L = sim.links(paper)
            for nbytes in (4 * 1024, 64 * 1024, MiB, 4 * MiB, 16 * MiB, RESNET50_BYTES):
                nat = sim.point(paper, nodes, nbytes, "natural")
                best = sim.best_builtin(paper, nodes, nbytes)
                rows.append({"ranks": nodes * paper.gpus, "bytes": nbytes, "natural_s": nat.get("sim_s"),
                             "predicted_s": nat.get("predicted_s"), "best_builtin": best["lib"][4:] if best else None,
                             "best_builtin_s": best["sim_s"] if best else None,
                             "bound_s": bound_s(L, nodes, nbytes)})
        write_csv(out / f"sizes_{args.network}.csv", rows)
        csvs.append(out / f"sizes_{args.network}.csv")
        report += [f"### Natural input against the built-ins at every size, network {args.network} "
                   f"(built-ins run: {', '.join(args.builtins)})", "",
                   "| ranks | size | natural ms | predicted ms | best built-in | ms | natural / best | natural / bound |",
                   "| ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: |"]
        for r in rows:
            report.append(f"| {r['ranks']} | {fmt_bytes(r['bytes'])} | {fmt_ms(r['natural_s'])} | "
                          f"{fmt_ms(r['predicted_s'])} | {r['best_builtin'] or '-'} | {fmt_ms(r['best_builtin_s'])} | "
                          f"{ratio(r['natural_s'], r['best_builtin_s']):.3f} | {ratio(r['natural_s'], r['bound_s']):.3f} |")
        report.append("")
    if "huge" in sections:
        # 4096 ranks (1024 nodes x 4) at 102.4 MB against the bound (target: at most
        # 1.10 x): mdring on the fitted links and on the natural input. No built-in
        # (hours each at this size).
        nodes = 1024
        L = sim.links(paper)
        rows = []
        for lib in args.huge_inputs:  # the natural input first: what a user gets
            r = sim.point(paper, nodes, RESNET50_BYTES, lib)
            rows.append({"ranks": nodes * paper.gpus, "lib": lib, "sim_s": r.get("sim_s"),
                         "predicted_s": r.get("predicted_s"), "bound_s": bound_s(L, nodes, RESNET50_BYTES),
                         "wall_s": r.get("wall_s")})
        write_csv(out / f"huge_{args.network}.csv", rows)
        csvs.append(out / f"huge_{args.network}.csv")
        report += [f"### 4096 ranks (1024 nodes x 4), 102.4 MB, network {args.network}", "",
                   "| input | simulated ms | predicted ms | bound ms | / bound | wall s |", "| :--- | ---: | ---: | ---: | ---: | ---: |"]
        for r in rows:
            report.append(f"| {r['lib']} | {fmt_ms(r['sim_s'])} | {fmt_ms(r['predicted_s'])} | {fmt_ms(r['bound_s'])} | "
                          f"{ratio(r['sim_s'], r['bound_s']):.3f} | {r['wall_s']} |")
        report.append("")
    if "ddl" in sections:
        ddl = []
        # On SMPI's network also the calibrated plan: one figure per link misplans there.
        runs = [("overlap", 25, False), ("exposed", 25, False), ("overlap", 4, False)]
        if args.network == "smpi":
            runs.append(("overlap", 25, True))
        for mode, mb, cal in runs:
            for nodes in (1, 2, 4, 8, 16, 32, 64):
                ddl.append(sim.ddl_point(paper, nodes, mode, mb, cal))
        write_csv(named("ddl"), [{k: r.get(k) for k in ("ranks", "mode", "bucket_mb", "calibrated", "efficiency", "step_s",
                                                       "exposed_s", "all_reduce_s", "buckets", "status")}
                                 for r in ddl])
        csvs.append(named("ddl"))
        report += ["### ResNet-50 with the all-reduce overlapped (paper platform)", "", table_ddl(ddl)]
    pngs = plot(rows_ranks if "ranks" in sections or "large" in sections else [], rows_bytes, out, suffix)
    text = "\n".join(report)
    tables = named("tables", "md")
    tables.write_text(text)
    print(text)
    log(f"simulate: {sim.wall_total:.0f} s of simulations in this run; tables in {tables}")
    if args.publish:
        dest = Path(args.publish)
        dest.mkdir(parents=True, exist_ok=True)
        for f in csvs + pngs + [tables]:
            shutil.copy(f, dest / f.name)
        log(f"simulate: copied {len(csvs) + len(pngs) + 1} files to {dest}")
        if dest.resolve() == (ROOT / "docs" / "scaling").resolve():
            # docs/SCALING.md is rendered from docs/scaling alone: render it again (a CSV
            # that docs/scaling/page.md does not name yet is reported, not shown).
            rc = subprocess.run([sys.executable, str(ROOT / "scripts" / "scaling_report.py"), "--write"]).returncode
            log("simulate: docs/SCALING.md rendered again" if rc == 0 else "simulate: scripts/scaling_report.py failed")
            return rc
    return 0


def smoke(sim: Simulator) -> int:
    """16 ranks: mdring, the flat ring and two built-ins time 1 MiB; mdring's
    results are checked element by element with real buffers (--check)."""
    p = PLATFORMS["paper"]
    sim.args.builtins = ["lr", "ompi"]
    rows = sweep(sim, p, [(4, MiB)])
    r = rows[0]
    ok = all(r[k] for k in ("mdring_s", "flat_s", "best_builtin_s"))
    intra, inter = fitted_links(sim.links(p))
    rc, out, err, wall, guard, cmd = sim.smpirun(
        p, 4, BENCH, ["--topology", "sim-intra:4xsim-inter:4", "--link", intra, "--link", inter, "--min-bytes", "4",
                      "--max-bytes", "256K", "--factor", "64", "--iters", "2", "--warmup", "1", "--check",
                      "--baseline", "mpi", "--json"], ["--cfg=smpi/allreduce:lr"], nbytes=256 * 1024)
    checks = [json.loads(l)["check"] for l in out.splitlines() if l.startswith('{"op"')]
    print(table_scaling(rows, "smoke: 16 ranks (4 nodes x 4), 1 MiB"))
    print(f"checked runs (16 ranks, 4 B .. 256 KiB, real buffers): {checks} ({wall:.1f} s)")
    if rc != 0 or not checks or any(c != "ok" for c in checks):
        print(err[-2000:], file=sys.stderr)
        ok = False
    print("smoke: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
