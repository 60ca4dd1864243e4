"""A DDP training loop that loses a process and goes on without it, in the same
processes, with no checkpoint file (mdring_torch.shrink).

    mdring-run -n 4 --on-failure shrink /usr/bin/python3 examples/torch_elastic.py
    MDRING_TOPOLOGY="shm:2 x ethernet:2" mdring-run -n 4 --on-failure shrink /usr/bin/python3 examples/torch_elastic.py

The last rank kills itself (SIGKILL) at step 5 of 20 (ELASTIC_VICTIM, ELASTIC_KILL_AT
choose others). The survivors' backward pass fails naming it; each survivor calls
mdring_torch.shrink(), which replaces the default group by one over the survivors
(with "shm:2 x ethernet:2" the dead rank's node-mate is left out too, and leaves),
takes the last completed step's model from the new rank 0 (broadcast_object_list:
the state lives in the survivors' memory; the failure can end a call on one
survivor after the others completed it, so a survivor may be a step ahead, and
taking rank 0's step puts them all on the same one), wraps the model in DDP again, and goes
on. Every input is the same on every rank, so the averaged gradient does not depend
on how many ranks there are: at the end each survivor checks its parameters against
a run of the same 20 steps in one process, and prints the result.

The comparison, torchrun's elastic restart of the same loop from a checkpoint file:

    torchrun --max_restarts 3 ... examples/torch_elastic.py --restart CHECKPOINT

There rank 0 saves the model and step to CHECKPOINT after every step; a failure
ends every process (torchrun's agents then start them all again), and a started
process loads CHECKPOINT where it exists (and then kills no one: the victim kills
itself in a process started without one only).

Both ways print the wall-clock time of the kill ("killed at") and of each
process's first completed step after it ("resumed at"): scripts/bench_elastic.sh
takes the time to resume from them.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import mdring_torch

STEPS = 20


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)


def train_one(model, opt, step):
    x, y = batch(step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()  # DDP all-reduces the gradients here
    opt.step()


def new_model():
    torch.manual_seed(0)
    return torch.nn.Linear(16, 4)


def main():
    restart = sys.argv[1:2] == ["--restart"]
    if restart and len(sys.argv) != 3:
        raise SystemExit("torch_elastic.py: --restart expects the checkpoint file's path after it")
    checkpoint = sys.argv[2] if restart else None
    dist.init_process_group("mdring")
    victim = int(os.environ.get("ELASTIC_VICTIM", dist.get_world_size() - 1))
    kill_at = int(os.environ.get("ELASTIC_KILL_AT", 5))
    me = dist.get_rank()  # this process in the job as started
    model = new_model()
    step = 0
    # torchrun started this process again: the last completed step's state from the file
    resuming = restart and os.path.exists(checkpoint)  # (the next completed step is the first after the failure)
    if resuming:
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        step = state["step"]
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    first_attempt = not resuming
    while step < STEPS:
        if me == victim and step == kill_at and first_attempt:
            print(f"process {me}: killed at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_one(ddp, opt, step)
            step += 1
            if resuming:
                print(f"process {me}: resumed at {time.time():.3f} (step {step})", flush=True)
                resuming = False
            if restart and dist.get_rank() == 0:  # the checkpoint of the completed step
                torch.save({"model": model.state_dict(), "step": step}, checkpoint + ".tmp")
                os.replace(checkpoint + ".tmp", checkpoint)
        except RuntimeError as e:
            print(f"process {me}, step {step}: {str(e).splitlines()[0][:160]}", flush=True)
            if restart:
                raise SystemExit(1)  # torchrun's agents start every process again
            kept = mdring_torch.shrink()
            resuming = True
            if kept is None:
                print(f"process {me}: left out by the shrink", flush=True)
                return
            # The last completed step's state, from the new rank 0's memory.
            state = [model.state_dict(), step]
            dist.broadcast_object_list(state, src=0)
            model.load_state_dict(state[0])
            step = state[1]
            ddp = DDP(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            if dist.get_rank() == 0:
                print(f"step {step}: shrunk to {dist.get_world_size()} ranks (old ranks {kept}), "
                      f"{mdring_torch.describe()}", flush=True)
    # The same 20 steps in one process.
    ref = new_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for s in range(STEPS):
        train_one(ref, ref_opt, s)
    err = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    ok = err < 1e-5
    print(f"process {me}: rank {dist.get_rank()} of {dist.get_world_size()}, {STEPS} steps, "
          f"largest difference from one process {err:.2e}: {'ok' if ok else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
