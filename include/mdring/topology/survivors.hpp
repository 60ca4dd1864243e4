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
// ranks kept, which is again dimension 0 fastest. mdring::grow
// (collective/grow_ucx.hpp) makes the same dimension larger again
// (detail::plan_growth: the new ranks, node-major).
#pragma once

#include "../config.hpp"
#include "runtime.hpp"

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {
// The dimension that shrinks and grows: the outermost of more than one rank, else the last.
inline std::size_t growing_dim(const runtime_topology& t) {
  std::size_t d = t.ndims() - 1;
  for (std::size_t k = 0; k < t.ndims(); ++k)
    if (t.extent(k) > 1) d = k;
  return d;
}

}  // namespace detail

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
  survivors s{t, t, {}, detail::growing_dim(t), {}, {}};
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

namespace detail {

// The grown topology and the new ranks: order[new rank] = slot (members 0..n-1 by
// rank, then joiners by slot); `why_not` when the shape does not fit.
struct growth {
  runtime_topology topology;
  std::vector<std::size_t> order;
  std::string why_not;
};

// who[slot]: ucx::world::self_description() ("node\nib\npid").
MDRING_COLD inline growth plan_growth(const runtime_topology& now, std::size_t size,
                                      const std::vector<std::string>& who) {
  growth g{now, {}, {}};
  const std::size_t d = growing_dim(now), inner = now.size() / now.extent(d);
  if (size % inner != 0) {
    g.why_not = "a size of " + std::to_string(size) + " does not fit \"" + now.to_string() +
                "\": it must be a multiple of " + std::to_string(inner) + ", the ranks of one " + now.dim(d).link.name +
                " coordinate";
    return g;
  }
  g.topology.dim(d).extent = size / inner;
  std::vector<std::string> hosts;  // in order of first appearance
  std::map<std::string, std::vector<std::size_t>> on;
  for (std::size_t s = 0; s < who.size(); ++s) {
    const std::string node = who[s].substr(0, who[s].find('\n'));
    if (!on.count(node)) hosts.push_back(node);
    on[node].push_back(s);
  }
  for (const auto& h : hosts) {
    if (on[h].size() % inner != 0) {
      g.why_not = "host " + h.substr(0, h.find('/')) + " would hold " + std::to_string(on[h].size()) +
                  " ranks, not a multiple of " + std::to_string(inner) + " (the ranks of one " + now.dim(d).link.name +
                  " coordinate of \"" + g.topology.to_string() + "\")";
      return g;
    }
    g.order.insert(g.order.end(), on[h].begin(), on[h].end());
  }
  return g;
}

}  // namespace detail

MDRING_NAMESPACE_END
