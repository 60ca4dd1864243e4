// mdring/cuda/store.cuh: device buffers between processes that find each other
// through a rendezvous store (rendezvous/store.hpp: PyTorch's c10d store, or
// mdring's TCP store), with no MPI: what the PyTorch backend binds under torchrun.
//
//   mdring::cuda::store_world world{store, rank, size};
//   auto comm = mdring::cuda::bind(mdring::parse_topology("nvlink:8 x infiniband:*"), world);
//   mdring::cuda::all_reduce(comm, d_buf, n, mdring::sum, stream);
//
// bind() is collective over the store (every rank calls it, in the same order
// as its other binds on that store). The ranks agree on the topology and options
// (one fingerprint each; topology_error when they differ). Each executed
// dimension on a GPU link (nvlink, pcie) whose ranks are processes of one node
// runs the ipc transport (cuda/ipc.cuh); any other dimension runs NCCL (built
// with NCCL; one GPU per rank: the dimension's unique id goes through the store),
// and a dimension neither can run is refused with invalid_argument naming it.
// Failures during bind: a rank that cannot set up a dimension says so in the
// store and every rank throws (remote_error on the others); a rank that never
// arrives is a timeout_error at options.timeout.
#pragma once

#include "../collective/fingerprint.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../rendezvous/store.hpp"
#include "../topology/runtime.hpp"
#include "../transport/node_window.hpp"
#include "collectives.cuh"
#include "config.cuh"
#include "ipc_bind.cuh"
#include "ipc.cuh"

// NCCL for the dimensions that are not node-local, where it is there (link
// libnccl: mdring::nccl); MDRING_CUDA_NO_NCCL leaves it out.
#if !defined(MDRING_CUDA_NO_NCCL) && __has_include(<nccl.h>)
#define MDRING_STORE_NCCL 1
#include "nccl.cuh"
#else
#define MDRING_STORE_NCCL 0
#endif

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

/// The processes of a job as a store sees them: this one is `rank` of `size`. Keys
/// go under `prefix` (several worlds may share one store under different prefixes).
struct store_world {
  rendezvous::store& store;  ///< the store every process reaches
  /// This process's rank, and the number of processes.
  ///@{
  std::size_t rank = 0, size = 1;
  ///@}
  std::string prefix = "mdring/cuda";  ///< the keys' prefix in the store
};

#if !MDRING_STORE_NCCL
/// A communicator bound through a store: each dimension over CUDA IPC.
template <class Topology>
using store_communicator = communicator<Topology, ipc_link>;
#else
/// A communicator bound through a store: each dimension over CUDA IPC or NCCL.
template <class Topology>
using store_communicator = communicator<Topology, nccl_link, ipc_link>;
#endif

/// The topology of a store's processes as their hosts lay them out, for a caller
/// that was given none: `nvlink:L x infiniband:N` when the ranks are node-major
/// (ranks [k L, (k+1) L) on node k, every node distinct), `nvlink:L` on one node,
/// else one flat `infiniband:size` dimension. Collective over the store (every
/// rank calls it with the same tag); `source` says which case it was.
inline runtime_topology detect_topology(const store_world& world, const std::string& tag,
                                        rendezvous::clock::time_point deadline, std::string& source) {
  const std::size_t size = world.size;
  const auto nodes = rendezvous::all_gather(world.store, world.prefix + "/" + tag, world.rank, size,
                                            mdring::detail::node_identity(), deadline);
  std::size_t L = 0;
  while (L < size && nodes[L] == nodes[0]) ++L;
  bool node_major = size % L == 0;
  const std::size_t N = node_major ? size / L : 0;
  for (std::size_t r = 0; r < size && node_major; ++r) node_major = nodes[r] == nodes[r / L * L];
  for (std::size_t k = 1; k < N && node_major; ++k)
    for (std::size_t q = 0; q < k && node_major; ++q) node_major = nodes[k * L] != nodes[q * L];
  source = "detected";
  if (node_major && N == 1) return parse_topology("nvlink:" + std::to_string(L));
  if (node_major) return parse_topology("nvlink:" + std::to_string(L) + " x infiniband:" + std::to_string(N));
  source = "detected (ranks not node-major: one flat dimension)";
  return parse_topology("infiniband:" + std::to_string(size));
}

namespace detail {

// all_gather among the members of one ring through the store (the Exchange of
// ipc_link::open): each call a fresh tag.
struct store_exchange {
  rendezvous::store* store;
  std::string tag;  // unique to the bind, the dimension and the ring
  std::size_t me = 0, p = 1;
  rendezvous::clock::time_point deadline;
  std::size_t calls = 0;
  void all_gather(const void* mine, std::size_t bytes, void* all) {
    const auto got = rendezvous::all_gather(*store, tag + "/" + std::to_string(calls++), me, p,
                                            std::string(static_cast<const char*>(mine), bytes), deadline);
    for (std::size_t j = 0; j < p; ++j) {
      if (got[j].size() != bytes)
        throw transport_error("mdring::cuda::bind: a peer's contribution to \"" + tag + "\" has " +
                                  std::to_string(got[j].size()) + " bytes, not " + std::to_string(bytes),
                              0);
      std::memcpy(static_cast<char*>(all) + j * bytes, got[j].data(), bytes);
    }
  }
};

// Each bind on one store prefix gets the next number (every rank binds in the same order).
inline std::size_t next_bind(const std::string& prefix) {
  static std::mutex m;
  static std::map<std::string, std::size_t> counters;
  std::lock_guard l(m);
  return counters[prefix]++;
}

}  // namespace detail

/// Binds rank world.rank of world.size through the store (collective over the world): each dimension over CUDA IPC, or
/// NCCL where built with it.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
store_communicator<Topology> bind(const Topology& topo, const store_world& world, options opts = {}) {
  const std::string where = "mdring::cuda::bind";
  mdring::detail::validate(opts);
  if (world.size == 0 || world.rank >= world.size)
    throw invalid_argument("world", where + ": rank " + std::to_string(world.rank) +
                                        " is not in [0, size = " + std::to_string(world.size) + ")");
  const std::string base = world.prefix + "/" + std::to_string(detail::next_bind(world.prefix));
  const auto deadline = rendezvous::clock::now() + opts.timeout;
  auto gather = [&](const std::string& tag, const std::string& mine) {
    return rendezvous::all_gather(world.store, base + "/" + tag, world.rank, world.size, mine, deadline);
  };
  // 1. The same topology and options everywhere.
  std::string fp = mdring::detail::fingerprint(mdring::detail::to_runtime(topo), opts);
  for (auto t : opts.device_transports) fp += "|" + std::string(to_string(t));
  const auto fps = gather("fingerprint", fp);
  for (std::size_t r = 0; r < world.size; ++r)
    if (fps[r] != fp)
      throw topology_error("topology", where + ": rank " + std::to_string(r) +
                                           " bound another topology or other options than rank " +
                                           std::to_string(world.rank) + " (every rank must bind the same)");
  // 2. Which GPUs: NCCL needs one per rank.
  const int dev = detail::current_device();
  cudaDeviceProp prop{};
  detail::check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  const auto uuids = gather("uuid", std::string(prop.uuid.bytes, sizeof prop.uuid.bytes));
  std::size_t shared_gpu = 0;
  for (std::size_t r = 0; r < world.size; ++r)
    for (std::size_t q = 0; q < world.size; ++q)
      if (q != r && uuids[q] == uuids[r]) {
        ++shared_gpu;
        break;
      }
  device_transport_support support;
#if MDRING_STORE_NCCL
  support.nccl = shared_gpu == 0;
  if (shared_gpu)
    support.nccl_unavailable =
        std::to_string(shared_gpu) + " ranks share a GPU with another rank, and NCCL needs one GPU per rank";
#else
  support.nccl_unavailable = "mdring was built without NCCL";
#endif
  // 3. The ipc links (collective per dimension, through the store).
  auto ipc =
      detail::open_ipc_links(topo, world.size, world.rank, opts, support,
                             [&](std::size_t d, std::span<const std::size_t> members, std::size_t me) {
                               return detail::store_exchange{
                                   &world.store, base + "/ipc" + std::to_string(d) + "/" + std::to_string(members[0]),
                                   me, members.size(), deadline};
                             });
  store_communicator<Topology> c(topo, world.size, world.rank, std::move(opts), support, dev);
  detail::install_ipc_links(c, ipc);
  // 4. NCCL for the other dimensions; every rank says whether it could.
  std::string failed;
  for (std::size_t d = 0; d < c.executed_extents().size() && failed.empty(); ++d) {
    if (c.executed_extents()[d] < 2 || c.executed_transports()[d] == device_transport::ipc) continue;
#if MDRING_STORE_NCCL
    if (c.executed_transports()[d] == device_transport::nccl) {
      try {
        const std::string key = base + "/nccl" + std::to_string(d) + "/" + std::to_string(c.members(d)[0]);
        ncclUniqueId id{};
        if (c.executed_coordinates()[d] == 0) {
          detail::nccl_check(ncclGetUniqueId(&id), where, "ncclGetUniqueId");
          world.store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof id));
        } else {
          const std::string v = world.store.get(key, deadline);
          if (v.size() != sizeof id) throw transport_error(where + ": a malformed NCCL id in the store", 0);
          std::memcpy(&id, v.data(), sizeof id);
        }
        ncclComm_t sub = nullptr;
        detail::nccl_check(ncclCommInitRank(&sub, int(c.executed_extents()[d]), id, int(c.executed_coordinates()[d])),
                           where, "ncclCommInitRank");
        c.set_link(d, nccl_link(sub));
      } catch (const std::exception& e) {
        failed = e.what();
      }
      continue;
    }
#endif
    failed = where + ": dimension " + std::to_string(d) + " (" + c.executed_topology().dim(d).link.name +
             ") cannot run on a store-bound communicator: it needs the ipc transport (a GPU link within a node) "
             "or nccl, and got " +
             std::string(to_string(c.executed_transports()[d]));
  }
  const auto status = gather("status", failed);
  if (!failed.empty()) throw transport_error(failed, 0);
  for (std::size_t r = 0; r < world.size; ++r)
    if (!status[r].empty())
      throw remote_error(where + ": rank " + std::to_string(r) + " could not bind, so this rank stopped: " + status[r],
                         r);
  return c;
}

}  // namespace cuda

MDRING_NAMESPACE_END
