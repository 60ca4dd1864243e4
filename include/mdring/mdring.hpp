// mdring/mdring.hpp: the host path in one include. Compiles with a plain C++20
// compiler: no MPI, no CUDA. For MPI add <mdring/mpi.hpp>, for Boost.MPI
// <mdring/boost_mpi.hpp>.
//
//   constexpr auto topo = mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm, 4>;
//   mdring::threads::run(8, [&](mdring::threads::endpoint ep) {
//     auto comm = mdring::bind(topo, ep);
//     mdring::all_reduce(comm, buf, n, mdring::sum);
//     auto req = mdring::iall_reduce(comm, buf, n, mdring::sum);   // nonblocking
//     req.wait();
//   });
#pragma once

#if defined(MDRING_SEPARATE_COMPILATION) && !defined(MDRING_SEPARATE_IMPLEMENTATION)
// Separate compilation: declarations only, the library compiled once elsewhere.
#include "separate/api.hpp"
#else

#include "config.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "options.hpp"
#include "version.hpp"

#include "topology/coordinates.hpp"
#include "topology/link.hpp"
#include "topology/link_registry.hpp"
#include "topology/ring.hpp"
#include "topology/runtime.hpp"
#include "topology/survivors.hpp"

#include "executor/progress.hpp"

#include "plan/blocks.hpp"
#include "plan/cost.hpp"
#include "plan/merge.hpp"
#include "plan/pipeline.hpp"
#include "plan/call_algorithms.hpp"
#include "plan/halving_doubling.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/collective_programs.hpp"
#include "plan/program_cache.hpp"
#include "plan/profile.hpp"

#include "reduce/host.hpp"
#include "reduce/ops.hpp"
#include "reduce/types.hpp"

#include "transport/device_select.hpp"
#include "transport/threads.hpp"
#include "transport/transport.hpp"

#include "collective/all_gather.hpp"
#include "collective/all_reduce.hpp"
#include "collective/bind_policy.hpp"
#include "collective/bind_threads.hpp"
#include "collective/broadcast.hpp"
#include "collective/calibrate.hpp"
#include "collective/communicator.hpp"
#include "collective/reduce.hpp"
#include "collective/reduce_scatter.hpp"
#include "collective/request.hpp"
#include "collective/shrink.hpp"
#endif
