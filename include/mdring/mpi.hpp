// mdring/mpi.hpp: the host path plus the MPI transport (needs <mpi.h>; target mdring::mpi).
#pragma once

#if defined(MDRING_SEPARATE_COMPILATION) && !defined(MDRING_SEPARATE_IMPLEMENTATION)
// Separate compilation (separate/api.hpp): bind over MPI, compiled once elsewhere.
#include "separate/mpi.hpp"
#else
#include "mdring.hpp"
#include "collective/bind_mpi.hpp"
#include "topology/detect_mpi.hpp"
#include "transport/mpi.hpp"
#endif
