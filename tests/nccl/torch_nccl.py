"""PyTorch's own nccl backend on libmdring-nccl.so (docs/NCCL.md): run under
torchrun with the library preloaded, every process on the one GPU or one each:

    LD_PRELOAD=build/libmdring-nccl.so torchrun --standalone --nproc_per_node 2 tests/nccl/torch_nccl.py OUT.pt

1. dist's collectives on CUDA tensors, exact: all_reduce (SUM, AVG, MIN, MAX, PRODUCT;
   float32, float16, bfloat16, float64, int32, int64, uint8, int8), broadcast from each
   rank, all_gather_into_tensor, reduce_scatter_tensor, reduce; sizes 0 to 1 Mi + 3.
2. Point to point (not under --backend mdring, whose backend has none): a ring of
   batch_isend_irecv, send/recv between pairs, all_to_all_single (even and uneven
   splits), gather and scatter to and from each rank; float32, bfloat16, int64, sizes
   0 to 4099, exact.
3. DDP, 10 SGD steps of a Linear/BatchNorm model, each rank its own data: its final
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

# Point to point, and the collectives torch builds from it (ncclSend/ncclRecv in groups).
P2P_TYPES = [torch.float32, torch.int64] + ([] if args.backend == "gloo" else [torch.bfloat16])
for dtype in P2P_TYPES if args.backend != "mdring" else []:
    for n in SIZES[:4]:
        # a ring: each rank sends to the next and receives from the one before, in one batch
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        out = torch.zeros(n, dtype=dtype, device=dev)
        ops = [dist.P2POp(dist.isend, value(rank, n, dtype).to(dev), nxt), dist.P2POp(dist.irecv, out, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check(f"batch_isend_irecv ring {dtype} n={n}", out, value(prv, n, dtype))
        # pairs: even ranks send to the next odd one, which answers with its own
        if rank % 2 == 0 and rank + 1 < size:
            dist.send(value(rank, n, dtype).to(dev), dst=rank + 1)
            back = torch.zeros(n, dtype=dtype, device=dev)
            dist.recv(back, src=rank + 1)
            check(f"send/recv answer {dtype} n={n}", back, value(rank + 1, n, dtype))
        elif rank % 2 == 1:
            got = torch.zeros(n, dtype=dtype, device=dev)
            dist.recv(got, src=rank - 1)
            check(f"send/recv {dtype} n={n}", got, value(rank - 1, n, dtype))
            dist.send(value(rank, n, dtype).to(dev), dst=rank - 1)
        # all_to_all_single: block j of rank r's input (n elements of value(r, size * n)) goes to rank j
        full = [value(r, size * n, dtype) for r in range(size)]
        out = torch.zeros(size * n, dtype=dtype, device=dev)
        dist.all_to_all_single(out, full[rank].to(dev))
        check(f"all_to_all_single {dtype} n={n}", out, torch.cat([full[r][rank * n:(rank + 1) * n]
                                                                 for r in range(size)]))
        # uneven: rank r sends j + r + (n % 3) elements to rank j
        if args.backend != "gloo" or n:
            sizes_to = [j + rank + n % 3 for j in range(size)]
            sizes_from = [rank + j + n % 3 for j in range(size)]
            src = value(rank, sum(sizes_to), dtype).to(dev)
            out = torch.zeros(sum(sizes_from), dtype=dtype, device=dev)
            dist.all_to_all_single(out, src, output_split_sizes=sizes_from, input_split_sizes=sizes_to)
            want = []
            for r in range(size):
                theirs = value(r, sum(j + r + n % 3 for j in range(size)), dtype)
                start = sum(j + r + n % 3 for j in range(rank))
                want.append(theirs[start:start + rank + r + n % 3])
            check(f"all_to_all_single uneven {dtype} n={n}", out, torch.cat(want))
        for root in range(size):
            mine = value(rank, n, dtype).to(dev)
            gathered = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(size)] if rank == root else None
            dist.gather(mine, gather_list=gathered, dst=root)
            if rank == root:
                check(f"gather {dtype} n={n} root={root}", torch.cat(gathered),
                      torch.cat([value(r, n, dtype) for r in range(size)]))
            got = torch.zeros(n, dtype=dtype, device=dev)
            parts = [value(root * size + r, n, dtype).to(dev) for r in range(size)] if rank == root else None
            dist.scatter(got, scatter_list=parts, src=root)
            check(f"scatter {dtype} n={n} root={root}", got, value(root * size + rank, n, dtype))

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
