"""MDRING_NODE_MEMORY with a value that is neither 0 nor 1: creating the default
group fails with an error that names the variable and what it takes, and torch's
allocator is left alone (one process, a file store)."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import mdring_torch

os.environ["MDRING_NODE_MEMORY"] = "yes"
path = tempfile.mktemp(prefix="mdring-node-memory-")
try:
    dist.init_process_group("mdring", init_method="file://" + path, rank=0, world_size=1)
except ValueError as e:
    msg = str(e)
    if "MDRING_NODE_MEMORY" not in msg or '"yes"' not in msg or "0 (torch's own allocator)" not in msg:
        sys.exit(f"FAILED: the error does not name the variable, its value and what it takes: {msg}")
else:
    sys.exit("FAILED: MDRING_NODE_MEMORY=yes was accepted")
finally:
    if os.path.exists(path):
        os.remove(path)
if mdring_torch._node_memory is not None:
    sys.exit("FAILED: node memory was turned on anyway")
print("PASSED")
