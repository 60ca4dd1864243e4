// mdring/plan/pipeline.hpp: how many segments an all_reduce is cut into.
//
// Without pipelining an all_reduce over dimensions d = 0..k-1 takes
//   T(1) = sum_d t_d(n),   t_d = RS_d + AG_d
// and every link idles while another dimension works. Cut into K segments that
// follow each other through the stages, a segment is done every `pace` seconds:
//   T(K) = sum_d t_d(n/K) + (K - 1) pace(n/K)
// (a dimension's reduce-scatter and all-gather share its links, so they count
// together). The first term is the pipeline's fill and drain. The executor keeps
// c = min(K, tuning::pipeline_depth) segments in flight and starts the next when
// one is done, so the pace is that of a closed queueing network of c customers:
// each segment needs every link for its busy time b_d (bytes and per-message
// overheads, plan/cost.hpp: no segment can use a link while another does) and
// waits out the latencies, t_d - b_d, which overlap anything. Dimensions of the
// same link (the same link name: "ib:16 x ib:16", the nodes behind one uplink cut
// into a grid) send through the same port: one queue, D = sum b_d. Mean value
// analysis (Reiser and Lavenberg) gives the throughput X(c) of such a network,
// with Z = sum_d (t_d - b_d):
//   R_q(n) = D_q (1 + Q_q(n-1)),  X(n) = n / (Z + sum_q R_q(n)),  Q_q(n) = X(n) R_q(n)
// and pace = 1 / X(c): t(n/K) summed for one segment in flight (nothing overlaps),
// approaching the busiest link's D as c grows, and above both bounds near the
// knee, where segments queue for a link while others wait out latencies.
// (Simulated on the 64 x 4 cluster with measured links, docs/SCALING.md: within
// 0.5 % from 8 to 64 segments at 102.4 MB and 2 % from 4 to 64 at 16 MiB, where
// the bounds alone, max(b_d, t_d / c), had picked 64 segments, 4 % slower than the
// 16 that this picks.)
// Give links of their own a name of their own (register_link) when they are
// separate ports, as in a torus. The latencies, and the per-message overheads
// (which no depth hides), are what stop K from growing without bound: on a link
// with overhead o and bandwidth B, messages much below o B bytes waste the link.
// The model picks the
// K in {1, 2, 4, ...} with the smallest T(K), with segments of at least
// tuning::min_segment_bytes and at most tuning::max_segments of them;
// tuning::segment_bytes overrides it. Segment lengths are rounded up to whole
// cache lines, so the count can come out a little lower than K.
//
// Only all_reduce is pipelined, and only when two or more dimensions have more
// than one rank and at least one of them moves messages: dimensions of fully
// connected host links with the direct algorithm run by shared access, on the
// same cores, so overlapping them with each other gains nothing.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "blocks.hpp"
#include "cost.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// n values of T, on the stack up to 16 (a topology has a handful of dimensions: the
/// planner allocates nothing for it), on the heap beyond; value-initialized.
template <class T>
class small_buffer {
public:
  /// n values, value-initialized.
  explicit small_buffer(std::size_t n) : n_(n) {
    if (n > on_stack_.size()) on_heap_.assign(n, T{});
  }
  small_buffer(const small_buffer&) = delete;
  small_buffer& operator=(const small_buffer&) = delete;
  T* data() noexcept { return n_ > on_stack_.size() ? on_heap_.data() : on_stack_.data(); }  ///< the n values
  std::span<T> span() noexcept { return {data(), n_}; }  ///< the n values, as a span

private:
  std::size_t n_;
  std::array<T, 16> on_stack_{};
  std::vector<T> on_heap_;
};

/// 1 / X(c) of the mean value analysis above: `demands` are the links' busy seconds
/// per segment (one queue each), `delay` the seconds that overlap anything, c >= 1
/// the segments in flight. Example: one link busy 1 s and 1 s of latency, two in
/// flight: X(1) = 1/2, Q(1) = 1/2, R(2) = 1.5, X(2) = 2/2.5: pace 1.25 s (the bounds
/// say max(1, 2/2) = 1).
inline double closed_pace(std::span<const double> demands, double delay, std::size_t c) {
  small_buffer<double> queued(demands.size());  // Q_q(n - 1)
  double* q = queued.data();
  double x = 0;
  for (std::size_t n = 1; n <= (c ? c : 1); ++n) {
    double r = delay;
    for (std::size_t i = 0; i < demands.size(); ++i) r += demands[i] * (1 + q[i]);
    if (r <= 0) return 0.0;
    x = double(n) / r;
    for (std::size_t i = 0; i < demands.size(); ++i) q[i] = x * demands[i] * (1 + q[i]);
  }
  return 1.0 / x;
}

/// Predicted seconds of the reduce-scatter plus all-gather of every dimension, for
/// an all_reduce of n elements (ranges shrink by each dimension's extent).
struct dimension_times {
  double sum = 0;   ///< all stages, one after the other
  double pace = 0;  ///< seconds between segments done, `concurrent` in flight
};

/// The dimension_times of an all_reduce of n elements with these algorithms, `concurrent` segments in flight.
inline dimension_times all_reduce_dimension_times(const runtime_topology& topo, std::span<const algorithm> algos,
                                                  std::size_t n, std::size_t elem_size, const tuning& tune,
                                                  std::size_t concurrent = 1) {
  dimension_times t;
  std::size_t range = n;
  // Per dimension: the stages' time and the time the link is busy; then the
  // dimensions of one link are added up.
  const std::size_t k = topo.ndims();
  small_buffer<double> both_b(k), busy_b(k);
  double* both = both_b.data();
  double* busy = busy_b.data();
  for (std::size_t d = 0; d < k; ++d) {
    const std::size_t p = topo.extent(d);
    if (p <= 1) continue;
    const link_info link = topo.rank_link(d);  // the rank's share of a NIC
    const double g = tune.gamma(link.space);
    const bool rd = algos[d] == algorithm::recursive_doubling;  // the whole range, kept
    auto both_for = [&](const link_info& l) {
      if (rd) return stage_seconds(phase::all_reduce, algos[d], p, range, elem_size, l, g);
      return stage_seconds(phase::reduce_scatter, algos[d], p, range, elem_size, l, g) +
             stage_seconds(phase::all_gather, algos[d], p, range, elem_size, l, g);
    };
    both[d] = both_for(link);
    busy[d] = both_for(link.busy_only());  // the overhead stays: it is busy time
    t.sum += both[d];
    if (!rd) range = max_block(range, p);
  }
  // One queue per link (its dimensions' busy times added up), the latencies a delay.
  small_buffer<double> queue_b(k);
  double* queue = queue_b.data();
  std::size_t queues = 0;
  double delay = 0;
  for (std::size_t d = 0; d < k; ++d) {
    delay += both[d] - busy[d];
    bool first = true;  // of its link: the group is counted once
    for (std::size_t e = 0; e < d && first; ++e) first = topo.dim(e).link.name != topo.dim(d).link.name;
    if (!first) continue;
    double group_busy = 0;
    for (std::size_t e = d; e < k; ++e)
      if (topo.dim(e).link.name == topo.dim(d).link.name) group_busy += busy[e];
    queue[queues++] = group_busy;
  }
  t.pace = closed_pace(std::span<const double>(queue, queues), delay, concurrent);
  return t;
}

/// How an all_reduce of `count` elements is cut into segments of `length` elements
/// (the last one shorter): the one place that says so, for the programs both
/// executors run (plan/collective_programs.hpp) and for explain()
/// (plan.hpp). A length of 0 or of at least count is one segment; a count of 0 is
/// one empty segment. Example: count 10, length 4: segments 3, of 4, 4 and 2.
struct segmentation {
  /// The count, the segment length (0: one segment) and the number of segments.
  ///@{
  std::size_t count = 0, length = 0, segments = 1;
  ///@}
  ///@{
  std::vector<block_range> full, tail;  ///< this rank's stage ranges in a full and in the last segment
  ///@}

  std::size_t first(std::size_t s) const noexcept { return s * length; }  ///< the first element of segment s
  /// This rank's stage ranges in segment s.
  const std::vector<block_range>& ranges(std::size_t s) const noexcept { return s + 1 == segments ? tail : full; }
};

/// Segments of `length` elements in `count` (1 when length is 0 or at least count).
constexpr std::size_t segment_count(std::size_t count, std::size_t length) noexcept {
  const std::size_t len = length && length < count ? length : count;
  return len ? max_block(count, len) : 1;
}
static_assert(segment_count(10, 4) == 3 && segment_count(10, 0) == 1 && segment_count(10, 10) == 1 &&
              segment_count(0, 4) == 1 && segment_count(10, 11) == 1);

/// The segmentation with this rank's stage ranges (extents and coords as in stage_ranges).
inline segmentation make_segmentation(std::size_t count, std::size_t length, std::span<const std::size_t> extents,
                                      std::span<const std::size_t> coords) {
  segmentation g;
  g.count = count;
  g.length = length && length < count ? length : count;
  g.segments = segment_count(count, length);
  g.full.resize(extents.size());
  g.tail.resize(extents.size());
  stage_ranges(g.length, extents, coords, g.full);
  stage_ranges(count - (g.segments - 1) * g.length, extents, coords, g.tail);
  return g;
}

/// Segments in flight at once when there are K of them.
inline std::size_t in_flight(std::size_t K, const tuning& tune) {
  return tune.pipeline_depth < K ? tune.pipeline_depth : K;
}

/// Elements per segment when n elements are cut into about K segments: rounded up
/// to whole cache lines, so that segments after the first start on one.
constexpr std::size_t segment_length(std::size_t n, std::size_t K, std::size_t elem_size) noexcept {
  const std::size_t line = elem_size < 64 ? 64 / elem_size : 1;
  const std::size_t len = max_block(n, K ? K : 1);
  return len >= n ? n : (len + line - 1) / line * line;
}
static_assert(segment_length(4099, 257, 4) == 16 && segment_length(100, 1, 4) == 100 && segment_length(0, 4, 4) == 0);

/// Whether an all_reduce with these algorithms is pipelined at all: two or more
/// dimensions of more than one rank, one of which moves messages (see the top).
inline bool pipelines(const runtime_topology& topo, std::span<const algorithm> algos) {
  std::size_t busy = 0;
  bool messages = false;
  for (std::size_t d = 0; d < topo.ndims(); ++d) {
    if (topo.extent(d) <= 1) continue;
    if (algos[d] == algorithm::recursive_doubling) return false;  // for calls too small to cut
    ++busy;
    const auto& link = topo.dim(d).link;
    messages |= !(link.fully_connected && link.space == memory_space::host && algos[d] == algorithm::direct);
  }
  return busy >= 2 && messages;
}

/// Elements per segment for an all_reduce of n elements of elem_size bytes (n: no
/// pipelining). Segments after the first start on a cache line.
inline std::size_t segment_elements(const runtime_topology& topo, std::span<const algorithm> algos, std::size_t n,
                                    std::size_t elem_size, const tuning& tune) {
  if (!pipelines(topo, algos) || n == 0) return n;
  const std::size_t line = elem_size < 64 ? 64 / elem_size : 1;
  auto round = [&](std::size_t len) { return len >= n ? n : (len + line - 1) / line * line; };
  if (tune.segment_bytes) return round(max_block(tune.segment_bytes, elem_size));
  std::size_t best = 1;
  double best_t = all_reduce_dimension_times(topo, algos, n, elem_size, tune).sum;
  const double bytes = double(n) * double(elem_size);
  for (std::size_t K = 2; K <= tune.max_segments && bytes / double(K) >= double(tune.min_segment_bytes); K *= 2) {
    const auto t = all_reduce_dimension_times(topo, algos, max_block(n, K), elem_size, tune, in_flight(K, tune));
    const double total = t.sum + double(K - 1) * t.pace;
    if (total < best_t) best_t = total, best = K;
  }
  return segment_length(n, best, elem_size);
}

/// The predicted seconds of an all_reduce cut into segments of len elements.
inline double pipelined_seconds(const runtime_topology& topo, std::span<const algorithm> algos, std::size_t n,
                                std::size_t elem_size, const tuning& tune, std::size_t len) {
  const std::size_t K = segment_count(n, len);
  const auto t = all_reduce_dimension_times(topo, algos, len < n ? len : n, elem_size, tune, in_flight(K, tune));
  return t.sum + double(K - 1) * t.pace;
}

/// The shape a call's stages cut its buffer by: a recursive_doubling dimension
/// all-reduces its whole range, so it cuts nothing (extent 1 there, coordinate 0).
/// stage_ranges and make_segmentation of this shape give each stage's range.
struct cut_shape {
  ///@{
  std::vector<std::size_t> extents, coords;  ///< the shape's extents and coordinates, per dimension
  ///@}
};
/// The cut_shape of a call with these extents, coordinates and algorithms.
inline cut_shape cut_shape_of(std::span<const std::size_t> extents, std::span<const std::size_t> coords,
                              std::span<const algorithm> algos) {
  cut_shape c{{extents.begin(), extents.end()}, {coords.begin(), coords.end()}};
  for (std::size_t d = 0; d < extents.size(); ++d)
    if (algos[d] == algorithm::recursive_doubling) c.extents[d] = 1, c.coords[d] = 0;
  return c;
}

MDRING_NAMESPACE_END
