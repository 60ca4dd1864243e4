// mdring/collective/communicator.hpp: a topology bound to a transport.
//
//   auto comm = mdring::bind(topo, MPI_COMM_WORLD);   // or a threads::endpoint, or a
//                                                     // boost::mpi::communicator
//   mdring::all_reduce(comm, buf, n, mdring::sum);    // as often as you like
//
// bind() resolves the dynamic extent from the transport's size (a mismatch throws
// topology_error on every rank, before any message), builds one channel per
// dimension, picks each dimension's algorithm (collective/communicator_base.hpp,
// plan/bound_layout.hpp), and sets up the host executor's workspace
// (executor/host/workspace.hpp: request slots, program cache, scratch). Calls then
// allocate nothing except scratch that grows to the largest call (reserve()
// pre-sizes it), from options::memory.
//
// After any error inside a collective (timeout, a peer's failure, a bad argument,
// a transport error) the communicator is unusable on every rank: later calls
// throw communicator_error. Bind a new one.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../executor/host/engine.hpp"
#include "../executor/host/local_ops.hpp"
#include "../executor/host/one_shot.hpp"
#include "../executor/host/workspace.hpp"
#include "../executor/progress.hpp"
#include "../reduce/ops.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"
#include "../transport/node_distance.hpp"
#include "../transport/shared_access.hpp"
#include "../transport/transport.hpp"
#include "communicator_base.hpp"
#include "explain.hpp"
#include "fingerprint.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// The first base of a host communicator: moving it waits for the calls in flight
// before anything else moves (the communicator's destructor drains too).
struct executor_slot {
  std::shared_ptr<host_executor> exec;
  executor_slot() = default;
  executor_slot(executor_slot&& o) noexcept : exec((o.drain(), std::move(o.exec))) {}
  executor_slot& operator=(executor_slot&& o) noexcept {
    if (this != &o) {
      drain();
      o.drain();
      exec = std::move(o.exec);
    }
    return *this;
  }
  ~executor_slot() { drain(); }
  void drain() noexcept {
    if (exec) exec->drain();
  }
};

// Whether a progress thread may call the transport while the user's threads call
// it too: a transport says so with background_progress() (MPI: only under
// MPI_THREAD_MULTIPLE); one that does not say allows it.
template <class Transport>
bool background_progress_allowed(const Transport& t) {
  if constexpr (reports_background_progress<Transport>) return t.background_progress();
  else return true;
}

template <transport Transport>
class communicator_core;
// What a call on c runs with (the executor's view: layout, options, transport,
// channels, workspace, hang report), and who moves its calls on.
template <transport Transport>
host_binding<Transport> binding_of(communicator_core<Transport>& c) noexcept;
template <transport Transport>
const std::shared_ptr<host_executor>& executor_of(const communicator_core<Transport>& c) noexcept;

// Everything a host communicator is except its topology's type: what every
// communicator is (communicator_base: the bind result, options, failure, hang
// report), the transport with a channel per executed dimension, and the host
// executor (its queue of calls and its workspace). The collectives and the executor
// are templates of this (one per transport), not of communicator<Topology,
// Transport>: a program that binds several topologies compiles the executor once
// per transport, not once per topology, and once for all element types and ops
// but their folds (executor/host/local_ops.hpp).
template <transport Transport>
class communicator_core : private executor_slot, public communicator_base {
public:
  using transport_type = Transport;

  communicator_core(const runtime_topology& written, std::unique_ptr<Transport> tr, options opts)
      : communicator_base(written, tr->size(), tr->rank(), std::move(opts), bind_path::host, "bind", tr->name()),
        tr_(std::move(tr)) {
    const bound_layout& L = layout();
    const options& o = get_options();
    // Measured plans of an earlier run (options.wisdom), under the topology as written.
    wisdom w = load_wisdom(written, o);
    for (std::size_t d = 0; d < L.ndims(); ++d) {
      channels_.emplace_back();
      if (L.extents[d] > 1) channels_.back() = tr_->make_channel(d, L.dims[d].members, L.coords[d]);
    }
    // The flat channel of the one-shot path (executor/host/one_shot.hpp): every rank
    // opens it where the options let small calls take it (each rank decides the
    // same), and it is used where the transport gave it shared access.
    bool timed = false;  // (decide_streaming: the calls time both ways)
    if constexpr (shared_access_transport<Transport>)
      if (o.shared_memory && o.tune.one_shot_max_bytes > 0 && L.size > 1 && L.size <= access_group::max_ranks) {
        std::vector<std::size_t> all(L.size);
        for (std::size_t r = 0; r < L.size; ++r) all[r] = r;
        flat_ = std::make_unique<typename Transport::channel>(tr_->make_channel(L.ndims(), all, L.rank));
        if (!tr_->shared(*flat_)) flat_.reset();
        if (flat_) timed = decide_streaming();
      }
    ws_ = std::make_unique<call_workspace<Transport>>(L, o, std::move(w),
                                                      !Transport::same_address_space && o.shared_memory);
    // Where the distance did not decide, the calls themselves do (plan/stream_choice.hpp).
    if (timed) ws_->streams().arm(stream_requested_, bind_options().tune.one_shot_stream_trials);
    progress_mode mode = o.progress;
    if (mode == progress_mode::automatic)
      mode = background_progress_allowed(*tr_) ? progress_mode::agent : progress_mode::in_wait;
    exec = std::make_shared<host_executor>(mode);
  }

  // A communicator of no ranks, for a rank that mdring::shrink left out
  // (communicator_base's constructor of that name).
  communicator_core(const runtime_topology& shrunk, options opts, std::string transport, std::string why)
      : communicator_base(shrunk, std::move(opts), std::move(transport), std::move(why)) {}

  // Moving or destroying a communicator first waits for its calls in flight (the
  // engine of a call refers to the communicator's state): see executor_slot.
  communicator_core(communicator_core&&) noexcept = default;
  communicator_core& operator=(communicator_core&&) noexcept = default;
  ~communicator_core() { drain(); }

  // The transport; communicator_error once shrink released it, or on a rank that
  // shrink left out.
  Transport& get_transport() { return (void)released("get_transport"), *tr_; }
  const Transport& get_transport() const { return (void)released("get_transport"), *tr_; }

  // The options as bound, before bind resolved them for this communicator (what
  // get_options() shows): a communicator made from this one (shrink, grow) binds
  // with these and resolves them afresh.
  options bind_options() const {
    options o = get_options();
    if (stream_requested_) o.tune.one_shot_stream_max_bytes = stream_requested_;
    return o;
  }
  // The node's distance as rank 0 measured it at bind for streamed rooted calls
  // (transport/node_distance.hpp): unmeasured where it did not.
  const node_distance& distance() const noexcept { return distance_; }

  // Who moves this communicator's nonblocking calls on: agent or in_wait
  // (options::progress with automatic resolved for this transport).
  progress_mode progress() const noexcept { return exec ? exec->mode() : progress_mode::in_wait; }

  // Pre-sizes scratch so that no collective on up to `count` elements of T (the
  // count each collective takes) allocates. Waits for the calls in flight first.
  template <class T>
  void reserve(std::size_t count) {
    released("reserve");
    reserve_bytes(sizeof(T), count);
  }
  std::size_t scratch_bytes() const noexcept { return ws_ ? ws_->scratch().capacity() : 0; }

  // mdring::shrink (collective/shrink.hpp): the number of its agreement (one
  // more each time it is tried), and, once the survivors have their communicator,
  // the release of everything but the bind result: the calls in flight are
  // waited for (they fail), then the node windows, mappings, scratch and
  // transport go, and every later call throws communicator_error with `why`.
  std::uint32_t next_shrink() noexcept { return shrinks_++; }
  void release(const std::string& why) {
    drain();
    replace_failure(usable() ? why : why + "; before, it had failed: " + failure());
    flat_.reset();
    channels_.clear();
    ws_.reset();
    tr_.reset();
  }

  // What the call would do on this rank (see plan/plan.hpp), and its text.
  template <class T = float, class Op = sum_t>
  plan make_plan(std::size_t count, collective kind = collective::all_reduce, Op = {}, std::size_t root = 0) const {
    released("explain");
    const bound_layout& L = layout();
    std::vector<dim_access> access(L.ndims());
    const std::size_t staging = (get_options().tune.shared_staging_bytes + 63) / 64 * 64;  // as transports open it
    if constexpr (shared_access_transport<Transport>)
      for (std::size_t d = 0; d < L.ndims(); ++d)
        if (L.extents[d] > 1 && tr_->shared(channels_[d])) access[d] = dim_access{true, staging, false};
    plan pl = plan_of_call<T, Op>(L, get_options(), kind, count, root, access, !Transport::same_address_space,
                                  &ws_->measured_plans(), one_shot_staging());
    if (stream_requested_ && pl.one_shot.empty()) {
      // A call that would have streamed over node memory, had bind not found the ranks far apart.
      const one_shot_call c{kind, count, pl.elem_size, L.size, root};
      if (one_shot_applies(c, get_options(), one_shot_staging(), L.written_extents, stream_requested_)) {
        const stream_choice& ch = ws_->streams();
        if (!ch.armed()) {
          pl.streaming = stream_refusal();
        } else {
          const std::size_t slot = stream_choice::slot_of(kind, one_shot_bytes(c));
          if (ch.chose_stream(slot))
            pl.one_shot =
                one_shot_text(c, get_options(), one_shot_staging(), stream_requested_) + "; " + stream_timing(slot);
          else pl.streaming = stream_timing(slot);
        }
      }
    }
    return pl;
  }
  /// Whether a call of `kind` on `count` elements of `elem_size` bytes (count as the collective takes
  /// it: per rank for all_gather and reduce_scatter) runs by the one-shot path over node memory (all
  /// ranks on one node, at most tune.one_shot_max_bytes per rank: plan/one_shot.hpp), as explain()
  /// says. The same on every rank for the same arguments; false once shrink released the communicator.
  bool runs_one_shot(collective kind, std::size_t count, std::size_t elem_size) const noexcept {
    if (!tr_) return false;
    const one_shot_call c{kind, count, elem_size, layout().size, 0};
    if (one_shot_applies(c, get_options(), one_shot_staging(), layout().written_extents)) return true;
    // A broadcast or reduce whose size class streams by its first calls' times (applying
    // only under the limit as bound, it is one that streams).
    const stream_choice& ch = ws_->streams();
    return ch.armed() &&
           one_shot_applies(c, get_options(), one_shot_staging(), layout().written_extents, ch.requested()) &&
           ch.chose_stream(stream_choice::slot_of(kind, one_shot_bytes(c)));
  }
  template <class T = float, class Op = sum_t>
  std::string explain(std::size_t count, collective kind = collective::all_reduce, Op op = {},
                      std::size_t root = 0) const {
    return make_plan<T>(count, kind, op, root).to_string();
  }

private:
  friend host_binding<Transport> binding_of<Transport>(communicator_core&) noexcept;
  friend const std::shared_ptr<host_executor>& executor_of<Transport>(const communicator_core&) noexcept;

  // The staging bytes of the flat channel that a one-shot call's data can use (0: none).
  std::size_t one_shot_staging() const noexcept {
    if constexpr (shared_access_transport<Transport>)
      if (flat_) return one_shot<Transport>::capacity(tr_->group(*flat_).staging_bytes());
    return 0;
  }

  // Whether broadcasts and reduces above the one-shot cap stream over node memory
  // (tuning::one_shot_stream_max_trip_ns): rank 0 measures how far the other ranks'
  // cores are, and where they are all close, those calls stream. Where the node's
  // ranks outnumber its cores, they run their programs. Anywhere else (the ranks
  // far apart, or ranks of one process, which measure nothing), their first calls
  // time both ways and decide (tuning::one_shot_stream_trials, plan/stream_choice.hpp;
  // the constructor arms it; 0 trials: their programs). Every rank decides the same:
  // by rank 0's measurement and the options in the fingerprint. Ranks of one process
  // (the threads transport) measure nothing at bind: their bind does not wait for
  // each other (a rank may bind later, or fail before it binds), and a measurement
  // at bind would make it wait. Returns whether the calls time both ways.
  MDRING_COLD bool decide_streaming() {
    tuning& u = mutable_options().tune;
    if (u.one_shot_stream_max_bytes <= u.one_shot_max_bytes || u.one_shot_stream_max_trip_ns == SIZE_MAX) return false;
    const bool crowded = this->crowded();
    if constexpr (!Transport::same_address_space) {
      const access_group& g = tr_->group(*flat_);
      const std::uint32_t stop = u.one_shot_stream_max_trip_ns >= node_distance::unmeasured
                                     ? node_distance::unmeasured - 1
                                     : std::uint32_t(u.one_shot_stream_max_trip_ns);
      distance_ = measure_node_distance(g, !crowded, stop, deadline_clock::now() + get_options().timeout,
                                        [this] { return tr_->shared_failure(); });
      if (distance_.measured() && distance_.trip_ns <= u.one_shot_stream_max_trip_ns) return false;
    }
    stream_requested_ = u.one_shot_stream_max_bytes;
    u.one_shot_stream_max_bytes = 0;
    return !crowded && u.one_shot_stream_trials > 0 && (Transport::same_address_space || distance_.measured());
  }
  // The transport found the node's ranks outnumbering its cores (its waits yield at
  // once); only where the flat channel exists.
  bool crowded() const noexcept { return tr_->group(*flat_).spins() <= 1; }
  std::string stream_limit_text() const {
    return "tune.one_shot_stream_max_trip_ns = " + std::to_string(bind_options().tune.one_shot_stream_max_trip_ns);
  }
  // What explain() says of a call that did not stream because of decide_streaming
  // (and was not timed: stream_timing).
  std::string stream_refusal() const {
    const std::string limit = stream_limit_text();
    if (crowded())
      return "not streamed over node memory: the node's " + std::to_string(layout().size) +
             " ranks outnumber its cores, where each step would wait for a descheduled peer (" + limit + ")";
    if (Transport::same_address_space)
      return "not streamed over node memory: ranks of one process measure nothing at bind, which does not wait for "
             "the other ranks, and tune.one_shot_stream_trials = 0 times nothing (" +
             limit + "; SIZE_MAX streams without measuring)";
    if (!distance_.measured())
      return "not streamed over node memory: bind could not measure how far the node's ranks are (" + limit + ")";
    return "not streamed over node memory: at bind a cache line took " + std::to_string(distance_.trip_ns) +
           " ns from rank 0's core to rank " + std::to_string(distance_.farthest) + "'s, over " + limit +
           ", and tune.one_shot_stream_trials = 0 times nothing";
  }

  // What explain() says of a call whose size class streams or not by timing (plan/stream_choice.hpp).
  std::string stream_timing(std::size_t slot) const {
    const stream_choice& ch = ws_->streams();
    const stream_choice::entry& e = ch.at(slot);
    const std::size_t hi = stream_choice::class_max(slot), n = 2 * ch.trials();
    const std::string cls =
        std::string(stream_choice::kind_of(slot) == collective::broadcast ? "broadcasts" : "reduces") + " of " +
        std::to_string(hi / 2 + 1) + " to " + std::to_string(hi) + " B";
    const std::string limit = stream_limit_text();
    const std::string why = "tune.one_shot_stream_trials = " + std::to_string(ch.trials()) + "; " +
                            (distance_.measured() ? "at bind a cache line took " + std::to_string(distance_.trip_ns) +
                                                        " ns from rank 0's core to rank " +
                                                        std::to_string(distance_.farthest) + "'s, over " + limit
                                                  : "ranks of one process measure nothing at bind, " + limit);
    auto us = [](std::uint64_t ns) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2f us", double(ns) / 1e3);
      return std::string(b);
    };
    if (e.decided < 0)
      return "streamed or not by timing: the first " + std::to_string(n) + " " + cls +
             " alternate between the stages below and streaming over node memory, then every rank takes "
             "the way whose slowest rank was faster (" +
             why + "); " + std::to_string(e.calls) + " of them so far";
    const std::string times = "the slowest rank's least time was " + us(e.slowest[1]) + " streamed against " +
                              us(e.slowest[0]) + " by the program";
    if (e.decided == 1)
      return "chosen by timing the first " + std::to_string(n) + " " + cls + " both ways: " + times + " (" + why + ")";
    return "not streamed over node memory: the first " + std::to_string(n) + " " + cls + " were timed both ways and " +
           times + " (" + why + ")";
  }

  // Throws communicator_error naming `fn` where there is no transport (released).
  bool released(const char* fn) const {
    if (!tr_) throw communicator_error("mdring::communicator::" + std::string(fn) + ": " + failure());
    return false;
  }

  // reserve() for elements of elem_size bytes.
  void reserve_bytes(std::size_t elem_size, std::size_t count) {
    drain();  // a larger block replaces the one that calls in flight may be using
    std::size_t bytes = 0;
    no_step_ops<Transport> none;
    for (bool commutative : {true, false}) {  // non-commutative ops run direct everywhere
      engine<Transport> e(binding_of(*this), "reserve", none, elem_size, commutative);
      for (auto kind :
           {collective::all_reduce, collective::reduce_scatter, collective::all_gather, collective::reduce}) {
        const std::size_t b = e.reserve_bytes(kind, count);  // smaller calls included
        bytes = b > bytes ? b : bytes;
      }
    }
    ws_->scratch().get(bytes);
    // A streamed all_reduce's block of node memory (executor/host/engine.hpp
    // stream_in), kept by the pool for the calls.
    if constexpr (!Transport::same_address_space)
      if (get_options().shared_memory && count) (void)ws_->blocks().take(count * elem_size);
  }

  std::unique_ptr<Transport> tr_;
  std::vector<typename Transport::channel> channels_;  // per executed dimension (none where the extent is 1)
  std::unique_ptr<typename Transport::channel> flat_;  // over every rank, where they share a node (one-shot path)
  std::unique_ptr<call_workspace<Transport>> ws_;
  std::uint32_t shrinks_ = 0;
  node_distance distance_;            // decide_streaming's measurement
  std::size_t stream_requested_ = 0;  // tune.one_shot_stream_max_bytes as bound, where decide_streaming cleared it
};

template <transport Transport>
host_binding<Transport> binding_of(communicator_core<Transport>& c) noexcept {
  return {c.layout(), c.get_options(), *c.tr_, c.channels_, *c.ws_, board_of(c), c.flat_.get()};
}
template <transport Transport>
const std::shared_ptr<host_executor>& executor_of(const communicator_core<Transport>& c) noexcept {
  return c.exec;
}
// The host executor's workspace of c: what its last call decided and ran (tests,
// diagnostics).
template <transport Transport>
const call_workspace<Transport>& workspace_of(communicator_core<Transport>& c) noexcept {
  return binding_of(c).workspace;
}

}  // namespace detail

/// A bound communicator (bind() makes one): detail::communicator_core, whose public
/// members are its face, and the topology's type, which the compile-time checks of
/// the collectives read (a non-commutative op on a ring-only link).
template <class Topology, transport Transport>
class communicator : public detail::communicator_core<Transport> {
public:
  using topology_type = Topology;    ///< the topology's type
  using transport_type = Transport;  ///< the transport's type

  /// Binds over transport `tr` (the bind functions call it).
  communicator(const Topology& topo, std::unique_ptr<Transport> tr, options opts)
      : detail::communicator_core<Transport>(detail::to_runtime(topo), std::move(tr), std::move(opts)) {}
  /// A communicator of no ranks: a survivor that mdring::shrink left out (its node
  /// dropped). topology() is the shrunk topology; every call throws communicator_error with `why`.
  communicator(const runtime_topology& shrunk, options opts, std::string transport, std::string why)
    requires std::same_as<Topology, runtime_topology>
      : detail::communicator_core<Transport>(shrunk, std::move(opts), std::move(transport), std::move(why)) {}
};

namespace detail {
// The core a collective runs on: a communicator's, or the core itself.
template <transport Transport>
communicator_core<Transport>& core_of(communicator_core<Transport>& c) noexcept {
  return c;
}
}  // namespace detail

/// A host communicator, as bind() makes one: it names its topology and transport types, and has size() and
/// get_transport().
template <class C>
concept bound_communicator = requires(C& c) {
  typename C::topology_type;
  typename C::transport_type;
  { c.size() } -> std::convertible_to<std::size_t>;
  { c.get_transport() };
};

MDRING_NAMESPACE_END
