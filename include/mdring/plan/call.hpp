// mdring/plan/call.hpp: what one call will run, decided in one function, which
// every path asks: the host engine (executor/host/engine.hpp), the GPU
// communicator (cuda/communicator.cuh), a communicator's make_plan() and the free
// explain() (collective/communicator.hpp).
//
//   call_decision d;
//   decide_call(d, {collective::all_reduce, executed_topology, requested, bind_algorithms,
//                   commutative, count, ranks, sizeof(T), tune, measured});
//
// From the algorithms chosen at bind for the op (choose_algorithm: direct where a
// non-commutative op needs it), a call of `count` elements runs:
//   - per dimension, the bind-time algorithm with automatic rings refined for the
//     call's size (halving-doubling where the cost model says), and all_reduce's
//     last dimensions by recursive doubling where it pays (plan/pipeline.hpp
//     algorithms_for_call); the other collectives run halving-doubling where
//     recursive doubling was asked for;
//   - all_reduce: the segment length of the pipeline (the cost model's, or the
//     measured plan's when options.planning = measure found one for the size
//     class), and how many segments are in flight at once;
//   - broadcast and reduce: binomial trees of the whole buffer or blocks
//     (trees_for_call).
// `source` says where the choice came from (explain() prints it).
// Example: ring<nvlink, 4> * ring<infiniband, 2>, all_reduce of 1 Mi floats:
// direct, ring; the model's segment length; estimate.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "cost.hpp"
#include "pipeline.hpp"
#include "wisdom.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

struct call_request {
  collective kind = collective::all_reduce;
  const runtime_topology& topology;            // executed dimensions (plan/merge.hpp)
  std::span<const algorithm> requested;        // options.algorithms, per executed dimension
  std::span<const algorithm> bind_algorithms;  // choose_algorithm at bind, commutative ops
  bool commutative = true;
  std::size_t count = 0;  // the collective's count argument (per rank for reduce_scatter, all_gather)
  std::size_t ranks = 1;
  std::size_t elem_size = 4;
  const tuning& tune;
  const measured_choice* measured = nullptr;  // all_reduce, options.planning = measure
  // topology.rank_link(d) for every dimension, computed once at bind (the host
  // engine's: no copy of a link per call); empty: computed here.
  std::span<const link_info> rank_links = {};
  std::span<const std::size_t> extents = {};  // topology.extent(d), likewise
  // >= 0: halving-doubling on this dimension whatever the model says (the host
  // engine's bound on scratch, communicator::reserve).
  int force_halving_doubling = -1;
};

struct call_decision {
  enum class origin { estimate, measured };
  std::vector<algorithm> algos;    // per executed dimension
  std::size_t segment_length = 0;  // all_reduce; 0 (one segment) for the others
  std::size_t segments = 1;
  std::size_t depth = 1;  // segments in flight
  bool trees = false;     // broadcast, reduce
  origin source = origin::estimate;
};

// The elements of the whole buffer a call's stages cut up.
constexpr std::size_t call_elements(collective kind, std::size_t count, std::size_t ranks) noexcept {
  return kind == collective::reduce_scatter || kind == collective::all_gather ? count * ranks : count;
}

// Fills d (reusing its storage: no allocation once it has the dimensions).
inline void decide_call(call_decision& d, const call_request& r) {
  const std::size_t k = r.topology.ndims();
  const std::size_t n = call_elements(r.kind, r.count, r.ranks);
  d.algos.resize(k);
  for (std::size_t i = 0; i < k; ++i) d.algos[i] = r.commutative ? r.bind_algorithms[i] : algorithm::direct;
  algorithms_for_call(r.kind, r.topology, r.requested, d.algos, n, r.elem_size, r.tune, r.rank_links, r.extents);
  if (r.force_halving_doubling >= 0 && std::size_t(r.force_halving_doubling) < k)
    d.algos[std::size_t(r.force_halving_doubling)] = algorithm::halving_doubling;
  d.segment_length = 0, d.segments = 1, d.depth = 1, d.source = call_decision::origin::estimate;
  if (r.kind == collective::all_reduce) {
    std::size_t depth = r.tune.pipeline_depth;
    const measured_choice* m = r.commutative && r.measured && r.measured->algos.size() == k ? r.measured : nullptr;
    if (m) {
      std::copy(m->algos.begin(), m->algos.end(), d.algos.begin());
      d.segment_length = segment_length(n, m->segments, r.elem_size);
      depth = m->depth < depth ? m->depth : depth;
      d.source = call_decision::origin::measured;
    } else {
      d.segment_length = segment_elements(r.topology, d.algos, n, r.elem_size, r.tune);
    }
    d.segments = segment_count(n, d.segment_length);
    d.depth = depth < d.segments ? depth : d.segments;
  }
  d.trees = trees_for_call(r.kind, r.topology, r.requested, d.algos, r.count, r.elem_size, r.tune, r.commutative);
}

MDRING_NAMESPACE_END
