"""DDP under the mdring backend against DDP under gloo, step by step, in the
same processes: a model with Linear and BatchNorm layers, 10 SGD steps per variant.

At every step the gradients must match gloo's within float32 tolerance (the two
backends add in different orders), and after the steps every rank's parameters
must be bitwise equal. Variants: the defaults, buckets of 1 KiB (many in flight),
find_unused_parameters, gradient_as_bucket_view, no_sync every other step, and
the comm hooks allreduce_hook and fp16_compress_hook. The variant "trajectory"
trains both for 10 steps independently (no resync) and requires their parameters
to agree within 1e-6, relative (norm of the difference over the norm).

    PYTHONPATH=build/python torchrun --standalone --nproc_per_node 4 tests/torch/test_ddp.py [VARIANT...]
MDRING_TORCH_TEST_DEVICE=cuda: the models on cuda:LOCAL_RANK % GPUs (DDP over CUDA
tensors under both backends).
"""
import os
import copy
import gc
import sys
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import mdring_torch  # noqa: F401  (registers the backend)

warnings.filterwarnings("ignore")
dist.init_process_group("mdring")
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
DEV = torch.device("cpu")
if os.environ.get("MDRING_TORCH_TEST_DEVICE", "cpu") == "cuda":
    DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(DEV)


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 32),
                                  nn.BatchNorm1d(32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.spare = nn.Linear(32, 4) if unused else None  # never used in forward

    def forward(self, x):
        return self.head(self.body(x))


VARIANTS = {
    "default": {},
    "small_buckets": {"ddp": {"bucket_cap_mb": 1 / 1024}},
    "find_unused": {"ddp": {"find_unused_parameters": True}, "unused": True},
    "bucket_view": {"ddp": {"gradient_as_bucket_view": True}},
    "no_sync": {"no_sync": True},
    "allreduce_hook": {"hook": default_hooks.allreduce_hook},
    # float16 sums, added in another order: a few half-precision ulps of the largest
    "fp16_hook": {"hook": default_hooks.fp16_compress_hook, "half_ulps": True},
    "trajectory": {"independent": True},
}


def fail(msg):
    print(f"rank {rank}: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def run(name, v):
    torch.manual_seed(1234)
    base = Net(unused=v.get("unused", False))
    models, opts = [], []
    for pg in (None, gloo):  # None: the default group, mdring
        ids = [DEV.index] if DEV.type == "cuda" else None
        m = DDP(copy.deepcopy(base).to(DEV), process_group=pg, device_ids=ids, **v.get("ddp", {}))
        if "hook" in v:
            m.register_comm_hook(state=pg, hook=v["hook"])
        models.append(m)
        opts.append(torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
    rtol, atol = 1e-5, 1e-6
    losses = []
    for step in range(10):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(32, 16, generator=g).to(DEV)
        y = torch.randn(32, 4, generator=g).to(DEV)
        local = v.get("no_sync") and step % 2 == 0  # accumulate locally, sync next step
        # gloo's model restarts from mdring's parameters and buffers at every step,
        # so that each step compares the two reductions alone (not two trajectories
        # that rounding has moved apart)
        if not v.get("independent"):
            with torch.no_grad():
                for a, b in zip(models[1].module.state_dict().values(), models[0].module.state_dict().values()):
                    a.copy_(b)
        loss = []
        for m in models:
            if local:
                with m.no_sync():
                    nn.functional.mse_loss(m(x), y).backward()
            else:
                loss.append(nn.functional.mse_loss(m(x), y))
                loss[-1].backward()
        if local:
            continue
        for (pname, p1), p2 in zip(models[0].module.named_parameters(), models[1].module.parameters()):
            if (p1.grad is None) != (p2.grad is None):
                fail(f"{name} step {step} {pname}: a gradient under one backend only")
            if p1.grad is not None and v.get("half_ulps"):
                atol = size * 2.0 ** -10 * p2.grad.abs().max().item()
            if p1.grad is not None and not v.get("independent") and not torch.allclose(p1.grad, p2.grad, rtol=rtol,
                                                                                         atol=atol):
                d = (p1.grad - p2.grad).abs().max().item()
                fail(f"{name} step {step} {pname}: gradients differ from gloo's by up to {d} "
                     f"(largest {p2.grad.abs().max().item()}, tolerance {atol} + {rtol} x)")
        losses.append(loss[0].item())  # mdring's model
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=False)
    # every rank holds the same parameters, bitwise (BatchNorm's running statistics
    # are not compared: each rank's last forward updates them from its own batch)
    flat = torch.cat([t.detach().reshape(-1).double() for t in models[0].module.parameters()]).cpu()
    if v.get("independent"):
        other = torch.cat([t.detach().reshape(-1).double() for t in models[1].module.parameters()]).cpu()
        rel = ((flat - other).norm() / other.norm()).item()
        if not rel <= 1e-6:
            fail(f"{name}: after 10 independent steps the parameters differ from gloo's by {rel:.2e} (relative)")
        if rank == 0:
            print(f"test_ddp {name}: parameters after 10 steps within {rel:.2e} of gloo's (relative)", flush=True)
    all_ = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(all_, flat, group=gloo)
    for r in range(size):
        if not torch.equal(all_[r], all_[0]):
            fail(f"{name}: rank {r}'s parameters differ from rank 0's")
    if rank == 0:
        print(f"test_ddp {name}: {size} processes, losses " + " ".join(f"{l:.4f}" for l in losses), flush=True)


for name in sys.argv[1:] or VARIANTS:
    run(name, VARIANTS[name])
dist.barrier()
# The gloo group's worker threads release tensors, and with them Python objects: end
# those threads while the interpreter is whole. A torch 1.13 worker still doing so
# during the interpreter's teardown aborts the process ("terminate called without an
# active exception", in ProcessGroupGloo::runLoop), once in about 50 runs here.
dist.destroy_process_group()
del gloo
gc.collect()
