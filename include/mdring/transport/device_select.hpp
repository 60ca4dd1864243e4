// mdring/transport/device_select.hpp: which transport moves each dimension's
// device buffers (the GPU path, mdring/cuda/). Plain C++: the choice is tested
// without a GPU.
//
// automatic, per dimension, from the link's traits and what the communicator
// supports:
//   - a local world (several logical ranks on one GPU): local, always;
//   - a GPU link (memory_space::device: nvlink, pcie) whose ranks share a node
//     (processes, one or more per GPU): ipc, where CUDA IPC works between them;
//   - a GPU link (memory_space::device: nvlink, pcie) or a fast fabric
//     (bandwidth >= 5 GB/s: infiniband, shm): NCCL when available;
//   - a slow host link (ethernet, or a registered link under 5 GB/s): MPI, on the
//     device pointers when the MPI library is CUDA-aware, else staged through
//     pinned host buffers (the Horovod / BlueConnect way);
//   - whatever is available when the preferred one is not (MPI for NCCL, and back).
// options::device_transports overrides it per dimension of the topology as
// written; a request that the communicator cannot honour throws
// invalid_argument("options.device_transports") naming the entry.
//
//   nvlink:4 x infiniband:64, NCCL and MPI     -> ipc, nccl (nodes of 4 processes)
//   nvlink:4 x infiniband:64, no CUDA IPC      -> nccl, nccl
//   nvlink:4 x ethernet:16, NCCL and MPI       -> nccl, mpi_staged
//   nvlink:4 x ethernet:16, CUDA-aware MPI     -> nccl, mpi_cuda_aware
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../plan/merge.hpp"
#include "../topology/link.hpp"
#include "../topology/runtime.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// What a device communicator can use.
struct device_transport_support {
  bool nccl = false;            ///< built with NCCL and bound where NCCL can reach the ranks
  bool mpi = false;             ///< bound to an MPI communicator (staged MPI always works then)
  bool cuda_aware_mpi = false;  ///< the MPI library says it takes device pointers
  bool local = false;           ///< a local world: every dimension is local
  /// Per executed dimension: its ranks share a node and CUDA IPC works between
  /// them (so the ipc transport can run it). Missing entries: no.
  std::vector<bool> ipc;
  std::string nccl_unavailable;  ///< why not nccl, when it was built but cannot be used here (in errors)
  std::string ipc_unavailable;   ///< why not ipc (in errors)

  /// Dimension d can run the ipc transport.
  bool ipc_on(std::size_t d) const noexcept { return d < ipc.size() && ipc[d]; }
};

/// Links at or above this bandwidth (bytes/s) prefer NCCL even in host memory space.
inline constexpr double device_fast_link_bandwidth = 5e9;

/// The transport `automatic` stands for on `link` (executed dimension d); automatic
/// itself when the communicator supports nothing.
inline device_transport default_device_transport(const link_info& link, const device_transport_support& s,
                                                 std::size_t d = std::size_t(-1)) noexcept {
  if (s.local) return device_transport::local;
  if (link.space == memory_space::device && s.ipc_on(d)) return device_transport::ipc;
  const bool fast = link.space == memory_space::device || link.bandwidth >= device_fast_link_bandwidth;
  const device_transport mpi = s.cuda_aware_mpi ? device_transport::mpi_cuda_aware : device_transport::mpi_staged;
  if (fast && s.nccl) return device_transport::nccl;
  if (s.mpi) return mpi;
  if (s.nccl) return device_transport::nccl;
  return device_transport::automatic;
}

/// Whether the communicator can run transport t on executed dimension d.
inline bool supports(const device_transport_support& s, device_transport t, std::size_t d = std::size_t(-1)) noexcept {
  switch (t) {
    case device_transport::nccl:
      return s.nccl;
    case device_transport::mpi_staged:
      return s.mpi;
    case device_transport::mpi_cuda_aware:
      return s.mpi && s.cuda_aware_mpi;
    case device_transport::local:
      return s.local;
    case device_transport::ipc:
      return s.ipc_on(d);
    default:
      return true;
  }
}

/// The ipc transport's one-shot threshold on a dimension of p ranks joined by
/// `link`: the largest stage range (bytes) for which copying it into the staging
/// buffer and folding the whole range from every peer's staging (one-shot: (p-1) r
/// over the link, 2 r copied locally, no host exchange) is predicted faster than
/// publishing the buffers and folding one block from each peer in place (two-shot:
/// 2 (p-1)/p r over the link, plus t.ipc_publish_seconds on the host):
///   r* = ipc_publish_seconds / ((p-1) (1 - 2/p) / bandwidth + 2 device_gamma)
/// capped at t.ipc_staging_bytes, in whole cache lines. Example: nvlink (150 GB/s),
/// p = 4, the defaults (20 us, 1 / 1e12 s per byte): 1.67 MB, so the 1 MiB cap.
inline std::size_t ipc_staging_bytes(const link_info& link, std::size_t p, const tuning& t) {
  if (p < 2 || t.ipc_staging_bytes == 0) return 0;
  const double per_byte = double(p - 1) * (1.0 - 2.0 / double(p)) / link.bandwidth + 2.0 * t.device_gamma;
  const double r = t.ipc_publish_seconds / per_byte;
  if (!(r < double(t.ipc_staging_bytes))) return t.ipc_staging_bytes;
  return std::size_t(r) / 64 * 64;
}

namespace detail {
inline std::string device_support_string(const device_transport_support& s, std::size_t d = std::size_t(-1)) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(s.ipc_on(d), "ipc");
  add(s.nccl, "nccl");
  add(s.mpi, "mpi_staged");
  add(s.mpi && s.cuda_aware_mpi, "mpi_cuda_aware");
  add(s.local, "local");
  return out.empty() ? "none" : out;
}
}  // namespace detail

/// The transport of every executed dimension (plan/merge.hpp: merged dimensions
/// take the common request of the dimensions they merge). `requested` is per
/// dimension of the topology as written (`written`); missing entries are automatic.
/// A dimension of one rank never throws for want of a transport.
inline std::vector<device_transport> select_device_transports(const runtime_topology& written,
                                                              const merged_dimensions& m,
                                                              std::span<const device_transport> requested,
                                                              const device_transport_support& s,
                                                              const char* fn = "mdring::cuda::bind") {
  const std::string where = std::string(fn) + ": ";
  if (requested.size() > written.ndims())
    throw invalid_argument("options.device_transports",
                           where + "options.device_transports has " + std::to_string(requested.size()) +
                               " entries but the topology \"" + written.to_string() + "\" has " +
                               std::to_string(written.ndims()) + " dimensions");
  const std::size_t k = m.topology.ndims();
  std::vector<device_transport> out(k, device_transport::automatic);
  std::vector<std::size_t> from(k, written.ndims());  // the user dimension that asked
  for (std::size_t d = 0; d < requested.size(); ++d) {
    const device_transport t = requested[d];
    if (t == device_transport::automatic) continue;
    const std::string entry = "options.device_transports[" + std::to_string(d) + "] is " + std::string(to_string(t));
    const std::size_t e = m.of_user[d];
    if (!supports(s, t, e))
      throw invalid_argument("options.device_transports",
                             where + entry + ", which this communicator cannot use (it supports: " +
                                 detail::device_support_string(s, e) + ")" +
                                 (t == device_transport::nccl && !s.nccl_unavailable.empty() ? ": " + s.nccl_unavailable
                                  : t == device_transport::ipc && !s.ipc_unavailable.empty() ? ": " + s.ipc_unavailable
                                                                                             : std::string()));
    if (out[e] != device_transport::automatic && out[e] != t)
      throw invalid_argument("options.device_transports",
                             where + entry + " but options.device_transports[" + std::to_string(from[e]) + "] is " +
                                 std::string(to_string(out[e])) + ", and the two dimensions run merged as one (same " +
                                 "fully connected link); ask for the same transport or set "
                                 "options.tune.merge_same_link = false");
    out[e] = t, from[e] = d;
  }
  // The second half of a split dimension runs on what its user dimension asked for.
  for (std::size_t e = 1; e < k; ++e)
    if (m.user_of[e] == m.user_of[e - 1]) out[e] = out[e - 1];
  for (std::size_t e = 0; e < k; ++e) {
    if (out[e] != device_transport::automatic) continue;
    out[e] = default_device_transport(m.topology.dim(e).link, s, e);
    if (out[e] == device_transport::automatic && m.topology.extent(e) > 1)
      throw invalid_argument("options.device_transports", where + "no transport can move device buffers in dimension " +
                                                              std::to_string(e) + " (" + m.topology.dim(e).link.name +
                                                              "): the communicator supports none");
  }
  return out;
}

MDRING_NAMESPACE_END
