// mdring/collective/communicator.hpp: a topology bound to a transport.
//
//   auto comm = mdring::bind(topo, MPI_COMM_WORLD);   // or a threads::endpoint, or a
//                                                     // boost::mpi::communicator
//   mdring::all_reduce(comm, buf, n, mdring::sum);    // as often as you like
//
// bind() resolves the dynamic extent from the transport's size (a mismatch throws
// topology_error on every rank, before any message), builds one channel per
// dimension, picks each dimension's algorithm, and allocates the request slots.
// Calls then allocate nothing except scratch that grows to the largest call
// (reserve() pre-sizes it), from options::memory.
//
// After any error inside a collective (timeout, a peer's failure, a bad argument,
// a transport error) the communicator is unusable on every rank: later calls
// throw communicator_error. Bind a new one.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../memory.hpp"
#include "../options.hpp"
#include "../plan/blocks.hpp"
#include "../plan/call.hpp"
#include "../plan/cost.hpp"
#include "../plan/merge.hpp"
#include "../plan/plan.hpp"
#include "../plan/program_cache.hpp"
#include "../plan/wisdom.hpp"
#include "fingerprint.hpp"
#include "ring_only.hpp"
#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "../topology/coordinates.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"
#include "../executor/internals.hpp"
#include "../executor/progress.hpp"
#include "../executor/state.hpp"
#include "../transport/shared_access.hpp"
#include "../transport/transport.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Scratch of the widened 16-bit calls (options.accumulation = float32): blocks
// kept for reuse, one per call in flight, so that a call after the first allocates
// nothing and touches no fresh page. Between processes of a node with shared
// memory on, node memory (memory.hpp: peers map it and fold in place, as they do
// node_alloc buffers), else the user's memory_resource. take() hands a block out
// until the last copy of its pointer is gone.
class block_pool : public std::enable_shared_from_this<block_pool> {
public:
  block_pool(std::pmr::memory_resource* mr, bool node) : mr_(mr ? mr : std::pmr::get_default_resource()), node_(node) {}
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;
  ~block_pool() {
    for (auto& b : free_) drop(b);
  }

  std::shared_ptr<void> take(std::size_t bytes) {
    bytes = (bytes + 4095) / 4096 * 4096;
    block b;
    {
      std::lock_guard<std::mutex> g(m_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
      if (best != free_.end()) b = *best, free_.erase(best);
    }
    if (!b.p) b = make(bytes);
    return std::shared_ptr<void>(b.p, [pool = shared_from_this(), b](void*) { pool->give(b); });
  }

private:
  struct block {
    void* p = nullptr;
    std::size_t bytes = 0;
    bool node = false;
  };
  static constexpr std::size_t keep = 4;  // free blocks kept (the largest)
  block make(std::size_t bytes) {
    if (node_) {
      try {
        return {node_alloc(bytes), bytes, true};
      } catch (const std::exception&) {  // no memory files here: plain memory, read by cross-memory attach
      }
    }
    return {mr_->allocate(bytes, 64), bytes, false};
  }
  void drop(const block& b) noexcept {
    if (b.node) node_free(b.p);
    else mr_->deallocate(b.p, b.bytes, 64);
  }
  void give(const block& b) {
    block out;
    {
      std::lock_guard<std::mutex> g(m_);
      free_.push_back(b);
      if (free_.size() <= keep) return;
      auto smallest = std::min_element(free_.begin(), free_.end(),
                                       [](const block& x, const block& y) { return x.bytes < y.bytes; });
      out = *smallest;
      free_.erase(smallest);
    }
    drop(out);
  }
  std::mutex m_;
  std::pmr::memory_resource* mr_;
  bool node_;
  std::vector<block> free_;
};

// Scratch memory: one block from the user's memory_resource that grows to the
// largest request and is then reused.
class workspace {
public:
  explicit workspace(std::pmr::memory_resource* mr) : mr_(mr ? mr : std::pmr::get_default_resource()) {}
  workspace(workspace&& o) noexcept
      : mr_(o.mr_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  workspace& operator=(workspace&& o) noexcept {
    if (this != &o) {
      release();
      mr_ = o.mr_;
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~workspace() { release(); }

  void* get(std::size_t bytes) {
    if (bytes > bytes_) {
      release();
      const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
      p_ = mr_->allocate(rounded, alignment);
      bytes_ = rounded;
    }
    return p_;
  }
  std::size_t capacity() const noexcept { return bytes_; }
  std::pmr::memory_resource* resource() const noexcept { return mr_; }

  static constexpr std::size_t alignment = 64;

private:
  void release() noexcept {
    if (p_) mr_->deallocate(p_, bytes_, alignment);
    p_ = nullptr;
    bytes_ = 0;
  }
  std::pmr::memory_resource* mr_;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

template <class Topology>
runtime_topology to_runtime(const Topology& t) {
  if constexpr (std::is_same_v<std::remove_cv_t<Topology>, runtime_topology>) return t;
  else return describe(t);
}

// options.algorithms has at most one entry per dimension of the (resolved) topology.
inline void check_algorithm_count(const runtime_topology& t, const options& o, const char* fn) {
  if (o.algorithms.size() > t.ndims())
    throw invalid_argument("options.algorithms", std::string(fn) + ": options.algorithms has " +
                                                     std::to_string(o.algorithms.size()) +
                                                     " entries but the topology \"" + t.to_string() + "\" has " +
                                                     std::to_string(t.ndims()) + " dimensions");
}

// The first member of a communicator: moving it waits for the calls in flight
// before any other member moves (the communicator's destructor drains too).
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

// A program run with MDRING_STATE_SIGNAL handles that signal from its start, not
// from its first communicator: a rank still in its rendezvous, or a PyTorch rank
// whose group binds at its first collective, must not die of it (its default
// action). Reading the environment is all this costs a program without it. (Here,
// not in executor/state.hpp, which mdring-run includes for the lines alone.)
inline const bool state_signal_at_start = (install_state_signal(), true);

// How explain() shows a reduction of T with Op under options.accumulation: the
// element size and type the call runs with (a widened half/bfloat16 call runs
// float32), and the line that says so.
struct accumulated_type {
  std::size_t size;
  std::string name, note;
};
template <class T, class Op>
accumulated_type accumulated(collective kind, const runtime_topology& written, const options& o) {
  accumulated_type a{sizeof(T), type_name<T>(), {}};
  if constexpr (is_16bit_float_v<T> && op_traits<Op>::builtin) {
    if (kind != collective::all_reduce && kind != collective::reduce_scatter && kind != collective::reduce) return a;
    if (accumulates_float32(o, written.ndims())) {
      a.size = sizeof(float);
      a.note = "accumulation float32 (options.accumulation): the call is widened, its " + a.name +
               " inputs converted to float32, every stage above carrying float32, the result rounded once";
      a.name = "float (widened " + a.name + ")";
      return a;
    }
    std::string dims;
    for (std::size_t d = 0; d < written.ndims(); ++d)
      if (accumulation_of(o, d) == accumulation::float32 && written.extent(d) > 1)
        dims += (dims.empty() ? "" : ", ") + written.dim(d).link.name + ":" + std::to_string(written.extent(d));
    if (!dims.empty())
      a.note = "accumulation float32 on " + dims +
               " (options.dimension_accumulation): direct there, each block's inputs folded in float32 at its "
               "owner and rounded once as it leaves the dimension; " +
               a.name + " on the wire";
  }
  return a;
}

}  // namespace detail

namespace detail {
// Everything a communicator is except its topology's type: the bound state, the
// public face, and what the executor reaches through detail::internals. The
// collectives and the executor are templates of this (one per transport), not of
// communicator<Topology, Transport>: a program that binds several topologies
// compiles the executor once per transport, not once per topology (the topology
// is a runtime_topology from here on).
template <transport Transport>
class communicator_core {
public:
  using transport_type = Transport;

  communicator_core(const runtime_topology& written, std::unique_ptr<Transport> tr, options opts)
      : tr_(std::move(tr)),
        opts_(std::move(opts)),
        ws_(opts_.memory),
        wide_(
            std::make_shared<detail::block_pool>(opts_.memory, !Transport::same_address_space && opts_.shared_memory)) {
    detail::validate(opts_);
    size_ = tr_->size();
    rank_ = tr_->rank();
    topo_ = written.resolve(size_, "bind");
    detail::apply_profile(opts_, topo_, "mdring::bind");
    wisdom_ = detail::load_wisdom(written, opts_);
    detail::check_algorithm_count(topo_, opts_, "mdring::bind");
    merged_ = merge_dimensions(topo_, opts_, true);
    {  // one accumulation per dimension; `accumulation` float32 only when the calls widen
      std::vector<accumulation> acc(topo_.ndims());
      for (std::size_t d = 0; d < acc.size(); ++d) acc[d] = detail::accumulation_of(opts_, d);
      opts_.accumulation =
          detail::accumulates_float32(opts_, acc.size()) ? accumulation::float32 : accumulation::element;
      opts_.dimension_accumulation = std::move(acc);
    }
    const runtime_topology& ex = merged_.topology;
    extents_ = ex.extents();
    coords_ = ex.coordinates(rank_);
    written_extents_ = topo_.extents();
    written_coords_ = topo_.coordinates(rank_);
    const std::size_t k = extents_.size();
    std::size_t pmax = 1;
    for (std::size_t d = 0; d < k; ++d) {
      dims_.emplace_back();
      auto& dim = dims_.back();
      dim.extent = extents_[d];
      dim.coord = coords_[d];
      dim.link = ex.dim(d).link;
      dim.requested = merged_.requested[d];
      bind_algos_.push_back(choose_algorithm(dim.requested, dim.link, dim.extent, opts_.tune, true));
      rank_links_.push_back(ex.rank_link(d));
      if (opts_.reproducible) {  // merged dimensions fold nested (plan/merge.hpp)
        for (std::size_t e : merged_.nest[d])
          if (e > 1) dim.nest.push_back(e);
        if (dim.nest.size() < 2) dim.nest.clear();
      }
      dim.members = ex.peers(rank_, d);
      if (dim.extent > 1) dim.ch = tr_->make_channel(d, dim.members, dim.coord);
      pmax = dim.extent > pmax ? dim.extent : pmax;
    }
    // One set of request slots per segment an all_reduce has in flight.
    req_per_slot_ = 2 * pmax + 2;
    nreq_ = req_per_slot_ * opts_.tune.pipeline_depth;
    reqs_.reset(new typename Transport::request[nreq_]);
    req_info_.resize(nreq_);
    ptrs_.resize(pmax);
    call_algos_.resize(k);
    program_dims_.resize(k);
    unmapped_.assign(k, 0);
    progress_mode mode = opts_.progress;
    if (mode == progress_mode::automatic)
      mode = detail::background_progress_allowed(*tr_) ? progress_mode::agent : progress_mode::in_wait;
    exec_.exec = std::make_shared<detail::host_executor>(mode);
    std::vector<std::string> links;
    for (const auto& dim : dims_) links.push_back(dim.link.name + ":" + std::to_string(dim.extent));
    board_ = std::make_unique<detail::state_board>(rank_, size_, tr_->name(), std::move(links), opts_.timeout);
  }

  // Moving or destroying a communicator first waits for its calls in flight (the
  // engine of a call refers to the communicator's state): see executor_slot.
  communicator_core(communicator_core&&) noexcept = default;
  communicator_core& operator=(communicator_core&&) noexcept = default;
  ~communicator_core() { exec_.drain(); }

  std::size_t size() const noexcept { return size_; }
  std::size_t rank() const noexcept { return rank_; }
  // The dimensions of the topology as written (see executed_topology()).
  std::size_t ndims() const noexcept { return topo_.ndims(); }
  const std::vector<std::size_t>& coordinates() const noexcept { return written_coords_; }
  const std::vector<std::size_t>& extents() const noexcept { return written_extents_; }
  // The same for executed_topology() (what the engine works with).
  const std::vector<std::size_t>& executed_coordinates() const noexcept { return coords_; }
  const std::vector<std::size_t>& executed_extents() const noexcept { return extents_; }
  // The resolved topology (dynamic extent filled in).
  const runtime_topology& topology() const noexcept { return topo_; }
  // The dimensions the collectives run: topology() with adjacent same-link
  // dimensions merged (plan/merge.hpp, tuning::merge_same_link).
  const runtime_topology& executed_topology() const noexcept { return merged_.topology; }
  const options& get_options() const noexcept { return opts_; }
  Transport& get_transport() noexcept { return *tr_; }
  const Transport& get_transport() const noexcept { return *tr_; }
  // The algorithm dimension d of topology() runs for commutative ops
  // (non-commutative: direct); a merged dimension reports its merged stage's.
  algorithm algorithm_of(std::size_t d) const { return bind_algos_.at(merged_.of_user.at(d)); }

  // Who moves this communicator's nonblocking calls on: agent or in_wait
  // (options::progress with automatic resolved for this transport).
  progress_mode progress() const noexcept { return exec_.exec->mode(); }

  bool usable() const noexcept { return !broken_; }
  const std::string& failure() const noexcept { return broken_why_; }

  // Pre-sizes scratch so that no collective on up to `count` elements of T (the
  // count each collective takes) allocates. Waits for the calls in flight first.
  // Defined in run.hpp.
  template <class T>
  void reserve(std::size_t count);
  std::size_t scratch_bytes() const noexcept { return ws_.capacity(); }

  // What the call would do on this rank (see plan.hpp).
  template <class T = float, class Op = sum_t>
  plan make_plan(std::size_t count, collective kind = collective::all_reduce, Op = {}, std::size_t root = 0) const {
    constexpr bool commutative = op_traits<Op>::commutative;
    const detail::accumulated_type at = detail::accumulated<T, Op>(kind, topo_, opts_);
    // A measured plan, when this size class has one (options.planning = measure).
    const measured_choice* m = kind == collective::all_reduce && opts_.planning == planning::measure && commutative
                                   ? wisdom_.find(at.size, count * at.size)
                                   : nullptr;
    call_decision d;  // what the call would run: the executors' own decision (plan/call.hpp)
    decide_call(d, call_request{kind, merged_.topology, merged_.requested, bind_algos_, commutative, count, size_,
                                at.size, opts_.tune, m, rank_links_, extents_});
    if (d.source != call_decision::origin::measured) m = nullptr;
    const std::vector<algorithm>& al = d.algos;
    tuning tune = opts_.tune;
    if (m) tune.pipeline_depth = m->depth;
    const bool trees = d.trees;
    // What the engine runs by shared access: the reduce-scatter and all-gather stages
    // of a dimension the call runs direct whose ranks share memory (executor/host/core.hpp
    // shared(d), plan/build_stages.hpp), and a broadcast's last such dimension
    // (plan/collective_programs.hpp shared_broadcast); tree, scatter and gather
    // stages move messages.
    auto shared = [&](std::size_t e) {
      if constexpr (shared_access_transport<Transport>)
        return al[e] == algorithm::direct && dims_[e].extent > 1 && tr_->shared(dims_[e].ch);
      else return (void)e, false;
    };
    std::size_t last = extents_.size();
    for (std::size_t e = 0; e < extents_.size(); ++e)
      if (extents_[e] > 1) last = e;
    plan pl =
        mdring::make_plan(kind, merged_.topology, rank_, count, at.size, al, tune, root, at.name, op_traits<Op>::name(),
                          m ? m->segments : 0, trees, last < extents_.size() && shared(last));
    pl.accumulation = at.note;
    if constexpr (shared_access_transport<Transport>) {
      for (auto& st : pl.stages)
        st.shared_access = (st.ph == phase::reduce_scatter || st.ph == phase::all_gather ||
                            ((st.ph == phase::broadcast || st.ph == phase::reduce) && !trees)) &&
                           shared(st.dim);
      // The engine's pull form (executor/host/engine.hpp program_of): the same test.
      // (A widened call runs on node memory of its own: nothing to stream.)
      const std::size_t bytes = call_elements(kind, count, size_) * at.size;
      const std::size_t seg = kind == collective::all_reduce && pl.segments > 1 && pl.segment_elements
                                  ? pl.segment_elements * at.size
                                  : bytes;
      const std::size_t staging = (opts_.tune.shared_staging_bytes + 63) / 64 * 64;  // as the transports open it
      bool streams = false;
      for (std::size_t e = 0; e < extents_.size() && !streams && at.size == sizeof(T); ++e)
        streams = streams_when_unmapped({kind, extents_, e, al[e], extents_[e] > 1 && tr_->shared(dims_[e].ch),
                                         Transport::same_address_space, bytes, seg, pl.segments, staging},
                                        dims_[e].link, opts_.tune);
      if (streams && kind == collective::broadcast)
        pl.streaming =
            "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
            "the first such one (tune.stream_broadcast_min_bytes): a root whose buffer is not node memory "
            "copies it into node memory, which the others map and copy from";
      else if (streams && kind == collective::reduce_scatter)
        pl.streaming =
            "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
            "the first such one (tune.stream_blocks_min_bytes): a rank whose sendbuf is not node memory "
            "copies the blocks its peers fold into node memory, which they map and fold from";
      else if (streams && kind == collective::all_gather)
        pl.streaming =
            "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
            "the first such one (tune.stream_blocks_min_bytes): a rank whose recvbuf is not node memory "
            "copies its block into node memory, which the others map and copy from";
      else if (streams)
        pl.streaming =
            "buffers not from node_alloc (on any rank): streamed through node memory from the call after "
            "the first such one (tune.cma_gamma, copy_gamma, stream_min_bytes): each such rank copies the "
            "peers' blocks into node memory, and the all-gather reads the peers' results (one more "
            "synchronization per segment)";
    }
    if (m) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "measured (options.planning = measure): %zu candidates timed at the first call of this "
                    "size class; this plan took %s, the estimate's %s",
                    m->candidates, detail::human_seconds(m->seconds).c_str(),
                    detail::human_seconds(m->estimate_seconds).c_str());
      pl.chosen_by = buf;
    } else if (kind == collective::all_reduce && opts_.planning == planning::measure) {
      pl.chosen_by = "estimated: options.planning = measure measures this size class at its first call";
    }
    pl.written = topo_;
    pl.reproducible = opts_.reproducible;
    return pl;
  }
  template <class T = float, class Op = sum_t>
  std::string explain(std::size_t count, collective kind = collective::all_reduce, Op op = {},
                      std::size_t root = 0) const {
    return make_plan<T>(count, kind, op, root).to_string();
  }

private:
  // ---- for the collectives: reached through detail::internals (executor/internals.hpp)
  template <class>
  friend class detail::internals;
  struct dim_state {
    std::size_t extent = 1, coord = 0;
    link_info link;
    algorithm requested = algorithm::automatic;
    std::vector<std::size_t> members;
    typename Transport::channel ch{};
    // options.reproducible on merged dimensions: the extents to fold nested,
    // innermost first (reduce/host.hpp combine_nested); empty: a flat fold.
    std::vector<std::size_t> nest;
  };
  struct request_info {
    std::size_t dim = 0, peer = 0;
    bool is_send = false;
  };
  std::vector<dim_state>& dims() noexcept { return dims_; }
  typename Transport::request* requests() noexcept { return reqs_.get(); }
  std::size_t request_slot_size() const noexcept { return req_per_slot_; }
  std::vector<request_info>& request_infos() noexcept { return req_info_; }
  std::vector<const void*>& pointer_slots() noexcept { return ptrs_; }
  std::vector<algorithm>& algorithm_slots() noexcept { return call_algos_; }
  // What decide_call (plan/call.hpp) takes from the bind, per executed dimension:
  // the algorithm for commutative ops, and this rank's share of the link.
  const std::vector<algorithm>& bind_algorithms() const noexcept { return bind_algos_; }
  const std::vector<link_info>& rank_links() const noexcept { return rank_links_; }
  call_decision& decision() noexcept { return decision_; }  // the current call's (reused storage)
  // The programs of recent calls (plan/program_cache.hpp), and the per-dimension
  // parameters a call's program is looked up with.
  program_cache& programs() noexcept { return programs_; }
  std::vector<dim_program>& program_dims() noexcept { return program_dims_; }
  // Per executed dimension: whether the last all_reduce that noted it had buffers
  // some rank's peers could not map (executor/host/core.hpp; dim_program::streamed).
  std::vector<unsigned char>& unmapped_buffers() noexcept { return unmapped_; }
  // options.planning = measure: the measured all_reduce plans (plan/wisdom.hpp), and
  // what the executor is measuring (executor/host/engine.hpp).
  struct measuring_state {
    bool active = false;                      // timing candidates: no new measurement, no wisdom
    const measured_choice* forced = nullptr;  // the candidate being timed
  };
  wisdom& measured_plans() noexcept { return wisdom_; }
  const wisdom& measured_plans() const noexcept { return wisdom_; }
  measuring_state& measuring() noexcept { return measuring_; }
  // The user's algorithm per executed dimension (automatic where none was asked for).
  const std::vector<algorithm>& requested_algorithms() const noexcept { return merged_.requested; }
  detail::workspace& scratch() noexcept { return ws_; }
  detail::block_pool& widened_scratch() { return *wide_; }
  detail::host_executor& executor() noexcept { return *exec_.exec; }
  // What this communicator is doing, for the hang report (executor/state.hpp).
  detail::state_board& board() noexcept { return *board_; }
  const detail::state_board& board() const noexcept { return *board_; }
  const std::shared_ptr<detail::host_executor>& executor_handle() const noexcept { return exec_.exec; }
  void mark_broken(const std::string& why) {
    if (!broken_) broken_why_ = why;
    broken_ = true;
  }

  detail::executor_slot exec_;  // first: moved (and so drained) before the rest
  std::unique_ptr<Transport> tr_;
  options opts_;
  detail::workspace ws_;
  std::shared_ptr<detail::block_pool> wide_;
  runtime_topology topo_;
  merged_dimensions merged_;
  std::size_t size_ = 0, rank_ = 0;
  std::vector<std::size_t> extents_, coords_, written_extents_, written_coords_;
  std::vector<algorithm> call_algos_;
  std::vector<algorithm> bind_algos_;
  std::vector<link_info> rank_links_;
  call_decision decision_;
  std::vector<dim_program> program_dims_;
  std::vector<unsigned char> unmapped_;
  program_cache programs_;
  wisdom wisdom_;
  measuring_state measuring_;
  std::vector<dim_state> dims_;
  std::unique_ptr<typename Transport::request[]> reqs_;
  std::size_t nreq_ = 0, req_per_slot_ = 0;
  std::vector<request_info> req_info_;
  std::vector<const void*> ptrs_;
  bool broken_ = false;
  std::string broken_why_;
  std::unique_ptr<detail::state_board> board_;
};
}  // namespace detail

// A bound communicator (bind() makes one): detail::communicator_core, whose public
// members are its face, and the topology's type, which the compile-time checks of
// the collectives read (a non-commutative op on a ring-only link).
template <class Topology, transport Transport>
class communicator : public detail::communicator_core<Transport> {
public:
  using topology_type = Topology;
  using transport_type = Transport;

  communicator(const Topology& topo, std::unique_ptr<Transport> tr, options opts)
      : detail::communicator_core<Transport>(detail::to_runtime(topo), std::move(tr), std::move(opts)) {}
};

namespace detail {
// The core a collective runs on: a communicator's, or the core itself.
template <transport Transport>
communicator_core<Transport>& core_of(communicator_core<Transport>& c) noexcept {
  return c;
}
}  // namespace detail

template <class C>
concept bound_communicator = requires(C& c) {
  typename C::topology_type;
  typename C::transport_type;
  { c.size() } -> std::convertible_to<std::size_t>;
  { c.get_transport() };
};

// explain() without binding: the plan of `count` elements of T on `rank` of a
// topology (a compile-time one without dynamic extent, or a resolved runtime one).
template <class T = float, class Op = sum_t, class Topology>
std::string explain(const Topology& topo, std::size_t count, collective kind = collective::all_reduce,
                    std::size_t rank = 0, Op = {}, const options& opts = {}, std::size_t root = 0) {
  runtime_topology rt = detail::to_runtime(topo);
  detail::apply_profile(opts, rt, "mdring::explain");
  if (!rt.is_static())
    throw topology_error("topology", "mdring::explain: \"" + rt.to_string() +
                                         "\" has a dynamic extent; resolve() it with the number of ranks first");
  if (rank >= rt.size())
    throw invalid_argument("rank", "mdring::explain: rank " + std::to_string(rank) + " is not below the size " +
                                       std::to_string(rt.size()) + " of \"" + rt.to_string() + "\"");
  const merged_dimensions m = merge_dimensions(rt, opts, true);
  // What a communicator bound to it would run (plan/call.hpp, the executors' own decision).
  std::vector<algorithm> bind_algos(m.topology.ndims());
  for (std::size_t d = 0; d < bind_algos.size(); ++d)
    bind_algos[d] = choose_algorithm(m.requested[d], m.topology.dim(d).link, m.topology.extent(d), opts.tune, true);
  const detail::accumulated_type at = detail::accumulated<T, Op>(kind, rt, opts);
  call_decision dec;
  decide_call(dec, call_request{kind, m.topology, m.requested, bind_algos, op_traits<Op>::commutative, count, rt.size(),
                                at.size, opts.tune});
  plan pl = make_plan(kind, m.topology, rank, count, at.size, dec.algos, opts.tune, root, at.name,
                      op_traits<Op>::name(), 0, dec.trees);
  pl.accumulation = at.note;
  pl.written = rt;
  pl.reproducible = opts.reproducible;
  return pl.to_string();
}

MDRING_NAMESPACE_END
