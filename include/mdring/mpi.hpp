// mdring/mpi.hpp: the host path plus the MPI transport (needs <mpi.h>; target mdring::mpi).
#pragma once

#include "mdring.hpp"
#include "collective/bind_mpi.hpp"
#include "topology/detect_mpi.hpp"
#include "transport/mpi.hpp"
