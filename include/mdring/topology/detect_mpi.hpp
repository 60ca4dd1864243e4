// mdring/topology/detect_mpi.hpp: the topology of an MPI communicator, detected.
//
//   auto topo = mdring::detect_topology(MPI_COMM_WORLD);  // e.g. "shm:4 x infiniband:16"
//   auto comm = mdring::bind(topo, MPI_COMM_WORLD);
//
// Ranks per node come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); the network
// is infiniband when every node has a device under /sys/class/infiniband, else
// ethernet. The result is resolved (no dynamic extent):
//   one rank                     shm:1
//   one node of P ranks          shm:P
//   N nodes of L ranks each      shm:L x <network>:N    (<network>:N when L is 1)
//   nodes of unequal rank counts <network>:P            (flat: no shm dimension fits)
// The topology assumes node-major ranks (the L ranks of node 0 first, then node 1's,
// ...), which mpirun's default by-slot mapping gives. detect_node_layout() tells
// whether comm is so, and gives each rank its node-major position (`key`), so that
// MPI_Comm_split(comm, 0, layout.key, &ordered) makes a communicator that is.
// layout_of_nodes(comm, node_id) does the same from node numbers the ranks give.
// All three are collective over comm.
#pragma once

#include "../config.hpp"
#include "detect.hpp"
#include "runtime.hpp"

#include <mpi.h>

#include <cstddef>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The layout when each rank names its node itself: ranks passing the same
/// `node_id` (any int) are one node. For launchers or containers that know the
/// nodes better than shared-memory detection does. Collective over comm.
inline node_layout layout_of_nodes(MPI_Comm comm, int node_id) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> given(std::size_t(size), 0);
  MPI_Allgather(&node_id, 1, MPI_INT, given.data(), 1, MPI_INT, comm);
  int ib = detail::has_infiniband() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ib, 1, MPI_INT, MPI_MIN, comm);
  return layout_from_node_ids(given, std::size_t(rank), ib != 0);
}

/// Nodes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Collective over comm.
inline node_layout detect_node_layout(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  // The lowest rank of comm on each node names the node (the split keeps rank order).
  int leader = rank;
  MPI_Bcast(&leader, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
  return layout_of_nodes(comm, leader);
}

/// The topology of comm's ranks, from where they run (topology/detect.hpp topology_of).
inline runtime_topology detect_topology(MPI_Comm comm) { return topology_of(detect_node_layout(comm)); }

MDRING_NAMESPACE_END
