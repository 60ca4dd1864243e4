"""A DDP training loop that loses a process and goes on without it, in the same
processes, with no checkpoint file (mdring_torch.shrink).

    mdring-run -n 4 --on-failure shrink /usr/bin/python3 examples/torch_elastic.py
    MDRING_TOPOLOGY="shm:2 x ethernet:2" mdring-run -n 4 --on-failure shrink /usr/bin/python3 examples/torch_elastic.py

The last rank kills itself (SIGKILL) at step 5 of 20 (ELASTIC_VICTIM, ELASTIC_KILL_AT
choose others). The survivors' backward pass fails naming it; each survivor calls
mdring_torch.shrink(), which replaces the default group by one over the survivors
(with "shm:2 x ethernet:2" the dead rank's node-mate is left out too, and leaves),
takes the last completed step's model from the new rank 0 (broadcast_object_list:
the state lives in the survivors' memory), wraps the model in DDP again, and goes
on. Every input is the same on every rank, so the averaged gradient does not depend
on how many ranks there are: at the end each survivor checks its parameters against
a run of the same 20 steps in one process, and prints the result.
"""
import os
import signal

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
    dist.init_process_group("mdring")
    victim = int(os.environ.get("ELASTIC_VICTIM", dist.get_world_size() - 1))
    kill_at = int(os.environ.get("ELASTIC_KILL_AT", 5))
    me = dist.get_rank()  # this process in the job as started
    model = new_model()
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    step = 0
    while step < STEPS:
        if me == victim and step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_one(ddp, opt, step)
            step += 1
        except RuntimeError as e:
            print(f"process {me}, step {step}: {str(e).splitlines()[0][:160]}", flush=True)
            kept = mdring_torch.shrink()
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
