// mdring/plan/call_algorithms.hpp: the algorithms and trees one call runs.
//
// At bind each executed dimension gets its algorithm for commutative ops
// (plan/cost.hpp choose_algorithm: direct on small fully connected links, else a
// ring). A call then refines it for its size, the same on every rank:
//   - an automatic ring becomes halving-doubling where the cost model predicts it
//     faster for the stage's nominal range (call_algorithms);
//   - all_reduce's last dimensions run recursive doubling where the pipeline model
//     predicts it faster (recursive_doubling_for_call);
//   - broadcast and reduce run binomial trees of the whole buffer where they pay
//     (trees_for_call).
// plan/call.hpp decide_call asks these (algorithms_for_call, trees_for_call); the
// pipeline's segments (plan/pipeline.hpp) are cut after them.
// Example: ethernet:6, automatic: recursive doubling for a call of a few bytes,
// halving-doubling for a few KiB, the ring for large calls.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "../vocabulary.hpp"
#include "blocks.hpp"
#include "cost.hpp"
#include "pipeline.hpp"

#include <algorithm>
#include <cstddef>
#include <span>

MDRING_NAMESPACE_BEGIN

/// The algorithms one call runs: `algos` holds what was chosen at bind for the op
/// (choose_algorithm); each automatic ring becomes halving-doubling where the model
/// predicts it faster for the call's size (algorithm_for_call). `n` is the elements
/// of the whole buffer the stages cut up; a stage's nominal range shrinks by
/// max_block per dimension, so every rank decides alike.
template <class RankLink>
void call_algorithms(std::span<const std::size_t> extents, RankLink&& rank_link, std::span<const algorithm> requested,
                     std::span<algorithm> algos, std::size_t n, std::size_t elem_size, const tuning& tune) {
  std::size_t range = n;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    const std::size_t p = extents[d];
    if (p <= 1) continue;
    const link_info& link = rank_link(d);  // the rank's share of a NIC
    algos[d] = algorithm_for_call(algos[d], d < requested.size() ? requested[d] : algorithm::automatic, link, p, range,
                                  elem_size, tune);
    range = max_block(range, p);
  }
}
/// rank_links and extents: topo.rank_link(d) and topo.extent(d) for every
/// dimension, computed beforehand (the host engine's, at bind: nothing copied per
/// call); empty: taken from topo here.
inline void call_algorithms(const runtime_topology& topo, std::span<const algorithm> requested,
                            std::span<algorithm> algos, std::size_t n, std::size_t elem_size, const tuning& tune,
                            std::span<const link_info> rank_links = {}, std::span<const std::size_t> extents = {}) {
  const std::size_t k = topo.ndims();
  small_buffer<std::size_t> ext(extents.size() == k ? 0 : k);
  if (extents.size() != k) {
    for (std::size_t d = 0; d < k; ++d) ext.data()[d] = topo.extent(d);
    extents = std::span<const std::size_t>(ext.data(), k);
  }
  if (rank_links.size() == k)
    return call_algorithms(
        extents, [&](std::size_t d) -> const link_info& { return rank_links[d]; }, requested, algos, n, elem_size,
        tune);
  link_info computed;
  call_algorithms(
      extents, [&](std::size_t d) -> const link_info& { return computed = topo.rank_link(d); }, requested, algos, n,
      elem_size, tune);
}

/// all_reduce: the last dimensions run by recursive doubling (whole-range exchanges)
/// where the cost model predicts it faster, for calls of at most
/// tuning::recursive_doubling_max_bytes. Only a suffix of the non-trivial
/// dimensions, each a ring or halving-doubling the user left automatic: then the
/// dimensions before it cut the range as usual and nothing after it is made to
/// move more bytes. Never when tuning::segment_bytes fixes a pipeline. Every rank
/// decides from the call's size alone.
inline void recursive_doubling_for_call(const runtime_topology& topo, std::span<const algorithm> requested,
                                        std::span<algorithm> algos, std::size_t n, std::size_t elem_size,
                                        const tuning& tune) {
  // Not when the user fixed the segments (tuning::segment_bytes): they asked for a pipeline.
  if (n == 0 || tune.segment_bytes || n > tune.recursive_doubling_max_bytes / (elem_size ? elem_size : 1)) return;
  auto eligible = [&](std::size_t d) {
    return (algos[d] == algorithm::ring || algos[d] == algorithm::halving_doubling) &&
           (d >= requested.size() || requested[d] == algorithm::automatic);
  };
  double best = pipelined_seconds(topo, algos, n, elem_size, tune, segment_elements(topo, algos, n, elem_size, tune));
  std::size_t from = topo.ndims();  // the suffix that runs recursive doubling: none
  small_buffer<algorithm> trial_b(algos.size());
  const std::span<algorithm> trial = trial_b.span();
  std::copy(algos.begin(), algos.end(), trial.begin());
  for (std::size_t d = topo.ndims(); d-- > 0;) {
    if (topo.extent(d) <= 1) continue;
    if (!eligible(d)) break;
    trial[d] = algorithm::recursive_doubling;
    const double t = pipelined_seconds(topo, trial, n, elem_size, tune, n);
    if (t < best) best = t, from = d;
  }
  for (std::size_t d = from; d < topo.ndims(); ++d)
    if (topo.extent(d) > 1) algos[d] = algorithm::recursive_doubling;
}

/// The algorithms one call of `kind` runs on each executed dimension, from what was
/// chosen at bind for the op (`algos`, choose_algorithm): rings refined for the
/// size (call_algorithms); all_reduce's last dimensions by recursive doubling where
/// it pays (above); the other collectives run halving-doubling where recursive
/// doubling was asked for (it is an all-reduce). `n`: elements of the whole buffer.
/// rank_links, extents: as for call_algorithms above.
inline void algorithms_for_call(collective kind, const runtime_topology& topo, std::span<const algorithm> requested,
                                std::span<algorithm> algos, std::size_t n, std::size_t elem_size, const tuning& tune,
                                std::span<const link_info> rank_links = {}, std::span<const std::size_t> extents = {}) {
  call_algorithms(topo, requested, algos, n, elem_size, tune, rank_links, extents);
  if (kind == collective::all_reduce) return recursive_doubling_for_call(topo, requested, algos, n, elem_size, tune);
  for (auto& a : algos)
    if (a == algorithm::recursive_doubling) a = algorithm::halving_doubling;
}

/// Broadcast and reduce of n elements run binomial trees (the whole buffer along
/// each dimension, ceil(log2 p) steps each) instead of scatter + all-gather or
/// reduce-scatter + gather, when every non-trivial dimension was left automatic,
/// the op commutes (reduce), the call is at most tuning::recursive_doubling_max_bytes
/// and the cost model predicts the trees faster. Every rank decides alike (the
/// nominal ranges of call_algorithms).
inline bool trees_for_call(collective kind, const runtime_topology& topo, std::span<const algorithm> requested,
                           std::span<const algorithm> algos, std::size_t n, std::size_t elem_size, const tuning& tune,
                           bool commutative) {
  if ((kind != collective::broadcast && kind != collective::reduce) || n == 0 || topo.size() <= 1 ||
      n > tune.recursive_doubling_max_bytes / (elem_size ? elem_size : 1) ||
      (kind == collective::reduce && !commutative))
    return false;
  double tree = 0, blocks = 0;
  std::size_t range = n;
  for (std::size_t d = 0; d < topo.ndims(); ++d) {
    const std::size_t p = topo.extent(d);
    if (p <= 1) continue;
    if (d < requested.size() && requested[d] != algorithm::automatic) return false;
    const link_info link = topo.rank_link(d);
    const double g = tune.gamma(link.space);
    const bool b = kind == collective::broadcast;
    tree += stage_seconds(b ? phase::broadcast : phase::reduce, algos[d], p, n, elem_size, link, g);
    blocks += stage_seconds(b ? phase::scatter : phase::reduce_scatter, algos[d], p, range, elem_size, link, g) +
              stage_seconds(b ? phase::all_gather : phase::gather, algos[d], p, range, elem_size, link, g);
    range = max_block(range, p);
  }
  return tree < blocks;
}

MDRING_NAMESPACE_END
