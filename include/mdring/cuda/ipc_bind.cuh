// mdring/cuda/ipc_bind.cuh: the ipc links of a bind (cuda/ipc.cuh): each GPU
// dimension's link tried at bind, then installed in the communicator on the
// dimensions that chose the ipc transport. Used by every bind of the GPU path
// (cuda/store.cuh, cuda/mpi.cuh).
#pragma once

#include "../options.hpp"
#include "../plan/bound_layout.hpp"
#include "../topology/runtime.hpp"
#include "../transport/device_select.hpp"
#include "config.cuh"
#include "ipc.cuh"

#include <span>
#include <string>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

// The executed dimensions that may run the ipc transport (a GPU link, more than
// one rank, and automatic or ipc asked for), each tried: its ipc link, open when
// its ranks are processes of one node and CUDA IPC works between them. `channel(d)`
// makes dimension d's exchange (collective, in dimension order on every rank).
template <class Topology, class Channel>
std::vector<ipc_link> open_ipc_links(const Topology& topo, std::size_t size, std::size_t rank, const options& opts,
                                     device_transport_support& support, Channel&& channel) {
  options o = opts;  // the bind the communicator will make (plan/bound_layout.hpp), ahead of it
  const bound_layout L = bind_layout(mdring::detail::to_runtime(topo), size, rank, o, bind_path::device, "cuda::bind");
  const runtime_topology& ex = L.executed();
  const merged_dimensions& m = L.merged;
  std::vector<ipc_link> links(ex.ndims());
  support.ipc.assign(ex.ndims(), false);
  const auto& coords = L.coords;
  for (std::size_t d = 0; d < ex.ndims(); ++d) {
    if (ex.extent(d) < 2 || ex.dim(d).link.space != memory_space::device) continue;
    bool wanted = true;
    for (std::size_t u = 0; u < opts.device_transports.size() && u < m.of_user.size(); ++u)
      if (m.of_user[u] == d && opts.device_transports[u] != device_transport::automatic &&
          opts.device_transports[u] != device_transport::ipc)
        wanted = false;
    if (!wanted) continue;
    const auto& members = L.dims[d].members;
    auto xch = channel(d, members, coords[d]);
    std::string why;
    links[d] = ipc_link::open(xch, members, coords[d], opts.tune.ipc_staging_bytes, &why);
    support.ipc[d] = links[d].is_open();
    if (!links[d].is_open() && support.ipc_unavailable.empty())
      support.ipc_unavailable = "dimension " + std::to_string(d) + ": " + why;
  }
  return links;
}

// Installs the ipc links of the dimensions that chose ipc (the others' are dropped).
template <class Comm>
void install_ipc_links(Comm& c, std::vector<ipc_link>& links) {
  for (std::size_t d = 0; d < c.executed_extents().size() && d < links.size(); ++d) {
    if (c.executed_transports()[d] != device_transport::ipc || c.executed_extents()[d] < 2) continue;
    const std::size_t p = c.executed_extents()[d];
    c.set_shared(d, ipc_staging_bytes(c.executed_topology().dim(d).link, p, c.get_options().tune));
    c.set_link(d, std::move(links[d]));
  }
}

}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
