// mdring/plan/merge.hpp: the dimensions as they run, which need not be the ones
// written.
//
// Merged. "shm:2 x shm:2" describes four ranks on one node as a 2 x 2 grid. Run
// as two dimensions, the data crosses the node's memory twice (one reduce-scatter
// and one all-gather per dimension); run as one direct stage over all four ranks
// it crosses once. So adjacent dimensions with the same fully connected link,
// whose algorithm is left automatic, are merged into one dimension of their
// product as long as it has at most tuning::direct_max_extent ranks
// (tuning::merge_same_link; on by default). The merged dimension's coordinate is
// c_d + p_d c_{d+1}, so the ranks keep their numbers.
//
// Split. A ring of p ranks pays 2 (p - 1) latencies per all_reduce; the same ranks
// as an a x b grid pay 2 (a - 1 + b - 1), and move the same bytes through each
// rank's port: (1 - 1/a) + (1 - 1/b) / a = 1 - 1/p of the range each way. So a
// dimension of at least tuning::split_ring_extent ranks (16 by default; 0: never)
// on a link that is not fully connected (a switched network, one port per rank or
// node), algorithm automatic, runs as a x b with a the largest divisor of p not
// above sqrt(p) (b = p / a; a prime p is not split). Its coordinate c = c_a + a c_b,
// so again the ranks keep their numbers, and every collective's result is the
// same: reduce_scatter and all_gather map their blocks from the executed
// dimensions (plan/blocks.hpp). The two dimensions keep the link, and the cost
// model counts them on one port (plan/pipeline.hpp). Ask for algorithm::ring to
// keep one ring.
//
// Reproducible (options::reproducible). Every dimension runs direct, none is
// split (a 4 x 4 grid folds in two stages, not left to right over 16), and merged
// dimensions fold nested: shm:2 x shm:2 merged into shm:4 folds each pair first,
// rounds, and then the pairs ((x_0 op x_1) op (x_2 op x_3)), as the two stages it
// replaces would (`nest`; the host path's reducer, reduce/host.hpp combine_nested).
// The GPU path's folds are flat: it merges nothing in this mode (nested_folds false).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The dimensions as they run (see the top), and how the written ones map to them.
struct merged_dimensions {
  runtime_topology topology;         ///< the dimensions as executed
  std::vector<algorithm> requested;  ///< per executed dimension
  std::vector<std::size_t> of_user;  ///< user dimension d runs in executed dimension of_user[d] (the first, if split)
  std::vector<std::size_t> user_of;  ///< executed dimension e runs (the first of) user dimension user_of[e]
  /// The user dimensions' extents that executed dimension e is made of, innermost
  /// first ({4} unmerged, {2, 2} for shm:2 x shm:2 merged; a split's parts: {a}, {b}).
  std::vector<std::vector<std::size_t>> nest;
};

/// The a of a split a x b of p ranks (see above), or 0 when p stays one ring.
inline std::size_t split_factor(std::size_t p, std::size_t min_extent) noexcept {
  if (min_extent == 0 || p < min_extent || p < 4) return 0;
  std::size_t a = 0;
  for (std::size_t f = 2; f * f <= p; ++f)
    if (p % f == 0) a = f;
  return a;
}

/// `topo` must be resolved; requested[d] (missing: automatic) is the user's choice for dimension d.
MDRING_COLD inline merged_dimensions merge_dimensions(const runtime_topology& topo,
                                                      std::span<const algorithm> requested, const tuning& tune) {
  merged_dimensions m;
  std::vector<runtime_topology::dimension> out;
  auto req = [&](std::size_t d) { return d < requested.size() ? requested[d] : algorithm::automatic; };
  for (std::size_t d = 0; d < topo.ndims(); ++d) {
    const auto& dim = topo.dim(d);
    if (!out.empty() && tune.merge_same_link) {
      auto& prev = out.back();
      const bool mergeable = dim.link.fully_connected && prev.link == dim.link &&
                             m.requested.back() == algorithm::automatic && req(d) == algorithm::automatic &&
                             prev.extent * dim.extent <= tune.direct_max_extent;
      if (mergeable) {
        prev.extent *= dim.extent;
        m.nest.back().push_back(dim.extent);
        m.of_user.push_back(out.size() - 1);
        continue;
      }
    }
    m.of_user.push_back(out.size());
    const std::size_t a = dim.link.fully_connected || req(d) != algorithm::automatic
                              ? 0
                              : split_factor(dim.extent, tune.split_ring_extent);
    for (std::size_t part : a ? std::vector<std::size_t>{a, dim.extent / a} : std::vector<std::size_t>{dim.extent}) {
      out.push_back({dim.link, part});
      m.nest.push_back({part});
      m.requested.push_back(req(d));
      m.user_of.push_back(d);
    }
  }
  m.topology = runtime_topology(std::move(out));
  return m;
}

/// The algorithms asked for per written dimension: o.algorithms, and direct on each
/// dimension of more than one rank whose partial results are float32
/// (options::dimension_accumulation: folded at the owner, rounded once), unless the
/// call is widened (every dimension float32 on the host path: `widens`). Asking
/// for another algorithm there is invalid_argument("options.algorithms").
MDRING_COLD inline std::vector<algorithm> requested_algorithms(const runtime_topology& topo, const options& o,
                                                               bool widens) {
  const std::size_t k = topo.ndims();
  if (o.dimension_accumulation.size() > k)
    throw invalid_argument("options.dimension_accumulation",
                           "mdring::bind: options.dimension_accumulation has " +
                               std::to_string(o.dimension_accumulation.size()) + " entries but the topology \"" +
                               topo.to_string() + "\" has " + std::to_string(k) +
                               " dimensions (MDRING_ACCUMULATION sets it when it lists one per dimension)");
  std::vector<algorithm> req(o.algorithms);
  if (widens && detail::accumulates_float32(o, k)) return req;
  for (std::size_t d = 0; d < k; ++d) {
    if (detail::accumulation_of(o, d) != accumulation::float32 || topo.extent(d) <= 1) continue;
    if (d < req.size() && req[d] != algorithm::automatic && req[d] != algorithm::direct)
      throw invalid_argument("options.algorithms",
                             "mdring::bind: options.algorithms[" + std::to_string(d) + "] is " +
                                 std::string(to_string(req[d])) + ", but dimension " + std::to_string(d) + " (" +
                                 topo.dim(d).link.name + ":" + std::to_string(topo.extent(d)) +
                                 ") accumulates in float32 (options.dimension_accumulation), which only the direct "
                                 "algorithm does without rounding at each step (leave it automatic or ask for direct)");
    if (req.size() <= d) req.resize(d + 1, algorithm::automatic);
    req[d] = algorithm::direct;
  }
  return req;
}

/// The dimensions as a communicator bound with `o` runs them: o.algorithms (with
/// direct on float32 dimensions, above), or when o.reproducible direct on every
/// dimension, unsplit, merged only where the executor folds nested. `host`: the
/// host path, whose reducer folds nested and which widens a call whose every
/// dimension is float32; the GPU path does neither.
inline merged_dimensions merge_dimensions(const runtime_topology& topo, const options& o, bool host) {
  const std::vector<algorithm> requested = requested_algorithms(topo, o, host);
  const bool nested_folds = host;
  if (!o.reproducible) return merge_dimensions(topo, requested, o.tune);
  tuning t = o.tune;
  t.split_ring_extent = 0;
  t.merge_same_link = t.merge_same_link && nested_folds;
  merged_dimensions m = merge_dimensions(topo, requested, t);
  // The nested fold keeps one accumulator tile per level: at most 8 levels of
  // extents above 1 (a direct_max_extent of 256 or more could merge more).
  for (const auto& nest : m.nest)
    if (std::count_if(nest.begin(), nest.end(), [](std::size_t e) { return e > 1; }) > 8) {
      t.merge_same_link = false;
      m = merge_dimensions(topo, requested, t);
      break;
    }
  for (auto& a : m.requested) a = algorithm::direct;
  return m;
}

MDRING_NAMESPACE_END
