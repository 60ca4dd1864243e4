// mdring/plan/merge.hpp: adjacent dimensions that run as one.
//
// "shm:2 x shm:2" describes four ranks on one node as a 2 x 2 grid. Run as two
// dimensions, the data crosses the node's memory twice (one reduce-scatter and one
// all-gather per dimension); run as one direct stage over all four ranks it
// crosses once. So adjacent dimensions with the same fully connected link, whose
// algorithm is left automatic, are merged into one dimension of their product as
// long as it has at most tuning::direct_max_extent ranks (tuning::merge_same_link;
// on by default). The merged dimension's coordinate is c_d + p_d c_{d+1}, so the
// ranks keep their numbers. Links that are not fully connected (rings of nodes)
// are never merged: their dimensions are what the topology is for.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"

#include <cstddef>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

struct merged_dimensions {
  runtime_topology topology;         // the dimensions as executed
  std::vector<algorithm> requested;  // per executed dimension
  std::vector<std::size_t> of_user;  // user dimension d runs in executed dimension of_user[d]
};

// `topo` must be resolved; requested[d] (missing: automatic) is the user's choice for dimension d.
inline merged_dimensions merge_dimensions(const runtime_topology& topo, std::span<const algorithm> requested,
                                          const tuning& tune) {
  merged_dimensions m;
  std::vector<runtime_topology::dimension> out;
  auto req = [&](std::size_t d) { return d < requested.size() ? requested[d] : algorithm::automatic; };
  for (std::size_t d = 0; d < topo.ndims(); ++d) {
    const auto& dim = topo.dim(d);
    if (!out.empty() && tune.merge_same_link) {
      auto& prev = out.back();
      const bool mergeable = dim.link.fully_connected && prev.link == dim.link && m.requested.back() == algorithm::automatic &&
                             req(d) == algorithm::automatic && prev.extent * dim.extent <= tune.direct_max_extent;
      if (mergeable) {
        prev.extent *= dim.extent;
        m.of_user.push_back(out.size() - 1);
        continue;
      }
    }
    out.push_back(dim);
    m.requested.push_back(req(d));
    m.of_user.push_back(out.size() - 1);
  }
  m.topology = runtime_topology(std::move(out));
  return m;
}

MDRING_NAMESPACE_END
