"""One refusal of bad input by the mdring backend, in a process group of its own, so
that a refusal that crashes (as pg.allreduce of a complex64 CUDA tensor once did
under torch 2.11) hides no other. scripts/gpu-device.sh's diag phase runs each case:

    torchrun --standalone --nproc_per_node 2 tests/torch/refusals.py CASE

CASE: cuda-complex-pg, cuda-complex-backend, cpu-complex-pg, cuda-bool, cuda-band, cuda-two-tensors.
Exit 0 when the call raised an error naming what was expected and an all_reduce
afterwards was exact; 77 when the case needs CUDA and there is none.
"""
import os
import sys

import torch
import torch.distributed as dist

import mdring_torch

CASES = {
    # name: (device, make the bad call, words the error must hold)
    "cuda-complex-pg": ("cuda", lambda pg, t: pg.allreduce([t(4, torch.complex64)]).wait(), ["ComplexFloat", "float32"]),
    "cuda-complex-backend": ("cuda", lambda pg, t: pg._get_backend(torch.device("cuda")).allreduce(
        [t(4, torch.complex64)]).wait(), ["ComplexFloat", "float32"]),
    "cpu-complex-pg": ("cpu", lambda pg, t: pg.allreduce([t(4, torch.complex64)]).wait(), ["ComplexFloat", "float32"]),
    "cuda-bool": ("cuda", lambda pg, t: dist.all_reduce(t(4, torch.bool)), ["Bool", "float32"]),
    "cuda-band": ("cuda", lambda pg, t: dist.all_reduce(t(4, torch.int32), op=dist.ReduceOp.BAND),
                  ["reduce op", "SUM, AVG"]),
    "cuda-two-tensors": ("cuda", lambda pg, t: pg.allreduce([t(4, torch.float32), t(4, torch.float32)]).wait(),
                         ["exactly one tensor"]),
}
if len(sys.argv) != 2 or sys.argv[1] not in CASES:
    sys.exit(f"refusals.py: CASE must be one of {', '.join(CASES)} (got {sys.argv[1:]})")
case = sys.argv[1]
where, call, words = CASES[case]
if where == "cuda" and not torch.cuda.is_available():
    print(f"refusals: {case}: skipped (no CUDA)")
    sys.exit(77)

dist.init_process_group("mdring")
rank, size = dist.get_rank(), dist.get_world_size()
dev = torch.device("cpu")
if where == "cuda":
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
pg = dist.distributed_c10d._get_default_group()


def make(n, dtype):
    return torch.ones(n, dtype=dtype, device=dev)


print(f"refusals: rank {rank}: {case}: calling", flush=True)
try:
    call(pg, make)
except (RuntimeError, ValueError) as e:
    first = str(e).splitlines()[0] if str(e) else ""
    missing = [w for w in words if w not in str(e)]
    print(f"refusals: rank {rank}: {case}: {type(e).__name__}: {first}", flush=True)
    if missing:
        sys.exit(f"refusals: rank {rank}: {case}: the error does not say {missing}")
else:
    sys.exit(f"refusals: rank {rank}: {case}: no error")

# The group stays usable (on the same device; a build without a host transport
# refuses every CPU tensor).
if dev.type == "cpu" and "no host transport" in mdring_torch.describe():
    print(f"refusals: rank {rank}: {case}: refused (no host transport to check the group with)", flush=True)
    sys.exit(0)
t = torch.full((5,), float(rank + 1), device=dev)
dist.all_reduce(t)
want = float(size * (size + 1) // 2)
if not torch.equal(t.cpu(), torch.full((5,), want)):
    sys.exit(f"refusals: rank {rank}: {case}: all_reduce afterwards gave {t.tolist()}, expected {want}")
print(f"refusals: rank {rank}: {case}: refused, and the group still sums", flush=True)
dist.destroy_process_group()
