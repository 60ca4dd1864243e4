// mdring/collective/reduce_scatter.hpp
//
//   reduce_scatter(comm, sendbuf, recvbuf, recvcount, op)
//
// MPI_Reduce_scatter_block semantics: sendbuf holds size() * recvcount elements;
// rank r receives block r, recvbuf[i] = op over all ranks of sendbuf[r*recvcount + i].
// In place (as NCCL): recvbuf == sendbuf + rank() * recvcount.
// Example, 2 ranks, sum, recvcount 2, rank r passes {r, r, 10+r, 10+r}:
// rank 0 gets {1, 1}, rank 1 gets {21, 21}.
// Stages: reduce-scatter in dimensions 0..k-1 (see executor/host/core.hpp for the block order).
#pragma once

#include "../config.hpp"
#include "launch.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
inline std::optional<arg_error> scattered_sizes(const char* name, std::size_t size, std::size_t send,
                                                std::size_t recv) {
  if (send == recv * size) return std::nullopt;
  return arg_error{"sendbuf", std::string("mdring::") + name + ": sendbuf has " + std::to_string(send) +
                                  " elements; expected size() * recvbuf.size() = " + std::to_string(recv * size)};
}

template <bool Async, transport Tr, class T, class Op>
auto reduce_scatter_on(communicator_core<Tr>& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount, Op op,
                       std::optional<arg_error> pre) {
  constexpr const char* name = "reduce_scatter";
  const std::size_t total = recvcount * comm.size();
  std::optional<arg_error> err =
      reduce_scatter_buffers(name, comm.rank(), comm.size(), sendbuf, recvbuf, recvcount, sizeof(T));
  if (pre) err = std::move(pre);  // (an error found before this one comes first)
  if constexpr (widens<T, Op>)
    if (comm.get_options().accumulation == accumulation::float32)  // float32 copy, then its block
      return detail::launch_widened<Async>(comm, name, op, std::move(err), recvcount, 0, total + recvcount, sendbuf,
                                           total, recvbuf, total, recvcount,
                                           [=](auto& e, float* w) { e.start_reduce_scatter(w, w + total, recvcount); });
  return detail::launch<Async, T>(comm, name, op, std::move(err), recvcount, 0,
                                  [=](auto& e) { e.start_reduce_scatter(sendbuf, recvbuf, recvcount); });
}
// The checks that need the communicator's own type (its topology's), then the call on its core.
template <bool Async, class C, class T, class Op>
auto reduce_scatter_impl(C& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount, Op op,
                         std::optional<arg_error> pre) {
  detail::static_checks<C, T, Op>();
  return reduce_scatter_on<Async>(core_of(comm), sendbuf, recvbuf, recvcount, op, std::move(pre));
}
}  // namespace detail

/// Rank r receives block r of the reduction of every rank's sendbuf (size() * recvcount elements), `recvcount` elements
/// (see the top).
template <bound_communicator C, class T, class Op = sum_t>
void reduce_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount, Op op = {}) {
  detail::reduce_scatter_impl<false>(comm, sendbuf, recvbuf, recvcount, op, std::nullopt);
}

/// The same on spans: recvbuf's size is recvcount, sendbuf's size() times it.
template <bound_communicator C, class T, class Op = sum_t>
void reduce_scatter(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, Op op = {}) {
  detail::reduce_scatter_impl<false>(
      comm, sendbuf.data(), recvbuf.data(), recvbuf.size(), op,
      detail::scattered_sizes("reduce_scatter", comm.size(), sendbuf.size(), recvbuf.size()));
}

/// Nonblocking (collective/request.hpp).
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request ireduce_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t recvcount, Op op = {}) {
  return detail::reduce_scatter_impl<true>(comm, sendbuf, recvbuf, recvcount, op, std::nullopt);
}

/// On spans (see reduce_scatter above).
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request ireduce_scatter(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, Op op = {}) {
  return detail::reduce_scatter_impl<true>(
      comm, sendbuf.data(), recvbuf.data(), recvbuf.size(), op,
      detail::scattered_sizes("ireduce_scatter", comm.size(), sendbuf.size(), recvbuf.size()));
}

MDRING_NAMESPACE_END
