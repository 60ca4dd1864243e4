"""MDRING_REPRODUCIBLE=1 through torch.distributed: every element of all_reduce,
reduce_scatter and reduce is bitwise the reproducible mode's contract (docs/USAGE.md,
"Reproducible reductions"), computed here from every rank's inputs; a group made
without the mode gives other bits on the same inputs (so the check can fail).
With MDRING_ACCUMULATION=float32 as well, float16 and bfloat16 results are the
contract over the float32 inputs, rounded once.

Run under torchrun with MDRING_TOPOLOGY set and MDRING_TORCH_TEST_EXTENTS its
extents, for example:
    MDRING_REPRODUCIBLE=1 MDRING_TOPOLOGY="shm:2 x shm:2" MDRING_TORCH_TEST_EXTENTS=2,2 \\
    PYTHONPATH=build/python torchrun --standalone --nproc_per_node 4 tests/torch/test_reproducible.py
"""
import os
import sys
import warnings

import torch
import torch.distributed as dist

import mdring_torch  # noqa: F401  (registers the backend)

warnings.filterwarnings("ignore", module="torch.distributed")
if os.environ.get("MDRING_REPRODUCIBLE") != "1":
    sys.exit("run with MDRING_REPRODUCIBLE=1")
dist.init_process_group("mdring")
rank, size = dist.get_rank(), dist.get_world_size()
extents = [int(e) for e in os.environ["MDRING_TORCH_TEST_EXTENTS"].split(",")]
assert torch.tensor(extents).prod().item() == size, "MDRING_TORCH_TEST_EXTENTS must multiply to the world size"


def fail(msg):
    print(f"rank {rank}: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def inputs(r, n, dtype, spread=None):
    """Rank r's input: random signs and mantissas, exponents in [-spread, spread]
    (so that a sum's bits depend on the order of its terms)."""
    g = torch.Generator().manual_seed(1000 + r)
    if spread is None:
        spread = 24 if dtype in (torch.float32, torch.float64) else 12 if dtype == torch.bfloat16 else 6
    mant = 1 + torch.rand(n, generator=g, dtype=torch.float64)
    exp = torch.randint(-spread, spread + 1, (n,), generator=g, dtype=torch.float64)
    sign = torch.randint(0, 2, (n,), generator=g, dtype=torch.float64) * 2 - 1
    return (sign * mant * torch.pow(2.0, exp)).to(dtype)


WIDENED = os.environ.get("MDRING_ACCUMULATION") == "float32"


def contract(n, dtype, avg=False, prod=False):
    """Dimension 0 first, each folded left to right in coordinate order in the
    accumulator type (float32 for 16-bit types), rounded to dtype once per
    dimension; avg divides the last dimension's accumulator by the ranks. With
    MDRING_ACCUMULATION=float32, 16-bit types: the same over the float32 inputs,
    rounded once at the end."""
    if WIDENED and dtype in (torch.float16, torch.bfloat16):
        v = torch.stack([inputs(r, n, dtype, 1 if prod else None).float() for r in range(size)])
        return _fold(v, n, torch.float32, torch.float32, avg, prod).to(dtype)
    acc_t = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    v = torch.stack([inputs(r, n, dtype, 1 if prod else None) for r in range(size)])
    return _fold(v, n, dtype, acc_t, avg, prod)


def _fold(v, n, dtype, acc_t, avg, prod=False):
    """v: [rank, n], rank = c0 + e0 (c1 + ...)."""
    last = max([d for d, e in enumerate(extents) if e > 1], default=0)
    for d, e in enumerate(extents):
        v = v.reshape(-1, e, n)  # (rest, c_d, n): c_d varies fastest among the ranks left
        a = v[:, 0].to(acc_t)
        for c in range(1, e):
            a = a * v[:, c].to(acc_t) if prod else a + v[:, c].to(acc_t)
        if avg and d == last and size > 1:
            a = a / size
        v = a.to(dtype)
    return v.reshape(n)


def bits(t):
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same_bits(a, b):
    return torch.equal(bits(a), bits(b))


def first_diff(got, want):
    i = (bits(got) != bits(want)).nonzero()[0].item()
    return f"element {i}: got {got[i].item()!r}, the contract's {want[i].item()!r}"


checks = 0
for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
    for n in (1, 7, 1000, 65537, (1 << 20) + 3):
        want = contract(n, dtype)
        x = inputs(rank, n, dtype)
        dist.all_reduce(x)
        if not same_bits(x, want):
            fail(f"all_reduce {dtype} n={n}: {first_diff(x, want)}")
        b = n // size
        if b > 0:
            out = torch.empty(b, dtype=dtype)
            dist.reduce_scatter(out, list(inputs(rank, n, dtype)[:b * size].split(b)))
            if not same_bits(out, want[rank * b:(rank + 1) * b]):
                fail(f"reduce_scatter {dtype} block {b}: {first_diff(out, want[rank * b:(rank + 1) * b])}")
        root = n % size
        y = inputs(rank, n, dtype)
        dist.reduce(y, dst=root)
        if rank == root and not same_bits(y, want):
            fail(f"reduce {dtype} n={n} root {root}: {first_diff(y, want)}")
        checks += 3
    if dtype != torch.float64:
        want = contract(4099, dtype, avg=True)
        x = inputs(rank, 4099, dtype)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        if not same_bits(x, want):
            fail(f"all_reduce avg {dtype}: {first_diff(x, want)}")
        checks += 1
    # PRODUCT (exponents in [-1, 1]): 16-bit types fold in float32 like SUM.
    want = contract(4099, dtype, prod=True)
    x = inputs(rank, 4099, dtype, 1)
    dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
    if not same_bits(x, want):
        fail(f"all_reduce product {dtype}: {first_diff(x, want)}")
    checks += 1

# A group made without the mode (the option is read when a group is made): other
# bits on the same inputs, where the topology lets the default differ.
os.environ["MDRING_REPRODUCIBLE"] = "0"
default = dist.new_group(backend="mdring")
n = (1 << 20) + 3
x = inputs(rank, n, torch.float32)
dist.all_reduce(x, group=default)
differs = not same_bits(x, contract(n, torch.float32))
if os.environ.get("MDRING_TORCH_TEST_DEFAULT_DIFFERS") == "1" and not differs:
    fail("the default mode gave the contract's bits too: this topology cannot show the mode's effect")
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print(f"test_reproducible: {checks} checks passed on {size} ranks ({os.environ.get('MDRING_TOPOLOGY')}); "
          f"default mode {'differs' if differs else 'equal'}", flush=True)
