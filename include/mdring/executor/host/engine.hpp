// mdring/executor/host/engine.hpp: the five collectives of the host executor (see core.hpp).
#pragma once

#include "../../plan/plan.hpp"
#include "segments.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class engine : public segment_executor<T, Op, Comm> {
public:
  using B = segment_executor<T, Op, Comm>;
  using B::B;
  using B::name_;
  using pipeline = typename B::pipeline;
  using segment = typename B::segment;
  using B::c_, B::red_, B::ext_, B::coords_, B::dims_, B::commutative_, B::w_lo_, B::W_, B::ranges, B::root_coords,
      B::line_of_root;
  using B::first_dim, B::last_dim, B::nontrivial_dims, B::sizes_rs, B::sizes_ag, B::total_bytes, B::reserve;
  using B::reduce_scatter_stage, B::all_gather_stage, B::all_gather_unpack_stage, B::scatter_stage, B::gather_stage;
  using B::all_reduce_scatter_into, B::pipeline_of, B::pipeline_scratch_bytes, B::reserve_pipeline, B::run_pipeline;

  // ---- the five collectives (arguments already checked) ---------------------

  // all_reduce: the reduce-scatter stages inwards-out, then the all-gathers back,
  // run by the segment executor below (one segment: the stages one after another).
  void all_reduce(const T* send, T* recv, std::size_t n) {
    if (first_dim() < 0) return red_.finalize(recv, send, n, true);
    if (c_.get_options().planning == planning::measure && commutative_ && n > 0 && !c_.measuring().active &&
        !c_.measuring().forced && !c_.measured_plans().find(sizeof(T), n * sizeof(T)))
      measure(n);
    pipeline pl = pipeline_of(n);
    reserve_pipeline(pl);
    run_pipeline(pl, send, recv);
  }

  void reduce_scatter(const T* send, T* recv, std::size_t rc) {
    const std::size_t n = rc * c_.size();
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (first < 0) return red_.finalize(recv, send, rc, true);
    const bool permuted = nontrivial_dims() > 1;
    reserve(n, sizes_rs(n, permuted, false, first != last));
    view<const T> src{send, 0, rc, permuted, ext_};
    const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
    const std::size_t w_lo = r1.offset + b1.offset;
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
      if (ext_[d] == 1) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      const bool is_last = int(d) == last;
      if (int(d) == first) {
        reduce_scatter_stage(d, r, src, nullptr, is_last ? recv : W_, is_last);
      } else {
        T* mid = W_ + (r.offset - w_lo);
        reduce_scatter_stage(d, r, view<const T>{W_, w_lo}, mid, is_last ? recv : mid + b.offset, is_last);
      }
    }
  }

  void all_gather(const T* send, T* recv, std::size_t sc) {
    const std::size_t n = sc * c_.size();
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (sc == 0) return;
    T* own = recv + c_.rank() * sc;
    if (first < 0) {
      if (send != recv) std::memmove(recv, send, sc * sizeof(T));
      return;
    }
    if (first == last) {  // one ring: nested order is rank order
      if (send != own) std::memcpy(own, send, sc * sizeof(T));
      reserve(n, sizes_ag(n, false));
      all_gather_stage(std::size_t(first), rg[first], recv);
      return;
    }
    reserve(n, sizes_ag(n, true));
    const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
    const std::size_t w_lo = r1.offset + b1.offset;
    const std::size_t q = nested_index(ext_, coords_);
    std::memcpy(W_ + (q * sc - w_lo), send, sc * sizeof(T));
    for (std::size_t d = std::size_t(last); d > std::size_t(first); --d)
      if (ext_[d] > 1) all_gather_stage(d, rg[d], W_ + (rg[d].offset - w_lo));
    all_gather_unpack_stage(std::size_t(first), r1, W_, view<T>{recv, 0, sc, true, ext_});
  }

  void broadcast(T* buf, std::size_t n, std::size_t root) {
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (first < 0) return;
    auto& rc = root_coords(root);
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d)
      if (ext_[d] > 1 && line_of_root(d, rc)) scatter_stage(d, rg[d], buf + rg[d].offset, rc[d]);
    for (std::size_t d = std::size_t(last) + 1; d-- > std::size_t(first);)
      if (ext_[d] > 1) all_gather_stage(d, rg[d], buf + rg[d].offset);
  }

  void reduce(const T* send, T* recv, std::size_t n, std::size_t root) {
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    const bool is_root = c_.rank() == root;
    if (first < 0) return red_.finalize(recv, send, n, true);
    auto& rc = root_coords(root);
    if (is_root) {
      all_reduce_scatter_into(send, recv, n, first, last);
    } else {
      reserve(n, sizes_rs(n, false, false, true));
      const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
      const std::size_t w_lo = r1.offset + b1.offset;
      for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
        if (ext_[d] == 1) continue;
        const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
        if (int(d) == first) {
          reduce_scatter_stage(d, r, view<const T>{send}, nullptr, W_, int(d) == last);
        } else {
          T* mid = W_ + (r.offset - w_lo);
          reduce_scatter_stage(d, r, view<const T>{W_, w_lo}, mid, mid + b.offset, int(d) == last);
        }
      }
      w_lo_ = w_lo;
    }
    for (std::size_t d = std::size_t(last) + 1; d-- > std::size_t(first);) {
      if (ext_[d] == 1 || !line_of_root(d, rc)) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      T* whole = is_root ? recv + r.offset : (coords_[d] == rc[d] ? W_ + (r.offset - w_lo_) : nullptr);
      const T* own = is_root ? recv + r.offset + b.offset : W_ + (r.offset + b.offset - w_lo_);
      gather_stage(d, r, whole, own, rc[d]);
    }
  }

  // ---- measured planning (options.planning = measure, plan/wisdom.hpp) ---------
  //
  // At the first all_reduce of a size class: times candidate plans on buffers of
  // the call's size (the estimate's plan; each ring dimension the user left
  // automatic flipped between ring and halving-doubling; with pipelining, the
  // estimate's segment count halved and doubled, one segment, and fewer segments in
  // flight), one warm-up and 3 to 15 runs each (about 2 ms), takes every candidate's
  // median, then the slowest rank's (one all_reduce of the medians, so every rank
  // picks the same), and keeps the fastest if it beats the estimate's plan by more
  // than 5 %, else the estimate's. Every rank writes options.wisdom.
  void measure(std::size_t n) {
    auto& ms = c_.measuring();
    ms.active = true;
    struct reset {
      typename Comm::measuring_state& m;
      ~reset() { m = {}; }
    } guard{ms};
    const auto& o = c_.get_options();
    const auto& tune = o.tune;
    this->choose_algorithms(n);
    const std::vector<algorithm> est(c_.algorithm_slots());
    const std::size_t K0 = segment_count(n, segment_elements(c_.executed_topology(), est, n, sizeof(T), tune));
    std::vector<measured_choice> cand;
    auto add = [&](const std::vector<algorithm>& al, std::size_t K, std::size_t depth) {
      for (auto& c : cand)
        if (c.algos == al && c.segments == K && c.depth == depth) return;
      cand.push_back({al, K, depth, 0, 0, 0});
    };
    const std::size_t D = tune.pipeline_depth;
    add(est, K0, D);
    const auto& req = c_.requested_algorithms();
    for (std::size_t d = 0; d < ext_.size(); ++d) {
      if (ext_[d] < 2 || dims_[d].algo_for(true) != algorithm::ring || (d < req.size() && req[d] != algorithm::automatic))
        continue;
      std::vector<algorithm> al = est;
      al[d] = est[d] == algorithm::halving_doubling ? algorithm::ring : algorithm::halving_doubling;
      add(al, K0, D);
    }
    if (pipelines(c_.executed_topology(), est)) {
      add(est, 1, D);
      if (2 * K0 <= tune.max_segments && n >= 2 * K0) add(est, 2 * K0, D);
      if (K0 > 2) add(est, K0 / 2, D);
      if (K0 > 1 && D > 2) add(est, K0, 2);
    }
    std::vector<T> a(n), b(n);
    std::vector<double> secs(cand.size()), t;
    engine<double, max_t, Comm> slowest(c_, name_, max_t{}, true);
    auto run = [&](const measured_choice& c) {
      ms.forced = &c;
      const auto t0 = deadline_clock::now();
      pipeline pl = pipeline_of(n);
      reserve_pipeline(pl);
      run_pipeline(pl, a.data(), b.data());
      ms.forced = nullptr;
      return std::chrono::duration<double>(deadline_clock::now() - t0).count();
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
    }
    slowest.all_reduce(secs.data(), secs.data(), secs.size());
    // The estimate's plan stays unless another is faster by more than this machine's
    // noise between runs of one plan (5 %).
    std::size_t best = 0;
    for (std::size_t i = 1; i < cand.size(); ++i)
      if (secs[i] < 0.95 * secs[0] && secs[i] < secs[best]) best = i;
    measured_choice m = cand[best];
    m.seconds = secs[best];
    m.estimate_seconds = secs[0];
    m.candidates = cand.size();
    wisdom& w = c_.measured_plans();
    w.all_reduce[{sizeof(T), size_class(n * sizeof(T))}] = m;
    if (!o.wisdom.empty()) {
      w.save(o.wisdom, c_.rank());
      double sync = 0;  // every rank has written it before any goes on (to bind again, say)
      slowest.all_reduce(&sync, &sync, 1);
    }
  }

  // Scratch bytes a call of this kind and count needs, with halving-doubling forced
  // on dimension `force_hd` (>= 0; all_reduce then counts tuning::pipeline_depth
  // segments in flight, the most there can be).
  std::size_t scratch_bytes(collective kind, std::size_t count, int force_hd = -1) {
    const std::size_t n = (kind == collective::reduce_scatter || kind == collective::all_gather) ? count * c_.size() : count;
    ranges(n);
    if (force_hd >= 0) c_.algorithm_slots()[std::size_t(force_hd)] = algorithm::halving_doubling;
    const bool multi = nontrivial_dims() > 1;
    scratch_sizes s;
    switch (kind) {
      case collective::all_reduce: {
        pipeline pl = pipeline_of(n, force_hd < 0);
        if (force_hd >= 0) pl.depth = c_.get_options().tune.pipeline_depth;
        return pipeline_scratch_bytes(pl);
      }
      case collective::reduce_scatter: s = sizes_rs(n, multi, false, multi); break;
      case collective::all_gather: s = sizes_ag(n, multi); break;
      case collective::reduce: s = sizes_rs(n, false, false, true); break;  // a non-root rank
      default: break;
    }
    return total_bytes(s);
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
    const std::size_t per = (kind == collective::reduce_scatter || kind == collective::all_gather) ? c_.size() : 1;
    const std::size_t cap = c_.get_options().tune.halving_doubling_max_bytes / sizeof(T);
    const auto& req = c_.requested_algorithms();
    for (std::size_t d = 0; d < ext_.size(); ++d) {
      if (ext_[d] < 4 || dims_[d].algo_for(commutative_) != algorithm::ring ||
          (d < req.size() && req[d] != algorithm::automatic))
        continue;
      auto range_at = [&](std::size_t c) {  // the nominal range of dimension d (plan/pipeline.hpp)
        std::size_t r = c * per;
        for (std::size_t e = 0; e < d; ++e) r = ext_[e] > 1 ? max_block(r, ext_[e]) : r;
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
    return bytes;
  }
};

}  // namespace detail

MDRING_NAMESPACE_END
