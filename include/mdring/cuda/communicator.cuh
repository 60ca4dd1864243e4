// mdring/cuda/communicator.cuh: a topology bound to device transports, and
// all_reduce on device buffers.
//
//   auto comm = mdring::cuda::bind(mdring::ring<mdring::nvlink, 4> * mdring::ring<mdring::infiniband, 64>,
//                                  MPI_COMM_WORLD);              // mdring/cuda/mpi.cuh
//   mdring::cuda::all_reduce(comm, d_send, d_recv, n, mdring::sum, stream);
//
// A communicator<Topology, Links...> holds, per executed dimension (plan/merge.hpp),
// the link that moves its messages: one of Links (nccl_link, mpi_link, local_link),
// picked by transport/device_select.hpp from the link tag or options.device_transports.
// The algorithms per dimension, the merging of same-link dimensions, the block
// ranges and the segment length are those of the host path, and so is the
// program (plan/collective_programs.hpp): the GPU runs the same steps the host
// executor runs, built once per (count, type, op kind, alignment) and cached.
//
// all_reduce is stream-ordered (cuda/engine.cuh): it returns once everything is
// enqueued. Transports that must synchronize with the host (MPI) do so inside; a
// stream being captured into a CUDA graph is refused for them with
// invalid_argument("stream"). Calls on one communicator share its scratch, so a
// call on another stream than the previous call's waits for it on the GPU (not
// when captured: order graph launches with the other calls yourself). After an
// error the communicator is unusable (communicator_error), as on the host path.
#pragma once

#include "../collective/communicator.hpp"
#include "../collective/run.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../plan/call.hpp"
#include "../plan/merge.hpp"
#include "../plan/pipeline.hpp"
#include "../plan/collective_programs.hpp"
#include "../plan/program.hpp"
#include "../plan/program_cache.hpp"
#include "../topology/runtime.hpp"
#include "../transport/device_select.hpp"
#include "config.cuh"
#include "engine.cuh"

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

template <class Topology, class... Links>
class communicator {
public:
  using topology_type = Topology;
  using link_variant = std::variant<std::monostate, Links...>;

  // Resolves the topology for `size` ranks and picks algorithms and transports.
  // The bind functions then install each dimension's link (set_link).
  communicator(const Topology& topo, std::size_t size, std::size_t rank, options opts,
               const device_transport_support& support, int device)
      : opts_(std::move(opts)), size_(size), rank_(rank), device_(device), ws_(opts_.device_memory, device) {
    mdring::detail::validate(opts_);
    topo_ = mdring::detail::to_runtime(topo).resolve(size_, "cuda::bind");
    mdring::detail::check_algorithm_count(topo_, opts_, "mdring::cuda::bind");
    merged_ = merge_dimensions(topo_, opts_, false);
    const runtime_topology& ex = merged_.topology;
    extents_ = ex.extents();
    coords_ = ex.coordinates(rank_);
    transports_ = select_device_transports(topo_, merged_, opts_.device_transports, support);
    shared_.assign(extents_.size(), dim_program{});
    for (std::size_t d = 0; d < extents_.size(); ++d) {
      algorithm requested = merged_.requested[d];
      // The ipc transport reads the peers' buffers in place: direct by shared
      // access, unless the user asked for another algorithm (it moves messages too).
      if (transports_[d] == device_transport::ipc && requested == algorithm::automatic && extents_[d] > 1)
        requested = algorithm::direct;
      algos_.push_back(choose_algorithm(requested, ex.dim(d).link, extents_[d], opts_.tune, true));
      members_.push_back(ex.peers(rank_, d));
      if (algos_[d] == algorithm::direct && extents_[d] > std::size_t(max_fold_inputs))
        throw invalid_argument(
            "options.algorithms",
            "mdring::cuda::bind: dimension " + std::to_string(d) + " (" + ex.dim(d).link.name + ":" +
                std::to_string(extents_[d]) + ") runs the direct algorithm over more than " +
                std::to_string(max_fold_inputs) + " ranks, more inputs than the GPU path folds in one pass; " +
                (opts_.reproducible ? std::string("options.reproducible needs direct on every "
                                                  "dimension: write it as two dimensions")
                 : mdring::detail::accumulation_of(opts_, merged_.user_of[d]) == accumulation::float32
                     ? std::string("a float32 accumulation (options.accumulation, "
                                   "options.dimension_accumulation) runs direct there: write it "
                                   "as two dimensions or leave that dimension element")
                     : std::string("use ring there")));
    }
    links_.resize(extents_.size());
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;

  std::size_t size() const noexcept { return size_; }
  std::size_t rank() const noexcept { return rank_; }
  int device() const noexcept { return device_; }
  const runtime_topology& topology() const noexcept { return topo_; }
  const runtime_topology& executed_topology() const noexcept { return merged_.topology; }
  const std::vector<std::size_t>& executed_extents() const noexcept { return extents_; }
  const std::vector<std::size_t>& executed_coordinates() const noexcept { return coords_; }
  const options& get_options() const noexcept { return opts_; }
  // The transport and algorithm (commutative ops) of dimension d as written.
  device_transport transport_of(std::size_t d) const { return transports_.at(merged_.of_user.at(d)); }
  algorithm algorithm_of(std::size_t d) const { return algos_.at(merged_.of_user.at(d)); }
  // Per executed dimension.
  const std::vector<device_transport>& executed_transports() const noexcept { return transports_; }
  // The global ranks of this rank's ring in executed dimension d, by coordinate.
  const std::vector<std::size_t>& members(std::size_t d) const { return members_.at(d); }

  bool usable() const noexcept { return !broken_; }
  const std::string& failure() const noexcept { return broken_why_; }
  void mark_broken(const std::string& why) {
    if (!broken_) broken_why_ = why;
    broken_ = true;
  }

  // Pre-sizes device scratch, streams and events so that every collective of up
  // to `count` elements of T (the count argument of each) neither allocates nor
  // creates anything: needed before capturing a call into a CUDA graph.
  // reserve<T>(kind, count): for one collective only.
  template <class T>
  void reserve(std::size_t count) {
    for (auto kind : {collective::all_reduce, collective::reduce_scatter, collective::all_gather, collective::broadcast,
                      collective::reduce})
      reserve<T>(kind, count);
  }
  template <class T>
  void reserve(collective kind, std::size_t count) {
    detail::device_guard g(device_);
    std::size_t bytes = 0, segments = 1;
    for (bool commutative : {true, false}) {
      if (!commutative && !all_fully_connected()) continue;
      const std::size_t V = std::size_t(detail::vector_elements<T>);
      for (std::size_t mis = 0; mis < (kind == collective::all_reduce ? V : 1); ++mis)
        for (std::size_t root : {std::size_t(0), size_ > 1 ? std::size_t(1) : std::size_t(0)}) {
          const auto& s = program_for<T>(kind, count, root, commutative, mis);
          bytes = detail::scratch_elements(s) * sizeof(T) > bytes ? detail::scratch_elements(s) * sizeof(T) : bytes;
          segments = s.segments > segments ? s.segments : segments;
        }
    }
    ws_.get(bytes, false, "reserve");
    streams_.prepare(extents_.size(), segments);
  }
  std::size_t scratch_bytes() const noexcept { return ws_.capacity(); }

  // ---- for the engine and the bind functions ----------------------------------
  // Something the links share and that must live as long as they do (the MPI transport).
  void keep_alive(std::shared_ptr<void> p) { owners_.push_back(std::move(p)); }
  link_variant& link(std::size_t d) { return links_.at(d); }
  template <class L>
  void set_link(std::size_t d, L&& l) {
    links_.at(d) = std::forward<L>(l);
  }
  // Executed dimension d runs its direct stages by shared access (the ipc
  // transport), with stages of up to staging_bytes going through staging buffers.
  void set_shared(std::size_t d, std::size_t staging_bytes) {
    shared_.at(d).shared = true;
    shared_.at(d).staging_bytes = staging_bytes;
  }
  bool shared(std::size_t d) const { return shared_.at(d).shared; }

  // The program of one call (plan/call.hpp decides what it runs; built once per
  // parameters and cached, plan/program_cache.hpp). recv_mis: all_reduce's
  // receive buffer's misalignment (elements modulo a 16-byte vector).
  template <class T>
  const program& program_for(collective kind, std::size_t count, std::size_t root, bool commutative,
                             std::size_t recv_mis) {
    decide_call(decision_, call_request{kind, merged_.topology, merged_.requested, algos_, commutative, count, size_,
                                        sizeof(T), opts_.tune, nullptr});
    dims_.resize(extents_.size());
    for (std::size_t d = 0; d < dims_.size(); ++d) {
      dims_[d] = {extents_[d], coords_[d], decision_.algos[d], false, 0};
      if (extents_[d] > 1 && shared_[d].shared && decision_.algos[d] == algorithm::direct)
        dims_[d].shared = true, dims_[d].staging_bytes = shared_[d].staging_bytes;
    }
    program_params p;
    p.kind = kind;
    p.dims = dims_;
    p.count = count;
    p.rank = rank_;
    p.root = root;
    p.elem_size = sizeof(T);
    p.segment_length = decision_.segment_length;
    p.vector_elements = std::size_t(detail::vector_elements<T>);
    p.recv_misalignment = kind == collective::all_reduce ? recv_mis : 0;
    p.trees = decision_.trees;
    return programs_.get(p);
  }
  // The all_reduce program, as before (tests, benchmarks).
  template <class T>
  const program& program_for(std::size_t count, bool commutative, std::size_t recv_mis) {
    return program_for<T>(collective::all_reduce, count, 0, commutative, recv_mis);
  }
  std::uint64_t programs_built() const noexcept { return programs_.built(); }
  // The order the engine enqueues a program's steps in (reused storage).
  std::vector<std::size_t>& order_storage() noexcept { return order_; }
  detail::device_workspace& workspace() noexcept { return ws_; }
  detail::stream_plan& streams() noexcept { return streams_; }
  std::vector<device_message>& send_slots() noexcept { return sends_; }
  std::vector<device_message>& recv_slots() noexcept { return recvs_; }

  bool all_fully_connected() const {
    for (std::size_t d = 0; d < extents_.size(); ++d)
      if (extents_[d] > 1 && !merged_.topology.dim(d).link.fully_connected) return false;
    return true;
  }

private:
  options opts_;
  std::size_t size_ = 0, rank_ = 0;
  int device_ = 0;
  runtime_topology topo_;
  merged_dimensions merged_;
  std::vector<device_transport> transports_;
  std::vector<std::size_t> extents_, coords_;
  std::vector<algorithm> algos_;
  std::vector<std::vector<std::size_t>> members_;
  std::vector<dim_program> shared_;            // per executed dimension: shared access and its staging bytes
  std::vector<std::shared_ptr<void>> owners_;  // destroyed after the links
  std::vector<link_variant> links_;
  detail::device_workspace ws_;
  detail::stream_plan streams_;
  call_decision decision_;
  std::vector<dim_program> dims_;
  program_cache programs_;
  std::vector<std::size_t> order_;
  std::vector<device_message> sends_, recvs_;
  bool broken_ = false;
  std::string broken_why_;
};

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

template <class C>
struct is_device_communicator : std::false_type {};
template <class Topology, class... Links>
struct is_device_communicator<communicator<Topology, Links...>> : std::true_type {};

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
  const std::size_t bytes = count * sizeof(T);
  auto err =
      md::first_error(md::check_null(name, "sendbuf", send, count), md::check_null(name, "recvbuf", recv, count),
                      md::check_overlap(name, send, bytes, recv, bytes, send == recv, "pass the same pointer twice"),
                      check_alignment(name, "sendbuf", send, alignof(T), count),
                      check_alignment(name, "recvbuf", recv, alignof(T), count));
  if (!err) err = check_device_op<C, Op>(comm, name);
  return err;
}

template <class C>
void check_usable(const C& comm, const char* name) {
  if (!comm.usable())
    throw communicator_error(std::string("mdring::cuda::") + name +
                             ": the communicator is unusable after an earlier error (" + comm.failure() +
                             "); bind a new one");
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

// Enqueues rank `comm`'s call (program pr, already checked) on `stream`:
// each step's pre ops, its messages through the dimension's link, a shared
// stage's arrive or leave, then its ops.
template <class T, class Op, class C>
void enqueue_program(C& comm, const program& pr, const call_buffers<T>& b, const Op& op, cudaStream_t stream,
                     bool capturing, const char* name) {
  auto& order = comm.order_storage();
  order = wavefront_order(pr);
  auto& sp = comm.streams();
  sp.begin(stream, comm.executed_extents().size(), pr.segments, capturing);
  step_context cx;
  cx.collective = name;
  cx.rank = comm.rank();
  for (const std::size_t i : order) {
    const program_step& st = pr.steps[i];
    const cudaStream_t s = sp.enter(st);
    cx.dim = st.dim;
    cx.link = comm.executed_topology().dim(st.dim).link.name + ":" + std::to_string(comm.executed_extents()[st.dim]);
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
            step_messages(pr, st, b, comm.send_slots(), comm.recv_slots());
            if constexpr (requires { l.exchange(comm.send_slots(), comm.recv_slots(), s, cx); })
              l.exchange(comm.send_slots(), comm.recv_slots(), s, cx);
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

// Runs body(); on an exception marks the communicator unusable, tells the links
// (so that MPI peers stop waiting: abort), and rethrows. On a peer's failure
// (remote_error) the peers already know; the links only give up what this rank
// has in flight (abort_local: NCCL kernels waiting for a peer that stopped).
template <class C, class Body>
void guarded(C& comm, Body&& body) {
  try {
    body();
  } catch (const remote_error& e) {
    comm.mark_broken(e.what());
    for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
      std::visit(
          [&](auto& l) {
            if constexpr (requires { l.abort_local(); }) l.abort_local();
            // Passed on, naming the rank that failed first (transport.hpp relayed_failure).
            if constexpr (requires { l.abort(std::string()); }) l.abort(relayed_failure(e.failed_rank(), e.what()));
          },
          comm.link(d));
    throw;
  } catch (const std::exception& e) {
    comm.mark_broken(e.what());
    for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
      std::visit(
          [&](auto& l) {
            if constexpr (requires { l.abort(std::string()); })
              l.abort(std::string("rank ") + std::to_string(comm.rank()) + ": " + e.what());
          },
          comm.link(d));
    throw;
  }
}

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
    T* scratch = static_cast<T*>(comm.workspace().get(scratch_elements(pr) * sizeof(T), cap, name));
    const auto b = buffers_of(pr, send, recv, scratch);
    guarded(comm, [&] { enqueue_program(comm, pr, b, op, stream, cap, name); });
  }
}

}  // namespace detail

// ---- the collectives on device buffers ------------------------------------------------
// Stream-ordered (see the top of this file): each returns once its work is
// enqueued on `stream`. Semantics, in-place conventions and argument errors are
// those of the host collectives (README): MPI's, with NCCL's in-place rules.

// all_reduce. Postcondition, once the stream reaches the end of the call: on
// every rank, recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i], bitwise
// identical on all ranks. In place when sendbuf == recvbuf; otherwise they must
// not overlap.
template <class Topology, class... Links, class T, class Op = sum_t>
void all_reduce(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op = {},
                cudaStream_t stream = nullptr) {
  constexpr const char* name = "all_reduce";
  detail::check_usable(comm, name);
  auto err = detail::check_all_reduce<communicator<Topology, Links...>, T, Op>(comm, sendbuf, recvbuf, count, name);
  detail::run_collective<T>(comm, collective::all_reduce, name, std::move(err), sendbuf, recvbuf, count, 0, op, stream);
}

template <class Topology, class... Links, class T, class Op = sum_t>
void all_reduce(communicator<Topology, Links...>& comm, T* buf, std::size_t count, Op op = {},
                cudaStream_t stream = nullptr) {
  all_reduce(comm, static_cast<const T*>(buf), buf, count, op, stream);
}

// reduce_scatter (MPI_Reduce_scatter_block): sendbuf holds size() * recvcount
// elements; rank r gets block r reduced. In place when recvbuf == sendbuf +
// rank() * recvcount.
template <class Topology, class... Links, class T, class Op = sum_t>
void reduce_scatter(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount,
                    Op op = {}, cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "reduce_scatter";
  const std::size_t total = recvcount * comm.size();
  const bool in_place = md::addr(recvbuf) == md::addr(sendbuf) + comm.rank() * recvcount * sizeof(T);
  auto err = md::first_error(md::check_null(name, "sendbuf", sendbuf, total, "size() * recvcount"),
                             md::check_null(name, "recvbuf", recvbuf, recvcount, "recvcount"),
                             md::check_overlap(name, sendbuf, total * sizeof(T), recvbuf, recvcount * sizeof(T),
                                               in_place, "recvbuf must be sendbuf + rank() * recvcount"),
                             detail::check_alignment(name, "sendbuf", sendbuf, alignof(T), total),
                             detail::check_alignment(name, "recvbuf", recvbuf, alignof(T), recvcount));
  detail::run_collective<T>(comm, collective::reduce_scatter, name, std::move(err), sendbuf, recvbuf, recvcount, 0, op,
                            stream);
}

// all_gather (MPI_Allgather): every rank gets all ranks' blocks of sendcount, in
// rank order. In place when sendbuf == recvbuf + rank() * sendcount.
template <class Topology, class... Links, class T>
void all_gather(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount,
                cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "all_gather";
  const std::size_t total = sendcount * comm.size();
  const bool in_place = md::addr(sendbuf) == md::addr(recvbuf) + comm.rank() * sendcount * sizeof(T);
  auto err = md::first_error(md::check_null(name, "sendbuf", sendbuf, sendcount, "sendcount"),
                             md::check_null(name, "recvbuf", recvbuf, total, "size() * sendcount"),
                             md::check_overlap(name, sendbuf, sendcount * sizeof(T), recvbuf, total * sizeof(T),
                                               in_place, "sendbuf must be recvbuf + rank() * sendcount"),
                             detail::check_alignment(name, "sendbuf", sendbuf, alignof(T), sendcount),
                             detail::check_alignment(name, "recvbuf", recvbuf, alignof(T), total));
  detail::run_collective<T>(comm, collective::all_gather, name, std::move(err), sendbuf, recvbuf, sendcount, 0, sum_t{},
                            stream);
}

// broadcast: every rank's buf gets root's.
template <class Topology, class... Links, class T>
void broadcast(communicator<Topology, Links...>& comm, T* buf, std::size_t count, std::size_t root,
               cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "broadcast";
  auto err = md::first_error(md::check_root(name, root, comm.size()), md::check_null(name, "buf", buf, count),
                             detail::check_alignment(name, "buf", buf, alignof(T), count));
  detail::run_collective<T>(comm, collective::broadcast, name, std::move(err), buf, buf, count, root, sum_t{}, stream);
}

// reduce: root's recvbuf gets op over every rank's sendbuf (recvbuf may be null
// on the other ranks). In place at the root when sendbuf == recvbuf.
template <class Topology, class... Links, class T, class Op = sum_t>
void reduce(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root,
            Op op = {}, cudaStream_t stream = nullptr) {
  namespace md = mdring::detail;
  constexpr const char* name = "reduce";
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * sizeof(T);
  auto err = md::first_error(
      md::check_root(name, root, comm.size()), md::check_null(name, "sendbuf", sendbuf, count),
      is_root ? md::check_null(name, "recvbuf", recvbuf, count) : std::nullopt,
      is_root
          ? md::check_overlap(name, sendbuf, bytes, recvbuf, bytes, sendbuf == recvbuf, "pass the same pointer twice")
          : std::nullopt,
      detail::check_alignment(name, "sendbuf", sendbuf, alignof(T), count),
      is_root ? detail::check_alignment(name, "recvbuf", recvbuf, alignof(T), count) : std::nullopt);
  detail::run_collective<T>(comm, collective::reduce, name, std::move(err), sendbuf, recvbuf, count, root, op, stream);
}

}  // namespace cuda

MDRING_NAMESPACE_END
