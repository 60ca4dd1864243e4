// mdring/cuda/communicator.cuh: a topology bound to device transports.
//
//   auto comm = mdring::cuda::bind(mdring::ring<mdring::nvlink, 4> * mdring::ring<mdring::infiniband, 64>,
//                                  MPI_COMM_WORLD);              // mdring/cuda/mpi.cuh
//   mdring::cuda::all_reduce(comm, d_send, d_recv, n, mdring::sum, stream);   // cuda/collectives.cuh
//
// A communicator<Topology, Links...> is what every communicator is
// (collective/communicator_base.hpp: the bind result of plan/bound_layout.hpp, the
// options, the failure flag and the hang report's board, the same as the host
// path's) plus, per executed dimension, the link that moves its messages: one of
// Links (nccl_link, mpi_link, ipc_link, local_link), picked by
// transport/device_select.hpp from the link tag or options.device_transports, and
// the GPU executor's state for its calls (cuda/engine.cuh device_calls). The
// algorithms per dimension, the merging of same-link dimensions, the block ranges,
// the segment length and the program are those of the host path
// (plan/call.hpp, plan/collective_programs.hpp): the GPU runs the same steps the
// host executor runs, built once per (count, type, op kind, alignment) and cached.
#pragma once

#include "../collective/communicator_base.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../plan/bound_layout.hpp"
#include "../plan/call.hpp"
#include "../plan/program.hpp"
#include "../topology/runtime.hpp"
#include "../transport/device_select.hpp"
#include "config.cuh"
#include "engine.cuh"

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

/// A topology bound to device transports (see the top): what cuda::bind() returns; each executed dimension runs
/// over one of Links.
template <class Topology, class... Links>
class communicator : public mdring::detail::communicator_base {
public:
  using topology_type = Topology;                               ///< the topology type bound
  using link_variant = std::variant<std::monostate, Links...>;  ///< one dimension's link: none yet, or one of Links

  /// Binds rank `rank` of `size` (plan/bound_layout.hpp, the device path) and picks a
  /// transport per executed dimension. The bind functions then install each
  /// dimension's link (set_link).
  communicator(const Topology& topo, std::size_t size, std::size_t rank, options opts,
               const device_transport_support& support, int device)
      : communicator_base(mdring::detail::to_runtime(topo), size, rank, std::move(opts), bind_path::device,
                          "cuda::bind", "device"),
        device_(device),
        calls_(get_options().device_memory, device) {
    const bound_layout& L = layout();
    transports_ = select_device_transports(topology(), L.merged, get_options().device_transports, support);
    access_.assign(L.ndims(), dim_access{});
    for (std::size_t d = 0; d < L.ndims(); ++d) {
      // The ipc transport reads the peers' buffers in place: direct by shared
      // access, unless the user asked for another algorithm (it moves messages too).
      if (transports_[d] == device_transport::ipc && L.dims[d].requested == algorithm::automatic && L.extents[d] > 1)
        mutable_layout().request(d, algorithm::direct, get_options().tune);
      check_fold_inputs(d);
    }
    links_.resize(L.ndims());
  }

  /// Movable, not copyable.
  ///@{
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  ///@}

  int device() const noexcept { return device_; }  ///< the CUDA device the communicator runs on
  /// The transport of dimension d as written.
  device_transport transport_of(std::size_t d) const { return transports_.at(layout().merged.of_user.at(d)); }
  /// Per executed dimension.
  const std::vector<device_transport>& executed_transports() const noexcept { return transports_; }
  /// The global ranks of this rank's ring in executed dimension d, by coordinate.
  const std::vector<std::size_t>& members(std::size_t d) const { return layout().dims.at(d).members; }

  /// Pre-sizes device scratch, streams and events so that every collective of up
  /// to `count` elements of T (the count argument of each) neither allocates nor
  /// creates anything: needed before capturing a call into a CUDA graph.
  /// reserve<T>(kind, count): for one collective only.
  template <class T>
  void reserve(std::size_t count) {
    for (auto kind : {collective::all_reduce, collective::reduce_scatter, collective::all_gather, collective::broadcast,
                      collective::reduce})
      reserve<T>(kind, count);
  }
  /// Pre-sizes for one collective `kind` only (see reserve<T>(count)).
  template <class T>
  void reserve(collective kind, std::size_t count) {
    detail::device_guard g(device_);
    std::size_t bytes = 0, segments = 1;
    for (bool commutative : {true, false}) {
      if (!commutative && !layout().all_fully_connected()) continue;
      const std::size_t V = std::size_t(detail::vector_elements<T>);
      for (std::size_t mis = 0; mis < (kind == collective::all_reduce ? V : 1); ++mis)
        for (std::size_t root : {std::size_t(0), size() > 1 ? std::size_t(1) : std::size_t(0)}) {
          const auto& s = program_for<T>(kind, count, root, commutative, mis);
          bytes = detail::scratch_elements(s) * sizeof(T) > bytes ? detail::scratch_elements(s) * sizeof(T) : bytes;
          segments = s.segments > segments ? s.segments : segments;
        }
    }
    calls_.workspace().get(bytes, false, "reserve");
    calls_.streams().prepare(layout().ndims(), segments);
  }
  /// Device scratch held, in bytes.
  std::size_t scratch_bytes() const noexcept { return calls_.workspace().capacity(); }

  // ---- for the engine and the bind functions ----------------------------------
  /// Something the links share and that must live as long as they do (the MPI transport).
  void keep_alive(std::shared_ptr<void> p) { owners_.push_back(std::move(p)); }
  link_variant& link(std::size_t d) { return links_.at(d); }  ///< executed dimension d's link
  /// Installs executed dimension d's link.
  template <class L>
  void set_link(std::size_t d, L&& l) {
    links_.at(d) = std::forward<L>(l);
  }
  /// Executed dimension d runs its direct stages by shared access (the ipc
  /// transport), with stages of up to staging_bytes going through staging buffers.
  void set_shared(std::size_t d, std::size_t staging_bytes) { access_.at(d) = {true, staging_bytes, false}; }
  /// Executed dimension d runs its direct stages by shared access.
  bool shared(std::size_t d) const { return access_.at(d).shared; }

  /// The program of one call (plan/call.hpp decides and describes it; built once per
  /// parameters and cached, plan/program_cache.hpp). recv_mis: all_reduce's
  /// receive buffer's misalignment (elements modulo a 16-byte vector).
  template <class T>
  const program& program_for(collective kind, std::size_t count, std::size_t root, bool commutative,
                             std::size_t recv_mis) {
    return calls_.program_for({kind, count, root, sizeof(T)}, layout(), access_, get_options().tune, commutative,
                              std::size_t(detail::vector_elements<T>), recv_mis);
  }
  /// The all_reduce program, as before (tests, benchmarks).
  template <class T>
  const program& program_for(std::size_t count, bool commutative, std::size_t recv_mis) {
    return program_for<T>(collective::all_reduce, count, 0, commutative, recv_mis);
  }
  /// Programs built so far (a repeated call shape builds none).
  std::uint64_t programs_built() const noexcept { return calls_.programs_built(); }
  /// The GPU executor's state for this communicator's calls (cuda/engine.cuh).
  detail::device_calls& calls() noexcept { return calls_; }

private:
  // The direct algorithm folds at most max_fold_inputs inputs in one pass.
  void check_fold_inputs(std::size_t d) const {
    const bound_layout& L = layout();
    if (L.algorithms[d] != algorithm::direct || L.extents[d] <= std::size_t(max_fold_inputs)) return;
    const options& o = get_options();
    throw invalid_argument("options.algorithms",
                           "mdring::cuda::bind: dimension " + std::to_string(d) + " (" + L.dim_name(d) +
                               ") runs the direct algorithm over more than " + std::to_string(max_fold_inputs) +
                               " ranks, more inputs than the GPU path folds in one pass; " +
                               (o.reproducible ? std::string("options.reproducible needs direct on every "
                                                             "dimension: write it as two dimensions")
                                : mdring::detail::accumulation_of(o, L.merged.user_of[d]) == accumulation::float32
                                    ? std::string("a float32 accumulation (options.accumulation, "
                                                  "options.dimension_accumulation) runs direct there: write it "
                                                  "as two dimensions or leave that dimension element")
                                    : std::string("use ring there")));
  }

  int device_ = 0;
  std::vector<device_transport> transports_;
  std::vector<dim_access> access_;             // per executed dimension: shared access and its staging bytes
  std::vector<std::shared_ptr<void>> owners_;  // destroyed after the links
  std::vector<link_variant> links_;
  detail::device_calls calls_;
};

namespace detail {

template <class C>
struct is_device_communicator : std::false_type {};
template <class Topology, class... Links>
struct is_device_communicator<communicator<Topology, Links...>> : std::true_type {};

}  // namespace detail

}  // namespace cuda

MDRING_NAMESPACE_END
