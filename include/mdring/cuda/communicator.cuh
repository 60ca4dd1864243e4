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
#include "../plan/merge.hpp"
#include "../plan/pipeline.hpp"
#include "../plan/collective_programs.hpp"
#include "../plan/program.hpp"
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
      : opts_(std::move(opts)), size_(size), rank_(rank), device_(device),
        ws_(opts_.device_memory, device) {
    mdring::detail::validate(opts_);
    topo_ = mdring::detail::to_runtime(topo).resolve(size_, "cuda::bind");
    mdring::detail::check_algorithm_count(topo_, opts_, "mdring::cuda::bind");
    merged_ = merge_dimensions(topo_, opts_.algorithms, opts_.tune);
    transports_ = select_device_transports(topo_, merged_, opts_.device_transports, support);
    const runtime_topology& ex = merged_.topology;
    extents_ = ex.extents();
    coords_ = ex.coordinates(rank_);
    for (std::size_t d = 0; d < extents_.size(); ++d) {
      algos_.push_back(choose_algorithm(merged_.requested[d], ex.dim(d).link, extents_[d], opts_.tune, true));
      members_.push_back(ex.peers(rank_, d));
      if (algos_[d] == algorithm::direct && extents_[d] > std::size_t(max_fold_inputs))
        throw invalid_argument("options.algorithms",
                               "mdring::cuda::bind: dimension " + std::to_string(d) + " (" + ex.dim(d).link.name + ":" +
                                   std::to_string(extents_[d]) + ") runs the direct algorithm over more than " +
                                   std::to_string(max_fold_inputs) +
                                   " ranks, more inputs than the GPU path folds in one pass; use ring there");
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

  // Pre-sizes device scratch, streams and events so that all_reduce of up to
  // `count` elements of T neither allocates nor creates anything (needed before
  // capturing a call into a CUDA graph).
  template <class T>
  void reserve(std::size_t count) {
    detail::device_guard g(device_);
    std::size_t bytes = 0, segments = 1;
    for (bool commutative : {true, false}) {
      if (!commutative && !all_fully_connected()) continue;
      for (std::size_t mis = 0; mis < std::size_t(detail::vector_elements<T>); ++mis) {
        const auto& s = program_for<T>(count, commutative, mis).pr;
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
  void keep_alive(std::shared_ptr<void> p) { owner_ = std::move(p); }
  link_variant& link(std::size_t d) { return links_.at(d); }
  template <class L>
  void set_link(std::size_t d, L&& l) {
    links_.at(d) = std::forward<L>(l);
  }

  // The program of an all_reduce of `count` elements of T, and the order its steps
  // are enqueued in (a wavefront; cached: a few recent ones). The algorithms are
  // the host path's for the call's size (plan/pipeline.hpp algorithms_for_call),
  // halving-doubling and recursive doubling included.
  struct program_entry {
    program pr;
    std::vector<std::size_t> order;  // wavefront_order(pr)
  };
  template <class T>
  const program_entry& program_for(std::size_t count, bool commutative, std::size_t recv_mis) {
    const key k{count, sizeof(T), std::size_t(detail::vector_elements<T>), recv_mis, commutative};
    for (auto& e : cache_)
      if (e.valid && e.k == k) return e.entry;
    std::vector<algorithm> al(extents_.size());
    for (std::size_t d = 0; d < al.size(); ++d) al[d] = commutative ? algos_[d] : algorithm::direct;
    algorithms_for_call(collective::all_reduce, merged_.topology, merged_.requested, al, count, sizeof(T), opts_.tune);
    std::vector<dim_program> dims(extents_.size());
    for (std::size_t d = 0; d < dims.size(); ++d) dims[d] = {extents_[d], coords_[d], al[d], false, 0};
    program_params p;
    p.dims = dims;
    p.count = count;
    p.rank = rank_;
    p.elem_size = sizeof(T);
    p.segment_length = segment_elements(merged_.topology, al, count, sizeof(T), opts_.tune);
    p.vector_elements = k.vec;
    p.recv_misalignment = recv_mis;
    auto& e = cache_[next_++ % cache_.size()];
    e.entry.pr = make_program(p);
    e.entry.order = wavefront_order(e.entry.pr);
    e.k = k;
    e.valid = true;
    return e.entry;
  }
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
  struct key {
    std::size_t count = 0, elem = 0, vec = 0, mis = 0;
    bool commutative = true;
    friend bool operator==(const key&, const key&) = default;
  };
  struct cache_entry {
    key k;
    bool valid = false;
    program_entry entry;
  };

  options opts_;
  std::size_t size_ = 0, rank_ = 0;
  int device_ = 0;
  runtime_topology topo_;
  merged_dimensions merged_;
  std::vector<device_transport> transports_;
  std::vector<std::size_t> extents_, coords_;
  std::vector<algorithm> algos_;
  std::vector<std::vector<std::size_t>> members_;
  std::shared_ptr<void> owner_;  // destroyed after the links
  std::vector<link_variant> links_;
  detail::device_workspace ws_;
  detail::stream_plan streams_;
  std::array<cache_entry, 8> cache_{};
  std::size_t next_ = 0;
  std::vector<device_message> sends_, recvs_;
  bool broken_ = false;
  std::string broken_why_;
};

namespace detail {

// A link whose ranks must all be driven at once by one thread (local_link).
template <class L>
concept lock_step_link = requires { requires L::lock_step; };

template <class C>
struct is_device_communicator : std::false_type {};
template <class Topology, class... Links>
struct is_device_communicator<communicator<Topology, Links...>> : std::true_type {};

// What every device all_reduce checks before it enqueues anything. Returns the
// error, if any (argument name and message).
template <class C, class T, class Op>
std::optional<mdring::detail::arg_error> check_all_reduce(C& comm, const T* send, T* recv, std::size_t count,
                                                          const char* name) {
  namespace md = mdring::detail;
  const std::size_t bytes = count * sizeof(T);
  auto err = md::first_error(
      md::check_null(name, "sendbuf", send, count), md::check_null(name, "recvbuf", recv, count),
      md::check_overlap(name, send, bytes, recv, bytes, send == recv, "pass the same pointer twice"));
  if (!err && count && (address(send) % alignof(T) || address(recv) % alignof(T)))
    err = md::arg_error{address(send) % alignof(T) ? "sendbuf" : "recvbuf",
                        std::string("mdring::cuda::") + name + ": " +
                            (address(send) % alignof(T) ? "sendbuf" : "recvbuf") +
                            " is not aligned to its element type (" + std::to_string(alignof(T)) + " bytes)"};
  if (!err) err = md::check_op(comm, op_traits<Op>::commutative, name);
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
    std::visit([&](auto& l) {
      if constexpr (requires { l.capturable(); }) ok = l.capturable();
    }, comm.link(d));
    if (!ok)
      throw invalid_argument("stream", std::string("mdring::cuda::") + name + ": dimension " + std::to_string(d) +
                                           " (" + comm.executed_topology().dim(d).link.name + ") uses the " +
                                           std::string(to_string(comm.executed_transports()[d])) +
                                           " transport, which synchronizes with the host and cannot be captured "
                                           "into a CUDA graph; use nccl there (options.device_transports)");
  }
}

// Enqueues rank `comm`'s all_reduce (program already checked) on `stream`,
// exchanging each step's messages through the dimension's link.
template <class T, class Op, class C, class Entry>
void enqueue_all_reduce(C& comm, const Entry& e, const call_buffers<T>& b, const Op& op, cudaStream_t stream,
                        bool capturing, const char* name) {
  const program& pr = e.pr;
  auto& sp = comm.streams();
  sp.begin(stream, comm.executed_extents().size(), pr.segments, capturing);
  step_context cx;
  cx.collective = name;
  cx.rank = comm.rank();
  for (const std::size_t i : e.order) {
    const program_step& st = pr.steps[i];
    const cudaStream_t s = sp.enter(st);
    run_ops(pr, pr.pre_of(st), st, b, op, comm.size(), s);
    if (st.sends + st.recvs) {
      step_messages(pr, st, b, comm.send_slots(), comm.recv_slots());
      cx.dim = st.dim;
      cx.link = comm.executed_topology().dim(st.dim).link.name + ":" + std::to_string(comm.executed_extents()[st.dim]);
      cx.ph = st.ph;
      cx.step = st.index;
      cx.deadline = deadline_clock::now() + comm.get_options().timeout;
      std::visit([&](auto& l) {
        if constexpr (requires { l.exchange(comm.send_slots(), comm.recv_slots(), s, cx); })
          l.exchange(comm.send_slots(), comm.recv_slots(), s, cx);
        else
          throw transport_error(cx.where() + ": this dimension has no transport", 0);
      }, comm.link(st.dim));
    }
    run_ops(pr, pr.ops_of(st), st, b, op, comm.size(), s);
    sp.leave(st, s);
  }
  sp.end();
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
      std::visit([&](auto& l) {
        if constexpr (requires { l.abort_local(); }) l.abort_local();
      }, comm.link(d));
    throw;
  } catch (const std::exception& e) {
    comm.mark_broken(e.what());
    for (std::size_t d = 0; d < comm.executed_extents().size(); ++d)
      std::visit([&](auto& l) {
        if constexpr (requires { l.abort(std::string()); }) l.abort(std::string("rank ") + std::to_string(comm.rank()) + ": " + e.what());
      }, comm.link(d));
    throw;
  }
}

}  // namespace detail

// all_reduce on device buffers, stream-ordered (see the top of this file).
// Postcondition, once the stream reaches the end of the call: on every rank,
// recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i], bitwise identical on all
// ranks. In place when sendbuf == recvbuf; otherwise they must not overlap.
template <class Topology, class... Links, class T, class Op = sum_t>
void all_reduce(communicator<Topology, Links...>& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op = {},
                cudaStream_t stream = nullptr) {
  using C = communicator<Topology, Links...>;
  mdring::detail::static_checks<C, T, Op>();
  static_assert(!std::is_same_v<std::remove_cv_t<T>, long double>,
                "mdring::cuda::all_reduce: long double has no device representation; use double");
  constexpr const char* name = "all_reduce";
  detail::check_usable(comm, name);
  if (auto err = detail::check_all_reduce<C, T, Op>(comm, sendbuf, recvbuf, count, name))
    throw invalid_argument(err->argument, err->what);
  if constexpr ((detail::lock_step_link<Links> || ...)) {
    if (comm.size() > 1)
      throw invalid_argument("comm", "mdring::cuda::all_reduce: a local communicator runs all its ranks at once; "
                                     "call all_reduce(std::span of every rank's communicator, ...) (cuda/local.cuh)");
  }
  if constexpr (std::is_trivially_copyable_v<T> && reduction_for<Op, T>) {
    detail::device_guard g(comm.device());
    // Errors up to here leave nothing enqueued and the communicator usable.
    const auto& e = comm.template program_for<T>(count, op_traits<Op>::commutative, detail::misalignment(recvbuf));
    const bool capturing = detail::capturing(stream);
    detail::check_capturable(comm, e.pr, capturing, name);
    T* scratch = static_cast<T*>(comm.workspace().get(detail::scratch_elements(e.pr) * sizeof(T), capturing, name));
    const auto b = detail::buffers_of(e.pr, sendbuf, recvbuf, scratch);
    detail::guarded(comm, [&] { detail::enqueue_all_reduce(comm, e, b, op, stream, capturing, name); });
  }
}

template <class Topology, class... Links, class T, class Op = sum_t>
void all_reduce(communicator<Topology, Links...>& comm, T* buf, std::size_t count, Op op = {},
                cudaStream_t stream = nullptr) {
  all_reduce(comm, static_cast<const T*>(buf), buf, count, op, stream);
}

}  // namespace cuda

MDRING_NAMESPACE_END
