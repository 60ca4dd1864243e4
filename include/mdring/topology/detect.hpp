// mdring/topology/detect.hpp: a topology from where the ranks run.
//
// Every rank names its node (any int; detect_mpi.hpp asks MPI, the UCX world its
// store); layout_from_node_ids() makes the layout, topology_of() the topology:
//   one rank                     shm:1
//   one node of P ranks          shm:P
//   N nodes of L ranks each      shm:L x <network>:N    (<network>:N when L is 1)
//   nodes of unequal rank counts <network>:P            (flat: no shm dimension fits)
// The network is infiniband when every node has a device under
// /sys/class/infiniband, else ethernet. The topology assumes node-major ranks (the
// L ranks of node 0 first, then node 1's, ...); node_layout says whether they are,
// and gives each rank its node-major position (`key`) to renumber by.
#pragma once

#include "../config.hpp"
#include "runtime.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <dirent.h>

MDRING_NAMESPACE_BEGIN

/// Where the ranks run (see the top): nodes, ranks per node, and the node-major position of each rank.
struct node_layout {
  std::size_t ranks = 0;           ///< comm's size
  std::size_t nodes = 0;           ///< distinct shared-memory nodes
  std::size_t ranks_per_node = 0;  ///< when every node has as many ranks; 0 otherwise
  std::size_t node = 0;            ///< this rank's node, numbered by the lowest rank on it
  std::size_t local_rank = 0;      ///< this rank's position on its node (in comm's rank order)
  bool node_major = false;         ///< rank == (ranks of the nodes before) + local_rank, everywhere
  int key = 0;                     ///< this rank's position in node-major order
  std::string network;             ///< "infiniband" or "ethernet" (the same on every rank)
};

namespace detail {
// A node with an InfiniBand (or RoCE) device shows it under /sys/class/infiniband.
inline bool has_infiniband() {
  DIR* d = ::opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      any = true;
      break;
    }
  ::closedir(d);
  return any;
}
}  // namespace detail

/// The layout from the node every rank names (`given[r]`: any int; equal ints are
/// one node) as seen by rank `rank`; `infiniband`: every rank has an InfiniBand device.
inline node_layout layout_from_node_ids(const std::vector<int>& given, std::size_t rank, bool infiniband) {
  const int size = int(given.size());
  // A node is named by its lowest rank.
  std::map<int, int> lowest;
  std::vector<int> leaders(std::size_t(size), 0);
  for (int r = 0; r < size; ++r) leaders[std::size_t(r)] = lowest.try_emplace(given[std::size_t(r)], r).first->second;
  std::vector<int> ids = leaders;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  auto node_of = [&](int r) {
    return std::size_t(std::lower_bound(ids.begin(), ids.end(), leaders[std::size_t(r)]) - ids.begin());
  };
  std::vector<std::size_t> count(ids.size(), 0), local(std::size_t(size), 0);
  for (int r = 0; r < size; ++r) local[std::size_t(r)] = count[node_of(r)]++;
  std::vector<std::size_t> first(ids.size(), 0);  // node-major position of each node's first rank
  for (std::size_t n = 1; n < ids.size(); ++n) first[n] = first[n - 1] + count[n - 1];

  node_layout l;
  l.ranks = std::size_t(size);
  l.nodes = ids.size();
  const bool equal = std::all_of(count.begin(), count.end(), [&](std::size_t c) { return c == count[0]; });
  l.ranks_per_node = equal && !count.empty() ? count[0] : 0;
  l.node = node_of(int(rank));
  l.local_rank = local[rank];
  l.node_major = true;
  for (int r = 0; r < size; ++r)
    if (first[node_of(r)] + local[std::size_t(r)] != std::size_t(r)) l.node_major = false;
  l.key = int(first[l.node] + l.local_rank);
  l.network = infiniband ? "infiniband" : "ethernet";
  return l;
}

/// The topology of a layout (see the table at the top).
inline runtime_topology topology_of(const node_layout& l) {
  std::string t;
  if (l.nodes <= 1) t = "shm:" + std::to_string(l.ranks);
  else if (l.ranks_per_node > 1)
    t = "shm:" + std::to_string(l.ranks_per_node) + " x " + l.network + ":" + std::to_string(l.nodes);
  else t = l.network + ":" + std::to_string(l.ranks);
  return parse_topology(t);
}

MDRING_NAMESPACE_END
