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
//
// o is LogGP's overhead: like the bytes it keeps the link busy, and unlike the
// latency it does not overlap with other segments' messages (plan/pipeline.hpp), so
// with it a message of b bytes moves at b / (b + o B) of the bandwidth.
//
// The direct forms assume a fully connected link: the p-1 messages travel at once,
// limited by the rank's injection bandwidth. Summed over the stages of an all-reduce
// this is DESIGN.md's T = sum_d [2 (p_d - 1) alpha_d + 2 (p_d-1)/p_d N_d beta_d + ...].
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/link.hpp"
#include "blocks.hpp"

#include <cstddef>
#include <string_view>

MDRING_NAMESPACE_BEGIN

// What a stage does to its range.
enum class phase { reduce_scatter, all_gather, scatter, gather };

constexpr std::string_view to_string(phase p) noexcept {
  switch (p) {
    case phase::reduce_scatter: return "reduce-scatter";
    case phase::all_gather: return "all-gather";
    case phase::scatter: return "scatter";
    default: return "gather";
  }
}

// Predicted seconds of one stage (see the table above).
inline double stage_seconds(phase ph, algorithm algo, std::size_t p, std::size_t n, std::size_t elem_size,
                            const link_info& link, double gamma) noexcept {
  if (p <= 1 || n == 0) return 0.0;
  const double block_bytes = double(max_block(n, p)) * double(elem_size);
  const double beta = link.bandwidth > 0 ? 1.0 / link.bandwidth : 0.0;
  const double move = block_bytes * beta + link.overhead;
  const double fold = ph == phase::reduce_scatter ? block_bytes * gamma : 0.0;
  const double others = double(p - 1);  // a message (o + bytes) to each, or one per step
  if (ph == phase::scatter || ph == phase::gather) return link.latency + others * move;
  if (algo == algorithm::direct) return link.latency + others * (move + fold);
  return others * (link.latency + move + fold);
}

// The algorithm `automatic` stands for on this dimension.
inline algorithm choose_algorithm(algorithm requested, const link_info& link, std::size_t p, const tuning& t,
                                  bool commutative) noexcept {
  if (!commutative) return algorithm::direct;  // only direct combines in rank order
  if (requested != algorithm::automatic) return requested;
  if (p <= 1) return algorithm::ring;  // no stage at all
  // Direct on fully connected links, two ranks included: over messages both
  // algorithms are then the same exchange, but direct is what shared access runs.
  return link.fully_connected && p <= t.direct_max_extent ? algorithm::direct : algorithm::ring;
}

MDRING_NAMESPACE_END
