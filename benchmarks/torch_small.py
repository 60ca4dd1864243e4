"""Small all_reduce calls under the mdring backend against gloo, in the same processes.

    PYTHONPATH=build/python mdring-run -n 2 /usr/bin/python3 benchmarks/torch_small.py [--calls 1000]

The default group is mdring; a second group over the same ranks is gloo. Per size
(float32 SUM, 8 B to 64 KiB, CPU tensors), 7 chunks of --calls calls (fewer where
that many take over 50 ms; as many untimed first) back to back, each chunk after a
barrier; the time per call is the median chunk's (rank 0's clock; every rank makes
the same calls). Prints one line
per size: bytes, mdring us, gloo us. scripts/bench_torch_small.sh runs it.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import mdring_torch  # noqa: F401 (registers the backend)

ap = argparse.ArgumentParser()
ap.add_argument("--calls", type=int, default=1000)
ap.add_argument("--sizes", default="8,64,512,2048,8192,65536", help="bytes, comma-separated (multiples of 4)")
args = ap.parse_args()
sizes = [int(x) for x in args.sizes.split(",")]
if args.calls < 1 or any(b < 4 or b % 4 for b in sizes):
    sys.exit("torch_small: --calls expects at least 1, --sizes multiples of 4 bytes from 4")

dist.init_process_group("mdring")
gloo = dist.new_group(backend="gloo")


def per_call(t, group):
    # Chunks of --calls calls, or of as many as take about 50 ms (gloo's calls take
    # milliseconds when oversubscribed): 10 untimed calls say which, every rank takes
    # the smallest count (each must make the same calls), and that many more untimed.
    t0 = time.perf_counter()
    for _ in range(10):
        dist.all_reduce(t, group=group)
    each = (time.perf_counter() - t0) / 10
    n = torch.tensor([max(10, min(args.calls, int(0.05 / each)))], dtype=torch.int64)
    dist.all_reduce(n, op=dist.ReduceOp.MIN, group=gloo)
    calls = int(n.item())
    for _ in range(calls):
        dist.all_reduce(t, group=group)
    chunks = []
    for _ in range(7):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t, group=group)
        chunks.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(chunks)


for b in sizes:
    t = torch.ones(b // 4)
    md_us = per_call(t, None)
    gloo_us = per_call(t, gloo)
    if dist.get_rank() == 0:
        print(f"{b} {md_us:.2f} {gloo_us:.2f}", flush=True)
dist.destroy_process_group()
