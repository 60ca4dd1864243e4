// mdring/separate/mpi.hpp: bind() over MPI in separate compilation (see api.hpp):
// what <mdring/mpi.hpp> is when MDRING_SEPARATE_COMPILATION is defined.
#pragma once

#include "../topology/detect_mpi.hpp"  // detect_topology(comm), as header-only
#include "api.hpp"

#include <mpi.h>

#include <concepts>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace separate {
/// Compiled in separate/src.hpp: mdring::bind(topology, comm, opts), header-only.
std::unique_ptr<face> bind_mpi(const runtime_topology& topology, MPI_Comm comm, options opts);
}  // namespace separate

#ifndef MDRING_SEPARATE_IMPLEMENTATION
/// Binds a topology to an MPI communicator (collective/bind_mpi.hpp). Collective over comm.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
compiled_communicator bind(const Topology& topo, MPI_Comm comm, options opts = {}) {
  return compiled_communicator(separate::bind_mpi(describe(topo), comm, std::move(opts)));
}
#endif

MDRING_NAMESPACE_END
