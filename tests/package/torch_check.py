"""The installed mdring_torch, imported from the install prefix (no build tree on
the path), has the version of include/mdring/config.hpp and runs an all_reduce in a
world of one process. argv[1]: the prefix's package directory."""
import os
import re
import socket
import sys

site = sys.argv[1]
sys.path = [p for p in sys.path if "build/python" not in p]
sys.path.insert(0, site)
s = socket.socket()
s.bind(("127.0.0.1", 0))
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
s.close()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import mdring_torch  # noqa: E402

assert mdring_torch.__file__.startswith(site), mdring_torch.__file__
config = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "mdring", "config.hpp")).read()
want = ".".join(re.search(rf"^#define MDRING_VERSION_{p} ([0-9]+)$", config, re.M)[1] for p in ("MAJOR", "MINOR", "PATCH"))
assert mdring_torch.__version__ == want, f"mdring_torch.__version__ {mdring_torch.__version__}, config.hpp {want}"
dist.init_process_group("mdring")
t = torch.arange(5, dtype=torch.float32)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
assert t.tolist() == [0, 1, 2, 3, 4], t
print("installed mdring_torch:", mdring_torch.__file__, mdring_torch.describe())
dist.destroy_process_group()
