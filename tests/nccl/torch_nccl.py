"""PyTorch's own nccl backend on libmdring-nccl.so (docs/NCCL.md): run under
torchrun with the library preloaded, every process on the one GPU or one each:

    LD_PRELOAD=build/libmdring-nccl.so torchrun --standalone --nproc_per_node 2 tests/nccl/torch_nccl.py OUT.pt

1. dist's collectives on CUDA tensors, exact: all_reduce (SUM, AVG, MIN, MAX, PRODUCT;
   float32, float16, bfloat16, float64, int32, int64, uint8, int8), broadcast from each
   rank, all_gather_into_tensor, reduce_scatter_tensor, reduce; sizes 0 to 1 Mi + 3.
2. DDP, 10 SGD steps of a Linear/BatchNorm model, each rank its own data: its final
   parameters go to OUT.pt (rank 0), for the comparison with the same script under
   mdring's own backend or gloo (--backend; tests/nccl/compare_params.py).

--backend gloo --device cpu runs the same checks without a GPU (how this script
is checked where there is none); --backend mdring (import mdring_torch) too.
Prints "torch_nccl: ok" on rank 0 when every check held; exits 1 otherwise.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

ap = argparse.ArgumentParser()
ap.add_argument("out", nargs="?", help="where rank 0 saves the parameters after DDP")
ap.add_argument("--backend", default="nccl")
ap.add_argument("--device", default="cuda")
ap.add_argument("--steps", type=int, default=10)
args = ap.parse_args()
if args.backend == "mdring":
    import mdring_torch  # noqa: F401

dist.init_process_group(args.backend)
rank, size = dist.get_rank(), dist.get_world_size()
if args.device == "cuda":
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
else:
    dev = torch.device("cpu")
failures = []


def check(what, got, want):
    if not torch.equal(got.cpu(), want.cpu()):
        bad = (got.cpu() != want.cpu()).nonzero()
        failures.append(f"{what}: {bad.numel()} elements differ, first at {bad[0].tolist() if bad.numel() else '?'}")


def value(r, n, dtype):
    """Rank r's input: small integers, exact in every type and every op's result."""
    x = (torch.arange(n, dtype=torch.int64) + 3 * r) % 5 + 1
    return x.to(dtype)


TYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8,
         torch.int8]
if args.backend == "gloo":  # gloo on CPU tensors has no 16-bit floats
    TYPES = [t for t in TYPES if t not in (torch.float16, torch.bfloat16)]
SIZES = [0, 1, 7, 4099, (1 << 20) + 3]
for dtype in TYPES:
    for n in SIZES:
        ins = [value(r, n, dtype) for r in range(size)]
        for op, name in [(dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max"),
                         (dist.ReduceOp.PRODUCT, "prod")]:
            if name == "prod" and n > 4099:
                continue  # products of 1..5 over the ranks stay exact only while small
            stacked = torch.stack(ins).to(torch.int64) if n else torch.zeros(size, 0, dtype=torch.int64)
            want = {"sum": stacked.sum(0), "min": stacked.min(0).values if n else stacked.sum(0),
                    "max": stacked.max(0).values if n else stacked.sum(0), "prod": stacked.prod(0)}[name]
            if dtype == torch.uint8 or dtype == torch.int8:
                want = want.to(dtype)  # wraps, as the sum of 8-bit integers does
            t = ins[rank].clone().to(dev)
            dist.all_reduce(t, op=op)
            check(f"all_reduce {name} {dtype} n={n}", t, want.to(dtype))
        if dtype.is_floating_point and args.backend != "gloo":
            t = ins[rank].clone().to(dev)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            want = torch.stack(ins).to(torch.float64).mean(0) if n else torch.zeros(0, dtype=torch.float64)
            if not torch.allclose(t.cpu().to(torch.float64), want, rtol=1e-2 if torch.finfo(dtype).bits == 16 else 1e-6):
                failures.append(f"all_reduce avg {dtype} n={n}")
    for n in SIZES[:4]:
        for root in range(size):
            t = value(rank, n, dtype).to(dev)
            dist.broadcast(t, src=root)
            check(f"broadcast {dtype} n={n} root={root}", t, value(root, n, dtype))
        out = torch.empty(size * n, dtype=dtype, device=dev)
        if args.backend == "gloo":  # gloo has no all_gather_into_tensor
            if n:  # (and zero elements crash it)
                dist.all_gather(list(out.chunk(size)), value(rank, n, dtype).to(dev))
        else:
            dist.all_gather_into_tensor(out, value(rank, n, dtype).to(dev))
        check(f"all_gather {dtype} n={n}", out, torch.cat([value(r, n, dtype) for r in range(size)]))
        if args.backend != "gloo":  # gloo has no reduce_scatter
            full = [value(r, size * n, dtype) for r in range(size)]
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, full[rank].to(dev))
            want = torch.stack(full).to(torch.int64).sum(0)[rank * n:(rank + 1) * n].to(dtype)
            check(f"reduce_scatter {dtype} n={n}", out, want)
        t = value(rank, n, dtype).to(dev)
        dist.reduce(t, dst=0)
        if rank == 0:
            check(f"reduce {dtype} n={n}", t, torch.stack([value(r, n, dtype) for r in range(size)]).to(
                torch.int64).sum(0).to(dtype))

# DDP: the same model and data as under any other backend.
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 4)).to(dev)
ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for _ in range(args.steps):
    x = torch.randn(32, 16, generator=gen).to(dev)
    y = torch.randn(32, 4, generator=gen).to(dev)
    opt.zero_grad()
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
params = [p.detach().cpu().to(torch.float64) for p in model.parameters()]
for p in params:  # every rank ends with the same parameters
    q = p.clone().to(dev)
    dist.broadcast(q, src=0)
    check("DDP parameters equal on every rank", p, q.cpu())
if rank == 0 and args.out:
    torch.save(params, args.out)

bad = torch.tensor([len(failures)], device=dev)
dist.all_reduce(bad)
for f in failures[:20]:
    print(f"torch_nccl: rank {rank}: {f}", flush=True)
if rank == 0:
    print("torch_nccl: ok" if bad.item() == 0 else f"torch_nccl: {bad.item()} failures", flush=True)
dist.destroy_process_group()
sys.exit(1 if bad.item() else 0)
