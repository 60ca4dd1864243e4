"""A small model trained with DistributedDataParallel on the mdring backend.

    PYTHONPATH=build/python torchrun --standalone --redirects 1 --tee 1 --nproc_per_node 4 examples/torch_ddp.py
    PYTHONPATH=build/python mpirun -np 4 -x PYTHONPATH /usr/bin/python3 examples/torch_ddp.py

(--redirects 1 --tee 1: Debian's torchrun 1.13 on Python 3.11 fails at start without them.)
The only mdring-specific lines are the import and the backend name. The task: a
convolutional classifier of synthetic 16 x 16 images (a bright square in one of
four quadrants, with noise), each rank reading its own shard of the data set.
Rank 0 prints the loss and accuracy of every step; accuracy passes 95 % within
the first epoch.
"""
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import mdring_torch  # registers the backend "mdring"

dist.init_process_group("mdring")
rank, size = dist.get_rank(), dist.get_world_size()

# The same synthetic data set on every rank; the sampler gives each its shard.
g = torch.Generator().manual_seed(0)
n = 4096
labels = torch.randint(0, 4, (n,), generator=g)
images = 0.8 * torch.randn(n, 1, 16, 16, generator=g)
for i, q in enumerate(labels.tolist()):
    r, c = divmod(q, 2)
    images[i, 0, 8 * r + 2:8 * r + 6, 8 * c + 2:8 * c + 6] += 0.8
data = TensorDataset(images, labels)
sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=64, sampler=sampler)

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(32 * 4 * 4, 4))
model = DDP(model)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
if rank == 0:
    print(f"{size} processes, {mdring_torch.describe()}", flush=True)

step, start = 0, time.monotonic()
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        # the mean loss and accuracy over all ranks (a collective of its own)
        stats = torch.tensor([loss.item(), (out.argmax(1) == y).float().mean().item()])
        dist.all_reduce(stats, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch} step {step:3d}  loss {stats[0]:.4f}  accuracy {100 * stats[1]:5.1f} %", flush=True)
        step += 1
if rank == 0:
    print(f"{step} steps in {time.monotonic() - start:.1f} s", flush=True)
dist.destroy_process_group()
