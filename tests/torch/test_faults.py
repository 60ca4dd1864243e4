"""Failures under the mdring backend, with real processes (started here, like a
launcher that does not kill the survivors: torchrun would SIGTERM them first).

  raise      rank 1 raises in the middle of a step; every other rank's pending
             all_reduce fails with an error naming rank 1, within seconds
  inflight   every rank issues 8 all_reduces and calls destroy_process_group
             without waiting: no hang, no abort, exit 0
  exit       every rank issues 8 all_reduces and leaves the interpreter: exit 0
  killed1, killed2, killed8
             every rank issues 1, 2 or 8 all_reduces (async_op=True) and rank 1
             is SIGKILLed right after issuing them; on every survivor each
             work's wait() (newest first, so the head of the queue is not the
             one waited on) either gives the right sum, for the calls that
             completed everywhere before the death, or raises an error naming
             rank 1, in queue order and at least for the newest; then a new
             all_reduce is refused; exit 0, no abort

    PYTHONPATH=build/python python3 tests/torch/test_faults.py [CASE...] [--np N]
"""
import os
import socket
import subprocess
import sys
import time

WORKER = r'''
import os, sys, time, warnings
import torch, torch.distributed as dist
import mdring_torch
warnings.filterwarnings("ignore")
case = sys.argv[1]
dist.init_process_group("mdring", timeout=__import__("datetime").timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.ones(1 << 20)
dist.all_reduce(t)                      # one step that works
assert t[0].item() == size
if case == "raise":
    if rank == 1:
        raise RuntimeError("the user's code failed on rank 1")
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 20))
    except RuntimeError as e:
        took = time.monotonic() - start
        print(f"rank {rank} got after {took:.2f} s: {e}", flush=True)
        sys.exit(0 if "rank 1" in str(e) and took < 10 else 3)
    print(f"rank {rank}: no error", flush=True)
    sys.exit(4)
if case.startswith("killed"):
    n = int(case[len("killed"):])
    # 128 MiB in all, so that the newest call is still in flight when rank 1
    # dies (a few ms after the last rank issued)
    tensors = [torch.full(((1 << 25) // n,), float(k)) for k in range(n)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    # Rank 1 dies once every rank has issued its calls (a rank still issuing
    # would have the next call refused, the communicator being broken).
    store = dist.distributed_c10d._get_default_store()
    store.add("issued", 1)
    if rank == 1:
        while store.add("issued", 0) < size:
            time.sleep(0.001)
        os.kill(os.getpid(), 9)
    # A work either completed everywhere before the death (its sum is right)
    # or fails naming rank 1; the queue runs in order, so the failed ones are
    # the newest, and the newest one at least was still in flight.
    outcome = []
    for k in reversed(range(n)):
        try:
            works[k].wait()
            outcome.append("ok" if torch.all(tensors[k] == k * size) else "wrong")
        except RuntimeError as e:
            outcome.append("rank 1" if "rank 1" in str(e) else "other: " + str(e))
    outcome.reverse()
    failed = outcome.count("rank 1")
    suffix = outcome == ["ok"] * (n - failed) + ["rank 1"] * failed
    try:
        dist.all_reduce(torch.ones(4))
        refused = False
    except RuntimeError:
        refused = True
    print(f"rank {rank}: {failed} of {n} waits raised naming rank 1, the first {n - failed} completed"
          f" (in order: {suffix}), new call refused: {refused}", flush=True)
    if not suffix:
        print(outcome, flush=True)
    sys.exit(0 if failed >= 1 and suffix and refused else 5)
works = [dist.all_reduce(torch.full((1 << 18,), float(k)), async_op=True) for k in range(8)]
if case == "inflight":
    dist.destroy_process_group()
    print(f"rank {rank}: destroyed with work in flight", flush=True)
# "exit": the interpreter ends with the works in flight
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(case, np_):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(np_),
               LOCAL_WORLD_SIZE=str(np_), MDRING_TORCH_TRANSPORT="ucx")
    procs = []
    for r in range(np_):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, case], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + 90
    out = []
    ok = True
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            text, _ = p.communicate()
            print(f"{case}: rank {r} hung (killed after 90 s)\n{text}")
            return False
        want = 1 if case == "raise" and r == 1 else 0
        if case.startswith("killed") and r == 1:
            want = -9
        if p.returncode != want:
            ok = False
            print(f"{case}: rank {r} exited {p.returncode}, expected {want}\n{text}")
        out.append(text)
    if ok:
        lines = [ln for t in out for ln in t.splitlines() if ln.startswith("rank ")]
        print(f"{case}: ok ({np_} processes)" + "".join("\n  " + ln for ln in lines))
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    np_ = 3
    if "--np" in args:
        i = args.index("--np")
        np_ = int(args[i + 1])
        del args[i:i + 2]
    cases = args or ["raise", "inflight", "exit", "killed1", "killed2", "killed8"]
    results = [run(c, np_) for c in cases]
    sys.exit(0 if all(results) else 1)
