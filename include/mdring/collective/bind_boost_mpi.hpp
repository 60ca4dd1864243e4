// mdring/collective/bind_boost_mpi.hpp: bind to a boost::mpi::communicator.
//
//   boost::mpi::environment env;
//   boost::mpi::communicator world;
//   auto comm = mdring::bind(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm>, world);
//
// A boost::mpi::communicator is a handle on an MPI_Comm, so this is the MPI
// transport on that communicator (duplicated at bind: the Boost communicator may
// go away afterwards). Needs Boost.MPI (target mdring::boost_mpi).
#pragma once

#include "../config.hpp"
#include "bind_mpi.hpp"

#include <boost/mpi/communicator.hpp>

MDRING_NAMESPACE_BEGIN

/// Binds over a Boost.MPI communicator, as bind() over its MPI_Comm.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
communicator<Topology, mpi::transport> bind(const Topology& topo, const boost::mpi::communicator& comm,
                                            options opts = {}) {
  return bind(topo, static_cast<MPI_Comm>(comm), std::move(opts));
}

MDRING_NAMESPACE_END
