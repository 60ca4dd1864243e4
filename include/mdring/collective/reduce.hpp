// mdring/collective/reduce.hpp
//
//   reduce(comm, sendbuf, recvbuf, count, root, op)
//
// Postcondition: on root, recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i];
// recvbuf is not touched (and may be null) on the other ranks. In place on the
// root: sendbuf == recvbuf. Stages: reduce-scatter in dimensions 0..k-1, then a
// gather towards the root along k-1..0.
#pragma once

#include "../config.hpp"
#include "run.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
template <class C, class T, class Op>
void reduce_impl(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op op,
                 std::optional<arg_error> pre) {
  detail::static_checks<C, T, Op>();
  constexpr const char* name = "reduce";
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * sizeof(T);
  auto err = detail::first_error(
      std::move(pre),
      detail::check_root(name, root, comm.size()),
      detail::check_null(name, "sendbuf", sendbuf, count),
      is_root ? detail::check_null(name, "recvbuf", recvbuf, count) : std::nullopt,
      is_root ? detail::check_overlap(name, sendbuf, bytes, recvbuf, bytes, sendbuf == recvbuf,
                                      "pass the same pointer twice")
              : std::nullopt);
  detail::run_collective<T>(comm, name, op, std::move(err), count, root,
                            [&](auto& e) { e.reduce(sendbuf, recvbuf, count, root); });
}
}  // namespace detail

template <bound_communicator C, class T, class Op = sum_t>
void reduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op op = {}) {
  detail::reduce_impl(comm, sendbuf, recvbuf, count, root, op, std::nullopt);
}

template <bound_communicator C, class T, class Op = sum_t>
void reduce(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, std::size_t root, Op op = {}) {
  std::optional<detail::arg_error> pre;
  if (comm.rank() == root && recvbuf.size() != sendbuf.size())
    pre = detail::arg_error{"recvbuf",
                            "mdring::reduce: recvbuf has " + std::to_string(recvbuf.size()) +
                                " elements on the root but sendbuf has " + std::to_string(sendbuf.size())};
  detail::reduce_impl(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(), root, op, std::move(pre));
}

MDRING_NAMESPACE_END
