// mdring/separate/src.hpp: the library of separate compilation (see api.hpp).
// Include it in exactly one file of the program, which is compiled with the rest
// (MDRING_SEPARATE_COMPILATION defined or not); CMake's mdring::separate target
// adds that file (separate/src.cpp) to the target that links it.
#pragma once

#define MDRING_SEPARATE_IMPLEMENTATION 1
#include "../collective/all_gather.hpp"
#include "../collective/all_reduce.hpp"
#include "../collective/bind_mpi.hpp"
#include "../collective/broadcast.hpp"
#include "../collective/reduce.hpp"
#include "../collective/reduce_scatter.hpp"
#include "mpi.hpp"

#include <memory>
#include <string>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace separate {
namespace detail {

template <class F>
decltype(auto) with_element(element e, F&& f) {
  switch (e) {
    case element::float32:
      return f(float{});
    case element::float64:
      return f(double{});
    case element::int32:
      return f(std::int32_t{});
    case element::int64:
      return f(std::int64_t{});
    case element::float16:
      return f(half{});
    default:
      return f(bfloat16{});
  }
}
// The op, on the element types api.hpp compiles it for (avg: the floating ones).
template <class T, class F>
decltype(auto) with_op(op_kind o, F&& f) {
  switch (o) {
    case op_kind::sum:
      return f(sum_t{});
    case op_kind::prod:
      return f(prod_t{});
    case op_kind::min:
      return f(min_t{});
    case op_kind::max:
      return f(max_t{});
    default:
      if constexpr (floating_type<T>) return f(avg_t{});
      else throw invalid_argument("op", "mdring: avg is compiled for the floating types only");
  }
}

// A header-only communicator behind the compiled face.
template <class Comm>
class model final : public face {
public:
  explicit model(Comm&& c) : c_(std::move(c)) {}
  std::size_t size() const noexcept override { return c_.size(); }
  std::size_t rank() const noexcept override { return c_.rank(); }
  const runtime_topology& topology() const noexcept override { return c_.topology(); }
  const options& get_options() const noexcept override { return c_.get_options(); }
  bool usable() const noexcept override { return c_.usable(); }
  const std::string& failure() const noexcept override { return c_.failure(); }
  std::size_t scratch_bytes() const noexcept override { return c_.scratch_bytes(); }

  void all_reduce(element e, op_kind o, const void* send, void* recv, std::size_t count) override {
    with_element(e, [&](auto t) {
      using T = decltype(t);
      with_op<T>(
          o, [&](auto op) { mdring::all_reduce(c_, static_cast<const T*>(send), static_cast<T*>(recv), count, op); });
    });
  }
  void reduce_scatter(element e, op_kind o, const void* send, void* recv, std::size_t recvcount) override {
    with_element(e, [&](auto t) {
      using T = decltype(t);
      with_op<T>(o, [&](auto op) {
        mdring::reduce_scatter(c_, static_cast<const T*>(send), static_cast<T*>(recv), recvcount, op);
      });
    });
  }
  void all_gather(element e, const void* send, void* recv, std::size_t sendcount) override {
    with_element(e, [&](auto t) {
      using T = decltype(t);
      mdring::all_gather(c_, static_cast<const T*>(send), static_cast<T*>(recv), sendcount);
    });
  }
  void broadcast(element e, void* buf, std::size_t count, std::size_t root) override {
    with_element(e, [&](auto t) {
      using T = decltype(t);
      mdring::broadcast(c_, static_cast<T*>(buf), count, root);
    });
  }
  void reduce(element e, op_kind o, const void* send, void* recv, std::size_t count, std::size_t root) override {
    with_element(e, [&](auto t) {
      using T = decltype(t);
      with_op<T>(
          o, [&](auto op) { mdring::reduce(c_, static_cast<const T*>(send), static_cast<T*>(recv), count, root, op); });
    });
  }
  std::string explain(element e, op_kind o, std::size_t count, collective kind, std::size_t root) const override {
    return with_element(e, [&](auto t) {
      using T = decltype(t);
      return with_op<T>(o, [&](auto op) { return c_.template explain<T>(count, kind, op, root); });
    });
  }
  void reserve(element e, std::size_t count) override {
    with_element(e, [&](auto t) { c_.template reserve<decltype(t)>(count); });
  }

private:
  Comm c_;
};

}  // namespace detail

std::unique_ptr<face> bind_mpi(const runtime_topology& topology, MPI_Comm comm, options opts) {
  return std::make_unique<detail::model<communicator<runtime_topology, mpi::transport>>>(
      mdring::bind(topology, comm, std::move(opts)));
}

}  // namespace separate

MDRING_NAMESPACE_END
