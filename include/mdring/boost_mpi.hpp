// mdring/boost_mpi.hpp: the host path plus binding to boost::mpi::communicator
// (needs Boost.MPI; target mdring::boost_mpi).
#pragma once

#if defined(MDRING_SEPARATE_COMPILATION) && !defined(MDRING_SEPARATE_IMPLEMENTATION)
#error \
    "mdring: the Boost.MPI transport is not compiled in separate compilation (MDRING_SEPARATE_COMPILATION, mdring/separate/api.hpp); include it header-only"
#endif

#include "mpi.hpp"
#include "collective/bind_boost_mpi.hpp"
