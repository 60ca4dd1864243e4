// mdring/executor/host/segments.hpp: the segment executor of all_reduce (see core.hpp).
#pragma once

#include "../../plan/pipeline.hpp"
#include "../../plan/wisdom.hpp"
#include "stages.hpp"

#include <algorithm>
#include <array>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class segment_executor : public stages<T, Op, Comm> {
public:
  using B = stages<T, Op, Comm>;
  using B::B;
  using transport_t = typename B::transport_t;
  using ring_bufs = typename B::ring_bufs;
  using B::c_, B::tr_, B::dims_, B::ext_, B::coords_, B::reqs_, B::infos_, B::commutative_, B::nreq_, B::base_;
  using B::seg_, B::slots_, B::slot_stride_, B::Q_, B::wait, B::raise, B::deadline, B::shared, B::direct, B::ranges;
  using B::first_dim, B::last_dim, B::direct_slots, B::shared_reduce_scatter_stage, B::shared_all_gather_stage;
  using B::shared_all_reduce_stage, B::ring_rs_post, B::ring_rs_fold, B::direct_rs_post, B::direct_rs_fold;
  using B::ring_ag_post, B::direct_ag_post, B::halving_doubling, B::hd_rs_post, B::hd_rs_fold, B::hd_ag_post;

  // ---- the segment executor of all_reduce ------------------------------------
  //
  // The buffer is cut into segments (plan/pipeline.hpp picks how many); each is an
  // all_reduce of its own range, whose program is the reduce-scatter stages, the
  // last dimension's reduce-scatter and all-gather (fused when shared), and the
  // all-gathers back. Up to tuning::pipeline_depth segments are in flight, each
  // with its own requests and receive slots; a new one starts when the newest has
  // left the first stage, so consecutive segments sit in consecutive stages.
  //
  // The executor always completes the step of the segment that has waited longest
  // (a FIFO), and every stage has the same number of steps on every rank (ring:
  // p-1, direct and shared: 1; empty ranges post nothing): so every rank runs the
  // same sequence of posts and waits. The wait that comes first in it has all its
  // messages posted by then, which is why this cannot deadlock; tags carry the
  // segment, so the matching does not depend on the order either.

  struct pipeline {
    segmentation seg;       // plan/pipeline.hpp: segment count, length and stage ranges
    std::size_t depth = 1;  // segments in flight at once
    std::size_t slot_elems = 0;           // receive slots of one segment in flight
    std::size_t piece_elems = 0;          // shared access between processes: p-1 pieces
  };
  struct pipeline_stage {
    phase ph;
    std::size_t d;
    std::size_t rs_steps;  // the fused last stage: steps [0, rs_steps) reduce-scatter
    std::size_t steps;
  };
  struct segment {
    std::size_t index = 0, lo = 0, stage = 0, step = 0, nreq = 0;
    bool busy = false;
  };
  static constexpr std::size_t max_depth = 8;

  std::size_t stage_steps(std::size_t d) const {
    return direct(d) ? 1 : halving_doubling(d) ? hd_shape_of(ext_[d]).steps() : ext_[d] - 1;
  }

  // The measured plan an all_reduce of n elements runs (options.planning = measure,
  // plan/wisdom.hpp): the candidate being timed, or what this size class measured.
  const measured_choice* measured_for(std::size_t n) {
    auto& ms = c_.measuring();
    const measured_choice* m = ms.forced;
    if (!m && !ms.active && commutative_ && c_.get_options().planning == planning::measure)
      m = c_.measured_plans().find(sizeof(T), n * sizeof(T));
    return m && m->algos.size() == dims_.size() ? m : nullptr;
  }

  // choose: pick the call's algorithms first (false: keep those in the slots).
  pipeline pipeline_of(std::size_t n, bool choose = true) {
    pipeline pl;
    const auto& tune = c_.get_options().tune;
    if (choose) B::choose_algorithms(n);
    std::vector<algorithm>& al = c_.algorithm_slots();
    std::size_t len, depth = tune.pipeline_depth;
    if (const measured_choice* m = measured_for(n)) {
      std::copy(m->algos.begin(), m->algos.end(), al.begin());
      len = segment_length(n, m->segments, sizeof(T));
      depth = m->depth < depth ? m->depth : depth;  // request slots exist for tune.pipeline_depth
    } else {
      len = segment_elements(c_.executed_topology(), al, n, sizeof(T), tune);
    }
    pl.seg = make_segmentation(n, len, ext_, coords_);
    pl.depth = depth < pl.seg.segments ? depth : pl.seg.segments;
    for (std::size_t d = 0; d < ext_.size(); ++d) {
      if (ext_[d] == 1) continue;
      std::size_t need;
      if (shared(d)) {
        need = direct_slots(d, pl.seg.full[d].count);
        pl.piece_elems = need > pl.piece_elems ? need : pl.piece_elems;
        continue;
      }
      const std::size_t mb = max_block(pl.seg.full[d].count, ext_[d]);
      need = direct(d) ? (ext_[d] - 1) * mb : halving_doubling(d) ? pl.seg.full[d].count : mb;
      pl.slot_elems = need > pl.slot_elems ? need : pl.slot_elems;
    }
    return pl;
  }
  std::size_t pipeline_scratch_bytes(const pipeline& pl) const {
    return pl.depth * align_up(pl.slot_elems * sizeof(T)) + align_up(pl.piece_elems * sizeof(T));
  }
  void reserve_pipeline(const pipeline& pl) {
    auto* base = static_cast<unsigned char*>(c_.scratch().get(pipeline_scratch_bytes(pl)));
    slots_ = reinterpret_cast<T*>(base);
    slot_stride_ = align_up(pl.slot_elems * sizeof(T)) / sizeof(T);
    Q_ = reinterpret_cast<T*>(base + pl.depth * align_up(pl.slot_elems * sizeof(T)));
  }

  void run_pipeline(const pipeline& pl, const T* send, T* recv) {
    const std::size_t first = std::size_t(first_dim()), last = std::size_t(last_dim());
    std::vector<pipeline_stage> prog;
    for (std::size_t d = first; d <= last; ++d)
      if (ext_[d] > 1)
        prog.push_back({phase::reduce_scatter, d, stage_steps(d), stage_steps(d) * (d == last ? 2 : 1)});
    for (std::size_t d = last; d-- > first;)
      if (ext_[d] > 1) prog.push_back({phase::all_gather, d, 0, stage_steps(d)});

    std::array<segment, max_depth> segs{};
    std::array<std::size_t, max_depth> queue{};
    std::size_t head = 0, queued = 0, active = 0, next = 0, newest = max_depth;
    const std::size_t per_slot = c_.request_slot_size();
    auto select = [&](segment& sg, std::size_t slot) {
      seg_ = sg.index;
      base_ = slot * per_slot;
      nreq_ = sg.nreq;
    };
    auto post = [&](std::size_t slot) {
      segment& sg = segs[slot];
      select(sg, slot);
      pipeline_step(pl, prog[sg.stage], sg, slot, send, recv, false, first, last);
      sg.nreq = nreq_;
      queue[(head + queued++) % max_depth] = slot;
    };
    // Tags carry the segment modulo max_depth: when segments finish out of order,
    // one may start only while no segment max_depth before it is still in flight.
    auto oldest = [&] {
      std::size_t o = next;
      for (const auto& sg : segs)
        if (sg.busy && sg.index < o) o = sg.index;
      return o;
    };
    auto admit = [&] {
      while (next < pl.seg.segments && active < pl.depth && next - oldest() < max_depth &&
             (newest == max_depth || !segs[newest].busy || segs[newest].stage > 0)) {
        std::size_t slot = 0;
        while (segs[slot].busy) ++slot;
        segs[slot] = segment{next, pl.seg.first(next), 0, 0, 0, true};
        ++next, ++active;
        newest = slot;
        post(slot);
      }
    };
    // Completes the posted step of the segment in queue position i and posts its next.
    auto advance = [&](std::size_t i) {
      const std::size_t slot = queue[(head + i) % max_depth];
      for (std::size_t j = i; j > 0; --j) queue[(head + j) % max_depth] = queue[(head + j - 1) % max_depth];
      head = (head + 1) % max_depth, --queued;
      segment& sg = segs[slot];
      select(sg, slot);
      pipeline_step(pl, prog[sg.stage], sg, slot, send, recv, true, first, last);
      sg.nreq = 0;
      if (++sg.step == prog[sg.stage].steps) sg.step = 0, ++sg.stage;
      if (sg.stage < prog.size()) post(slot);
      else sg.busy = false, --active;
      admit();
    };
    try {
      admit();
      if (any_order(prog)) {
        // Whichever segment's step is done goes on first, so a long stage of one
        // segment (a direct stage inside a node) does not hold up the steps of the
        // others (a ring between nodes). No step here is a shared one, whose
        // arrive/leave must happen in the same order on every rank; every other
        // step waits only for messages already posted (see above), so this order
        // cannot deadlock either.
        while (queued) {
          std::size_t ready = queued;
          for (std::size_t i = 0; i < queued && ready == queued; ++i) {
            const segment& sg = segs[queue[(head + i) % max_depth]];
            const auto* rq = reqs_ + queue[(head + i) % max_depth] * per_slot;
            bool done = true;
            for (std::size_t k = 0; k < sg.nreq && done; ++k) done = transport_t::complete(rq[k]);
            if (done) ready = i;
          }
          if (ready < queued) {
            advance(ready);
            continue;
          }
          wait_any_segment(prog, segs, pl.depth * per_slot, per_slot);
        }
      } else {
        while (queued) advance(0);
      }
    } catch (...) {
      for (std::size_t slot = 0; slot < max_depth; ++slot)
        if (segs[slot].busy && segs[slot].nreq)
          tr_.cancel_all(std::span<typename transport_t::request>(reqs_ + slot * per_slot, segs[slot].nreq));
      nreq_ = 0;
      throw;
    }
  }

  static constexpr bool has_wait_any = waits_for_any<transport_t>;
  // Segments may complete their steps out of order: the transport can wait for
  // any of several requests, and no stage of the program uses shared access.
  bool any_order(const std::vector<pipeline_stage>& prog) {
    if constexpr (!has_wait_any) return false;
    for (const auto& st : prog)
      if (shared(st.d)) return false;
    return true;
  }
  // Blocks until some request of the segments in flight completes; raises what a
  // timeout or a failed peer means, naming the step of the segment it concerns.
  template <class Segs>
  void wait_any_segment(const std::vector<pipeline_stage>& prog, Segs& segs, std::size_t n, std::size_t per_slot) {
    if constexpr (has_wait_any) {
      std::span<typename transport_t::request> rs(reqs_, n);
      const wait_status st =
          wait_or_yield(deadline(), [&](deadline_clock::time_point dl) { return tr_.wait_any(rs, dl); },
                        [&] { return tr_.wait_any(rs, deadline_clock::time_point{}); });
      if (st.kind == wait_status::done) return;
      const std::size_t slot = st.kind == wait_status::timeout ? st.index / per_slot : 0;
      const auto& sg = segs[slot];
      const auto& stage = prog[sg.stage < prog.size() ? sg.stage : 0];
      const bool rs_phase = stage.ph == phase::reduce_scatter && sg.step < stage.rs_steps;
      const std::size_t step = rs_phase ? sg.step : sg.step - stage.rs_steps;
      const auto& info = infos_[st.kind == wait_status::timeout ? st.index : slot * per_slot];
      raise(st, rs_phase ? phase::reduce_scatter : phase::all_gather,
            st.kind == wait_status::timeout ? info.dim : stage.d, step, info.peer,
            info.is_send ? " to receive what rank " : " to send to rank ");
    }
  }

  // Posts (finish == false) or completes one step of segment sg.
  void pipeline_step(const pipeline& pl, const pipeline_stage& st, const segment& sg, std::size_t slot, const T* send,
                     T* recv, bool finish, std::size_t first, std::size_t last) {
    const std::size_t d = st.d, p = ext_[d], c = coords_[d];
    const auto& rg = pl.seg.ranges(sg.index);
    const block_range r{sg.lo + rg[d].offset, rg[d].count};
    const view<const T> src{d == first ? send : recv};
    T* mid = recv + r.offset;
    T* out = mid + block_of(r.count, p, c).offset;
    const bool rs = st.ph == phase::reduce_scatter && sg.step < st.rs_steps;
    const std::size_t s = rs ? sg.step : sg.step - st.rs_steps;
    const bool final = d == last;
    if (shared(d)) {
      if (!finish || s != 0 || r.count == 0) return;
      if (st.rs_steps && st.steps > st.rs_steps) {
        if (rs) shared_all_reduce_stage(d, r, src, mid, true);  // the fused last dimension
      } else if (rs) {
        shared_reduce_scatter_stage(d, r, src, out, final);
      } else {
        shared_all_gather_stage(d, r, mid);
      }
      return;
    }
    T* q = slots_ + slot * slot_stride_;
    if (halving_doubling(d)) {
      if (!finish) return rs ? hd_rs_post(d, r, src, mid, q, out, s) : hd_ag_post(d, r, mid, s);
      wait(rs ? phase::reduce_scatter : phase::all_gather, d, s);
      if (rs) hd_rs_fold(d, r, src, mid, q, out, s, final);
      return;
    }
    const ring_bufs b{mid, q, nullptr};
    if (!finish) {
      if (rs) direct(d) ? direct_rs_post(d, r, src, q, nullptr) : ring_rs_post(d, r, src, b, s);
      else direct(d) ? direct_ag_post(d, r, mid) : ring_ag_post(d, r, mid, s);
      return;
    }
    wait(rs ? phase::reduce_scatter : phase::all_gather, d, s);
    if (rs) direct(d) ? direct_rs_fold(d, r, src, q, out, final) : ring_rs_fold(d, r, src, b, out, s, final);
  }
};

}  // namespace detail

MDRING_NAMESPACE_END
