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
//
// describe_call then turns the decision, the bind result (plan/bound_layout.hpp)
// and what the executor can do in each dimension (dim_access: shared access, its
// staging, whether the last call's buffers were unmapped) into the call's program
// parameters (plan/build_program.hpp program_params), the one description every
// path builds or looks up its program with:
//
//   call_program cp;
//   describe_call(cp, d, {collective::all_reduce, count, 0, sizeof(float)}, layout, access, tune,
//                 executor_profile::host(false));
//   const program& pr = cache.get(cp.params);
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "bound_layout.hpp"
#include "build_program.hpp"
#include "call_algorithms.hpp"
#include "cost.hpp"
#include "pipeline.hpp"
#include "wisdom.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// What decide_call needs to know of a call.
struct call_request {
  collective kind = collective::all_reduce;    ///< the collective
  const runtime_topology& topology;            ///< executed dimensions (plan/merge.hpp)
  std::span<const algorithm> requested;        ///< options.algorithms, per executed dimension
  std::span<const algorithm> bind_algorithms;  ///< choose_algorithm at bind, commutative ops
  bool commutative = true;                     ///< the op is commutative
  std::size_t count = 0;      ///< the collective's count argument (per rank for reduce_scatter, all_gather)
  std::size_t ranks = 1;      ///< ranks in the communicator
  std::size_t elem_size = 4;  ///< bytes per element
  const tuning& tune;         ///< the cost model's knobs
  const measured_choice* measured = nullptr;  ///< all_reduce, options.planning = measure
  /// topology.rank_link(d) for every dimension, computed once at bind (the host
  /// engine's: no copy of a link per call); empty: computed here.
  std::span<const link_info> rank_links = {};
  std::span<const std::size_t> extents = {};  ///< topology.extent(d), likewise
};

/// What a call runs (decide_call): the algorithm per executed dimension, the segments, the trees.
struct call_decision {
  /// Where the decision comes from: the cost model's estimate, or a measured plan (plan/wisdom.hpp).
  enum class origin { estimate, measured };
  std::vector<algorithm> algos;      ///< per executed dimension
  std::size_t segment_length = 0;    ///< all_reduce; 0 (one segment) for the others
  std::size_t segments = 1;          ///< all_reduce: segments of segment_length elements
  std::size_t depth = 1;             ///< segments in flight
  bool trees = false;                ///< broadcast, reduce
  origin source = origin::estimate;  ///< estimate or measured
};

/// The elements of the whole buffer a call's stages cut up.
constexpr std::size_t call_elements(collective kind, std::size_t count, std::size_t ranks) noexcept {
  return kind == collective::reduce_scatter || kind == collective::all_gather ? count * ranks : count;
}

/// Fills d (reusing its storage: no allocation once it has the dimensions).
/// `required`: per dimension, an algorithm the caller requires of this call whatever
/// the model says (automatic, or no entry: none), before the segments are cut (the
/// host engine sizes scratch for every algorithm a smaller call may run:
/// executor/host/engine.hpp reserve_bytes).
inline void decide_call(call_decision& d, const call_request& r, std::span<const algorithm> required = {}) {
  const std::size_t k = r.topology.ndims();
  const std::size_t n = call_elements(r.kind, r.count, r.ranks);
  d.algos.resize(k);
  for (std::size_t i = 0; i < k; ++i) d.algos[i] = r.commutative ? r.bind_algorithms[i] : algorithm::direct;
  algorithms_for_call(r.kind, r.topology, r.requested, d.algos, n, r.elem_size, r.tune, r.rank_links, r.extents);
  for (std::size_t i = 0; i < k && i < required.size(); ++i)
    if (required[i] != algorithm::automatic) d.algos[i] = required[i];
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

// ---- the call's program parameters ---------------------------------------------------

/// What an executor can do in one executed dimension (its transport's answer).
struct dim_access {
  bool shared = false;            ///< the ranks read each other's buffers: direct stages by shared access
  std::size_t staging_bytes = 0;  ///< shared: stage ranges of at most this many bytes go through staging buffers
  /// Host, between processes: the last call on this dimension that noted it had
  /// buffers some rank's peers could not map (the same on every rank of the ring:
  /// executor/host/core.hpp sync); the next one takes the pull form where it pays.
  bool unmapped = false;
};

/// What differs between the executors that run programs.
struct executor_profile {
  /// The host engine: nontemporal copies from tune.nontemporal_bytes, a reduce's
  /// shared last dimension in one stage (program_params::shared_reduce_split).
  bool host = true;
  /// Host ranks in separate address spaces: the pull form (dim_program::streamed)
  /// where a dimension's buffers are unmapped and it pays.
  bool between_processes = false;
  /// The GPU: receive slots aligned like their fold's destination, and all_reduce's
  /// recvbuf misalignment in elements modulo that vector.
  std::size_t vector_elements = 1;
  std::size_t recv_misalignment = 0;  ///< the GPU: all_reduce's recvbuf misalignment in elements modulo vector_elements

  /// The host engine's profile (between processes or threads of one process), and the GPU's.
  ///@{
  static constexpr executor_profile on_host(bool between_processes) noexcept { return {true, between_processes, 1, 0}; }
  static constexpr executor_profile on_device(std::size_t vector_elements, std::size_t recv_misalignment) noexcept {
    return {false, false, vector_elements, recv_misalignment};
  }
  ///@}
};

/// One call as its program is built: what collective, how many elements, which root.
struct call_shape {
  collective kind = collective::all_reduce;  ///< the collective
  std::size_t count = 0;                     ///< the collective's count argument
  std::size_t root = 0;                      ///< broadcast, reduce: the root
  std::size_t elem_size = 4;                 ///< bytes per element
};

/// The description describe_call fills: params (whose dims view `dims`) is what a
/// program is built or looked up with (plan/program_cache.hpp). Reused storage.
struct call_program {
  std::vector<dim_program> dims;  ///< per executed dimension
  program_params params;          ///< what the program is built or looked up with (its dims view `dims`)
  /// Per executed dimension: the pull form pays on it (it runs streamed when its
  /// buffers are unmapped; explain() says so).
  std::vector<unsigned char> stream_pays;
  /// Some dimension's pull form pays: the call notes, at its arrives, whether any
  /// rank's buffers were unmapped, for the next call to decide on.
  bool notes_unmapped = false;

  call_program() = default;
  /// Copies, pointing params.dims at the copy's own dims.
  call_program(const call_program& o)
      : dims(o.dims), params(o.params), stream_pays(o.stream_pays), notes_unmapped(o.notes_unmapped) {
    params.dims = dims;
  }
  /// Copies, pointing params.dims at this object's own dims.
  call_program& operator=(const call_program& o) {
    if (this != &o) {
      dims = o.dims, params = o.params, stream_pays = o.stream_pays, notes_unmapped = o.notes_unmapped;
      params.dims = dims;
    }
    return *this;
  }
};

/// Fills cp for the call `c` that decision d describes, on layout L with `access`
/// per executed dimension (empty: no shared access anywhere, as the free explain()
/// assumes). A dimension runs by shared access where its ranks share memory and
/// the call runs it direct; between processes it runs the pull form where that
/// pays (plan/cost.hpp streams_when_unmapped) and its buffers were unmapped.
inline void describe_call(call_program& cp, const call_decision& d, const call_shape& c, const bound_layout& L,
                          std::span<const dim_access> access, const tuning& tune, const executor_profile& ex) {
  const std::size_t k = L.ndims();
  cp.dims.resize(k);
  cp.stream_pays.assign(k, 0);
  cp.notes_unmapped = false;
  const std::size_t seg_len = c.kind == collective::all_reduce ? d.segment_length : 0;
  const std::size_t seg = seg_len && seg_len < c.count ? seg_len : c.count;
  const std::size_t whole = call_elements(c.kind, c.count, L.size) * c.elem_size;
  for (std::size_t i = 0; i < k; ++i) {
    dim_program& dp = cp.dims[i];
    dp = {L.extents[i], L.coords[i], d.algos[i], false, 0, false};
    const dim_access a = i < access.size() ? access[i] : dim_access{};
    if (L.extents[i] < 2 || !a.shared || dp.algo != algorithm::direct) continue;
    dp.shared = true, dp.staging_bytes = a.staging_bytes;
    if (!ex.between_processes) continue;
    const bool pays = streams_when_unmapped({c.kind, L.extents, i, dp.algo, true, false, whole,
                                             c.kind == collective::all_reduce ? seg * c.elem_size : whole,
                                             seg ? (c.count + seg - 1) / seg : 0, dp.staging_bytes},
                                            L.dims[i].link, tune);
    cp.stream_pays[i] = pays;
    cp.notes_unmapped |= pays;
    dp.streamed = pays && a.unmapped;
  }
  program_params& p = cp.params;
  p = program_params{};
  p.kind = c.kind, p.dims = cp.dims, p.count = c.count, p.rank = L.rank, p.root = c.root, p.elem_size = c.elem_size;
  p.segment_length = seg_len;
  p.trees = d.trees;
  if (ex.host) {
    p.nontemporal_bytes = tune.nontemporal_bytes;
    p.shared_reduce_max_bytes = tune.shared_reduce_max_bytes;
    p.shared_reduce_split = true;
  } else {
    p.vector_elements = ex.vector_elements;
    p.recv_misalignment = c.kind == collective::all_reduce ? ex.recv_misalignment : 0;
  }
}

/// decide_call's request for a call on layout L.
inline call_request request_for(const bound_layout& L, collective kind, std::size_t count, std::size_t elem_size,
                                bool commutative, const tuning& tune, const measured_choice* measured = nullptr) {
  return call_request{kind,      L.executed(), L.merged.requested, L.algorithms, commutative, count, L.size,
                      elem_size, tune,         measured,           L.rank_links, L.extents};
}

MDRING_NAMESPACE_END
