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
    case dtype::f32:
      return f.template operator()<float>();
    case dtype::f64:
      return f.template operator()<double>();
    case dtype::f16:
      return f.template operator()<mdring::half>();
    case dtype::bf16:
      return f.template operator()<mdring::bfloat16>();
    case dtype::i8:
      return f.template operator()<std::int8_t>();
    case dtype::u8:
      return f.template operator()<std::uint8_t>();
    case dtype::i16:
      return f.template operator()<std::int16_t>();
    case dtype::i32:
      return f.template operator()<std::int32_t>();
    case dtype::i64:
      return f.template operator()<std::int64_t>();
  }
  throw mdring::invalid_argument("dtype", "mdring_torch: unknown dtype " + std::to_string(int(t)));
}

template <class F>
decltype(auto) on_op(redop o, F&& f) {
  switch (o) {
    case redop::sum:
      return f(mdring::sum);
    case redop::avg:
      return f(mdring::avg);
    case redop::prod:
      return f(mdring::prod);
    case redop::min:
      return f(mdring::min);
    case redop::max:
      return f(mdring::max);
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

namespace detail {
// The element folds of every (dtype, op) pair: mdring's vectorized host loops,
// chosen at run time. A call on a pair without a fast path below runs on an
// unsigned type of the element's size with runtime_op, so the collective's
// machinery is compiled once per element size instead of once per pair (that
// cut the extension's build time about 3 x); AVG there is SUM, then one division.
using fold_fn = void (*)(const void* in, void* inout, std::size_t n);

template <class T, class Op>
void fold(const void* in, void* inout, std::size_t n) {
  auto* io = static_cast<T*>(inout);
  mdring::host_reducer<T, Op>(Op{}, 2).combine(io, static_cast<const T*>(in), io, n, false);
}

template <class S>  // S: the unsigned type of the element's size
struct runtime_op {
  fold_fn fn;
  void reduce_local(const S* in, S* inout, std::size_t n) const { fn(in, inout, n); }
};

inline fold_fn fold_of(dtype t, redop o) {
  return on_type(t, [&]<class T>() -> fold_fn {
    switch (o) {
      case redop::sum:
      case redop::avg:
        return &fold<T, mdring::sum_t>;
      case redop::prod:
        return &fold<T, mdring::prod_t>;
      case redop::min:
        return &fold<T, mdring::min_t>;
      case redop::max:
        return &fold<T, mdring::max_t>;
    }
    return nullptr;
  });
}

// x /= p on n elements (AVG after a SUM): floating types round once, integers
// truncate toward zero (as mdring::avg).
inline void divide(void* x, std::size_t n, dtype t, std::size_t p) {
  on_type(t, [&]<class T>() {
    auto* v = static_cast<T*>(x);
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (std::is_integral_v<T>) v[i] = T(v[i] / T(p));
      else if constexpr (std::is_same_v<T, double>) v[i] /= double(p);
      else v[i] = T(float(v[i]) / float(p));
    }
  });
}
}  // namespace detail

template <class Comm>
class group_impl final : public group {
public:
  // keep: what the communicator was built on (a store, a world), destroyed after it.
  group_impl(std::shared_ptr<void> keep, Comm comm, std::vector<std::size_t> position, std::string description)
      : keep_(std::move(keep)), comm_(std::move(comm)), pos_(std::move(position)), desc_(std::move(description)) {}

  op all_reduce(const void* in, void* out, std::size_t n, dtype t, redop o) override {
    return reduction(
        t, o, out, n, [&](auto* i, auto* r, auto f) { return mdring::iall_reduce(comm_, i, r, n, f); }, in);
  }

  op reduce(const void* in, void* out, std::size_t n, std::size_t root, dtype t, redop o) override {
    const std::size_t m = md(root);
    return reduction(
        t, o, out, n, [&](auto* i, auto* r, auto f) { return mdring::ireduce(comm_, i, r, n, m, f); }, in,
        m == comm_.rank());
  }

  op reduce_scatter(const void* in, void* out, std::size_t n, dtype t, redop o) override {
    const std::size_t b = n * size_of(t);
    std::shared_ptr<std::uint8_t[]> tmp;
    if (!pos_.empty() && b > 0) {  // block r of the group goes to mdring rank pos_[r]
      tmp.reset(new std::uint8_t[b * pos_.size()]);
      for (std::size_t r = 0; r < pos_.size(); ++r)
        std::memcpy(tmp.get() + pos_[r] * b, static_cast<const std::uint8_t*>(in) + r * b, b);
      in = tmp.get();
    }
    op x = reduction(
        t, o, out, n, [&](auto* i, auto* r, auto f) { return mdring::ireduce_scatter(comm_, i, r, n, f); }, in);
    if (tmp)
      x.after = [tmp, a = std::move(x.after)] {
        if (a) a();
      };
    return x;
  }

  // Broadcast and all_gather move bytes: one instantiation serves every dtype.
  op broadcast(void* buf, std::size_t n, std::size_t root, dtype t) override {
    return op{mdring::ibroadcast(comm_, static_cast<std::uint8_t*>(buf), n * size_of(t), md(root)), {}};
  }

  op all_gather(const void* in, void* out, std::size_t n, dtype t) override {
    const std::size_t b = n * size_of(t);
    const auto* src = static_cast<const std::uint8_t*>(in);
    if (pos_.empty() || b == 0) return op{mdring::iall_gather(comm_, src, static_cast<std::uint8_t*>(out), b), {}};
    std::shared_ptr<std::uint8_t[]> tmp(new std::uint8_t[b * pos_.size()]);
    auto after = [tmp, out, b, pos = pos_] {  // mdring rank pos[r]'s block is group rank r's
      for (std::size_t r = 0; r < pos.size(); ++r)
        std::memcpy(static_cast<std::byte*>(out) + r * b, tmp.get() + pos[r] * b, b);
    };
    return op{mdring::iall_gather(comm_, src, tmp.get(), b), after};
  }

  std::string describe() const override { return desc_; }

  shrunk_group shrink(std::chrono::milliseconds timeout) override {
    std::int64_t mine = std::int64_t(comm_.rank());  // this process's group rank (pos_: group -> mdring)
    for (std::size_t r = 0; r < pos_.size(); ++r)
      if (pos_[r] == comm_.rank()) mine = std::int64_t(r);
    mdring::shrink_options so;
    so.timeout = timeout;
    auto next = mdring::shrink(comm_, so);
    shrunk_group out;
    if (next.size() == 0) return out;  // left out
    out.rank = next.rank();
    out.size = next.size();
    out.kept.resize(out.size);
    mdring::all_gather(next, &mine, out.kept.data(), 1);
    const std::string transport = desc_.substr(0, desc_.find(','));
    std::string desc =
        transport + ", topology " + next.topology().to_string() + " (shrunk from " + comm_.topology().to_string() + ")";
    out.g = std::make_unique<group_impl>(keep_, std::move(next), std::vector<std::size_t>{}, std::move(desc));
    return out;
  }

private:
  // A reduction: the fast path of its pair (float32 with any op; SUM of float64,
  // float16 and bfloat16, AVG and PRODUCT of the 16-bit ones), else the runtime fold
  // on its element size.
  // result_here: this rank receives the result (AVG divides it).
  template <class Call>
  op reduction(dtype t, redop o, void* out, std::size_t n, Call&& call, const void* in, bool result_here = true) {
    if (t == dtype::f32)
      return detail::on_op(o, [&](auto f) {
        return op{call(static_cast<const float*>(in), static_cast<float*>(out), f), {}};
      });
    auto with = [&]<class T>(auto f) { return op{call(static_cast<const T*>(in), static_cast<T*>(out), f), {}}; };
    if (o == redop::sum && t == dtype::f64) return with.template operator()<double>(mdring::sum);
    if (o == redop::sum && t == dtype::f16) return with.template operator()<mdring::half>(mdring::sum);
    if (o == redop::sum && t == dtype::bf16) return with.template operator()<mdring::bfloat16>(mdring::sum);
    // 16-bit AVG (FSDP averages bfloat16 gradients) folds in float and rounds once per
    // dimension, dividing before the last rounding: the reproducible contract, and
    // no extra rounding of the sum before the division.
    if (o == redop::avg && t == dtype::f16) return with.template operator()<mdring::half>(mdring::avg);
    if (o == redop::avg && t == dtype::bf16) return with.template operator()<mdring::bfloat16>(mdring::avg);
    // 16-bit PRODUCT likewise (a product rounds at every factor otherwise), and so
    // options.accumulation applies to it as to SUM and AVG.
    if (o == redop::prod && t == dtype::f16) return with.template operator()<mdring::half>(mdring::prod);
    if (o == redop::prod && t == dtype::bf16) return with.template operator()<mdring::bfloat16>(mdring::prod);
    const detail::fold_fn fn = detail::fold_of(t, o);
    op x = [&] {
      switch (size_of(t)) {
        case 1:
          return bulk<std::uint8_t>(call, in, out, fn);
        case 2:
          return bulk<std::uint16_t>(call, in, out, fn);
        case 4:
          return bulk<std::uint32_t>(call, in, out, fn);
        default:
          return bulk<std::uint64_t>(call, in, out, fn);
      }
    }();
    if (o == redop::avg && result_here) x.after = [out, n, t, p = comm_.size()] { detail::divide(out, n, t, p); };
    return x;
  }
  template <class S, class Call>
  op bulk(Call& call, const void* in, void* out, detail::fold_fn fn) {
    return op{call(static_cast<const S*>(in), static_cast<S*>(out), detail::runtime_op<S>{fn}), {}};
  }

  std::size_t md(std::size_t group_rank) const { return pos_.empty() ? group_rank : pos_.at(group_rank); }

  std::shared_ptr<void> keep_;
  Comm comm_;
  std::vector<std::size_t> pos_;
  std::string desc_;
};

}  // namespace mdring_torch
