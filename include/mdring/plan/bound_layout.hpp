// mdring/plan/bound_layout.hpp: what bind resolves, once, for every path.
//
//   options o;
//   bound_layout L = bind_layout(parse_topology("shm:2 x ethernet:*"), 8, 5, o, bind_path::host, "bind");
//   // L.written: shm:2 x ethernet:4 (the dynamic extent resolved for 8 ranks)
//   // L.coords == {1, 2}; L.dims[1].members == {1, 3, 5, 7} (rank 5's ethernet ring)
//   // L.dims[0].algo == algorithm::direct (shm is fully connected, 2 ranks)
//
// bind_layout resolves the topology as written for `size` ranks (a mismatch is
// topology_error, before any message), applies options.profile's figures (host
// path), checks options.algorithms against it, runs the dimensions as they execute
// (plan/merge.hpp: merged and split), and gives per executed dimension its extent,
// this rank's coordinate, its link and this rank's share of it
// (runtime_topology::rank_link), the algorithm asked for and the one bind picks
// for commutative ops (plan/cost.hpp choose_algorithm), the ring's members (global
// ranks by coordinate), and under options.reproducible the extents a merged
// dimension folds nested. The host communicator (collective/communicator.hpp), the
// GPU communicator (cuda/communicator.cuh) and the free explain() read this one
// result; plan/call.hpp turns it and a call into the call's program parameters.
//
// Postcondition: L.extents, L.coords, L.algorithms, L.rank_links and L.dims have one
// entry per executed dimension, L.executed().size() == L.written.size() == size,
// and rank == to_rank(L.coords, L.extents).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "cost.hpp"
#include "merge.hpp"
#include "profile.hpp"

#include <cstddef>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// One executed dimension as this rank is bound to it.
struct bound_dimension {
  /// The dimension's extent, and this rank's coordinate in it.
  ///@{
  std::size_t extent = 1, coord = 0;
  ///@}
  link_info link;                              ///< as the executed topology has it
  algorithm requested = algorithm::automatic;  ///< the user's (automatic where none was asked for)
  algorithm algo = algorithm::ring;            ///< bind-time, for commutative ops
  std::vector<std::size_t> members;            ///< global ranks of this rank's ring, by coordinate
  /// options.reproducible on merged dimensions: the extents to fold nested,
  /// innermost first (reduce/host.hpp combine_nested); empty: a flat fold.
  std::vector<std::size_t> nest;
};

/// The one bind result: the topology resolved, merged and split, and this rank's place in it (see the top).
struct bound_layout {
  /// The communicator's size, and this rank.
  ///@{
  std::size_t size = 0, rank = 0;
  ///@}
  runtime_topology written;  ///< resolved, as the user wrote it (profile applied)
  merged_dimensions merged;  ///< the dimensions as they run (merged.topology)
  /// Per executed dimension, as flat arrays (what plan/call.hpp's decide_call takes).
  ///@{
  std::vector<std::size_t> extents, coords;
  ///@}
  std::vector<algorithm> algorithms;  ///< bind-time, commutative ops (= dims[d].algo)
  std::vector<link_info> rank_links;  ///< this rank's share of each link
  std::vector<bound_dimension> dims;  ///< per executed dimension
  /// Per written dimension.
  ///@{
  std::vector<std::size_t> written_extents, written_coords;
  ///@}

  const runtime_topology& executed() const noexcept { return merged.topology; }  ///< the dimensions as they run
  std::size_t ndims() const noexcept { return extents.size(); }                  ///< executed dimensions
  /// The algorithm dimension d as written runs for commutative ops (a merged
  /// dimension reports its merged stage's).
  algorithm algorithm_of(std::size_t written_d) const { return algorithms.at(merged.of_user.at(written_d)); }
  /// "link:extent" of executed dimension d (hang reports, errors).
  std::string dim_name(std::size_t d) const { return dims.at(d).link.name + ":" + std::to_string(extents.at(d)); }
  /// Every dimension of more than one rank is fully connected (a non-commutative op
  /// can run direct everywhere).
  bool all_fully_connected() const noexcept {
    for (const auto& d : dims)
      if (d.extent > 1 && !d.link.fully_connected) return false;
    return true;
  }
  /// Executed dimension d's algorithm asked for again, and bind's choice for it
  /// redone (the GPU path: the ipc transport reads peers' buffers, direct).
  void request(std::size_t d, algorithm a, const tuning& t) {
    bound_dimension& dim = dims.at(d);
    dim.requested = a;
    dim.algo = algorithms.at(d) = choose_algorithm(a, dim.link, dim.extent, t, true);
  }
};

/// Which executor the layout is for: the host path folds merged dimensions nested
/// under options.reproducible, widens 16-bit calls whose every dimension
/// accumulates in float32, and plans with options.profile; the device path does none
/// of these (plan/merge.hpp).
enum class bind_path { host, device };

namespace detail {
// options.algorithms has at most one entry per dimension of the (resolved) topology.
inline void check_algorithm_count(const runtime_topology& t, const options& o, const char* fn) {
  if (o.algorithms.size() > t.ndims())
    throw invalid_argument("options.algorithms", std::string(fn) + ": options.algorithms has " +
                                                     std::to_string(o.algorithms.size()) +
                                                     " entries but the topology \"" + t.to_string() + "\" has " +
                                                     std::to_string(t.ndims()) + " dimensions");
}
}  // namespace detail

/// The layout of rank `rank` of `size` (see the top of this file). `caller` names
/// the bind in errors ("bind", "cuda::bind", "explain"). On the host path, o's
/// accumulation settings are normalized to what the calls run: one entry per
/// dimension in o.dimension_accumulation, and o.accumulation float32 only when the
/// calls widen.
MDRING_COLD inline bound_layout bind_layout(const runtime_topology& written, std::size_t size, std::size_t rank,
                                            options& o, bind_path path, const char* caller) {
  const bool host = path == bind_path::host;
  const std::string fn = std::string("mdring::") + caller;
  bound_layout L;
  L.size = size, L.rank = rank;
  L.written = written.resolve(size, caller);
  if (host) detail::apply_profile(o, L.written, fn.c_str());
  detail::check_algorithm_count(L.written, o, fn.c_str());
  L.merged = merge_dimensions(L.written, o, host);
  if (host) {  // one accumulation per dimension; `accumulation` float32 only when the calls widen
    std::vector<accumulation> acc(L.written.ndims());
    for (std::size_t d = 0; d < acc.size(); ++d) acc[d] = detail::accumulation_of(o, d);
    o.accumulation = detail::accumulates_float32(o, acc.size()) ? accumulation::float32 : accumulation::element;
    o.dimension_accumulation = std::move(acc);
  }
  const runtime_topology& ex = L.merged.topology;
  L.extents = ex.extents();
  L.coords = ex.coordinates(rank);
  L.written_extents = L.written.extents();
  L.written_coords = L.written.coordinates(rank);
  for (std::size_t d = 0; d < L.extents.size(); ++d) {
    bound_dimension dim;
    dim.extent = L.extents[d];
    dim.coord = L.coords[d];
    dim.link = ex.dim(d).link;
    dim.requested = L.merged.requested[d];
    dim.algo = choose_algorithm(dim.requested, dim.link, dim.extent, o.tune, true);
    if (host && o.reproducible) {  // merged dimensions fold nested (plan/merge.hpp)
      for (std::size_t e : L.merged.nest[d])
        if (e > 1) dim.nest.push_back(e);
      if (dim.nest.size() < 2) dim.nest.clear();
    }
    dim.members = ex.peers(rank, d);
    L.algorithms.push_back(dim.algo);
    L.rank_links.push_back(ex.rank_link(d));
    L.dims.push_back(std::move(dim));
  }
  return L;
}

MDRING_NAMESPACE_END
