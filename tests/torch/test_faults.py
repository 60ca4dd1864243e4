"""Failures under the mdring backend, with real processes (started here, like a
launcher that does not kill the survivors: torchrun would SIGTERM them first).

  raise      rank 1 raises in the middle of a step; every other rank's pending
             all_reduce fails with an error naming rank 1, within seconds
  inflight   every rank issues 8 all_reduces and calls destroy_process_group
             without waiting: no hang, no abort, exit 0
  exit       every rank issues 8 all_reduces and leaves the interpreter: exit 0

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
    cases = args or ["raise", "inflight", "exit"]
    results = [run(c, np_) for c in cases]
    sys.exit(0 if all(results) else 1)
