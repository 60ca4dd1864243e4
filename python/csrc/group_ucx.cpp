// python/csrc/group_ucx.cpp: groups over UCX, found through torch's store.
#include "group_impl.hpp"

#include <mdring/ucx.hpp>

namespace mdring_torch {

bool have_ucx() noexcept { return true; }

namespace {
struct stores {
  std::unique_ptr<mdring::rendezvous::store> torch;
  std::unique_ptr<mdring::rendezvous::prefix_store> ordered;
};
}  // namespace

std::unique_ptr<group> make_ucx_group(std::unique_ptr<mdring::rendezvous::store> store, const group_config& cfg) {
  auto s = std::make_shared<stores>();
  s->torch = std::move(store);
  mdring::ucx::world world(*s->torch, cfg.rank, cfg.size, cfg.local_size, cfg.timeout);
  const auto fake = detail::test_layout(cfg.rank, cfg.size);
  const auto deadline = mdring::rendezvous::clock::now() + cfg.timeout;
  auto p = detail::place(cfg, fake ? *fake : world.layout(), [&](int key) {
    const auto all = mdring::rendezvous::all_gather(*s->torch, "mdring_torch/key", cfg.rank, cfg.size,
                                                    std::to_string(key), deadline);
    std::vector<int> keys(all.size());
    for (std::size_t r = 0; r < all.size(); ++r) keys[r] = std::stoi(all[r]);
    return keys;
  });
  if (!p.position.empty()) {  // a second world, in node-major order
    s->ordered = std::make_unique<mdring::rendezvous::prefix_store>(*s->torch, "mdring_torch/ordered/");
    world = mdring::ucx::world(*s->ordered, p.position[cfg.rank], cfg.size, cfg.local_size, cfg.timeout);
  }
  mdring::options o;
  o.timeout = cfg.timeout;
  auto comm = mdring::bind(p.topology, world, o);
  std::string desc = "ucx, topology " + p.topology.to_string() + " (" + p.source + ")";
  return std::make_unique<group_impl<decltype(comm)>>(std::move(s), std::move(comm), std::move(p.position),
                                                      std::move(desc));
}

}  // namespace mdring_torch
