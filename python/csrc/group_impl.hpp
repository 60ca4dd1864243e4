// python/csrc/group_impl.hpp: group (group.hpp) over one bound communicator of
// any transport; the topology choice that both transports share.
#pragma once

#include "group.hpp"

#include <mdring/mdring.hpp>
#include <mdring/topology/detect.hpp>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

namespace mdring_torch {

namespace detail {

template <class F>
decltype(auto) on_type(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f.template operator()<float>();
    case dtype::f64: return f.template operator()<double>();
    case dtype::f16: return f.template operator()<mdring::half>();
    case dtype::bf16: return f.template operator()<mdring::bfloat16>();
    case dtype::i8: return f.template operator()<std::int8_t>();
    case dtype::u8: return f.template operator()<std::uint8_t>();
    case dtype::i16: return f.template operator()<std::int16_t>();
    case dtype::i32: return f.template operator()<std::int32_t>();
    case dtype::i64: return f.template operator()<std::int64_t>();
  }
  throw mdring::invalid_argument("dtype", "mdring_torch: unknown dtype " + std::to_string(int(t)));
}

template <class F>
decltype(auto) on_op(redop o, F&& f) {
  switch (o) {
    case redop::sum: return f(mdring::sum);
    case redop::avg: return f(mdring::avg);
    case redop::prod: return f(mdring::prod);
    case redop::min: return f(mdring::min);
    case redop::max: return f(mdring::max);
  }
  throw mdring::invalid_argument("op", "mdring_torch: unknown reduce op " + std::to_string(int(o)));
}

// How the group's ranks run: the topology, and each group rank's mdring rank
// (empty when they are the same).
struct placement {
  mdring::runtime_topology topology;
  std::vector<std::size_t> position;  // group rank -> mdring rank; empty: identity
  std::string source;
};

// MDRING_TORCH_TEST_NODES=k (tests only): pretend group rank r runs on node
// r % k, a world that is not node-major, to exercise the renumbering on one machine.
inline std::optional<mdring::node_layout> test_layout(std::size_t rank, std::size_t size) {
  const char* v = std::getenv("MDRING_TORCH_TEST_NODES");
  const int k = v ? std::atoi(v) : 0;
  if (k <= 0) return std::nullopt;
  std::vector<int> given(size);
  for (std::size_t r = 0; r < size; ++r) given[r] = int(r % std::size_t(k));
  return mdring::layout_from_node_ids(given, rank, false);
}

// MDRING_TOPOLOGY when it fits the group (the default group must fit it: a
// mistake there is an error, not a silent fallback); else the detected layout,
// renumbered node-major when the ranks are not. `keys(key)` gathers every group
// rank's node-major key.
template <class Gather>
placement place(const group_config& cfg, const mdring::node_layout& layout, Gather&& keys) {
  placement p;
  if (const char* t = std::getenv("MDRING_TOPOLOGY"); t && *t) {
    try {
      p.topology = mdring::parse_topology(t).resolve(cfg.size, "mdring_torch");
      p.source = "MDRING_TOPOLOGY";
      return p;
    } catch (const mdring::error& e) {
      if (cfg.is_world)
        throw mdring::invalid_argument("MDRING_TOPOLOGY", std::string("mdring_torch: MDRING_TOPOLOGY=\"") + t +
                                                              "\" does not fit the default group of " +
                                                              std::to_string(cfg.size) + " processes: " + e.what());
      p.source = "detected (MDRING_TOPOLOGY does not fit " + std::to_string(cfg.size) + " ranks)";
    }
  }
  p.topology = mdring::topology_of(layout);
  if (p.source.empty()) p.source = "detected";
  const std::vector<int> all = keys(layout.key);
  bool identity = true;
  for (std::size_t r = 0; r < all.size(); ++r) identity = identity && all[r] == int(r);
  if (!identity) {
    p.position.assign(all.begin(), all.end());
    p.source += ", renumbered node-major";
  }
  return p;
}

}  // namespace detail

template <class Comm>
class group_impl final : public group {
public:
  // keep: what the communicator was built on (a store, a world), destroyed after it.
  group_impl(std::shared_ptr<void> keep, Comm comm, std::vector<std::size_t> position, std::string description)
      : keep_(std::move(keep)), comm_(std::move(comm)), pos_(std::move(position)), desc_(std::move(description)) {}

  op all_reduce(const void* in, void* out, std::size_t n, dtype t, redop o) override {
    return detail::on_type(t, [&]<class T>() {
      return detail::on_op(o, [&](auto f) {
        return op{mdring::iall_reduce(comm_, static_cast<const T*>(in), static_cast<T*>(out), n, f), {}};
      });
    });
  }

  op reduce(const void* in, void* out, std::size_t n, std::size_t root, dtype t, redop o) override {
    return detail::on_type(t, [&]<class T>() {
      return detail::on_op(o, [&](auto f) {
        return op{mdring::ireduce(comm_, static_cast<const T*>(in), static_cast<T*>(out), n, md(root), f), {}};
      });
    });
  }

  op broadcast(void* buf, std::size_t n, std::size_t root, dtype t) override {
    return detail::on_type(t, [&]<class T>() { return op{mdring::ibroadcast(comm_, static_cast<T*>(buf), n, md(root)), {}}; });
  }

  op reduce_scatter(const void* in, void* out, std::size_t n, dtype t, redop o) override {
    const std::size_t b = n * size_of(t);
    std::shared_ptr<char[]> tmp;
    if (!pos_.empty() && b > 0) {  // block r of the group goes to mdring rank pos_[r]
      tmp.reset(new char[b * pos_.size()]);
      for (std::size_t r = 0; r < pos_.size(); ++r)
        std::memcpy(tmp.get() + pos_[r] * b, static_cast<const char*>(in) + r * b, b);
      in = tmp.get();
    }
    return detail::on_type(t, [&]<class T>() {
      return detail::on_op(o, [&](auto f) {
        return op{mdring::ireduce_scatter(comm_, static_cast<const T*>(in), static_cast<T*>(out), n, f),
                  [tmp] {}};
      });
    });
  }

  op all_gather(const void* in, void* out, std::size_t n, dtype t) override {
    const std::size_t b = n * size_of(t);
    if (pos_.empty() || b == 0)
      return detail::on_type(t, [&]<class T>() {
        return op{mdring::iall_gather(comm_, static_cast<const T*>(in), static_cast<T*>(out), n), {}};
      });
    std::shared_ptr<char[]> tmp(new char[b * pos_.size()]);
    auto after = [tmp, out, b, pos = pos_] {  // mdring rank pos[r]'s block is group rank r's
      for (std::size_t r = 0; r < pos.size(); ++r)
        std::memcpy(static_cast<char*>(out) + r * b, tmp.get() + pos[r] * b, b);
    };
    return detail::on_type(t, [&]<class T>() {
      return op{mdring::iall_gather(comm_, static_cast<const T*>(in), reinterpret_cast<T*>(tmp.get()), n), after};
    });
  }

  std::string describe() const override { return desc_; }

private:
  std::size_t md(std::size_t group_rank) const { return pos_.empty() ? group_rank : pos_.at(group_rank); }

  std::shared_ptr<void> keep_;
  Comm comm_;
  std::vector<std::size_t> pos_;
  std::string desc_;
};

}  // namespace mdring_torch
