// mdring/plan/cost.hpp: the alpha-beta-gamma cost model of one stage.
//
// A stage of dimension d with p ranks works on a range of n elements of s bytes; its
// largest block holds m = ceil(n / p) elements. With the link's latency alpha, its
// per-message overhead o, the rank's bandwidth B (beta = 1 / B; a link with ports
// shares them among the node's ranks: runtime_topology::rank_link) and the
// reduction cost gamma (seconds per byte):
//
//   ring reduce-scatter    (p-1) * (alpha + o + m s beta + m s gamma)
//   ring all-gather        (p-1) * (alpha + o + m s beta)
//   direct reduce-scatter  alpha + (p-1) (o + m s beta + m s gamma)
//   direct all-gather      alpha + (p-1) (o + m s beta)
//   scatter / gather       alpha + (p-1) (o + m s beta)   (the root's link carries p-1 blocks)
//   halving-doubling       L (alpha + o) + (1 - 1/p2) n s (beta [+ gamma]), plus, when p is
//                          not a power of two, two messages more: the whole range
//                          (n s) and one block (m s) (plan/halving_doubling.hpp)
//   recursive doubling     L (alpha + o + n s (beta + gamma)), plus, when p is not a power
//   (all-reduce stage)     of two, the whole range twice (fold in, hand out)
//   tree (broadcast,       ceil(log2 p) (alpha + o + n s beta [+ n s gamma]): a binomial
//   reduce stage)          tree of the whole range
//
// o is LogGP's overhead: like the bytes it keeps the link busy, and unlike the
// latency it does not overlap with other segments' messages (plan/pipeline.hpp), so
// with it a message of b bytes moves at b / (b + o B) of the bandwidth. A link
// calibrated on the machine (link_curve) replaces o + b beta with its measured
// curve of b, and alpha with its measured latency at b.
//
// The direct forms assume a fully connected link: the p-1 messages travel at once,
// limited by the rank's injection bandwidth. Summed over the stages of an all-reduce
// this is DESIGN.md's T = sum_d [2 (p_d - 1) alpha_d + 2 (p_d-1)/p_d N_d beta_d + ...].
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/link.hpp"
#include "../vocabulary.hpp"
#include "blocks.hpp"
#include "halving_doubling.hpp"

#include <cstddef>
#include <span>
#include <string_view>

MDRING_NAMESPACE_BEGIN

/// Steps of a binomial tree over p ranks: ceil(log2 p).
constexpr std::size_t tree_steps(std::size_t p) noexcept {
  std::size_t s = 0;
  while ((std::size_t(1) << s) < p) ++s;
  return s;
}

/// Predicted seconds of one stage (see the table above).
inline double stage_seconds(phase ph, algorithm algo, std::size_t p, std::size_t n, std::size_t elem_size,
                            const link_info& link, double gamma) noexcept {
  if (p <= 1 || n == 0) return 0.0;
  const double block_bytes = double(max_block(n, p)) * double(elem_size);
  const double move = link.busy_seconds(block_bytes);
  const double fold = ph == phase::reduce_scatter ? block_bytes * gamma : 0.0;
  const double others = double(p - 1);  // a message (o + bytes) to each, or one per step
  const double alpha = link.latency_seconds(block_bytes);
  if (ph == phase::scatter || ph == phase::gather) return alpha + others * move;
  const double all = double(n) * double(elem_size);
  auto message = [&](double bytes, double per_byte_fold) {
    return link.latency_seconds(bytes) + link.busy_seconds(bytes) + bytes * per_byte_fold;
  };
  if (ph == phase::broadcast || ph == phase::reduce)
    return double(tree_steps(p)) * message(all, ph == phase::reduce ? gamma : 0.0);
  if (ph == phase::all_reduce) {  // recursive doubling
    const hd_shape h = hd_shape_of(p);
    return double(h.levels) * message(all, gamma) + (h.rem ? message(all, gamma) + message(all, 0) : 0.0);
  }
  if (algo == algorithm::halving_doubling) {
    // The critical path is an active rank's: fold in, L exchanges, hand out.
    const hd_shape h = hd_shape_of(p);
    const double g = ph == phase::reduce_scatter ? gamma : 0.0;
    double t = 0, piece = all;
    for (std::size_t k = 0; k < h.levels; ++k) t += message(piece /= 2, g);
    if (h.rem)  // the pair's whole range and one block, in that order or the other
      t += ph == phase::reduce_scatter ? message(all, g) + message(block_bytes, 0)
                                       : message(block_bytes, 0) + message(all, 0);
    return t;
  }
  if (algo == algorithm::direct) return alpha + others * (move + fold);
  return others * (alpha + move + fold);
}

/// all_reduce of `bytes` in `segments` over one dimension of p ranks that share
/// memory between processes (the fused shared stage): whether its pull form pays
/// (build_program.hpp dim_program::streamed). A rank whose buffers its peers cannot
/// map then copies the peers' blocks of its sendbuf into node memory ((p - 1) / p
/// of the bytes at copy_gamma) instead of the peers reading them and writing its
/// results by cross-memory attach (twice that at cma_gamma); the pull form costs
/// one more synchronization per segment (the link's latency). Never below
/// stream_min_bytes (see tuning). The same answer on every rank.
inline bool streaming_pays(std::size_t p, std::size_t bytes, std::size_t segments, const link_info& link,
                           const tuning& t) {
  if (p < 2 || !(t.cma_gamma > 0) || bytes < t.stream_min_bytes) return false;
  const double share = double(p - 1) / double(p) * double(bytes);
  return 2.0 * share * t.cma_gamma > share * t.copy_gamma + double(segments) * link.latency;
}

/// A broadcast, all_gather or reduce_scatter of `bytes` (the whole buffer) over one
/// such dimension of p ranks, where some rank's buffer cannot be mapped: whether
/// copying what the peers read into node memory, which they map, pays against their
/// reading it by cross-memory attach (broadcast: the root copies the buffer;
/// all_gather: each such rank its block; reduce_scatter: the blocks its peers fold).
/// From tuning::stream_broadcast_min_bytes and stream_blocks_min_bytes, measured
/// (cma_gamma 0: never). A broadcast over two ranks never streams: there the root
/// writes half of the range while its peer reads the other half, both by
/// cross-memory attach, which measured 0.35 to 0.4 x the time of streaming at
/// 16 MiB and 0.45 to 0.55 x at 64 and 256 MiB (broadcast_program.hpp
/// shared_broadcast).
inline bool whole_streaming_pays(collective kind, std::size_t p, std::size_t bytes, const tuning& t) {
  if (kind == collective::broadcast) return p > 2 && t.cma_gamma > 0 && bytes >= t.stream_broadcast_min_bytes;
  return t.cma_gamma > 0 && bytes >= t.stream_blocks_min_bytes;
}

/// Whether an all_reduce of `bytes` runs its pull form on dimension `dim` when some
/// rank's buffers cannot be mapped (dim_program::streamed): the one test the host
/// engine (executor/host/engine.hpp program_of) builds the program by and explain()
/// (collective/communicator.hpp make_plan) reports. Only an all_reduce whose one
/// dimension of more than one rank runs direct by shared access between processes,
/// with segments larger than the staging buffer, where streaming_pays says so.
struct stream_query {
  collective kind = collective::all_reduce;  ///< the collective
  std::span<const std::size_t> extents;      ///< the executed dimensions'
  std::size_t dim = 0;                       ///< the dimension asked about (executed)
  algorithm algo = algorithm::direct;        ///< what the call runs on dim
  bool shared = false;                       ///< dim's ranks share memory (the transport's answer)
  bool same_address_space = false;           ///< the transport's ranks are threads of one process
  /// The call's bytes, the bytes of its segments, the segments, and the staging buffer's bytes
  /// (dim_access::staging_bytes).
  ///@{
  std::size_t bytes = 0, segment_bytes = 0, segments = 1, staging_bytes = 0;
  ///@}
};
/// The test described above for query `q`, on dimension q.dim's link.
inline bool streams_when_unmapped(const stream_query& q, const link_info& link, const tuning& t) {
  const bool whole =
      q.kind == collective::broadcast || q.kind == collective::all_gather || q.kind == collective::reduce_scatter;
  if ((q.kind != collective::all_reduce && !whole) || q.same_address_space || !q.shared || q.algo != algorithm::direct)
    return false;
  if (q.dim >= q.extents.size() || q.extents[q.dim] < 2) return false;
  for (std::size_t e = 0; e < q.extents.size(); ++e)
    if (e != q.dim && q.extents[e] > 1) return false;  // a second nontrivial dimension
  if (q.segment_bytes <= q.staging_bytes) return false;
  return whole ? whole_streaming_pays(q.kind, q.extents[q.dim], q.bytes, t)
               : streaming_pays(q.extents[q.dim], q.bytes, q.segments, link, t);
}

/// The algorithm `automatic` stands for on this dimension.
inline algorithm choose_algorithm(algorithm requested, const link_info& link, std::size_t p, const tuning& t,
                                  bool commutative) noexcept {
  if (!commutative) return algorithm::direct;  // only direct combines in rank order
  if (requested != algorithm::automatic) return requested;
  if (p <= 1) return algorithm::ring;  // no stage at all
  // Direct on fully connected links, two ranks included: over messages both
  // algorithms are then the same exchange, but direct is what shared access runs.
  return link.fully_connected && p <= t.direct_max_extent ? algorithm::direct : algorithm::ring;
}

/// What a call runs on a dimension whose bind-time algorithm is `chosen`: a ring that
/// the user left automatic becomes halving-doubling for ranges where the model
/// predicts it faster (latency-bound sizes: 2 log2 p messages instead of 2 (p-1)).
/// `range` is the stage's nominal range in elements (the same on every rank: see
/// call_algorithms in pipeline.hpp), `link` the rank's share of it; at most
/// t.halving_doubling_max_bytes.
inline algorithm algorithm_for_call(algorithm chosen, algorithm requested, const link_info& link, std::size_t p,
                                    std::size_t range, std::size_t elem_size, const tuning& t) noexcept {
  if (chosen != algorithm::ring || requested != algorithm::automatic || p < 4 || range == 0 ||
      range > t.halving_doubling_max_bytes / (elem_size ? elem_size : 1))
    return chosen;
  const double gamma = t.gamma(link.space);
  auto both = [&](algorithm a) {
    return stage_seconds(phase::reduce_scatter, a, p, range, elem_size, link, gamma) +
           stage_seconds(phase::all_gather, a, p, range, elem_size, link, gamma);
  };
  return both(algorithm::halving_doubling) < both(algorithm::ring) ? algorithm::halving_doubling : chosen;
}

MDRING_NAMESPACE_END
