"""A group's last reference may go anywhere: here, where torch and Python put it in
real trainers. Each case checks the calls' exact results and that the process ends
with exit code 0 (before the fix, the first case aborted both ranks with
"terminate called without an active exception").

1. in a Future's callback, on the group's completion thread (a callback that held
   the group, or a garbage collection that ran there), with a second call queued
   behind the first: the group finishes that call there, then goes;
2. on the main thread while a call is in flight: it finishes, then the group goes;
3. at interpreter exit, while a callback that holds the only reference still runs
   (atexit's shutdown and the callback's release meet); the callback prints
   "case 3 exact" and the test's command wants it from every rank.

Run with 2 or more processes (tests/torch/CMakeLists.txt):
    PYTHONPATH=build/python build/tools/mdring-run -n 2 /usr/bin/python3 tests/torch/test_lifetime.py
"""
import sys
import time
import warnings

import torch
import torch.distributed as dist

import mdring_torch  # noqa: F401  (registers the backend)

warnings.filterwarnings("ignore")
dist.init_process_group("mdring")
rank, size = dist.get_rank(), dist.get_world_size()
N = (1 << 20) + 5  # above the 64 KiB that a caller completes itself: the completion thread does
SUM = size * (size + 1) // 2  # each rank adds rank + 1


def fail(msg):
    print(f"rank {rank}: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(x, want, what):
    if not torch.equal(x, torch.full_like(x, want)):
        fail(f"{what}: expected every element {want}, got {x[:4].tolist()} ...")


def late_start():
    # The last rank joins each call 0.3 s late, so that rank 0's calls are still in
    # flight when it drops its references.
    if rank == size - 1:
        time.sleep(0.3)


# 1. released in a callback on the completion thread, a call queued behind
pg = dist.new_group(backend="mdring")
late_start()
a = torch.full((N,), float(rank + 1))
b = torch.full((N,), float(10 * (rank + 1)))
holder = [pg]
released = []
wa = dist.all_reduce(a, group=pg, async_op=True)
fa = wa.get_future().then(lambda f: (holder.clear(), released.append(1)))
wb = dist.all_reduce(b, group=pg, async_op=True)
dist.destroy_process_group(pg)
del pg
fa.wait()
wb.wait()
check(a, SUM, "case 1, the call whose callback released the group")
check(b, 10 * SUM, "case 1, the call queued behind it")
if released != [1]:
    fail(f"case 1: the callback ran {len(released)} times")

# 2. released on the main thread with a call in flight
pg = dist.new_group(backend="mdring")
late_start()
c = torch.full((N,), float(rank + 1))
wc = dist.all_reduce(c, group=pg, async_op=True)
dist.destroy_process_group(pg)
del pg
wc.wait()
check(c, SUM, "case 2")

dist.barrier()
print(f"rank {rank}: test_lifetime: cases 1 and 2 exact", flush=True)

# 3. at exit, a callback holding the only reference still running
pg = dist.new_group(backend="mdring")
late_start()
d = torch.full((N,), float(rank + 1))
holder3 = [pg]


def slow_release(f):
    # (no sys.exit here: this is the completion thread; the test's command counts the lines)
    ok = torch.equal(d, torch.full_like(d, SUM))
    print(f"rank {rank}: test_lifetime: case 3 " + ("exact" if ok else f"WRONG: {d[:4].tolist()}"), flush=True)
    time.sleep(0.2)
    holder3.clear()


wd = dist.all_reduce(d, group=pg, async_op=True)
wd.get_future().then(slow_release)
dist.destroy_process_group(pg)
del pg
dist.destroy_process_group()
print(f"rank {rank}: test_lifetime: leaving with a call in flight", flush=True)
