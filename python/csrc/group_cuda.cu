// python/csrc/group_cuda.cu: device_group (group.hpp) over mdring's GPU path bound
// through torch's store (mdring/cuda/store.cuh): the ipc transport between the
// processes of a node, NCCL between nodes. Compiled by nvcc, apart from torch's
// headers; backend.cpp hands it device pointers and the caller's current stream.
#include "group_impl.hpp"

#include <mdring/cuda/store.cuh>
#include <mdring/transport/node_window.hpp>

#include <cstdlib>

namespace mdring_torch {

namespace {

// MDRING_CUDA_TOPOLOGY, or the hosts' layout (see group.hpp).
mdring::runtime_topology device_topology(mdring::rendezvous::store& store, const group_config& cfg,
                                         std::string& source) {
  if (const char* t = std::getenv("MDRING_CUDA_TOPOLOGY"); t && *t) {
    source = "MDRING_CUDA_TOPOLOGY";
    return mdring::parse_topology(t).resolve(cfg.size, "mdring_torch (MDRING_CUDA_TOPOLOGY)");
  }
  const auto deadline = mdring::rendezvous::clock::now() + cfg.timeout;
  const auto nodes = mdring::rendezvous::all_gather(store, "mdring_torch/cuda/node", cfg.rank, cfg.size,
                                                    mdring::detail::node_identity(), deadline);
  // L ranks on the first node; node-major: ranks [k L, (k+1) L) on node k, all distinct.
  std::size_t L = 0;
  while (L < cfg.size && nodes[L] == nodes[0]) ++L;
  bool node_major = cfg.size % L == 0;
  const std::size_t N = node_major ? cfg.size / L : 0;
  for (std::size_t r = 0; r < cfg.size && node_major; ++r) node_major = nodes[r] == nodes[r / L * L];
  for (std::size_t k = 1; k < N && node_major; ++k)
    for (std::size_t q = 0; q < k && node_major; ++q) node_major = nodes[k * L] != nodes[q * L];
  source = "detected";
  if (node_major && N == 1) return mdring::parse_topology("nvlink:" + std::to_string(L));
  if (node_major) return mdring::parse_topology("nvlink:" + std::to_string(L) + " x infiniband:" + std::to_string(N));
  source = "detected (ranks not node-major: one flat dimension)";
  return mdring::parse_topology("infiniband:" + std::to_string(cfg.size));
}

class device_group_impl final : public device_group {
public:
  using comm_t = mdring::cuda::store_communicator<mdring::runtime_topology>;
  device_group_impl(comm_t c, int device, std::string desc)
      : comm_(std::move(c)), device_(device), desc_(std::move(desc)) {}

  void all_reduce(const void* in, void* out, std::size_t n, dtype t, redop o, void* stream) override {
    typed(t, o, [&]<class T>(auto op) {
      mdring::cuda::all_reduce(comm_, static_cast<const T*>(in), static_cast<T*>(out), n, op, s(stream));
    });
  }
  void reduce(const void* in, void* out, std::size_t n, std::size_t root, dtype t, redop o, void* stream) override {
    typed(t, o, [&]<class T>(auto op) {
      mdring::cuda::reduce(comm_, static_cast<const T*>(in), static_cast<T*>(out), n, root, op, s(stream));
    });
  }
  void reduce_scatter(const void* in, void* out, std::size_t n, dtype t, redop o, void* stream) override {
    typed(t, o, [&]<class T>(auto op) {
      mdring::cuda::reduce_scatter(comm_, static_cast<const T*>(in), static_cast<T*>(out), n, op, s(stream));
    });
  }
  // Broadcast and all_gather move bytes: one instantiation serves every dtype.
  void all_gather(const void* in, void* out, std::size_t n, dtype t, void* stream) override {
    mdring::cuda::all_gather(comm_, static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out),
                             n * size_of(t), s(stream));
  }
  void broadcast(void* buf, std::size_t n, std::size_t root, dtype t, void* stream) override {
    mdring::cuda::broadcast(comm_, static_cast<std::uint8_t*>(buf), n * size_of(t), root, s(stream));
  }
  std::string describe() const override { return desc_; }
  int device() const override { return device_; }

private:
  static cudaStream_t s(void* p) { return static_cast<cudaStream_t>(p); }
  template <class F>
  void typed(dtype t, redop o, F&& f) {
    mdring::cuda::detail::device_guard g(device_);
    detail::on_type(t, [&]<class T>() { detail::on_op(o, [&](auto op) { f.template operator()<T>(op); }); });
  }

  comm_t comm_;
  int device_;
  std::string desc_;
};

}  // namespace

bool have_cuda() noexcept { return true; }

std::unique_ptr<device_group> make_device_group(mdring::rendezvous::store& store, const group_config& cfg, int device) {
  mdring::cuda::detail::device_guard g(device);
  std::string source;
  const auto topo = device_topology(store, cfg, source);
  mdring::options o;
  o.timeout = cfg.timeout;
  // Keys under the group's name: each group binds once, whatever other groups do.
  auto comm = mdring::cuda::bind(
      topo, mdring::cuda::store_world{store, cfg.rank, cfg.size, "mdring_torch/cuda/" + cfg.name}, o);
  std::string desc =
      "cuda:" + std::to_string(device) + ", topology " + topo.to_string() + " (" + source + "), transports";
  for (std::size_t d = 0; d < topo.ndims(); ++d)
    desc += std::string(d ? ", " : " ") + std::string(mdring::to_string(comm.transport_of(d)));
  return std::make_unique<device_group_impl>(std::move(comm), device, std::move(desc));
}

}  // namespace mdring_torch
