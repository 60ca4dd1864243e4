"""mdring as a torch.distributed backend.

    import mdring_torch                      # registers the backend "mdring"
    dist.init_process_group("mdring")        # topology from MDRING_TOPOLOGY, or detected
    model = DDP(model)                       # unchanged training loop

PyTorch 2.x: a c10d Backend for CPU and CUDA tensors (registered for both
devices); PyTorch 1.13: a ProcessGroup for CPU tensors.

CPU tensors, transports:
  - under torchrun (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT): UCX; the processes find each other through torch's own store;
  - under mpirun: MPI (MPI_THREAD_MULTIPLE). Importing this module under mpirun
    sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT from MPI when they are not set, so that init_process_group's
    env:// rendezvous needs nothing more.
  MDRING_TORCH_TRANSPORT=ucx|mpi overrides the choice; a build with neither
  (have_ucx() and have_mpi() false) takes CUDA tensors only.
CUDA tensors (builds with CUDA, have_cuda()): mdring's GPU path, bound at the
first call on CUDA tensors through the group's store: processes of one node read
each other's device buffers in place (CUDA IPC), nodes talk NCCL; every call is
enqueued on the current CUDA stream and returns at once (Work.wait() orders the
caller's stream after it, as the nccl backend does). MDRING_CUDA_TOPOLOGY
overrides the detected "nvlink:<per node> x infiniband:<nodes>".

Memory: the default group's creation puts CPU tensors of 1 MiB and more in node
memory from then on (use_node_memory() with its defaults), which the other
processes of the node read in place; MDRING_NODE_MEMORY=0 keeps torch's own
allocator (heap tensors, reached by cross-memory attach).

Dense, contiguous tensors (float32, float64, float16, bfloat16, int8, uint8,
int16, int32, int64), one tensor per process per call; reduce ops SUM, AVG,
PRODUCT, MIN, MAX. Every collective is asynchronous; init_process_group's timeout
is mdring's deadline.
"""
import atexit
import os

import torch
import torch.distributed as dist

from . import _C

__all__ = ["transport", "describe", "use_node_memory", "have_cuda", "shrink"]
# The version of the mdring headers the module was built from (MDRING_VERSION_* in
# include/mdring/config.hpp), which is also the installed package's version.
__version__ = _C.__version__


def _launched_by_mpirun():
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def transport():
    """The host transport new groups use for CPU tensors: "ucx", "mpi", or "none"
    (a build with neither: CUDA tensors only)."""
    t = os.environ.get("MDRING_TORCH_TRANSPORT", "")
    if t:
        if t not in ("ucx", "mpi"):
            raise ValueError(f'MDRING_TORCH_TRANSPORT must be "ucx" or "mpi", not "{t}"')
        return t
    if _launched_by_mpirun() and _C.have_mpi():
        return "mpi"
    return "ucx" if _C.have_ucx() else "none"


def have_cuda():
    """Whether this build takes CUDA tensors."""
    return _C.have_cuda()


def describe(group=None):
    """How a group runs: transport, topology, and where the topology came from."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not hasattr(pg, "describe"):  # torch 2.x: a ProcessGroup over our Backend
        pg = pg._get_backend(torch.device("cpu"))
    return pg.describe()


_node_memory = None  # (threshold, cache) once use_node_memory() has run


def use_node_memory(threshold=1 << 20, cache=1 << 30):
    """CPU tensors of `threshold` bytes or more are allocated in node memory
    (mdring::node_alloc), which the other processes of the node map and read in
    place during a collective, instead of copying them by cross-memory attach.
    Freed blocks are kept for reuse, up to `cache` bytes. It affects every CPU
    tensor of the process from then on, and runs once: creating the default
    "mdring" group calls it with the defaults (unless MDRING_NODE_MEMORY=0), so
    call it yourself before init_process_group only for other values. Tensors
    that DDP all-reduces (its gradient buckets, made when DDP wraps the model)
    must come from it. docs/PERFORMANCE.md has what it gains."""
    global _node_memory
    if threshold < 1 or cache < 0:
        raise ValueError(f"use_node_memory: threshold must be >= 1 and cache >= 0 (got {threshold}, {cache})")
    if _node_memory is not None:
        if _node_memory != (int(threshold), int(cache)):
            raise RuntimeError(f"use_node_memory: already on with threshold={_node_memory[0]}, "
                               f"cache={_node_memory[1]} (it runs once per process)")
        return
    _C.use_node_memory(int(threshold), int(cache))
    _node_memory = (int(threshold), int(cache))


def _node_memory_by_default():
    v = os.environ.get("MDRING_NODE_MEMORY", "1")
    if v not in ("0", "1"):
        raise ValueError(f'MDRING_NODE_MEMORY must be 0 (torch\'s own allocator) or 1 (node memory, the default), not "{v}"')
    if v == "1" and _node_memory is None:
        use_node_memory()


def _bootstrap_under_mpirun():
    if not _launched_by_mpirun() or transport() != "mpi" or "RANK" in os.environ:
        return
    rank, size, local_rank, local_size, addr, port = _C.bootstrap_mpi()
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(size))
    os.environ.setdefault("LOCAL_RANK", str(local_rank))
    os.environ.setdefault("LOCAL_WORLD_SIZE", str(local_size))
    os.environ.setdefault("MASTER_ADDR", addr)
    os.environ.setdefault("MASTER_PORT", str(port))


_adopt = None  # the group shrink() made, which the next init_process_group takes


def _own_address():
    """This host's address on the way to MASTER_ADDR (where the survivors' new
    store listens when this process is their rank 0)."""
    import socket

    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))  # no packet: it only picks the route
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def shrink(timeout=None):
    """After a collective failed because a process died or stalled: every
    surviving process calls it, and the default group is replaced by one over the
    survivors, in the same processes (mdring::shrink: they agree on who failed, and
    each failed process's node is dropped from the topology's outermost
    dimension). Returns the old rank of each new rank (dist.get_rank() and
    get_world_size() are the new ones), or None on a process that the shrink left
    out (its node was dropped): the default group is then destroyed there, and the
    process should leave. Groups made with new_group() and DDP modules built on the
    old group must be made again. `timeout` (seconds): how long the agreement waits
    for a silent process (default: the group's timeout). The survivors' group gets
    a new store, hosted by its rank 0 (the old one may have died with rank 0).
    CPU tensors over UCX (torchrun, mdring-run); over MPI it refuses."""
    global _adopt
    c10d = dist.distributed_c10d
    default = c10d._get_default_group()
    pg = default if hasattr(default, "_shrink") else default._get_backend(torch.device("cpu"))
    timeout_s = float(timeout) if timeout is not None else pg._timeout_s()
    new_pg, kept = pg._shrink(timeout_s)
    dist.destroy_process_group()
    if new_pg is None:
        return None
    rank, size = new_pg.rank(), new_pg.size()
    import datetime

    td = datetime.timedelta(seconds=timeout_s)
    if rank == 0:
        store = dist.TCPStore(_own_address(), 0, size, True, timeout=td, wait_for_workers=False)
        new_pg._share(f"{_own_address()}:{store.port}", 0)
    else:
        host, port = new_pg._share("", 0).rsplit(":", 1)
        store = dist.TCPStore(host, int(port), size, False, timeout=td)
    _adopt = new_pg
    try:
        dist.init_process_group("mdring", store=store, rank=rank, world_size=size, timeout=td)
    finally:
        _adopt = None
    return list(kept)


def _create(opts, pg_options=None):
    if _adopt is not None:  # shrink(): the survivors' group, already bound
        return _adopt
    timeout_s = opts.timeout.total_seconds()
    ranks = list(opts.global_ranks_in_group)
    is_world = len(ranks) == 0
    if is_world and transport() != "none":
        _node_memory_by_default()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) if is_world else 0
    name = str(getattr(opts, "group_id", "") or "")
    return _C.create(opts.store, transport(), ranks, opts.group_rank, opts.group_size, timeout_s, local, is_world,
                     name)


def _register():
    import inspect

    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params and _C.torch_api == "Backend":
        devices = ["cpu", "cuda"] if _C.have_cuda() else ["cpu"]
        dist.Backend.register_backend("mdring", _create, extended_api=True, devices=devices)
    else:
        dist.Backend.register_backend("mdring", _create, extended_api=True)


_bootstrap_under_mpirun()
_register()
# Groups finish their work and release their communicators before the
# interpreter's teardown (and before MPI_Finalize, when mdring_torch called MPI_Init).
atexit.register(_C.shutdown)
