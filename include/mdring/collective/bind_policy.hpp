// mdring/collective/bind_policy.hpp: the reproducible contract carried in the
// topology's type, for a code that wants it fixed where its machine is described
// rather than in every bind's options.
//
//   constexpr auto machine = mdring::reproducible(mdring::ring<mdring::shm, 4> * mdring::ring<mdring::ethernet, 16>);
//   auto comm = mdring::bind(machine, MPI_COMM_WORLD);   // options::reproducible is set
//
// bind sets options::reproducible (docs/USAGE.md, "Reproducible reductions") and binds the
// topology inside; every host bind takes it (threads, MPI, UCX, Boost.MPI). The
// GPU path's binds take options::reproducible directly.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/ring.hpp"
#include "../topology/runtime.hpp"

#include <concepts>
#include <utility>

MDRING_NAMESPACE_BEGIN

/// A topology that carries the reproducible contract (reproducible()).
template <class Topology>
struct reproducible_topology {
  Topology topology;  ///< the topology bound
};

/// The topology `t` with the reproducible contract: bind() sets options::reproducible.
template <class Topology>
  requires static_topology<Topology> || std::same_as<Topology, runtime_topology>
constexpr reproducible_topology<Topology> reproducible(const Topology& t) {
  return {t};
}

/// The bind for the world's transport (found when the call is instantiated), with
/// options::reproducible set.
template <class Topology, class World>
auto bind(const reproducible_topology<Topology>& t, World&& world, options opts = {}) {
  opts.reproducible = true;
  return bind(t.topology, std::forward<World>(world), std::move(opts));
}

MDRING_NAMESPACE_END
