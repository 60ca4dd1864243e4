// mdring/executor/host/engine.hpp: the five collectives of the host executor (see core.hpp).
//
// Each collective asks plan/call.hpp what the call runs (decide), describes it and
// takes its program from the workspace's cache (program_of: built from
// plan/collective_programs.hpp the first time), lays out its scratch, and hands
// program and buffers to the cursor: start_*() sets a call going, run(block) moves
// it on (cursor.hpp). The blocking collectives are start_*() then run(true).
//
// One engine serves every element type and op of a transport: buffers are bytes,
// the element size a number, and the folds the step_ops the caller passes
// (local_ops.hpp local_ops<T, Op>).
#pragma once

#include "../../plan/all_gather_program.hpp"
#include "../../plan/all_reduce_program.hpp"
#include "../../plan/broadcast_program.hpp"
#include "../../plan/call.hpp"
#include "../../plan/collective_programs.hpp"
#include "../../plan/cost.hpp"
#include "../../plan/measure.hpp"
#include "../../plan/pipeline.hpp"
#include "../../plan/reduce_program.hpp"
#include "../../plan/reduce_scatter_program.hpp"
#include "../../plan/wisdom.hpp"
#include "../../memory.hpp"
#include "cursor.hpp"
#include "local_ops.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Ops for an engine that only sizes scratch (communicator_core::reserve): never run.
template <transport Transport>
class no_step_ops : public step_ops<Transport> {
public:
  void run_ops(engine_state<Transport>&, const program&, std::span<const local_op>, std::size_t, std::size_t) override {
  }
  void fold_all(void*, const void* const*, std::size_t, std::size_t, std::span<const std::size_t>) override {}
};

template <transport Transport>
class engine {
public:
  using state = engine_state<Transport>;

  // A call of `name` on binding b with elements of elem_size bytes, folded by ops.
  engine(const host_binding<Transport>& b, const char* name, step_ops<Transport>& ops, std::size_t elem_size,
         bool commutative)
      : s_(b, name, elem_size, commutative), cur_(s_, ops) {}
  engine(const engine&) = delete;  // its parts refer to each other
  engine& operator=(const engine&) = delete;

  // Moves the call on (cursor.hpp); true once it is done.
  bool run(bool block) { return cur_.run(block); }
  // Steps completed so far (the progress agent's sign that something moved).
  std::uint64_t progress() const noexcept { return cur_.progress(); }

  // ---- the five collectives: start, then run (cursor.hpp) ------------------------------
  // all_reduce: measured planning first, at the first call of a size class.
  void start_all_reduce(const void* send, void* recv, std::size_t n) {
    auto& ms = ws().measuring();
    if (opts().planning == planning::measure && s_.commutative() && n > 0 && !ms.active && !ms.forced &&
        !ws().measured_plans().find(elem(), n * elem()))
      measure(n);
    const auto [pr, depth] = all_reduce_plan(n);
    start(*pr, depth, send, recv, {n, n, true, send});
  }
  void start_reduce_scatter(const void* send, void* recv, std::size_t rc) {
    decide(collective::reduce_scatter, rc);
    start(program_of(collective::reduce_scatter, rc, 0, make_reduce_scatter_program), 1, send, recv,
          {rc * size(), rc, true, send});
  }
  void start_all_gather(const void* send, void* recv, std::size_t sc) {
    decide(collective::all_gather, sc);
    start(program_of(collective::all_gather, sc, 0, make_all_gather_program), 1, send, recv,
          {sc, sc * size(), true, recv});
  }
  void start_broadcast(void* buf, std::size_t n, std::size_t root) {
    decide(collective::broadcast, n);
    start(program_of(collective::broadcast, n, root, make_broadcast_program), 1, buf, buf,
          {n, n, s_.layout().rank == root, buf});
  }
  void start_reduce(const void* send, void* recv, std::size_t n, std::size_t root) {
    decide(collective::reduce, n);
    start(program_of(collective::reduce, n, root, make_reduce_program), 1, send, recv);
  }

  void all_reduce(const void* send, void* recv, std::size_t n) {
    start_all_reduce(send, recv, n);
    cur_.run(true);
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
    const bound_layout& L = s_.layout();
    std::size_t bytes = scratch_bytes(kind, count);
    const std::size_t per = call_elements(kind, 1, size());
    const std::size_t cap = opts().tune.halving_doubling_max_bytes / elem();
    const auto& req = L.merged.requested;
    for (std::size_t d = 0; d < L.ndims(); ++d) {
      if (L.extents[d] < 4 || !s_.commutative() || L.algorithms[d] != algorithm::ring ||
          (d < req.size() && req[d] != algorithm::automatic))
        continue;
      auto range_at = [&](std::size_t c) {  // the nominal range of dimension d (plan/pipeline.hpp)
        std::size_t r = c * per;
        for (std::size_t e = 0; e < d; ++e) r = L.extents[e] > 1 ? max_block(r, L.extents[e]) : r;
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
    const std::size_t rd = std::min(count, opts().tune.recursive_doubling_max_bytes / elem());
    if (kind == collective::all_reduce) bytes += align_up(rd * elem());
    if (kind == collective::reduce) bytes += 2 * align_up(rd * elem());
    return bytes;
  }

private:
  call_workspace<Transport>& ws() const noexcept { return s_.ws(); }
  const options& opts() const noexcept { return s_.opts(); }
  std::size_t elem() const noexcept { return s_.elem_size(); }
  std::size_t size() const noexcept { return s_.layout().size; }

  // ---- programs -----------------------------------------------------------------------
  // What this call of `count` (the collective's count argument) runs: plan/call.hpp
  // decide_call, the decision every path asks (the bind-time algorithm for the op,
  // automatic rings refined for the size, all_reduce's last dimensions by recursive
  // doubling where it pays, the measured plan or the model's segments, trees).
  // force_hd >= 0: halving-doubling on that dimension (scratch_bytes' bound).
  const call_decision& decide(collective kind, std::size_t count, int force_hd = -1) {
    const std::size_t n = call_elements(kind, count, size());
    const call_request r = request_for(s_.layout(), kind, count, elem(), s_.commutative(), opts().tune,
                                       kind == collective::all_reduce ? measured_for(n) : nullptr);
    if (force_hd < 0) return ws().decide(r);
    std::vector<algorithm> required(s_.layout().ndims(), algorithm::automatic);  // (sizing only: reserve)
    required[std::size_t(force_hd)] = algorithm::halving_doubling;
    return ws().decide(r, required);
  }
  // The program of the call decided last (decide): plan/call.hpp describe_call, with
  // what the transport can do in each dimension (shared access between the ranks of a
  // node, and, between processes, whether the last all_reduce on it had buffers some
  // rank's peers could not map: the same on every rank, core.hpp sync), built by the
  // collective's own builder (a program that calls all_reduce alone compiles only its).
  const program& program_of(collective kind, std::size_t count, std::size_t root, program_cache::builder build) {
    const auto access = ws().access();
    for (std::size_t d = 0; d < access.size(); ++d) {
      access[d] = {};
      if constexpr (state::has_shared_access) {
        if (s_.layout().extents[d] > 1 && s_.transport().shared(s_.channel(d))) {
          access[d].shared = true;
          access[d].staging_bytes = s_.transport().group(s_.channel(d)).staging_bytes();
          access[d].unmapped = ws().unmapped(d);
        }
      }
    }
    const program& pr = ws().program_for({kind, count, root, elem()}, s_.layout(), access, opts().tune,
                                         !Transport::same_address_space, build);
    s_.set_notes_unmapped(ws().description().notes_unmapped);
    return pr;
  }

  // The measured plan an all_reduce of n elements runs (options.planning = measure,
  // plan/wisdom.hpp): the candidate being timed, or what this size class measured.
  const measured_choice* measured_for(std::size_t n) {
    auto& ms = ws().measuring();
    const measured_choice* m = ms.forced;
    if (!m && !ms.active && s_.commutative() && opts().planning == planning::measure)
      m = ws().measured_plans().find(elem(), n * elem());
    return m && m->algos.size() == s_.layout().ndims() ? m : nullptr;
  }
  // all_reduce's program and segments in flight (decide first, unless decided:
  // decide = false).
  std::pair<const program*, std::size_t> all_reduce_plan(std::size_t n, bool decide_now = true) {
    const call_decision& d = decide_now ? decide(collective::all_reduce, n) : ws().decision();
    const program& pr = program_of(collective::all_reduce, n, 0, make_all_reduce_program);
    return {&pr, d.depth < pr.segments ? d.depth : pr.segments};
  }

  // ---- scratch ------------------------------------------------------------------------
  // Elements of cross-memory-attach pieces: p for the largest shared dimension
  // between processes (p-1 read from the peers, one for a fold whose outputs are
  // all the peers': local_ops.hpp fold_by_pieces).
  std::size_t piece_elements(const program& pr) const {
    std::size_t n = 0;
    const std::size_t piece = piece_bytes / elem();
    if (!Transport::same_address_space && pr.shared)
      for (std::size_t d = 0; d < s_.layout().ndims(); ++d)
        if (s_.layout().extents[d] > 1 && s_.shared(d))
          n = s_.layout().extents[d] * piece > n ? s_.layout().extents[d] * piece : n;
    return n;
  }
  std::size_t scratch_bytes_of(const program& pr, std::size_t depth) const {
    return align_up(pr.scratch_elements * elem()) + depth * align_up(pr.slot_elements * elem()) +
           align_up(piece_elements(pr) * elem());
  }
  // What the pull form (stream_in) needs of a call: the elements of send and recv,
  // whether this rank takes a block of node memory when its buffers cannot be
  // mapped (a broadcast's root only), and where `source` is otherwise (laid out as
  // the peers read it: all_reduce's and reduce_scatter's send, all_gather's recv,
  // broadcast's buffer; the block is as large as the larger of the two).
  struct streaming {
    std::size_t send_count = 0, recv_count = 0;
    bool takes = false;
    const void* source = nullptr;
  };
  // all_reduce, reduce_scatter, all_gather and broadcast pass `how`: their pull form.
  void start(const program& pr, std::size_t depth, const void* send, void* recv, const streaming& how = {}) {
    auto* base = static_cast<unsigned char*>(ws().scratch().get(scratch_bytes_of(pr, depth)));
    call_buffers& b = s_.buffers();
    b.send = b.source = send, b.recv = b.result = recv;
    if (how.recv_count) stream_in(send, recv, how);
    b.scratch = base;
    base += align_up(pr.scratch_elements * elem());
    b.slots = base;
    b.slot_stride = align_up(pr.slot_elements * elem()) / elem();
    b.pieces = base + depth * align_up(pr.slot_elements * elem());
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
  // block as its source alone (plan/broadcast_program.hpp shared_broadcast);
  // the other ranks (takes = false) only publish whether their buffer is mapped.
  // all_gather's ranks put their own block into it (plan/all_gather_program.hpp).
  void stream_in(const void* send, void* recv, const streaming& how) {
    if constexpr (!Transport::same_address_space) {
      call_buffers& b = s_.buffers();
      b.source = how.source;
      const std::size_t bytes = std::max(how.send_count, how.recv_count) * elem();
      const bool unmapped = s_.notes_unmapped() && !(is_node_memory(send, how.send_count * elem()) &&
                                                     is_node_memory(recv, how.recv_count * elem()));
      s_.set_unmapped(unmapped);
      const auto& dp = ws().description().dims;
      if (!how.takes || !unmapped ||
          std::none_of(dp.begin(), dp.end(), [](const dim_program& d) { return d.streamed; }))
        return;
      copy_ = ws().blocks().take(bytes);
      if (!is_node_memory(copy_.get(), bytes)) return copy_.reset();
      b.result = copy_.get();
      b.source = b.result;
    } else {
      (void)send, (void)recv, (void)how;
    }
  }

  // Scratch bytes a call of this kind and count needs, with halving-doubling forced
  // on dimension `force_hd` (>= 0; all_reduce then counts tuning::pipeline_depth
  // segments in flight, the most there can be).
  std::size_t scratch_bytes(collective kind, std::size_t count, int force_hd = -1) {
    decide(kind, count, force_hd);
    if (kind == collective::all_reduce) {
      auto [pr, depth] = all_reduce_plan(count, false);
      return scratch_bytes_of(*pr, force_hd >= 0 ? opts().tune.pipeline_depth : depth);
    }
    // reduce: a rank that is not the root, which needs more (W)
    const std::size_t root = kind == collective::reduce && s_.layout().rank == 0 ? 1 % size() : 0;
    return scratch_bytes_of(program_of(kind, count, root, builder_of(kind)), 1);
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
  MDRING_COLD void measure(std::size_t n) {
    auto& ms = ws().measuring();
    ms.active = true;
    struct reset {
      typename call_workspace<Transport>::measuring_state& m;
      ~reset() { m = {}; }
    } guard{ms};
    const auto& o = opts();
    const bound_layout& L = s_.layout();
    decide(collective::all_reduce, n);  // measured_for: none while measuring
    const std::vector<algorithm> est(ws().decision().algos);
    const std::vector<measured_choice> cand =
        measured_candidates(L.executed(), est, L.merged.requested, L.algorithms, n, elem(), o.tune);
    // The candidates' buffers come from options.memory, as all scratch does (under
    // SimGrid SMPI: shared pages, not n elements per simulated rank); zeroed.
    std::pmr::memory_resource* mr = o.memory_or_default();
    const std::size_t bytes = align_up(n * elem());
    struct buffer {
      std::pmr::memory_resource* mr;
      std::size_t bytes;
      void* p = mr->allocate(bytes, scratch_alignment);
      ~buffer() { mr->deallocate(p, bytes, scratch_alignment); }
    } a{mr, bytes}, b{mr, bytes};
    std::memset(a.p, 0, bytes), std::memset(b.p, 0, bytes);
    std::vector<double> secs(cand.size() + 1, 0.0), t;  // the medians, then the largest spread
    // The slowest rank's figures: an all-reduce (max) of seconds, which are never
    // negative, as their bit patterns (IEEE doubles of one sign order as their bits
    // do), with the int64 ops the argument agreement compiles anyway
    // (collective/launch.hpp): no fold of doubles compiled for this alone.
    local_ops<std::int64_t, max_t, Transport> max_ops(max_t{}, size());
    engine slowest_engine(s_.binding(), s_.name(), max_ops, sizeof(std::int64_t), true);
    std::vector<std::int64_t> bits;
    auto slowest = [&](double* v, std::size_t count) {
      bits.resize(count);
      std::memcpy(bits.data(), v, count * sizeof(double));
      slowest_engine.all_reduce(bits.data(), bits.data(), count);
      std::memcpy(v, bits.data(), count * sizeof(double));
    };
    auto run = [&](const measured_choice& c) {
      ms.forced = &c;
      const double t0 = seconds_on(s_.transport());  // the transport's clock: simulated time under SMPI
      all_reduce(a.p, b.p, n);
      ms.forced = nullptr;
      return seconds_on(s_.transport()) - t0;
    };
    // Timed runs per candidate: about 2 ms of the estimate's plan, 3 to 15, from the
    // slowest rank's warm-up, so that every rank runs as many.
    double warm = run(cand[0]);
    slowest(&warm, 1);
    const std::size_t runs = warm * 15 < 2e-3 ? 15 : warm * 3 > 2e-3 ? 3 : std::size_t(2e-3 / warm);
    for (std::size_t i = 0; i < cand.size(); ++i) {
      if (i) run(cand[i]);  // warm-up
      t.clear();
      for (std::size_t r = 0; r < runs; ++r) t.push_back(run(cand[i]));
      std::sort(t.begin(), t.end());
      secs[i] = t[t.size() / 2];
      if (secs[i] > 0) secs.back() = std::max(secs.back(), (t.back() - t.front()) / secs[i]);
    }
    slowest(secs.data(), secs.size());
    // The estimate's plan stays unless another is faster by more than the noise
    // between runs of one plan (the largest spread; 1 % to 5 %).
    const double spread = secs.back();
    secs.pop_back();
    const std::size_t best = pick_measured(secs, spread);
    measured_choice m = cand[best];
    m.seconds = secs[best];
    m.estimate_seconds = secs[0];
    m.candidates = cand.size();
    wisdom& w = ws().measured_plans();
    w.all_reduce[{elem(), size_class(n * elem())}] = m;
    if (!o.wisdom.empty()) {
      w.save(o.wisdom, L.rank);
      double sync = 0;  // every rank has written it before any goes on (to bind again, say)
      slowest(&sync, 1);
    }
  }

  // The engine's parts, in this order (each refers to the ones before).
  state s_;
  call_cursor<Transport> cur_;
  std::shared_ptr<void> copy_;  // stream_in's copy, back to the pool with the engine
};

}  // namespace detail

MDRING_NAMESPACE_END
