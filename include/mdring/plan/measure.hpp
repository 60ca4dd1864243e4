// mdring/plan/measure.hpp: which plans measured planning times (options.planning =
// measure, plan/wisdom.hpp).
//
// At the first all_reduce of a size class the host engine (executor/host/engine.hpp
// measure) times the candidates listed here on buffers of the call's size and keeps
// the fastest by pick_measured (plan/wisdom.hpp). What is timed is decided here, in
// the plan room, from the call's estimate alone; the engine only runs and times.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "pipeline.hpp"
#include "wisdom.hpp"

#include <cstddef>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The candidates for an all_reduce of n elements of elem_size bytes on the executed
/// topology, the estimate's plan first (est: its algorithms, as decide_call chose
/// them; requested: the user's per dimension, automatic where none; bind: the
/// bind-time algorithm per dimension):
///   - the estimate's plan (its segments, tune.pipeline_depth in flight);
///   - per dimension the user left automatic: a ring flipped to halving-doubling or
///     back; a fully connected one of 3 ranks or more, which runs direct, as a ring
///     and as halving-doubling (its pairs may not be equal: NVLink meshes, PCIe
///     switches);
///   - with pipelining, the estimate's segment count K as 1, 2K, K/2, 4K and K/4
///     (within tune.max_segments and n), and fewer segments in flight (2).
/// No candidate twice.
MDRING_COLD inline std::vector<measured_choice> measured_candidates(const runtime_topology& executed,
                                                                    std::span<const algorithm> est,
                                                                    std::span<const algorithm> requested,
                                                                    std::span<const algorithm> bind, std::size_t n,
                                                                    std::size_t elem_size, const tuning& tune) {
  std::vector<measured_choice> cand;
  const std::vector<algorithm> e(est.begin(), est.end());
  auto add = [&](const std::vector<algorithm>& al, std::size_t K, std::size_t depth) {
    for (auto& c : cand)
      if (c.algos == al && c.segments == K && c.depth == depth) return;
    cand.push_back({al, K, depth, 0, 0, 0});
  };
  const std::size_t K0 = segment_count(n, segment_elements(executed, est, n, elem_size, tune));
  const std::size_t D = tune.pipeline_depth;
  add(e, K0, D);
  for (std::size_t d = 0; d < executed.ndims() && d < e.size(); ++d) {
    const std::size_t p = executed.extent(d);
    if (p < 2 || (d < requested.size() && requested[d] != algorithm::automatic)) continue;
    std::vector<algorithm> others;
    if (d < bind.size() && bind[d] == algorithm::ring)
      others = {e[d] == algorithm::halving_doubling ? algorithm::ring : algorithm::halving_doubling};
    else if (p >= 3 && e[d] == algorithm::direct && executed.dim(d).link.fully_connected)
      others = {algorithm::ring, algorithm::halving_doubling};
    for (algorithm a : others) {
      std::vector<algorithm> al = e;
      al[d] = a;
      add(al, K0, D);
    }
  }
  if (pipelines(executed, est)) {
    add(e, 1, D);
    if (2 * K0 <= tune.max_segments && n >= 2 * K0) add(e, 2 * K0, D);
    if (K0 > 2) add(e, K0 / 2, D);
    if (4 * K0 <= tune.max_segments && n >= 4 * K0) add(e, 4 * K0, D);
    if (K0 > 4) add(e, K0 / 4, D);
    if (K0 > 1 && D > 2) add(e, K0, 2);
  }
  return cand;
}

MDRING_NAMESPACE_END
