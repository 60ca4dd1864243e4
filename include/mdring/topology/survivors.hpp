// mdring/topology/survivors.hpp: the topology that survives a failure
// (mdring::shrink, collective/shrink.hpp).
//
//   auto t = mdring::parse_topology("shm:2 x ethernet:4").resolve(8);
//   std::vector<char> failed(8, 0);
//   failed[5] = 1;                                   // rank 5 (node 2) is gone
//   auto s = mdring::survivors_of(t, failed);
//   s.topology.to_string() == "shm:2 x ethernet:3"
//   s.members == {0, 1, 2, 3, 6, 7}                  // old ranks, by new rank
//   s.describe() == "shm:2 x ethernet:4 -> shm:2 x ethernet:3 (ethernet coordinate 2 dropped: rank 5 failed)"
//
// A failed rank takes its whole slab of the outermost dimension of more than one
// rank with it (its node, when that dimension is the network), so that every
// inner ring (NVLink, a node's shared memory) stays whole and the topology stays
// regular. The survivors keep their order: new rank = position among the old
// ranks kept, which is again dimension 0 fastest.
#pragma once

#include "../config.hpp"
#include "runtime.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// What survives a failure: the shrunk topology and the old ranks it keeps.
struct survivors {
  runtime_topology from;             ///< the topology before (resolved)
  runtime_topology topology;         ///< after; equal to `from` when nothing failed or nothing survives
  std::vector<std::size_t> members;  ///< the old ranks kept, by new rank (empty: none)
  std::size_t dimension = 0;         ///< the dimension that shrank
  std::vector<std::size_t> dropped;  ///< its coordinates dropped, ascending
  std::vector<std::size_t> failed;   ///< the failed ranks, ascending

  /// "shm:2 x ethernet:4 -> shm:2 x ethernet:3 (ethernet coordinate 2 dropped: rank 5 failed)".
  MDRING_COLD std::string describe() const {
    if (failed.empty()) return from.to_string() + " (no rank failed)";
    std::string s = from.to_string() + " -> " + (members.empty() ? std::string("nothing") : topology.to_string());
    s += " (" + from.dim(dimension).link.name + (dropped.size() == 1 ? " coordinate " : " coordinates ");
    for (std::size_t i = 0; i < dropped.size(); ++i) s += (i ? ", " : "") + std::to_string(dropped[i]);
    s += failed.size() == 1 ? " dropped: rank " : " dropped: ranks ";
    for (std::size_t i = 0; i < failed.size(); ++i) s += (i ? ", " : "") + std::to_string(failed[i]);
    return s + (failed.size() == 1 ? " failed)" : " failed)");
  }
};

/// The survivors of `t` (resolved) when failed[r] is nonzero for each failed rank r
/// (failed.size() == t.size(); throws topology_error otherwise).
MDRING_COLD inline survivors survivors_of(const runtime_topology& t, std::span<const char> failed) {
  if (!t.is_static() || failed.size() != t.size())
    throw topology_error("failed", "mdring::survivors_of: " + std::to_string(failed.size()) +
                                       " ranks' failures given for \"" + t.to_string() + "\" (" +
                                       (t.is_static() ? std::to_string(t.size()) + " ranks" : "not resolved") + ")");
  survivors s{t, t, {}, 0, {}, {}};
  for (std::size_t d = 0; d < t.ndims(); ++d)
    if (t.extent(d) > 1) s.dimension = d;
  std::vector<char> drop(t.extent(s.dimension), 0);
  for (std::size_t r = 0; r < failed.size(); ++r)
    if (failed[r]) {
      s.failed.push_back(r);
      drop[t.coordinates(r)[s.dimension]] = 1;
    }
  for (std::size_t c = 0; c < drop.size(); ++c)
    if (drop[c]) s.dropped.push_back(c);
  if (s.dropped.size() == drop.size()) return s;  // nothing survives
  for (std::size_t r = 0; r < failed.size(); ++r)
    if (!drop[t.coordinates(r)[s.dimension]]) s.members.push_back(r);
  s.topology.dim(s.dimension).extent -= s.dropped.size();
  return s;
}

MDRING_NAMESPACE_END
