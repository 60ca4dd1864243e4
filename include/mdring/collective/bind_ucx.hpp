// mdring/collective/bind_ucx.hpp: bind() for the UCX transport (transport/ucx.hpp).
//
//   auto world = mdring::ucx::world::from_env();
//   auto comm = mdring::bind(mdring::ring<mdring::shm, 4> * mdring::ring<mdring::ethernet>, world);
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../transport/ucx.hpp"
#include "communicator.hpp"

#include <memory>

MDRING_NAMESPACE_BEGIN

/// Binds a topology to the processes of a UCX world. Collective over the world:
/// every process binds the same topology, in the same order as its other binds.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
communicator<Topology, ucx::transport> bind(const Topology& topo, const ucx::world& world, options opts = {}) {
  detail::validate(opts);
  auto tr = std::make_unique<ucx::transport>(world, opts, detail::fingerprint(detail::to_runtime(topo), opts));
  return communicator<Topology, ucx::transport>(topo, std::move(tr), std::move(opts));
}

MDRING_NAMESPACE_END
