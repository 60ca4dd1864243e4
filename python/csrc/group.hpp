// python/csrc/group.hpp: the narrow interface between the PyTorch glue
// (backend.cpp, which sees torch's headers) and mdring (group_ucx.cpp,
// group_mpi.cpp, which see mdring's transports). Nothing here names torch, UCX
// or MPI, so each side compiles on its own, and in parallel.
//
// A group is one process group's communicator: its ranks are torch's group
// ranks, whatever order mdring runs them in (a world that is not node-major is
// renumbered inside, and all_gather / reduce_scatter permute their blocks back).
#pragma once

#include <mdring/collective/request.hpp>
#include <mdring/rendezvous/store.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mdring_torch {

enum class dtype : int { f32, f64, f16, bf16, i8, u8, i16, i32, i64 };
enum class redop : int { sum, avg, prod, min, max };

std::size_t size_of(dtype t) noexcept;

// One collective in flight: wait for req, then run after() (copies out of the
// call's own buffers, when it needed any; it keeps them alive until then).
struct op {
  mdring::request req;
  std::function<void()> after;
};

struct group_config {
  std::size_t rank = 0, size = 1;
  std::chrono::milliseconds timeout{300000};
  std::size_t local_size = 0;  // the launcher's LOCAL_WORLD_SIZE (0: from host names)
  bool is_world = false;       // the default group: MDRING_TOPOLOGY must fit it
  std::string name;            // torch's group name: the same on every rank, unique per group
};

class group;
// What a group's shrink leaves (mdring::shrink): the survivors' group (null on a
// process that shrink left out), this process's rank in it and its size, and the
// old group rank of each new rank.
struct shrunk_group {
  std::unique_ptr<group> g;
  std::size_t rank = 0, size = 0;
  std::vector<std::int64_t> kept;
};

class group {
public:
  virtual ~group() = default;
  // Collective over the living ranks after a failure (mdring::shrink); over MPI it
  // refuses (mdring::invalid_argument). This group is unusable after it.
  virtual shrunk_group shrink(std::chrono::milliseconds timeout) = 0;
  virtual op all_reduce(const void* in, void* out, std::size_t n, dtype, redop) = 0;
  virtual op reduce(const void* in, void* out, std::size_t n, std::size_t root, dtype, redop) = 0;
  // in: size() blocks of n (block r for group rank r); out: n elements.
  virtual op reduce_scatter(const void* in, void* out, std::size_t n, dtype, redop) = 0;
  // out: size() blocks of n, block r from group rank r.
  virtual op all_gather(const void* in, void* out, std::size_t n, dtype) = 0;
  virtual op broadcast(void* buf, std::size_t n, std::size_t root, dtype) = 0;
  // "ucx, topology shm:2 x ethernet:2 (detected, renumbered node-major)"
  virtual std::string describe() const = 0;
};

// Over UCX, finding the other ranks through `store` (torch's c10d store for the
// group, adapted by backend.cpp), which must outlive the group.
std::unique_ptr<group> make_ucx_group(std::unique_ptr<mdring::rendezvous::store> store, const group_config&);

// Over MPI: the group of these MPI_COMM_WORLD ranks (empty: all of them, in order).
// Initializes MPI (MPI_THREAD_MULTIPLE) if nobody has.
std::unique_ptr<group> make_mpi_group(const std::vector<int>& world_ranks, const group_config&);
bool have_mpi() noexcept;
// Under mpirun: MPI's rank, size, local rank and local size, and rank 0's host
// name with a free TCP port on it (for torch's store), agreed through MPI.
struct mpi_bootstrap {
  int rank, size, local_rank, local_size;
  std::string master_addr;
  int master_port;
};
mpi_bootstrap bootstrap_mpi();
// MPI_Finalize, if this module initialized MPI (at interpreter exit, after the groups).
void finalize_mpi();

// mdring::node_alloc / node_free (memory.hpp), for use_node_memory().
void* node_alloc(std::size_t bytes);
void node_free(void* p) noexcept;

// Over UCX (group_ucx.cpp), when built with it.
bool have_ucx() noexcept;

// A group's communicator for CUDA tensors (group_cuda.cu, compiled by nvcc): each
// call is enqueued on `stream` (a cudaStream_t of the group's device) and returns
// at once; the result is there when the stream reaches it. Ranks are torch's group
// ranks. The topology: MDRING_CUDA_TOPOLOGY when set (it must fit the group), else
// detected from the hosts: "nvlink:L" on one node of L processes, "nvlink:L x
// infiniband:N" for N nodes of L processes each in node-major order (torchrun's),
// else "infiniband:P". nvlink dimensions of one node run the ipc transport, the
// others NCCL (cuda/store.cuh).
class device_group {
public:
  virtual ~device_group() = default;
  virtual void all_reduce(const void* in, void* out, std::size_t n, dtype, redop, void* stream) = 0;
  virtual void reduce(const void* in, void* out, std::size_t n, std::size_t root, dtype, redop, void* stream) = 0;
  // in: size() blocks of n (block r for group rank r); out: n elements.
  virtual void reduce_scatter(const void* in, void* out, std::size_t n, dtype, redop, void* stream) = 0;
  // out: size() blocks of n, block r from group rank r.
  virtual void all_gather(const void* in, void* out, std::size_t n, dtype, void* stream) = 0;
  virtual void broadcast(void* buf, std::size_t n, std::size_t root, dtype, void* stream) = 0;
  virtual std::string describe() const = 0;
  virtual int device() const = 0;
};

// Collective over the group: binds on CUDA device `device` through `store`, which
// must outlive the group.
std::unique_ptr<device_group> make_device_group(mdring::rendezvous::store& store, const group_config&, int device);
bool have_cuda() noexcept;

}  // namespace mdring_torch
