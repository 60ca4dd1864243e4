// mdring/collective/bind_mpi.hpp: bind() for the MPI transport (transport/mpi.hpp).
//
//   auto comm = mdring::bind(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::infiniband>, MPI_COMM_WORLD);
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../transport/mpi.hpp"
#include "communicator.hpp"

#include <memory>

MDRING_NAMESPACE_BEGIN

/// Binds a topology to an MPI communicator. Collective over comm.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
communicator<Topology, mpi::transport> bind(const Topology& topo, MPI_Comm comm, options opts = {}) {
  detail::validate(opts);
  if (opts.progress == progress_mode::agent && !mpi::transport::thread_multiple())
    throw invalid_argument("options.progress",
                           "mdring::bind: options.progress is agent, whose progress thread calls MPI while your "
                           "threads do, but MPI was not initialized with MPI_THREAD_MULTIPLE (MPI_Query_thread); "
                           "call MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), or use "
                           "progress_mode::in_wait (nonblocking calls then move inside wait() and test())");
  auto tr = std::make_unique<mpi::transport>(comm, opts, detail::fingerprint(detail::to_runtime(topo), opts));
  return communicator<Topology, mpi::transport>(topo, std::move(tr), std::move(opts));
}

MDRING_NAMESPACE_END
