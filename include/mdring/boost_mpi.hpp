// mdring/boost_mpi.hpp: the host path plus binding to boost::mpi::communicator
// (needs Boost.MPI; target mdring::boost_mpi).
#pragma once

#include "mpi.hpp"
#include "collective/bind_boost_mpi.hpp"
