// python/csrc/group_cuda.cu: device_group (group.hpp) over mdring's GPU path bound
// through torch's store (mdring/cuda/store.cuh): the ipc transport between the
// processes of a node, NCCL between nodes. Compiled by nvcc, apart from torch's
// headers; backend.cpp hands it device pointers and the caller's current stream.
#include "group_impl.hpp"

#include <mdring/cuda/store.cuh>

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
  const mdring::cuda::store_world world{store, cfg.rank, cfg.size, "mdring_torch/cuda"};
  return mdring::cuda::detect_topology(world, "node", mdring::rendezvous::clock::now() + cfg.timeout, source);
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
