// mdring/executor/host/engine.hpp: the five collectives of the host executor (see core.hpp).
//
// Each collective asks plan/call.hpp what the call runs (engine::decide), takes
// its program from the communicator's cache (plan/program_cache.hpp; built from
// plan/collective_programs.hpp the first time), lays out its scratch, and hands
// program and buffers to the cursor: start_*() sets a call going, run(block)
// moves it on (cursor.hpp). The blocking collectives are start_*() then run(true).
#pragma once

#include "../../plan/call.hpp"
#include "../../plan/cost.hpp"
#include "../../plan/measure.hpp"
#include "../../plan/pipeline.hpp"
#include "../../plan/program_cache.hpp"
#include "../../plan/wisdom.hpp"
#include "cursor.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class engine {
public:
  using state = engine_state<T, Op, Comm>;
  using transport_t = typename state::transport_t;
  static constexpr std::size_t piece = local_ops<T, Op, Comm>::piece;

  engine(Comm& c, const char* name, Op op, bool commutative) : s_(c, name, op, commutative), ops_(s_), cur_(s_, ops_) {}
  engine(const engine&) = delete;  // its parts refer to each other
  engine& operator=(const engine&) = delete;

  // Moves the call on (cursor.hpp); true once it is done.
  bool run(bool block) { return cur_.run(block); }
  // Steps completed so far (the progress agent's sign that something moved).
  std::uint64_t progress() const noexcept { return cur_.progress(); }

  // ---- the five collectives: start, then run (cursor.hpp) ------------------------------
  // all_reduce: measured planning first, at the first call of a size class.
  void start_all_reduce(const T* send, T* recv, std::size_t n) {
    auto& ms = s_.in_.measuring();
    if (s_.c_.get_options().planning == planning::measure && s_.commutative_ && n > 0 && !ms.active && !ms.forced &&
        !s_.in_.measured_plans().find(sizeof(T), n * sizeof(T)))
      measure(n);
    const auto [pr, depth] = all_reduce_plan(n);
    start(*pr, depth, send, recv, {n, n, true, send});
  }
  void start_reduce_scatter(const T* send, T* recv, std::size_t rc) {
    decide(collective::reduce_scatter, rc);
    start(program_of(collective::reduce_scatter, rc, 0), 1, send, recv, {rc * s_.c_.size(), rc, true, send});
  }
  void start_all_gather(const T* send, T* recv, std::size_t sc) {
    decide(collective::all_gather, sc);
    start(program_of(collective::all_gather, sc, 0), 1, send, recv, {sc, sc * s_.c_.size(), true, recv});
  }
  void start_broadcast(T* buf, std::size_t n, std::size_t root) {
    decide(collective::broadcast, n);
    start(program_of(collective::broadcast, n, root), 1, buf, buf, {n, n, s_.c_.rank() == root, buf});
  }
  void start_reduce(const T* send, T* recv, std::size_t n, std::size_t root) {
    decide(collective::reduce, n);
    start(program_of(collective::reduce, n, root), 1, send, recv);
  }

  void all_reduce(const T* send, T* recv, std::size_t n) {
    start_all_reduce(send, recv, n);
    cur_.run(true);
  }

  // ---- programs -----------------------------------------------------------------------
  // What this call of `count` (the collective's count argument) runs: plan/call.hpp
  // decide_call, the decision every path asks (the bind-time algorithm for the op,
  // automatic rings refined for the size, all_reduce's last dimensions by recursive
  // doubling where it pays, the measured plan or the model's segments, trees). The
  // algorithms go to the communicator's slots (core.hpp algo()). force_hd >= 0:
  // halving-doubling on that dimension (scratch_bytes' bound).
  const call_decision& decide(collective kind, std::size_t count, int force_hd = -1) {
    call_decision& d = s_.in_.decision();
    const std::size_t n = call_elements(kind, count, s_.c_.size());
    decide_call(d, call_request{kind, s_.c_.executed_topology(), s_.in_.requested_algorithms(),
                                s_.in_.bind_algorithms(), s_.commutative_, count, s_.c_.size(), sizeof(T),
                                s_.c_.get_options().tune, kind == collective::all_reduce ? measured_for(n) : nullptr,
                                s_.in_.rank_links(), s_.ext_, force_hd});
    std::copy(d.algos.begin(), d.algos.end(), s_.in_.algorithm_slots().begin());
    return d;
  }
  // The program of the call decided last (decide), with seg_len elements per segment.
  const program& program_of(collective kind, std::size_t count, std::size_t root, std::size_t seg_len = 0) {
    auto& dp = s_.in_.program_dims();
    const std::size_t seg = seg_len && seg_len < count ? seg_len : count;
    s_.note_unmapped_ = false;
    for (std::size_t d = 0; d < s_.dims_.size(); ++d) {
      dp[d] = {s_.ext_[d], s_.coords_[d], s_.algo(d), false, 0, false};
      if (s_.ext_[d] > 1 && s_.shared(d)) {
        dp[d].shared = true, dp[d].staging_bytes = s_.staging_bytes(d);
        // The pull form where it pays and the last all_reduce on d had buffers some
        // rank's peers could not map (core.hpp sync: the same on every rank).
        // (Threads share one address space: never, decided at compile time.)
        if constexpr (!transport_t::same_address_space) {
          const std::size_t whole = call_elements(kind, count, s_.c_.size()) * sizeof(T);
          const bool pays = streams_when_unmapped({kind, s_.ext_, d, dp[d].algo, true, false, whole,
                                                   kind == collective::all_reduce ? seg * sizeof(T) : whole,
                                                   seg ? (count + seg - 1) / seg : 0, dp[d].staging_bytes},
                                                  s_.dims_[d].link, s_.c_.get_options().tune);
          s_.note_unmapped_ |= pays;
          dp[d].streamed = pays && s_.in_.unmapped_buffers()[d];
        }
      }
    }
    program_params p;
    p.kind = kind, p.dims = dp, p.count = count, p.rank = s_.c_.rank(), p.root = root, p.elem_size = sizeof(T);
    p.segment_length = seg_len, p.nontemporal_bytes = s_.c_.get_options().tune.nontemporal_bytes;
    p.shared_reduce_max_bytes = s_.c_.get_options().tune.shared_reduce_max_bytes;
    p.shared_reduce_split = true;
    p.trees = s_.in_.decision().trees;
    return s_.in_.programs().get(p);
  }

  // The measured plan an all_reduce of n elements runs (options.planning = measure,
  // plan/wisdom.hpp): the candidate being timed, or what this size class measured.
  const measured_choice* measured_for(std::size_t n) {
    auto& ms = s_.in_.measuring();
    const measured_choice* m = ms.forced;
    if (!m && !ms.active && s_.commutative_ && s_.c_.get_options().planning == planning::measure)
      m = s_.in_.measured_plans().find(sizeof(T), n * sizeof(T));
    return m && m->algos.size() == s_.dims_.size() ? m : nullptr;
  }
  // all_reduce's program and segments in flight (decide first, unless decided:
  // decide = false).
  std::pair<const program*, std::size_t> all_reduce_plan(std::size_t n, bool decide_now = true) {
    const call_decision& d = decide_now ? decide(collective::all_reduce, n) : s_.in_.decision();
    const program& pr = program_of(collective::all_reduce, n, 0, d.segment_length);
    return {&pr, d.depth < pr.segments ? d.depth : pr.segments};
  }

  // ---- scratch ------------------------------------------------------------------------
  // Elements of cross-memory-attach pieces: p for the largest shared dimension
  // between processes (p-1 read from the peers, one for a fold whose outputs are
  // all the peers': local_ops.hpp fold_by_pieces).
  std::size_t piece_elements(const program& pr) {
    std::size_t n = 0;
    if (!transport_t::same_address_space && pr.shared)
      for (std::size_t d = 0; d < s_.ext_.size(); ++d)
        if (s_.ext_[d] > 1 && s_.shared(d)) n = s_.ext_[d] * piece > n ? s_.ext_[d] * piece : n;
    return n;
  }
  std::size_t scratch_bytes_of(const program& pr, std::size_t depth) {
    return align_up(pr.scratch_elements * sizeof(T)) + depth * align_up(pr.slot_elements * sizeof(T)) +
           align_up(piece_elements(pr) * sizeof(T));
  }
  // What the pull form (stream_in) needs of a call: the elements of send and recv,
  // whether this rank takes a block of node memory when its buffers cannot be
  // mapped (a broadcast's root only), and where `source` is otherwise (laid out as
  // the peers read it: all_reduce's and reduce_scatter's send, all_gather's recv,
  // broadcast's buffer; the block is as large as the larger of the two).
  struct streaming {
    std::size_t send_count = 0, recv_count = 0;
    bool takes = false;
    const T* source = nullptr;
  };
  // all_reduce, reduce_scatter, all_gather and broadcast pass `how`: their pull form.
  void start(const program& pr, std::size_t depth, const T* send, T* recv, const streaming& how = {}) {
    auto* base = static_cast<unsigned char*>(s_.in_.scratch().get(scratch_bytes_of(pr, depth)));
    s_.buf_.send = s_.buf_.source = send, s_.buf_.recv = s_.buf_.result = recv;
    if (how.recv_count) stream_in(send, recv, how);
    s_.buf_.scratch = reinterpret_cast<T*>(base);
    base += align_up(pr.scratch_elements * sizeof(T));
    s_.buf_.slots = reinterpret_cast<T*>(base);
    s_.buf_.slot_stride = align_up(pr.slot_elements * sizeof(T)) / sizeof(T);
    s_.buf_.pieces = reinterpret_cast<T*>(base + depth * align_up(pr.slot_elements * sizeof(T)));
    cur_.begin(pr, depth);
  }

  // The pull form (build_program.hpp dim_program::streamed, chosen alike on every
  // rank by program_of): a rank whose buffers its peers cannot map takes a block of
  // node memory as its region::source and region::result; the program copies the
  // peers' blocks of sendbuf into it, segment by segment, and this rank's results
  // land there too, so its peers map it instead of reaching its buffers by
  // cross-memory attach. A rank whose buffers are node memory, or that gets none,
  // runs on its own buffers (its peers map them, or use cross-memory attach):
  // correct either way, each rank deciding alone. A broadcast's root takes the
  // block as its source alone (plan/collective_programs.hpp shared_broadcast);
  // the other ranks (takes = false) only publish whether their buffer is mapped.
  // all_gather's ranks put their own block into it (collective_programs.hpp).
  void stream_in(const T* send, T* recv, const streaming& how) {
    if constexpr (!transport_t::same_address_space) {
      s_.buf_.source = how.source;
      const std::size_t bytes = std::max(how.send_count, how.recv_count) * sizeof(T);
      s_.unmapped_ = s_.note_unmapped_ && !(is_node_memory(send, how.send_count * sizeof(T)) &&
                                            is_node_memory(recv, how.recv_count * sizeof(T)));
      const auto& dp = s_.in_.program_dims();
      if (!how.takes || !s_.unmapped_ ||
          std::none_of(dp.begin(), dp.end(), [](const dim_program& d) { return d.streamed; }))
        return;
      copy_ = s_.in_.widened_scratch().take(bytes);
      if (!is_node_memory(copy_.get(), bytes)) return copy_.reset();
      s_.buf_.result = static_cast<T*>(copy_.get());
      s_.buf_.source = s_.buf_.result;
    } else {
      (void)send, (void)recv, (void)how;
    }
  }
  std::shared_ptr<void> copy_;  // stream_in's copy, back to the pool with the engine

  // The engine's parts, in this order (each refers to the ones before).
  state s_;
  local_ops<T, Op, Comm> ops_;
  call_cursor<T, Op, Comm> cur_;

  // Scratch bytes a call of this kind and count needs, with halving-doubling forced
  // on dimension `force_hd` (>= 0; all_reduce then counts tuning::pipeline_depth
  // segments in flight, the most there can be).
  std::size_t scratch_bytes(collective kind, std::size_t count, int force_hd = -1) {
    decide(kind, count, force_hd);
    if (kind == collective::all_reduce) {
      auto [pr, depth] = all_reduce_plan(count, false);
      return scratch_bytes_of(*pr, force_hd >= 0 ? s_.c_.get_options().tune.pipeline_depth : depth);
    }
    // reduce: a rank that is not the root, which needs more (W)
    const std::size_t root = kind == collective::reduce && s_.c_.rank() == 0 ? 1 % s_.c_.size() : 0;
    return scratch_bytes_of(program_of(kind, count, root, 0), 1);
  }

  // Scratch enough for every call of this kind up to `count` (communicator::reserve).
  // Halving-doubling's scratch is a whole stage range rather than a block, and
  // automatic picks it for smaller calls only (tuning::halving_doubling_max_bytes),
  // so a smaller call can need more than `count` itself. Every part of a call's
  // scratch grows with its count and is larger for halving-doubling than for a
  // ring, so the sum of these is an upper bound: the call of `count`, and for each
  // dimension that may run it, the largest count whose range there is within the
  // cap, with it forced there.
  std::size_t reserve_bytes(collective kind, std::size_t count) {
    std::size_t bytes = scratch_bytes(kind, count);
    const std::size_t per = call_elements(kind, 1, s_.c_.size());
    const std::size_t cap = s_.c_.get_options().tune.halving_doubling_max_bytes / sizeof(T);
    const auto& req = s_.in_.requested_algorithms();
    for (std::size_t d = 0; d < s_.ext_.size(); ++d) {
      if (s_.ext_[d] < 4 || !s_.commutative_ || s_.in_.bind_algorithms()[d] != algorithm::ring ||
          (d < req.size() && req[d] != algorithm::automatic))
        continue;
      auto range_at = [&](std::size_t c) {  // the nominal range of dimension d (plan/pipeline.hpp)
        std::size_t r = c * per;
        for (std::size_t e = 0; e < d; ++e) r = s_.ext_[e] > 1 ? max_block(r, s_.ext_[e]) : r;
        return r;
      };
      std::size_t lo = 0, hi = count;  // the largest c <= count with range_at(c) <= cap
      if (range_at(count) > cap) {
        while (hi - lo > 1) {
          const std::size_t mid = lo + (hi - lo) / 2;
          (range_at(mid) <= cap ? lo : hi) = mid;
        }
        hi = lo;
      }
      if (hi) bytes += scratch_bytes(kind, hi, int(d));
    }
    // Smaller calls may run recursive doubling (all_reduce: one slot of the whole
    // range) or trees (reduce: a received buffer and a partial of the whole buffer).
    const std::size_t rd = std::min(count, s_.c_.get_options().tune.recursive_doubling_max_bytes / sizeof(T));
    if (kind == collective::all_reduce) bytes += align_up(rd * sizeof(T));
    if (kind == collective::reduce) bytes += 2 * align_up(rd * sizeof(T));
    return bytes;
  }

  // ---- measured planning (options.planning = measure, plan/wisdom.hpp) ---------
  //
  // At the first all_reduce of a size class: times the candidate plans that
  // plan/measure.hpp measured_candidates lists (the estimate's first) on buffers of
  // the call's size, one warm-up and 3 to 15 runs each (about 2 ms), takes every
  // candidate's median and the spread of its runs, then the slowest rank's (one
  // all_reduce, so every rank picks the same), and keeps the fastest if it beats the
  // estimate's plan by more than the runs' spread (1 % to 5 %, plan/wisdom.hpp
  // pick_measured), else the estimate's. Every rank writes options.wisdom.
  void measure(std::size_t n) {
    auto& ms = s_.in_.measuring();
    ms.active = true;
    struct reset {
      typename internals<Comm>::measuring_state& m;
      ~reset() { m = {}; }
    } guard{ms};
    const auto& o = s_.c_.get_options();
    const auto& tune = o.tune;
    decide(collective::all_reduce, n);  // measured_for: none while measuring
    const std::vector<algorithm> est(s_.in_.algorithm_slots());
    const std::vector<measured_choice> cand = measured_candidates(
        s_.c_.executed_topology(), est, s_.in_.requested_algorithms(), s_.in_.bind_algorithms(), n, sizeof(T), tune);
    // The candidates' buffers come from options.memory, as all scratch does (under
    // SimGrid SMPI: shared pages, not n elements per simulated rank).
    std::pmr::memory_resource* mr = o.memory_or_default();
    std::pmr::vector<T> a(n, mr), b(n, mr);
    std::vector<double> secs(cand.size() + 1, 0.0), t;  // the medians, then the largest spread
    engine<double, max_t, Comm> slowest(s_.c_, s_.name_, max_t{}, true);
    auto run = [&](const measured_choice& c) {
      ms.forced = &c;
      const double t0 = seconds_on(s_.tr_);  // the transport's clock: simulated time under SMPI
      all_reduce(a.data(), b.data(), n);
      ms.forced = nullptr;
      return seconds_on(s_.tr_) - t0;
    };
    // Timed runs per candidate: about 2 ms of the estimate's plan, 3 to 15, from the
    // slowest rank's warm-up, so that every rank runs as many.
    double warm = run(cand[0]);
    slowest.all_reduce(&warm, &warm, 1);
    const std::size_t runs = warm * 15 < 2e-3 ? 15 : warm * 3 > 2e-3 ? 3 : std::size_t(2e-3 / warm);
    for (std::size_t i = 0; i < cand.size(); ++i) {
      if (i) run(cand[i]);  // warm-up
      t.clear();
      for (std::size_t r = 0; r < runs; ++r) t.push_back(run(cand[i]));
      std::sort(t.begin(), t.end());
      secs[i] = t[t.size() / 2];
      if (secs[i] > 0) secs.back() = std::max(secs.back(), (t.back() - t.front()) / secs[i]);
    }
    slowest.all_reduce(secs.data(), secs.data(), secs.size());
    // The estimate's plan stays unless another is faster by more than the noise
    // between runs of one plan (the largest spread; 1 % to 5 %).
    const double spread = secs.back();
    secs.pop_back();
    const std::size_t best = pick_measured(secs, spread);
    measured_choice m = cand[best];
    m.seconds = secs[best];
    m.estimate_seconds = secs[0];
    m.candidates = cand.size();
    wisdom& w = s_.in_.measured_plans();
    w.all_reduce[{sizeof(T), size_class(n * sizeof(T))}] = m;
    if (!o.wisdom.empty()) {
      w.save(o.wisdom, s_.c_.rank());
      double sync = 0;  // every rank has written it before any goes on (to bind again, say)
      slowest.all_reduce(&sync, &sync, 1);
    }
  }
};

}  // namespace detail

MDRING_NAMESPACE_END
