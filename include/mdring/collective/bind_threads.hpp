// mdring/collective/bind_threads.hpp: bind() for the threads transport.
//
//   mdring::threads::run(8, [&](mdring::threads::endpoint ep) {
//     auto comm = mdring::bind(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm>, ep);
//   });
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../transport/threads.hpp"
#include "communicator.hpp"

#include <memory>

MDRING_NAMESPACE_BEGIN

/// Binds a topology (compile-time, or a runtime_topology) to one rank of a threads
/// world. Every rank of the world calls it, in the same order for every communicator.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
communicator<Topology, threads::transport> bind(const Topology& topo, threads::endpoint ep, options opts = {}) {
  if (ep.w == nullptr) throw invalid_argument("endpoint", "mdring::bind: the threads::endpoint has no world");
  try {
    auto tr = std::make_unique<threads::transport>(ep, detail::fingerprint(detail::to_runtime(topo), opts),
                                                   opts.shared_memory, opts.tune.shared_staging_bytes);
    return communicator<Topology, threads::transport>(topo, std::move(tr), std::move(opts));
  } catch (const std::exception& e) {
    ep.w->fail(ep.rank, e.what());  // so that no other rank waits for this one
    throw;
  }
}

MDRING_NAMESPACE_END
