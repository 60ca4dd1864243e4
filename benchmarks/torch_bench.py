"""torch.distributed under mdring against gloo, in the same processes.

  1. all_reduce (float32, SUM) from 4 KiB to 256 MiB: the default group is mdring,
     a second group over the same ranks is gloo; each size alternates the two
     for several rounds, on the same tensors. Time per call: the slowest rank's,
     median over the iterations.
  2. DDP iteration (forward, backward with the all-reduces, SGD step) of a model
     with 25.6 M float32 parameters (ResNet-50's gradient count) under each
     backend, and of the same model without DDP (the computation alone, so that
     iteration - computation is the communication a backend leaves exposed);
     the three step in turn, from the same weights on the same data, and the
     two backends' parameters must agree at the end (identical training up to
     rounding). Batches of 32 and 2 samples per rank (--batches).

    PYTHONPATH=build/python torchrun --standalone --redirects 1 --tee 1 --nproc_per_node 4 benchmarks/torch_bench.py [--json FILE]
Rank 0 prints a table (ratio = mdring / gloo: below 1, mdring is faster).
--device cuda: CUDA tensors (process r on cuda:r % GPUs); each timed call ends
with torch.cuda.synchronize(), so the times are the calls' whole latency.
--back-to-back: all_reduce timed as nccl-tests time it, the iterations one after
another after a single barrier (the slowest rank's total / iterations, median over
the rounds), instead of one call after each barrier: a call timed alone also holds
how far apart the ranks left gloo's barrier (tens to hundreds of microseconds on
2 cores), which both backends pay.
"""
import os
import argparse
import json
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mdring_torch

warnings.filterwarnings("ignore")
ap = argparse.ArgumentParser()
ap.add_argument("--json", help="append the results as JSON lines to FILE (rank 0)")
ap.add_argument("--min-bytes", type=int, default=4 << 10)
ap.add_argument("--max-bytes", type=int, default=256 << 20)
ap.add_argument("--sizes", help="the sizes to time, comma-separated bytes with an optional K or M suffix "
                "(e.g. 8K,64M,256M), instead of --min-bytes to --max-bytes by factors of 4")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--ddp-iters", type=int, default=8)
ap.add_argument("--skip-ddp", action="store_true")
ap.add_argument("--batches", default="32,2", help="DDP: samples per rank and step, one run each (comma-separated)")
ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
ap.add_argument("--back-to-back", action="store_true",
                help="all_reduce: time the iterations one after another after one barrier, not each after its own")
ap.add_argument("--node-memory", action="store_true",
                help="mdring_torch.use_node_memory() first (what creating the default group does anyway, "
                     "unless MDRING_NODE_MEMORY=0)")
args = ap.parse_args()


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20}
    t = text.strip().upper()
    try:
        v = int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        v = 0
    if v < 4:
        sys.exit(f"torch_bench: --sizes: '{text}' is not a size of at least 4 bytes (bytes, or a number with K or M)")
    return v


if args.sizes:
    sizes = [parse_size(x) for x in args.sizes.split(",")]
else:
    sizes, b = [], args.min_bytes
    while b <= args.max_bytes:
        sizes.append(b)
        b *= 4
if args.node_memory:
    mdring_torch.use_node_memory()

dist.init_process_group("mdring")
memory = "node" if mdring_torch._node_memory is not None else "heap"
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
groups = {"mdring": None, "gloo": gloo}
results = []
DEV = torch.device("cpu")
if args.device == "cuda":
    DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(DEV)
    memory = "cuda"


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize(DEV)


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def time_calls(t, group, iters):
    if args.back_to_back:
        sync()
        dist.barrier(group=gloo)
        s = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t, group=group)
        sync()
        return [slowest(time.perf_counter() - s) / iters]
    out = []
    for _ in range(iters):
        sync()
        dist.barrier(group=gloo)
        s = time.perf_counter()
        dist.all_reduce(t, group=group)
        sync()
        out.append(slowest(time.perf_counter() - s))
    return out


def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


if rank == 0:
    print(f"# torch_bench: {size} processes, mdring ({mdring_torch.describe()}) against gloo, float32 SUM, "
          f"{memory} memory, all_reduce timed {'back to back' if args.back_to_back else 'one call after each barrier'}")
    print(f"# {'size':>8} | {'mdring us':>11} | {'gloo us':>11} | ratio")
for b in sizes:
    n = b // 4
    t = torch.ones(n, device=DEV)
    iters = max(3, min(50, (64 << 20) // b))
    times = {k: [] for k in groups}
    for _ in range(args.rounds):
        for name, g in groups.items():
            time_calls(t, g, 1)  # warm-up
            times[name] += time_calls(t, g, iters)
    med = {k: statistics.median(v) for k, v in times.items()}
    r = med["mdring"] / med["gloo"]
    results.append({"kind": "all_reduce", "memory": memory, "bytes": b, "ranks": size, "mdring_s": med["mdring"],
                    "gloo_s": med["gloo"], "ratio": r, "timing": "back-to-back" if args.back_to_back else "per call"})
    if rank == 0:
        print(f"  {size_name(b):>8} | {med['mdring'] * 1e6:11.1f} | {med['gloo'] * 1e6:11.1f} | {r:.3f}", flush=True)


def make_model():
    torch.manual_seed(0)
    # 25,601,440 parameters: about ResNet-50's 25.6 M
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 416))


def ddp(batch):
    # Three copies of one model, stepped in turn (so that drift in the machine's
    # speed touches all three alike): DDP on mdring, DDP on gloo, and the plain
    # model without DDP, whose time is the computation alone (no communication).
    ids = [DEV.index] if DEV.type == "cuda" else None
    models = {name: DDP(make_model().to(DEV), process_group=g, device_ids=ids) for name, g in groups.items()}
    models["none"] = make_model().to(DEV)
    count = sum(p.numel() for p in models["none"].parameters())
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    its = {name: [] for name in models}
    for i in range(args.ddp_iters + 2):
        gen = torch.Generator().manual_seed(100 * i + rank)
        x, y = torch.randn(batch, 1024, generator=gen).to(DEV), torch.randn(batch, 416, generator=gen).to(DEV)
        for name, m in models.items():
            sync()
            dist.barrier(group=gloo)
            s = time.perf_counter()
            opts[name].zero_grad()
            nn.functional.mse_loss(m(x), y).backward()
            opts[name].step()
            sync()
            el = slowest(time.perf_counter() - s)
            if i >= 2:
                its[name].append(el)
    per = {name: statistics.median(v) for name, v in its.items()}
    params = {name: torch.cat([p.detach().reshape(-1) for p in models[name].parameters()])
              for name in ("mdring", "gloo")}
    del models, opts
    diff = (params["mdring"] - params["gloo"]).abs().max().item()
    r = per["mdring"] / per["gloo"]
    results.append({"kind": "ddp", "memory": memory, "ranks": size, "batch": batch, "parameters": count, "mdring_s": per["mdring"],
                    "gloo_s": per["gloo"], "compute_s": per["none"], "ratio": r, "max_param_diff": diff})
    if rank == 0:
        print(f"# DDP iteration, {count / 1e6:.1f} M float32 parameters, batch {batch} per rank: mdring "
              f"{per['mdring'] * 1e3:.1f} ms, gloo {per['gloo'] * 1e3:.1f} ms, ratio {r:.3f}; without DDP "
              f"(computation alone) {per['none'] * 1e3:.1f} ms; largest parameter difference after "
              f"{args.ddp_iters + 2} steps: {diff:.2e}", flush=True)


if not args.skip_ddp:
    for batch in [int(b) for b in args.batches.split(",")]:
        ddp(batch)

if rank == 0 and args.json:
    with open(args.json, "a") as f:
        for x in results:
            f.write(json.dumps(x) + "\n")
dist.destroy_process_group()
