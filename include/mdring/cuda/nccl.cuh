// mdring/cuda/nccl.cuh: the NCCL transport, one NCCL communicator per dimension.
//
//   ncclComm_t world;  // yours: ncclCommInitRank / ncclCommInitAll
//   auto comm = mdring::cuda::bind(mdring::ring<mdring::nvlink, 4> * mdring::ring<mdring::infiniband>, world);
//   mdring::cuda::all_reduce(comm, d_send, d_recv, n, mdring::sum, stream);
//
// bind() is collective over the parent communicator: it checks that every rank
// bound the same topology and options (one ncclAllReduce of a fingerprint), then
// splits one communicator per non-trivial dimension off the parent
// (ncclCommSplit; color: the ring, key: the coordinate, so the NCCL rank is the
// coordinate). Binding to an MPI communicator (cuda/mpi.cuh) creates them with
// ncclCommInitRank instead, the unique id broadcast over the dimension's MPI
// sub-communicator.
//
// A step's messages are one group of ncclRecv/ncclSend on the stream (bytes,
// ncclUint8; counts are size_t, so messages over 2^31 bytes need no splitting).
// Everything is enqueued, nothing waits on the host: the collective is
// stream-ordered and can be captured into a CUDA graph. On an error this rank's
// NCCL communicators are aborted (ncclCommAbort), so none of its kernels is left
// waiting for a peer, and the mdring communicator is unusable. The peers are not
// told by NCCL (it has no such channel): on a pure NCCL binding they learn of it
// only when their own NCCL calls fail (docs/GPU.md, "Errors").
//
// The communicator of a pipelined call runs dimensions on different streams at
// once; every rank enqueues the same operations in the same order on each
// dimension's communicator (plan/program.hpp), as NCCL requires.
#pragma once

#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"
#include "../collective/fingerprint.hpp"
#include "collectives.cuh"
#include "config.cuh"
#include "engine.cuh"

#include <nccl.h>

#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

inline std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) s += std::string(" (") + last + ")";
  }
#else
  (void)comm;
#endif
  return s;
}

// A nonblocking communicator (ncclConfig_t::blocking = 0, or split off a nonblocking
// parent) may answer ncclInProgress: the call goes on in the background, and
// ncclCommGetAsyncError tells when it is done. Waits for that outcome.
inline ncclResult_t nccl_settle(ncclResult_t r, ncclComm_t comm) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  while (r == ncclInProgress && comm) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return q;
    r = state;
    if (r == ncclInProgress) std::this_thread::yield();
  }
#else
  (void)comm;
#endif
  return r;
}

// Throws nccl_error("<where>: <call> failed: <text>") unless r is ncclSuccess.
inline void nccl_check(ncclResult_t r, const std::string& where, const char* call, ncclComm_t comm = nullptr) {
  if (r != ncclSuccess) throw nccl_error(where + ": " + call + " failed: " + nccl_text(r, comm), int(r));
}

}  // namespace detail

/// The link of one dimension: an NCCL communicator whose rank is the coordinate.
class nccl_link {
public:
  nccl_link() = default;
  /// Owns NCCL communicator `c`.
  explicit nccl_link(ncclComm_t c) noexcept : comm_(c) {}

  ncclComm_t get() const noexcept { return comm_.get(); }  ///< the NCCL communicator
  bool capturable() const noexcept { return true; }        ///< its steps can be captured into a CUDA graph

  /// One group of receives and sends on `stream`.
  void exchange(std::span<const device_message> sends, std::span<const device_message> recvs, cudaStream_t stream,
                const step_context& cx) {
    ncclComm_t comm = comm_.get();
    if (!comm) throw communicator_error(cx.where() + ": the NCCL communicator was aborted after an earlier error");
    const std::string where = cx.where();
    detail::nccl_check(ncclGroupStart(), where, "ncclGroupStart", comm);
    ncclResult_t r = ncclSuccess;
    const char* call = "ncclRecv";
    for (const auto& m : recvs)
      if (r == ncclSuccess) r = ncclRecv(m.ptr, m.bytes, ncclUint8, int(m.peer), comm, stream);
    if (r == ncclSuccess) call = "ncclSend";
    for (const auto& m : sends)
      if (r == ncclSuccess) r = ncclSend(m.ptr, m.bytes, ncclUint8, int(m.peer), comm, stream);
    const ncclResult_t end = detail::nccl_settle(ncclGroupEnd(), comm);
    detail::nccl_check(r, where, call, comm);
    detail::nccl_check(end, where, "ncclGroupEnd", comm);
  }

  /// After a failure: make NCCL give up on what is in flight (its kernels that
  /// wait for a peer return). Only this rank's communicator: a peer on a ring of
  /// NCCL dimensions only learns of it when its own NCCL operations fail or when
  /// another dimension (MPI) tells it (docs/GPU.md, "Errors").
  void abort(const std::string&) noexcept { abort_local(); }
  /// Aborts this rank's NCCL communicator (see abort()).
  void abort_local() noexcept {
    if (ncclComm_t c = comm_.release()) ncclCommAbort(c);
  }

private:
  struct destroy {
    void operator()(ncclComm_t c) const noexcept { ncclCommDestroy(c); }
  };
  unique_handle<ncclComm_t, destroy> comm_;
};

namespace detail {

// What every rank must agree on at bind: topology, algorithms, transports.
template <class C>
std::string device_fingerprint(const C& c) {
  std::string s = mdring::detail::fingerprint(c.topology(), c.get_options());
  for (auto t : c.executed_transports()) s += "|" + std::string(to_string(t));
  return s;
}

// One ncclAllReduce (max) of {h, ~h}: equal on every rank iff all hashes are equal.
inline bool nccl_agree(ncclComm_t comm, std::uint64_t h) {
  const std::string where = "mdring::cuda::bind";
  std::uint64_t v[2] = {h, ~h};
  void* d = nullptr;
  check(cudaMalloc(&d, sizeof v), "cudaMalloc");
  unique_stream s = unique_stream::create();
  ncclResult_t r = ncclSuccess;
  cudaError_t e = cudaMemcpyAsync(d, v, sizeof v, cudaMemcpyHostToDevice, s.get());
  if (e == cudaSuccess) r = nccl_settle(ncclAllReduce(d, d, 2, ncclUint64, ncclMax, comm, s.get()), comm);
  if (e == cudaSuccess && r == ncclSuccess) e = cudaMemcpyAsync(v, d, sizeof v, cudaMemcpyDeviceToHost, s.get());
  if (e == cudaSuccess) e = cudaStreamSynchronize(s.get());
  cudaFree(d);
  check(e, "copying the bind fingerprint");
  nccl_check(r, where, "ncclAllReduce", comm);
  return v[0] == ~v[1];
}

}  // namespace detail

/// A communicator whose every dimension runs over NCCL.
template <class Topology>
using nccl_communicator = communicator<Topology, nccl_link>;

/// Binds a topology to every rank of `parent` (collective over it; see the top).
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
nccl_communicator<Topology> bind(const Topology& topo, ncclComm_t parent, options opts = {}) {
  const std::string where = "mdring::cuda::bind";
  if (!parent) throw invalid_argument("comm", where + ": comm is a null ncclComm_t");
  int n = 0, r = 0, dev = 0;
  detail::nccl_check(ncclCommCount(parent, &n), where, "ncclCommCount", parent);
  detail::nccl_check(ncclCommUserRank(parent, &r), where, "ncclCommUserRank", parent);
  detail::nccl_check(ncclCommCuDevice(parent, &dev), where, "ncclCommCuDevice", parent);
  detail::device_guard g(dev);
  device_transport_support support;
  support.nccl = true;
  nccl_communicator<Topology> c(topo, std::size_t(n), std::size_t(r), std::move(opts), support, dev);
  if (!detail::nccl_agree(parent, mdring::detail::fnv1a(detail::device_fingerprint(c))))
    throw topology_error("topology", where +
                                         ": the ranks of the NCCL communicator bound different topologies, "
                                         "algorithms, options or transports (this rank: \"" +
                                         detail::device_fingerprint(c) + "\")");
  for (std::size_t d = 0; d < c.executed_extents().size(); ++d) {
    if (c.executed_extents()[d] < 2) continue;
    ncclComm_t sub = nullptr;
    // No config: the new communicator inherits the parent's (blocking or not, CGA
    // size, ...); a nonblocking one is waited for (nccl_settle).
    const ncclResult_t sr0 =
        ncclCommSplit(parent, int(c.members(d)[0]), int(c.executed_coordinates()[d]), &sub, nullptr);
    detail::nccl_check(detail::nccl_settle(sr0, sr0 == ncclInProgress && sub ? sub : parent), where, "ncclCommSplit",
                       parent);
    nccl_link link(sub);
    int sr = 0, sn = 0;
    detail::nccl_check(ncclCommUserRank(sub, &sr), where, "ncclCommUserRank", sub);
    detail::nccl_check(ncclCommCount(sub, &sn), where, "ncclCommCount", sub);
    if (std::size_t(sr) != c.executed_coordinates()[d] || std::size_t(sn) != c.executed_extents()[d])
      throw nccl_error(where + ": the NCCL communicator of dimension " + std::to_string(d) + " came out with rank " +
                           std::to_string(sr) + " of " + std::to_string(sn) + ", expected " +
                           std::to_string(c.executed_coordinates()[d]) + " of " +
                           std::to_string(c.executed_extents()[d]),
                       0);
    c.set_link(d, std::move(link));
  }
  return c;
}

}  // namespace cuda

MDRING_NAMESPACE_END
