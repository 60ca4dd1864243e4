"""Every op of the mdring backend, every dtype and reduce op, against exact
references (each rank computes every rank's input) and against gloo.

Run by torchrun or mpirun (tests/CMakeLists.txt), 1 to 4 processes:
    PYTHONPATH=build/python torchrun --standalone --nproc_per_node 4 tests/torch/test_ops.py
Exits non-zero on the first mismatch, naming op, dtype, reduce op and size.
MDRING_TORCH_TEST_DTYPES=float32,bfloat16,int64 runs those dtypes only.
MDRING_TORCH_TEST_DEVICE=cuda runs every check on CUDA tensors (process r on
cuda:r % GPUs; several processes may share one GPU), gloo's on CPU copies.
"""
import functools
import gc
import os
import sys
import warnings

import torch
import torch.distributed as dist

import mdring_torch

warnings.filterwarnings("ignore", module="torch.distributed")
if os.environ.get("MDRING_TORCH_TEST_NODE_MEMORY"):
    # every tensor of 4 KiB and more in node memory, with a small reuse cache
    mdring_torch.use_node_memory(threshold=4096, cache=8 << 20)
dist.init_process_group("mdring")
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
checks = 0
DEV = torch.device("cpu")
if os.environ.get("MDRING_TORCH_TEST_DEVICE", "cpu") == "cuda":
    DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(DEV)

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
if os.environ.get("MDRING_TORCH_TEST_DTYPES"):
    # a subset, for the runs that vary something else (the layout, node memory, the
    # transport at odd sizes): one type of each kind keeps every code path
    keep = os.environ["MDRING_TORCH_TEST_DTYPES"].split(",")
    FLOATS = [t for t in FLOATS if str(t).removeprefix("torch.") in keep]
    INTS = [t for t in INTS if str(t).removeprefix("torch.") in keep]
    if len(FLOATS) + len(INTS) != len(keep):
        sys.exit(f"MDRING_TORCH_TEST_DTYPES={os.environ['MDRING_TORCH_TEST_DTYPES']}: unknown dtype")
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "prod": dist.ReduceOp.PRODUCT,
       "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
SIZES = [0, 1, 7, 1000]
BIG = (1 << 20) + 3


def fail(msg):
    print(f"rank {rank}: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def values(r, n, dtype, op):
    """Rank r's input: small integers, so that every sum, product and mean below is
    exact in every dtype (bfloat16 has 8 significant bits). A fresh copy on the
    test's device: callers reduce into it."""
    return _values(r, n, dtype, op == "prod").clone().to(DEV)


@functools.lru_cache(maxsize=None)
def _values(r, n, dtype, prod):
    # (made once per argument set: at a million elements, torch's integer
    # arithmetic on one thread takes a third of a second, which was most of the test)
    i = torch.arange(n, dtype=torch.int64)
    if prod:
        v = 1 + (i + r) % 2  # 1 or 2: at most 2**4 over 4 ranks
    elif dtype == torch.uint8:
        v = (i * 7 + r * 3) % 50
    else:
        v = (i * 7 + r * 3) % 31 - 15
    return v.to(dtype)


def reference(n, dtype, op, ranks=None):
    return _reference(n, dtype, op, tuple(range(size) if ranks is None else ranks)).clone()


@functools.lru_cache(maxsize=None)
def _reference(n, dtype, op, ranks):
    xs = torch.stack([_values(r, n, dtype, op == "prod").to(torch.float64) for r in ranks])
    if op == "sum":
        out = xs.sum(0)
    elif op == "prod":
        out = xs.prod(0)
    elif op == "min":
        out = xs.min(0).values
    elif op == "max":
        out = xs.max(0).values
    else:  # avg: integers truncate toward zero, as mdring documents
        out = xs.sum(0) / len(ranks)
        if not dtype.is_floating_point:
            out = torch.trunc(out)
    return out.to(dtype)


def expect_equal(got, want, what):
    global checks
    checks += 1
    got, want = got.cpu(), want.cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        fail(f"{what}: got {got.dtype} {tuple(got.shape)}, expected {want.dtype} {tuple(want.shape)}")
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        j = bad[0].tolist()
        fail(f"{what}: {len(bad)} elements differ, first at {j}: got {got[tuple(j)].item()}, "
             f"expected {want[tuple(j)].item()}")


def gloo_has(dtype, op):
    # gloo in torch 1.13: no AVG, no bfloat16, no int16
    return op != "avg" and dtype not in (torch.bfloat16, torch.int16)


def expect_reduced(got, n, dtype, op, what):
    want = reference(n, dtype, op)
    got = got.cpu()
    if op == "avg" and dtype.is_floating_point and size == 3:
        # sum / 3 is rounded once (from an exact sum): within half an ulp of the mean
        global checks
        checks += 1
        tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-7, torch.float64: 1e-15}[dtype]
        if not torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=tol, atol=0):
            fail(f"{what}: {got[:8].tolist()} vs {want[:8].tolist()}")
    else:
        expect_equal(got, want, what)


def check_allreduce(n, dtype, op, asynchronous):
    what = f"all_reduce {dtype} {op} n={n}{' async' if asynchronous else ''}"
    t = values(rank, n, dtype, op)
    if asynchronous:
        w = dist.all_reduce(t, op=OPS[op], async_op=True)
        fut = w.get_future()
        w.wait()
        if not fut.done():
            fail(f"{what}: the future is not done after wait()")
        expect_reduced(fut.value()[0], n, dtype, op, what + " (future)")
    else:
        dist.all_reduce(t, op=OPS[op])
    expect_reduced(t, n, dtype, op, what)
    if gloo_has(dtype, op) and n >= 1000:  # (the exact reference covers the small sizes)
        g = values(rank, n, dtype, op).cpu()
        dist.all_reduce(g, op=OPS[op], group=gloo)
        expect_equal(t, g, what + " against gloo")


for dtype in FLOATS + INTS:
    for op in OPS:
        for n in SIZES:
            check_allreduce(n, dtype, op, asynchronous=(n == 7))
# One big size per dtype family (1M + 3 elements: segments and a ragged tail).
for dtype in (torch.float32, torch.bfloat16, torch.int64):
    for op in ("sum", "max"):
        check_allreduce(BIG, dtype, op, asynchronous=True)

# Many in flight at once, waited in reverse order: each as if alone.
works, tensors = [], []
for k in range(32):
    t = values(rank, 100 + 37 * k, torch.float32, "sum")
    tensors.append(t)
    works.append(dist.all_reduce(t, async_op=True))
for k in reversed(range(32)):
    works[k].wait()
    expect_equal(tensors[k], reference(100 + 37 * k, torch.float32, "sum"), f"in flight #{k}")

# allreduce_coalesced: tensors of different shapes, one call.
ts = [values(rank, n, torch.float64, "sum").reshape(-1, 1) if n else values(rank, 0, torch.float64, "sum")
      for n in (3, 0, 50)]
dist.all_reduce_coalesced(ts)
for t, n in zip(ts, (3, 0, 50)):
    expect_equal(t.reshape(-1), reference(n, torch.float64, "sum"), f"all_reduce_coalesced n={n}")

for dtype in FLOATS + INTS:
    for n in SIZES + ([BIG] if dtype == torch.float32 else []):
        tag = f"{dtype} n={n}"
        # broadcast from every root
        for root in range(size):
            t = values(rank, n, dtype, "sum")
            dist.broadcast(t, src=root)
            expect_equal(t, values(root, n, dtype, "sum"), f"broadcast root {root} {tag}")
        # reduce to the last rank
        root = size - 1
        for op in ("sum", "max"):
            t = values(rank, n, dtype, op)
            dist.reduce(t, dst=root, op=OPS[op])
            if rank == root:
                expect_equal(t, reference(n, dtype, op), f"reduce {op} root {root} {tag}")
        # all_gather (a list of tensors) and _all_gather_base (one tensor)
        mine = values(rank, n, dtype, "sum")
        outs = [torch.full((n,), 99).to(dtype).to(DEV) for _ in range(size)]
        dist.all_gather(outs, mine)
        for r in range(size):
            expect_equal(outs[r], values(r, n, dtype, "sum"), f"all_gather block {r} {tag}")
        flat = torch.empty(size * n, dtype=dtype, device=DEV)
        dist._all_gather_base(flat, mine)
        for r in range(size):
            expect_equal(flat[r * n:(r + 1) * n], values(r, n, dtype, "sum"), f"_all_gather_base block {r} {tag}")
        # reduce_scatter (a list) and _reduce_scatter_base (one tensor): block r of
        # every rank's input is values(., n, .) shifted by r
        for op in ("sum", "min", "avg"):
            blocks = [values(rank + 10 * r, n, dtype, op) for r in range(size)]
            out = torch.empty(n, dtype=dtype, device=DEV)
            dist.reduce_scatter(out, blocks, op=OPS[op])
            want = reference(n, dtype, op, ranks=[q + 10 * rank for q in range(size)])
            if op == "avg" and dtype.is_floating_point and size == 3:
                want = out  # rounding of sum / 3 is covered by all_reduce above
            expect_equal(out, want, f"reduce_scatter {op} {tag}")
            out2 = torch.empty(n, dtype=dtype, device=DEV)
            dist._reduce_scatter_base(out2, torch.cat(blocks), op=OPS[op])
            expect_equal(out2, out, f"_reduce_scatter_base {op} {tag}")

dist.barrier()

# Groups: each an independent communicator of its own (ranks listed in order).
if size >= 2:
    evens = list(range(0, size, 2))
    odds = list(range(1, size, 2))
    g_even = dist.new_group(evens, backend="mdring")
    g_odd = dist.new_group(odds, backend="mdring")
    g_rev = dist.new_group(list(range(size)), backend="mdring")
    mine_group = g_even if rank % 2 == 0 else g_odd
    members = evens if rank % 2 == 0 else odds
    t = values(rank, 1000, torch.float32, "sum")
    w1 = dist.all_reduce(t, group=mine_group, async_op=True)
    u = values(rank, 500, torch.int32, "sum")
    w2 = dist.all_reduce(u, async_op=True)  # the default group, meanwhile
    v = values(rank, 10, torch.float64, "sum")
    w3 = dist.all_reduce(v, op=dist.ReduceOp.MAX, group=g_rev, async_op=True)
    w3.wait(); w2.wait(); w1.wait()
    expect_equal(t, reference(1000, torch.float32, "sum", ranks=members), "all_reduce in a new group")
    expect_equal(u, reference(500, torch.int32, "sum"), "all_reduce in the default group beside new groups")
    expect_equal(v, reference(10, torch.float64, "max"), "all_reduce in a second group of everyone")
    # a group's root is a global rank (torch maps it to the group rank)
    b = values(rank, 5, torch.float32, "sum")
    dist.broadcast(b, src=members[-1], group=mine_group)
    expect_equal(b, values(members[-1], 5, torch.float32, "sum"), "broadcast in a new group")
    outs = [torch.empty(4, device=DEV) for _ in members]
    dist.all_gather(outs, values(rank, 4, torch.float32, "sum"), group=mine_group)
    for k, r in enumerate(members):
        expect_equal(outs[k], values(r, 4, torch.float32, "sum"), "all_gather in a new group")

# Bad input: a clear error naming what is supported, and the group stays usable.
def expect_error(fn, words, what):
    global checks
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        for w in words:
            if w not in str(e):
                fail(f"{what}: the error does not say '{w}': {e}")
        checks += 1
        return
    fail(f"{what}: no error")


pg = dist.distributed_c10d._get_default_group()


def ones(*shape, **kw):
    return torch.ones(*shape, device=DEV, **kw)


expect_error(lambda: dist.all_reduce(ones(4, 4).t()), ["non-contiguous", "contiguous()"], "non-contiguous")
expect_error(lambda: dist.all_reduce(ones(4).to_sparse()), ["sparse", "dense"], "sparse")
# (With Debian's CPU-only torch 1.13, CUDA tensors never reach the backend.)
expect_error(lambda: dist.all_reduce(ones(4, dtype=torch.bool)), ["Bool", "float32"], "bool")
expect_error(lambda: dist.all_reduce(ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND), ["reduce op",
             "SUM, AVG"], "BAND")
expect_error(lambda: pg.allreduce([ones(4), ones(4)]), ["exactly one tensor", "multi-tensor"],
             "two tensors")
expect_error(lambda: dist.all_gather([ones(4)] * (size + 1), ones(4)), ["output list", "one per process"],
             "all_gather list length")
expect_error(lambda: dist._all_gather_base(ones(size * 4 + 1), ones(4)), ["_allgather_base",
             "elements"], "_all_gather_base size")
expect_error(lambda: pg.allgather([[ones(4, dtype=torch.float64)] * size], [ones(4)]).wait(),
             ["Double", "Float"], "all_gather dtype")
if DEV.type == "cuda":
    expect_error(lambda: pg.allgather([[torch.ones(4)] * size], [ones(4)]).wait(), ["is on cpu", "input on cuda"],
                 "all_gather outputs on another device")
    expect_error(lambda: dist._all_gather_base(torch.ones(size * 4), ones(4)), ["different devices"],
                 "_all_gather_base across devices")
expect_error(lambda: mdring_torch.use_node_memory(threshold=0), ["threshold must be >= 1"], "use_node_memory(0)")
if os.environ.get("MDRING_TORCH_TEST_NODE_MEMORY"):
    expect_error(lambda: mdring_torch.use_node_memory(), ["already on with threshold=4096"], "use_node_memory twice")


def in_node_memory(t):
    """Whether t's data lies in one of mdring's memory files (/proc/self/maps)."""
    p = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            if "/memfd:mdring" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo <= p < hi:
                    return True
    return False


if DEV.type == "cpu":
    # Node memory without opting in: creating the default group turned it on for
    # CPU tensors of 1 MiB and more (4 KiB where the test opted in itself), unless
    # MDRING_NODE_MEMORY=0.
    node_default = os.environ.get("MDRING_NODE_MEMORY", "1") == "1"
    big, small = torch.zeros(1 << 19), torch.zeros(256)  # 2 MiB, 1 KiB
    if in_node_memory(big) != node_default:
        fail(f"a 2 MiB CPU tensor {'is not' if node_default else 'is'} in node memory "
             f"(MDRING_NODE_MEMORY={os.environ.get('MDRING_NODE_MEMORY', 'unset')})")
    if in_node_memory(small):
        fail("a 1 KiB CPU tensor is in node memory (below the threshold)")
    dist.all_reduce(big)  # the collective on node memory, exact
    expect_equal(big, torch.zeros(1 << 19), "all_reduce of a tensor in node memory")
    if node_default:
        expect_error(lambda: mdring_torch.use_node_memory(threshold=1 << 10), ["already on"],
                     "use_node_memory with other values after the default")
t = values(rank, 9, torch.float32, "sum")
dist.all_reduce(t)
expect_equal(t, reference(9, torch.float32, "sum"), "all_reduce after refused calls")

if DEV.type == "cuda":
    # Stream order: a call on a side stream, the result used there without a host sync.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = values(rank, 100003, torch.float32, "sum")
        w = dist.all_reduce(t, async_op=True)
        w.wait()  # the current stream (side) waits for the call; the host goes on
        u = t * 2
    side.synchronize()
    expect_equal(u, reference(100003, torch.float32, "sum") * 2, "all_reduce on a side stream, used there")
    # A CUDA graph: the call captured once and replayed with fresh inputs.
    n = 4096
    g_in = values(rank, n, torch.float32, "sum")
    dist.all_reduce(g_in)  # warm-up (binds, reserves)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            dist.all_reduce(g_in)
    torch.cuda.synchronize()
    for k in range(3):
        g_in.copy_(values(rank, n, torch.float32, "sum") * (k + 1))
        graph.replay()
        torch.cuda.synchronize()
        expect_equal(g_in, reference(n, torch.float32, "sum") * (k + 1), f"CUDA graph replay {k}")

# Last, since it once crashed both processes on CUDA tensors under torch 2.11 (every
# check above then ran first): dist.all_reduce sums complex tensors as real pairs;
# the group itself refuses them, and stays usable.
expect_error(lambda: pg.allreduce([ones(4, dtype=torch.complex64)]).wait(), ["ComplexFloat", "float32"],
             "complex")
t = values(rank, 9, torch.float32, "sum")
dist.all_reduce(t)
expect_equal(t, reference(9, torch.float32, "sum"), "all_reduce after the complex refusal")

dist.barrier()
if rank == 0:
    print(f"test_ops: {size} processes, {checks} checks passed ({mdring_torch.describe()})", flush=True)
# The gloo group's worker threads release tensors, and with them Python objects: end
# those threads while the interpreter is whole. A torch 1.13 worker still doing so
# during the interpreter's teardown aborts the process ("terminate called without an
# active exception", in ProcessGroupGloo::runLoop), once in about 50 runs here.
dist.destroy_process_group()
del gloo
gc.collect()
