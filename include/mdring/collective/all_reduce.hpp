// mdring/collective/all_reduce.hpp
//
//   all_reduce(comm, sendbuf, recvbuf, count, op)   out of place
//   all_reduce(comm, buf, count, op)                in place
//
// Postcondition: on every rank, recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i],
// bitwise identical on all ranks (each element is reduced once, by its owner, and
// copied). Stages: reduce-scatter in dimensions 0..k-1, all-gather in k-1..0.
// sendbuf and recvbuf must be the same pointer or not overlap at all.
// Example, 4 ranks, sum, rank r passes {r, 10r}: every rank gets {6, 60}.
#pragma once

#include "../config.hpp"
#include "launch.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
inline std::optional<arg_error> span_sizes(const char* name, std::size_t send, std::size_t recv) {
  if (send == recv) return std::nullopt;
  return arg_error{"recvbuf", std::string("mdring::") + name + ": recvbuf has " + std::to_string(recv) +
                                  " elements but sendbuf has " + std::to_string(send)};
}

template <bool Async, transport Tr, class T, class Op>
auto all_reduce_on(communicator_core<Tr>& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op,
                   std::optional<arg_error> pre) {
  constexpr const char* name = "all_reduce";
  std::optional<arg_error> err = all_reduce_buffers(name, sendbuf, recvbuf, count, sizeof(T));
  if (pre) err = std::move(pre);  // (an error found before this one comes first)
  if constexpr (widens<T, Op>)
    if (comm.get_options().accumulation == accumulation::float32)  // in place on the float32 copy
      return detail::launch_widened<Async>(comm, name, op, std::move(err), count, 0, count, sendbuf, count, recvbuf, 0,
                                           count, [=](auto& e, float* w) { e.start_all_reduce(w, w, count); });
  return detail::launch<Async, T>(comm, name, op, std::move(err), count, 0,
                                  [=](auto& e) { e.start_all_reduce(sendbuf, recvbuf, count); });
}
// The checks that need the communicator's own type (its topology's), then the call on its core.
template <bool Async, class C, class T, class Op>
auto all_reduce_impl(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op, std::optional<arg_error> pre) {
  detail::static_checks<C, T, Op>();
  return all_reduce_on<Async>(core_of(comm), sendbuf, recvbuf, count, op, std::move(pre));
}
}  // namespace detail

/// recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i] on every rank, `count` elements (see the top).
template <bound_communicator C, class T, class Op = sum_t>
void all_reduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op = {}) {
  detail::all_reduce_impl<false>(comm, sendbuf, recvbuf, count, op, std::nullopt);
}

/// In place: buf is this rank's input and receives the result.
template <bound_communicator C, class T, class Op = sum_t>
void all_reduce(C& comm, T* buf, std::size_t count, Op op = {}) {
  all_reduce(comm, static_cast<const T*>(buf), buf, count, op);
}

/// The same on spans of equal size.
template <bound_communicator C, class T, class Op = sum_t>
void all_reduce(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, Op op = {}) {
  detail::all_reduce_impl<false>(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(), op,
                                 detail::span_sizes("all_reduce", sendbuf.size(), recvbuf.size()));
}

/// In place, on a span.
template <bound_communicator C, class T, class Op = sum_t>
void all_reduce(C& comm, std::span<T> buf, Op op = {}) {
  all_reduce(comm, static_cast<const T*>(buf.data()), buf.data(), buf.size(), op);
}

/// Nonblocking: the same call, returning at once (collective/request.hpp). The
/// buffers belong to the call until the request completes.
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request iall_reduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, Op op = {}) {
  return detail::all_reduce_impl<true>(comm, sendbuf, recvbuf, count, op, std::nullopt);
}

/// In place (see iall_reduce above).
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request iall_reduce(C& comm, T* buf, std::size_t count, Op op = {}) {
  return iall_reduce(comm, static_cast<const T*>(buf), buf, count, op);
}

/// On spans of equal size.
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request iall_reduce(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, Op op = {}) {
  return detail::all_reduce_impl<true>(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(), op,
                                       detail::span_sizes("iall_reduce", sendbuf.size(), recvbuf.size()));
}

/// In place, on a span.
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request iall_reduce(C& comm, std::span<T> buf, Op op = {}) {
  return iall_reduce(comm, static_cast<const T*>(buf.data()), buf.data(), buf.size(), op);
}

MDRING_NAMESPACE_END
