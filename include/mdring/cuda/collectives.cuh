// mdring/cuda/collectives.cuh: the collectives on device buffers.
//
//   mdring::cuda::all_reduce(comm, d_send, d_recv, n, mdring::sum, stream);
//
// Stream-ordered (cuda/engine.cuh): each returns once everything is enqueued.
// Transports that must synchronize with the host (MPI) do so inside; a stream being
// captured into a CUDA graph is refused for them with invalid_argument("stream").
// Calls on one communicator share its scratch, so a call on another stream than the
// previous call's waits for it on the GPU (not when captured: order graph launches
// with the other calls yourself).
//
// Around its program, every call does what the host path's do, with the same code:
// the local argument checks (collective/checks.hpp; plus alignment and the fold's
// inputs on the GPU), the failure guard (collective/guard.hpp: after an error inside
// a call the communicator is unusable on every rank, communicator_error) and the
// hang report (executor/state.hpp: the call and the step its link waits in). What
// the GPU path does not do is check_level::collective's agreement: its calls return
// once enqueued, and agreeing would put a host round trip in every call (as NCCL,
// it leaves that to the caller); the local checks run under either level.
#pragma once

#include "../collective/checks.hpp"
#include "../collective/guard.hpp"
#include "../error.hpp"
#include "../executor/state.hpp"
#include "../options.hpp"
#include "../plan/program.hpp"
#include "communicator.cuh"
#include "config.cuh"
#include "engine.cuh"

#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

// A link whose ranks must all be driven at once by one thread (local_link).
template <class L>
concept lock_step_link = requires { requires L::lock_step; };

// A link that runs shared-access stages (cuda/ipc.cuh): arrive publishes this
// rank's buffers of the stage and waits (stream-ordered) for every peer to have
// published theirs; leave waits for every peer to be done with this rank's;
// stage_end closes a stage that arrived without a leave (staging); view() says
// where the peers' buffers are.
template <class L>
concept shared_access_link =
    requires(L& l, const void* c, void* v, std::uint64_t sig, cudaStream_t s, const step_context& cx) {
      l.arrive(c, v, sig, s, cx);
      l.leave(s, cx);
      l.stage_end(s, cx);
      { l.view() } -> std::convertible_to<const remote_view*>;
    };

inline std::optional<mdring::detail::arg_error> check_alignment(const char* name, const char* arg, const void* p,
                                                                std::size_t align, std::size_t count) {
  if (!count || !p || address(p) % align == 0) return std::nullopt;
  return mdring::detail::arg_error{arg, std::string("mdring::cuda::") + name + ": " + arg +
                                            " is not aligned to its element type (" + std::to_string(align) +
                                            " bytes)"};
}

// The op on a device communicator (commutative, or direct everywhere within the
// fold's inputs).
template <class C, class Op>
std::optional<mdring::detail::arg_error> check_device_op(C& comm, const char* name) {
  namespace md = mdring::detail;
  auto err = md::check_op(comm, op_traits<Op>::commutative, name);
  if (!err && !op_traits<Op>::commutative)  // direct everywhere: at most max_fold_inputs ranks per dimension
    for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
      if (comm.executed_extents()[d] > std::size_t(max_fold_inputs))
        err = md::arg_error{"op", std::string("mdring::cuda::") + name +
                                      ": the op is not commutative, so every dimension runs direct, but dimension " +
                                      std::to_string(d) + " has " + std::to_string(comm.executed_extents()[d]) +
                                      " ranks, more than the " + std::to_string(max_fold_inputs) +
                                      " inputs the GPU path folds in one pass"};
  return err;
}

// What every device all_reduce checks before it enqueues anything. Returns the
// error, if any (argument name and message).
template <class C, class T, class Op>
std::optional<mdring::detail::arg_error> check_all_reduce(C& comm, const T* send, T* recv, std::size_t count,
                                                          const char* name) {
  namespace md = mdring::detail;
  auto err = md::first_error(md::all_reduce_buffers(name, send, recv, count, sizeof(T)),
                             check_alignment(name, "sendbuf", send, alignof(T), count),
                             check_alignment(name, "recvbuf", recv, alignof(T), count));
  if (!err) err = check_device_op<C, Op>(comm, name);
  return err;
}

inline void check_usable(const mdring::detail::communicator_base& comm, const char* name) {
  if (!comm.usable()) mdring::detail::throw_unusable(std::string("cuda::") + name, comm.failure());
}

// The links a program uses can be captured into a CUDA graph.
template <class C>
void check_capturable(C& comm, const program& pr, bool capturing, const char* name) {
  if (pr.steps.empty() || !capturing) return;
  for (std::size_t d : pr.stage_dims) {
    bool ok = true;
    std::visit(
        [&](auto& l) {
          if constexpr (requires { l.capturable(); }) ok = l.capturable();
        },
        comm.link(d));
    if (!ok)
      throw invalid_argument("stream", std::string("mdring::cuda::") + name + ": dimension " + std::to_string(d) +
                                           " (" + comm.executed_topology().dim(d).link.name + ") uses the " +
                                           std::string(to_string(comm.executed_transports()[d])) +
                                           " transport, which synchronizes with the host and cannot be captured "
                                           "into a CUDA graph; use nccl or ipc there (options.device_transports)");
  }
}

// The hang report's view of a step the GPU executor hands to its link: the peer it
// receives from (else sends to). A link that synchronizes with the host (mpi_link)
// waits inside exchange(), so a rank stuck there shows the step, the dimension and
// the peer; a stream-ordered link returns at once.
template <class C>
void show_waiting(mdring::detail::state_board& board, C& comm, const program& pr, const program_step& st,
                  std::size_t elem, deadline_clock::time_point deadline) {
  const auto& members = comm.members(st.dim);
  long long peer = -1;
  auto dir = mdring::detail::state_board::dir::group;
  std::uint64_t bytes = 0;
  for (const auto& m : pr.recvs_of(st)) {
    if (peer < 0) peer = (long long)members[m.peer], dir = mdring::detail::state_board::dir::recv;
    bytes += m.count * elem;
  }
  if (peer < 0)
    for (const auto& m : pr.sends_of(st)) {
      peer = (long long)members[m.peer], dir = mdring::detail::state_board::dir::send;
      break;
    }
  board.waiting(st.dim, int(st.ph), st.index, peer, dir, bytes, deadline);
}

// Enqueues rank `comm`'s call (program pr, already checked) on `stream`:
// each step's pre ops, its messages through the dimension's link, a shared
// stage's arrive or leave, then its ops.
template <class T, class Op, class C>
void enqueue_program(C& comm, const program& pr, const call_buffers<T>& b, const Op& op, cudaStream_t stream,
                     bool capturing, const char* name) {
  auto& calls = comm.calls();
  auto& order = calls.order();
  order = wavefront_order(pr);
  auto& sp = calls.streams();
  mdring::detail::state_board& board = board_of(comm);
  board.begin_program(pr.steps.size());
  sp.begin(stream, comm.executed_extents().size(), pr.segments, capturing);
  step_context cx;
  cx.collective = name;
  cx.rank = comm.rank();
  for (const std::size_t i : order) {
    const program_step& st = pr.steps[i];
    const cudaStream_t s = sp.enter(st);
    cx.dim = st.dim;
    cx.link = comm.layout().dim_name(st.dim);
    cx.ph = st.ph;
    cx.step = st.index;
    cx.deadline = deadline_clock::now() + comm.get_options().timeout;
    std::visit(
        [&](auto& l) {
          using L = std::decay_t<decltype(l)>;
          const remote_view* rv = nullptr;
          if constexpr (shared_access_link<L>) rv = l.view();
          run_ops(pr, pr.pre_of(st), st, b, op, comm.size(), s, rv);
          constexpr bool every_step = requires { requires bool(L::collective_steps); };
          if (st.sends + st.recvs || (every_step && st.sync == sync_kind::messages)) {
            step_messages(pr, st, b, calls.sends(), calls.recvs());
            show_waiting(board, comm, pr, st, sizeof(T), cx.deadline);
            if constexpr (requires { l.exchange(calls.sends(), calls.recvs(), s, cx); })
              l.exchange(calls.sends(), calls.recvs(), s, cx);
            else throw transport_error(cx.where() + ": this dimension has no transport", 0);
          }
          if (st.sync == sync_kind::arrive || st.sync == sync_kind::leave) {
            if constexpr (shared_access_link<L>) {
              if (st.sync == sync_kind::arrive)
                l.arrive(st.publishes_src ? b.at(st.publish_src, st.segment) : nullptr,
                         st.publishes_dst ? b.at(st.publish_dst, st.segment) : nullptr,
                         std::uint64_t(st.signature) * 64 + sizeof(T) % 64, s, cx);
              else l.leave(s, cx);
              rv = l.view();
            } else {
              throw transport_error(cx.where() +
                                        ": a shared-access step on a dimension whose transport has no shared "
                                        "access (an internal error)",
                                    0);
            }
          }
          run_ops(pr, pr.ops_of(st), st, b, op, comm.size(), s, rv);
          if constexpr (shared_access_link<L>)
            if (st.stage_end) l.stage_end(s, cx);
        },
        comm.link(st.dim));
    sp.leave(st, s);
    std::uint64_t moved = 0;
    for (const auto& m : pr.recvs_of(st)) moved += m.count * sizeof(T);
    board.step_done(moved);
  }
  sp.end();
  // Every call leaves each shared link's barriers at an even count (ipc_window.hpp);
  // finish() would pad one that did not (it never has to: each stage closes itself).
  for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
    std::visit(
        [&](auto& l) {
          if constexpr (requires { l.finish(stream); }) l.finish(stream);
        },
        comm.link(d));
}

// How a failure on this rank reaches its peers (collective/guard.hpp): each link's
// abort. On a peer's failure (remote_error) the peers already know; the links only
// give up what this rank has in flight (abort_local: NCCL kernels waiting for a
// peer that stopped) and pass it on naming the rank that failed first
// (transport.hpp relayed_failure).
template <class C>
struct device_peers {
  C& comm;
  void failed_here(const std::string& why) {
    for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
      std::visit(
          [&](auto& l) {
            if constexpr (requires { l.abort(std::string()); }) l.abort(why);
          },
          comm.link(d));
  }
  void peer_failed(const remote_error& e) {
    for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
      std::visit(
          [&](auto& l) {
            if constexpr (requires { l.abort_local(); }) l.abort_local();
            if constexpr (requires { l.abort(std::string()); }) l.abort(relayed_failure(e.failed_rank(), e.what()));
          },
          comm.link(d));
  }
};

// One device collective: the checks done (err), then the program, scratch and
// enqueue. Errors up to the enqueue leave nothing enqueued and the communicator usable.
template <class T, class Op, class Topology, class... Links>
void run_collective(communicator<Topology, Links...>& comm, collective kind, const char* name,
                    std::optional<mdring::detail::arg_error> err, const T* send, T* recv, std::size_t count,
                    std::size_t root, const Op& op, cudaStream_t stream) {
  using C = communicator<Topology, Links...>;
  mdring::detail::static_checks<C, T, Op>();
  static_assert(!std::is_same_v<std::remove_cv_t<T>, long double>,
                "mdring::cuda: long double has no device representation; use double");
  check_usable(comm, name);
  if (!err) err = check_device_op<C, Op>(comm, name);
  if (err) throw invalid_argument(err->argument, err->what);
  if constexpr ((lock_step_link<Links> || ...)) {
    if (comm.size() > 1)
      throw invalid_argument("comm", std::string("mdring::cuda::") + name +
                                         ": a local communicator runs all its ranks at once; call all_reduce(std::span "
                                         "of every rank's communicator, ...) (cuda/local.cuh)");
  }
  if constexpr (std::is_trivially_copyable_v<T> && reduction_for<Op, T>) {
    device_guard g(comm.device());
    const program& pr = comm.template program_for<T>(kind, count, root, op_traits<Op>::commutative, misalignment(recv));
    const bool cap = capturing(stream);
    check_capturable(comm, pr, cap, name);
    T* scratch = static_cast<T*>(comm.calls().workspace().get(scratch_elements(pr) * sizeof(T), cap, name));
    const auto b = buffers_of(pr, send, recv, scratch);
    board_of(comm).begin_call(name, type_name<T>(), op_traits<Op>::name(), count);
    std::exception_ptr failed;
    try {
      mdring::detail::guarded(comm, device_peers<C>{comm},
                              [&] { enqueue_program(comm, pr, b, op, stream, cap, name); });
    } catch (...) {
      failed = std::current_exception();
    }
    mdring::detail::report_end(comm, failed);  // (enqueued: the board is idle again)
    if (failed) std::rethrow_exception(failed);
  }
}

}  // namespace detail

// ---- the collectives on device buffers ------------------------------------------------
// Stream-ordered (see the top of this file): each returns once its work is
// enqueued on `stream`. Semantics, in-place conventions and argument errors are
// those of the host collectives (README): MPI's, with NCCL's in-place rules.

/// all_reduce. Postcondition, once the stream reaches the end of the call: on
/// every rank, recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i], bitwise
/// identical on all ranks. In place when sendbuf == recvbuf; otherwise they must
/// not overlap.
template <class Topology, class... Links, class T, class Op = sum_t>
void all_reduce(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op = {},
                cudaStream_t stream = nullptr) {
  constexpr const char* name = "all_reduce";
  detail::check_usable(comm, name);
  auto err = detail::check_all_reduce<communicator<Topology, Links...>, T, Op>(comm, sendbuf, recvbuf, count, name);
  detail::run_collective<T>(comm, collective::all_reduce, name, std::move(err), sendbuf, recvbuf, count, 0, op, stream);
}

/// In place: buf is this rank's input and receives the result.
template <class Topology, class... Links, class T, class Op = sum_t>
void all_reduce(communicator<Topology, Links...>& comm, T* buf, std::size_t count, Op op = {},
                cudaStream_t stream = nullptr) {
  all_reduce(comm, static_cast<const T*>(buf), buf, count, op, stream);
}

/// reduce_scatter (MPI_Reduce_scatter_block): sendbuf holds size() * recvcount
/// elements; rank r gets block r reduced. In place when recvbuf == sendbuf +
/// rank() * recvcount.
template <class Topology, class... Links, class T, class Op = sum_t>
void reduce_scatter(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount,
                    Op op = {}, cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "reduce_scatter";
  const std::size_t total = recvcount * comm.size();
  auto err = md::first_error(
      md::reduce_scatter_buffers(name, comm.rank(), comm.size(), sendbuf, recvbuf, recvcount, sizeof(T)),
      detail::check_alignment(name, "sendbuf", sendbuf, alignof(T), total),
      detail::check_alignment(name, "recvbuf", recvbuf, alignof(T), recvcount));
  detail::run_collective<T>(comm, collective::reduce_scatter, name, std::move(err), sendbuf, recvbuf, recvcount, 0, op,
                            stream);
}

/// all_gather (MPI_Allgather): every rank gets all ranks' blocks of sendcount, in
/// rank order. In place when sendbuf == recvbuf + rank() * sendcount.
template <class Topology, class... Links, class T>
void all_gather(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount,
                cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "all_gather";
  const std::size_t total = sendcount * comm.size();
  auto err =
      md::first_error(md::all_gather_buffers(name, comm.rank(), comm.size(), sendbuf, recvbuf, sendcount, sizeof(T)),
                      detail::check_alignment(name, "sendbuf", sendbuf, alignof(T), sendcount),
                      detail::check_alignment(name, "recvbuf", recvbuf, alignof(T), total));
  detail::run_collective<T>(comm, collective::all_gather, name, std::move(err), sendbuf, recvbuf, sendcount, 0, sum_t{},
                            stream);
}

/// broadcast: every rank's buf gets root's.
template <class Topology, class... Links, class T>
void broadcast(communicator<Topology, Links...>& comm, T* buf, std::size_t count, std::size_t root,
               cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "broadcast";
  auto err = md::first_error(md::broadcast_buffers(name, root, comm.size(), buf, count),
                             detail::check_alignment(name, "buf", buf, alignof(T), count));
  detail::run_collective<T>(comm, collective::broadcast, name, std::move(err), buf, buf, count, root, sum_t{}, stream);
}

/// reduce: root's recvbuf gets op over every rank's sendbuf (recvbuf may be null
/// on the other ranks). In place at the root when sendbuf == recvbuf.
template <class Topology, class... Links, class T, class Op = sum_t>
void reduce(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root,
            Op op = {}, cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "reduce";
  const bool is_root = comm.rank() == root;
  auto err =
      md::first_error(md::reduce_buffers(name, root, comm.rank(), comm.size(), sendbuf, recvbuf, count, sizeof(T)),
                      detail::check_alignment(name, "sendbuf", sendbuf, alignof(T), count),
                      is_root ? detail::check_alignment(name, "recvbuf", recvbuf, alignof(T), count) : std::nullopt);
  detail::run_collective<T>(comm, collective::reduce, name, std::move(err), sendbuf, recvbuf, count, root, op, stream);
}

}  // namespace cuda

MDRING_NAMESPACE_END
