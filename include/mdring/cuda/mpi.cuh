// mdring/cuda/mpi.cuh: device buffers over MPI (and NCCL, where it is the better
// transport), bound to an MPI communicator.
//
//   auto comm = mdring::cuda::bind(mdring::ring<mdring::nvlink, 4> * mdring::ring<mdring::ethernet>, MPI_COMM_WORLD);
//   mdring::cuda::all_reduce(comm, d_send, d_recv, n, mdring::sum, stream);
//
// bind() is collective over the MPI communicator. It builds mdring's MPI transport
// (transport/mpi.hpp: a duplicate of the communicator, one sub-communicator per
// dimension, a control channel through which a failing rank stops the others),
// agrees on whether MPI is CUDA-aware, picks each dimension's transport
// (transport/device_select.hpp), and creates an NCCL communicator for each
// dimension that uses NCCL (ncclCommInitRank, the unique id broadcast over the
// dimension's MPI sub-communicator). Each rank uses the device that is current
// when it binds.
//
// The MPI link of a dimension:
//   - mpi_staged: waits (on the host, under the deadline) until the stream has
//     reached the step, then moves each message in chunks of
//     options.tune.staging_chunk_bytes through pinned host buffers, two per
//     message: while chunk c is on the wire, chunk c+1 is being copied from the
//     device (sends) or chunk c-1 to it (receives) -- the Horovod / BlueConnect
//     way for slow inter-node links. Copies to the device are enqueued on the
//     stream, so the folds that follow see them.
//   - mpi_cuda_aware: the same wait, then MPI_Isend/MPI_Irecv on the device
//     pointers, when the MPI library says it supports them (Open MPI's
//     MPIX_Query_cuda_support, MPICH's MPIX_GPU_query_support;
//     MDRING_CUDA_AWARE_MPI=0 or 1 overrides).
// Both synchronize the host with the stream, so a call that uses them cannot be
// captured into a CUDA graph (refused with invalid_argument("stream")); NCCL
// dimensions stay stream-ordered.
//
// Define MDRING_CUDA_NO_NCCL to use this header without NCCL (every dimension
// then uses MPI); the communicator type says which: mpi_communicator<Topology>.
#pragma once

#include "../error.hpp"
#include "../options.hpp"
#include "../collective/fingerprint.hpp"
#include "../transport/mpi.hpp"
#include "collectives.cuh"
#include "config.cuh"
#include "engine.cuh"
#include "ipc_bind.cuh"
#include "ipc.cuh"
#include "mpi_host.cuh"

#ifndef MDRING_CUDA_NO_NCCL
#include "nccl.cuh"
#endif

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

/// The link of one dimension over MPI (see the top).
class mpi_link {
public:
  /// The link of transport `tr`'s channel `ch`: MPI on device pointers when `cuda_aware`, else staged through pinned
  /// host buffers in chunks of `chunk_bytes` (see the top).
  mpi_link(std::shared_ptr<mdring::mpi::transport> tr, mdring::mpi::transport::channel ch, bool cuda_aware,
           std::size_t chunk_bytes)
      : tr_(std::move(tr)),
        ch_(std::move(ch)),
        aware_(cuda_aware),
        chunk_(chunk_bytes),
        ready_(unique_event::create()),
        copies_(unique_stream::create()) {}
  /// Movable, not copyable.
  ///@{
  mpi_link(mpi_link&&) noexcept = default;
  mpi_link& operator=(mpi_link&&) noexcept = default;
  ///@}

  /// The host waits for the stream: not capturable into a CUDA graph.
  bool capturable() const noexcept { return false; }
  bool cuda_aware() const noexcept { return aware_; }  ///< MPI takes the device pointers

  /// Waits on the host until the stream reaches the step, then moves its messages (see the top).
  void exchange(std::span<const device_message> sends, std::span<const device_message> recvs, cudaStream_t stream,
                const step_context& cx) {
    detail::check(cudaEventRecord(ready_.get(), stream), "cudaEventRecord");
    detail::wait_for_stream(ready_.get(), *tr_, cx);
    if (aware_) direct(sends, recvs, cx);
    else staged(sends, recvs, stream, cx);
  }

  void abort(const std::string& why) noexcept { tr_->abort(why); }  ///< tells every other rank that this one failed

private:
  using request = mdring::mpi::transport::request;
  static constexpr int tag = 7;

  [[noreturn]] void fail(const wait_status& st, const step_context& cx, std::size_t peer) {
    if (st.kind == wait_status::peer_failed)
      throw remote_error(cx.where() + ": rank " + std::to_string(st.failed_rank) +
                             " failed, so this rank stopped "
                             "waiting: " +
                             st.reason,
                         st.failed_rank);
    throw timeout_error(cx.where() + ": timed out waiting for rank " + std::to_string(peer) + " (mpi transport)",
                        cx.collective, cx.dim, std::string(to_string(cx.ph)), cx.step, peer);
  }

  // CUDA-aware MPI: the device pointers themselves.
  void direct(std::span<const device_message> sends, std::span<const device_message> recvs, const step_context& cx) {
    reqs_.assign(sends.size() + recvs.size(), request{});
    std::size_t i = 0;
    for (const auto& m : recvs) tr_->irecv(ch_, m.ptr, m.bytes, m.peer, tag, reqs_[i++]);
    for (const auto& m : sends) tr_->isend(ch_, m.ptr, m.bytes, m.peer, tag, reqs_[i++]);
    const wait_status st = tr_->wait_all(reqs_, cx.deadline);
    if (st.kind == wait_status::done) return;
    tr_->cancel_all(reqs_);
    const std::size_t j = st.index < recvs.size() ? recvs[st.index].peer : sends[st.index - recvs.size()].peer;
    fail(st, cx, ch_.members[j]);
  }

  /// One message in chunks through two pinned slots.
  struct flow {
    const device_message* m = nullptr;
    bool send = false;
    std::size_t chunks = 0, staged = 0, next = 0, done = 0;  // see staged()
    enum state_t { idle, copying, wire, landing };
    state_t state[2] = {idle, idle};
    std::size_t chunk_of[2] = {0, 0};
    request rq[2];
    cudaEvent_t ev[2] = {nullptr, nullptr};
    char* slot[2] = {nullptr, nullptr};
  };

  std::size_t chunk_bytes(const flow& f, std::size_t c) const {
    const std::size_t off = c * chunk_;
    return f.m->bytes - off < chunk_ ? f.m->bytes - off : chunk_;
  }
  char* device_at(const flow& f, std::size_t c) const { return static_cast<char*>(f.m->ptr) + c * chunk_; }

  // Non-blocking: the request has completed (one MPI_Testall; throws on a peer's failure).
  bool test(request& rq, const step_context& cx, std::size_t peer) {
    if (tr_->test(rq)) return true;
    const wait_status st = tr_->shared_failure();
    if (st.kind == wait_status::peer_failed) fail(st, cx, peer);
    return false;
  }
  static bool event_done(cudaEvent_t e) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) return false;
    detail::check(r, "cudaEventQuery");
    return true;
  }

  // Sends: slot k = c % 2 is copied from the device (copy stream), then sent; the
  // chunks go on the wire in order. Receives: chunk c is received into slot c % 2,
  // then copied to the device on the caller's stream. A slot is reused once its
  // send completed or its copy to the device finished.
  void staged(std::span<const device_message> sends, std::span<const device_message> recvs, cudaStream_t stream,
              const step_context& cx) {
    flows_.assign(sends.size() + recvs.size(), flow{});
    const std::size_t nf = flows_.size();
    char* host = pinned_.get(nf * 2 * chunk_);
    while (events_.size() < 2 * nf) events_.push_back(unique_event::create());
    for (std::size_t i = 0; i < nf; ++i) {
      flow& f = flows_[i];
      f.send = i >= recvs.size();
      f.m = f.send ? &sends[i - recvs.size()] : &recvs[i];
      f.chunks = (f.m->bytes + chunk_ - 1) / chunk_;
      for (int k = 0; k < 2; ++k)
        f.slot[k] = host + (2 * i + std::size_t(k)) * chunk_, f.ev[k] = events_[2 * i + k].get();
    }
    try {
      for (unsigned spin = 0;; ++spin) {
        bool all = true;
        for (auto& f : flows_) {
          if (f.done == f.chunks) continue;
          all = false;
          f.send ? progress_send(f, cx) : progress_recv(f, stream, cx);
        }
        if (all) return;
        if ((spin & 63) == 63 && deadline_clock::now() >= cx.deadline) {
          for (auto& f : flows_)
            if (f.done < f.chunks) fail(wait_status{wait_status::timeout, 0, 0, {}}, cx, ch_.members[f.m->peer]);
        }
      }
    } catch (...) {
      for (auto& f : flows_) tr_->cancel_all(std::span<request>(f.rq, 2));
      throw;
    }
  }

  void progress_send(flow& f, const step_context& cx) {
    const std::size_t peer = ch_.members[f.m->peer];
    // Copy the next chunk from the device into a free slot.
    if (f.staged < f.chunks && f.state[f.staged % 2] == flow::idle) {
      const int k = int(f.staged % 2);
      detail::check(cudaMemcpyAsync(f.slot[k], device_at(f, f.staged), chunk_bytes(f, f.staged), cudaMemcpyDeviceToHost,
                                    copies_.get()),
                    "cudaMemcpyAsync");
      detail::check(cudaEventRecord(f.ev[k], copies_.get()), "cudaEventRecord");
      f.state[k] = flow::copying, f.chunk_of[k] = f.staged++;
    }
    // Put the next chunk in order on the wire once it is in host memory.
    if (f.next < f.staged) {
      const int k = int(f.next % 2);
      if (f.state[k] == flow::copying && event_done(f.ev[k])) {
        tr_->isend(ch_, f.slot[k], chunk_bytes(f, f.next), f.m->peer, tag, f.rq[k]);
        f.state[k] = flow::wire, ++f.next;
      }
    }
    for (int k = 0; k < 2; ++k)
      if (f.state[k] == flow::wire && test(f.rq[k], cx, peer)) f.state[k] = flow::idle, ++f.done;
  }

  void progress_recv(flow& f, cudaStream_t stream, const step_context& cx) {
    const std::size_t peer = ch_.members[f.m->peer];
    // Post the next receive into a free slot (in order: MPI matches them in order).
    if (f.staged < f.chunks && f.state[f.staged % 2] == flow::idle) {
      const int k = int(f.staged % 2);
      tr_->irecv(ch_, f.slot[k], chunk_bytes(f, f.staged), f.m->peer, tag, f.rq[k]);
      f.state[k] = flow::wire, f.chunk_of[k] = f.staged++;
    }
    // A received chunk goes to the device on the caller's stream.
    if (f.next < f.staged) {
      const int k = int(f.next % 2);
      if (f.state[k] == flow::wire && test(f.rq[k], cx, peer)) {
        detail::check(
            cudaMemcpyAsync(device_at(f, f.next), f.slot[k], chunk_bytes(f, f.next), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync");
        detail::check(cudaEventRecord(f.ev[k], stream), "cudaEventRecord");
        f.state[k] = flow::landing, ++f.next;
      }
    }
    for (int k = 0; k < 2; ++k)
      if (f.state[k] == flow::landing && event_done(f.ev[k])) f.state[k] = flow::idle, ++f.done;
  }

  std::shared_ptr<mdring::mpi::transport> tr_;
  mdring::mpi::transport::channel ch_;
  bool aware_ = false;
  std::size_t chunk_ = 0;
  unique_event ready_;
  unique_stream copies_;
  detail::pinned_buffer pinned_;
  std::vector<unique_event> events_;
  std::vector<flow> flows_;
  std::vector<request> reqs_;
};

#ifdef MDRING_CUDA_NO_NCCL
/// A communicator bound to an MPI communicator: each dimension over MPI or CUDA IPC.
template <class Topology>
using mpi_communicator = communicator<Topology, mpi_link, ipc_link>;
#else
/// A communicator bound to an MPI communicator: each dimension over NCCL, MPI or CUDA IPC.
template <class Topology>
using mpi_communicator = communicator<Topology, nccl_link, mpi_link, ipc_link>;
#endif

/// Binds a topology to an MPI communicator for device buffers (collective over comm; see the top).
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
mpi_communicator<Topology> bind(const Topology& topo, MPI_Comm comm, options opts = {}) {
  const std::string where = "mdring::cuda::bind";
  mdring::detail::validate(opts);
  options host = opts;
  host.shared_memory = false;  // device buffers: no cross-memory attach
  std::string fp = mdring::detail::fingerprint(mdring::detail::to_runtime(topo), host);
  for (auto t : opts.device_transports) fp += "|" + std::string(to_string(t));
  auto tr = std::make_shared<mdring::mpi::transport>(comm, host, fp);
  int aware = mpi_is_cuda_aware() ? 1 : 0, all_aware = 0;
  mdring::mpi::detail::check(MPI_Allreduce(&aware, &all_aware, 1, MPI_INT, MPI_MIN, tr->control_comm()),
                             "MPI_Allreduce");
  device_transport_support support;
  support.mpi = true;
  support.cuda_aware_mpi = all_aware != 0;
  const int dev = detail::current_device();
  auto ipc =
      detail::open_ipc_links(topo, tr->size(), tr->rank(), opts, support,
                             [&](std::size_t d, std::span<const std::size_t> members, std::size_t me) {
                               return mdring::mpi::detail::allgather_exchange{tr->make_channel(d, members, me).comm};
                             });
#ifndef MDRING_CUDA_NO_NCCL
  // NCCL needs one GPU per rank ("Duplicate GPU detected" otherwise): where two
  // ranks share a GPU (a test on one GPU, an oversubscribed node), automatic
  // picks MPI and a request for nccl is refused, saying why.
  const std::size_t shared_gpu = detail::ranks_sharing_a_gpu(tr->control_comm(), dev);
  support.nccl = shared_gpu == 0;
  if (shared_gpu)
    support.nccl_unavailable = std::to_string(shared_gpu) +
                               " ranks share a GPU with another rank, and NCCL needs "
                               "one GPU per rank";
#endif
  mpi_communicator<Topology> c(topo, tr->size(), tr->rank(), std::move(opts), support, dev);
  detail::install_ipc_links(c, ipc);
  // Each dimension's link. A rank whose setup fails still joins the agreement
  // after it (MPI_Allreduce over every rank), so that the others throw too,
  // instead of waiting in the next dimension's setup.
  for (std::size_t d = 0; d < c.executed_extents().size(); ++d) {
    if (c.executed_extents()[d] < 2 || c.executed_transports()[d] == device_transport::ipc) continue;
    auto ch = tr->make_channel(d, c.members(d), c.executed_coordinates()[d]);
    const device_transport t = c.executed_transports()[d];
    std::exception_ptr failed;
    try {
#ifndef MDRING_CUDA_NO_NCCL
      if (t == device_transport::nccl) {
        // The id comes with a flag: coordinate 0 says whether it could make one.
        struct {
          int ok;
          ncclUniqueId id;
        } msg{1, {}};
        std::string why;
        if (c.executed_coordinates()[d] == 0) {
          const ncclResult_t r = ncclGetUniqueId(&msg.id);
          if (r != ncclSuccess) msg.ok = 0, why = detail::nccl_text(r, nullptr);
        }
        mdring::mpi::detail::check(MPI_Bcast(&msg, int(sizeof msg), MPI_BYTE, 0, ch.comm), "MPI_Bcast");
        if (!msg.ok)
          throw nccl_error(where + ": ncclGetUniqueId failed on rank " + std::to_string(c.members(d)[0]) +
                               " (coordinate 0 of dimension " + std::to_string(d) + ")" +
                               (why.empty() ? std::string() : ": " + why),
                           0);
        ncclComm_t sub = nullptr;
        detail::nccl_check(
            ncclCommInitRank(&sub, int(c.executed_extents()[d]), msg.id, int(c.executed_coordinates()[d])), where,
            "ncclCommInitRank");
        c.set_link(d, nccl_link(sub));
      } else
#endif
      {
        c.set_link(d, mpi_link(tr, std::move(ch), t == device_transport::mpi_cuda_aware,
                               c.get_options().tune.staging_chunk_bytes));
      }
    } catch (...) {
      failed = std::current_exception();
    }
    struct {
      int ok, rank;
    } mine{failed ? 0 : 1, int(tr->rank())}, all{1, 0};
    mdring::mpi::detail::check(MPI_Allreduce(&mine, &all, 1, MPI_2INT, MPI_MINLOC, tr->control_comm()),
                               "MPI_Allreduce");
    if (failed) std::rethrow_exception(failed);
    if (!all.ok)
      throw remote_error(where + ": rank " + std::to_string(all.rank) + " could not set up the " +
                             std::string(to_string(t)) + " transport of dimension " + std::to_string(d) + " (" +
                             c.executed_topology().dim(d).link.name + "), so this rank stopped binding",
                         std::size_t(all.rank));
  }
  c.keep_alive(tr);
  return c;
}

}  // namespace cuda

MDRING_NAMESPACE_END
