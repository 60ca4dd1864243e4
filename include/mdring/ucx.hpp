// mdring/ucx.hpp: the host path plus the UCX transport, for programs without MPI
// (needs UCX; target mdring::ucx). Launch with mdring-run, torchrun or any
// launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and MDRING_SECRET:
//
//   auto world = mdring::ucx::world::from_env();
//   auto comm = mdring::bind(world.topology(), world);   // e.g. "shm:4 x ethernet:2"
//   mdring::all_reduce(comm, buf, n, mdring::sum);
#pragma once

#if defined(MDRING_SEPARATE_COMPILATION) && !defined(MDRING_SEPARATE_IMPLEMENTATION)
#error \
    "mdring: the UCX transport is not compiled in separate compilation (MDRING_SEPARATE_COMPILATION, mdring/separate/api.hpp); include it header-only"
#endif

#include "mdring.hpp"
#include "collective/bind_ucx.hpp"
#include "collective/grow_ucx.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/tcp_store.hpp"
#include "transport/ucx.hpp"
#include "transport/ucx_world.hpp"
