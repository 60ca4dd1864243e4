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
#include "launch.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
inline std::optional<arg_error> root_sizes(const char* name, bool is_root, std::size_t send, std::size_t recv) {
  if (!is_root || recv == send) return std::nullopt;
  return arg_error{"recvbuf", std::string("mdring::") + name + ": recvbuf has " + std::to_string(recv) +
                                  " elements on the root but sendbuf has " + std::to_string(send)};
}

template <bool Async, transport Tr, class T, class Op>
auto reduce_on(communicator_core<Tr>& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op op,
               std::optional<arg_error> pre) {
  constexpr const char* name = "reduce";
  const bool is_root = comm.rank() == root;
  std::optional<arg_error> err =
      reduce_buffers(name, root, comm.rank(), comm.size(), sendbuf, recvbuf, count, sizeof(T));
  if (pre) err = std::move(pre);  // (an error found before this one comes first)
  if constexpr (widens<T, Op>)
    if (comm.get_options().accumulation == accumulation::float32)  // in place on the float32 copy
      return detail::launch_widened<Async>(comm, name, op, std::move(err), count, root, count, sendbuf, count, recvbuf,
                                           0, is_root ? count : 0,
                                           [=](auto& e, float* w) { e.start_reduce(w, w, count, root); });
  return detail::launch<Async, T>(comm, name, op, std::move(err), count, root,
                                  [=](auto& e) { e.start_reduce(sendbuf, recvbuf, count, root); });
}
// The checks that need the communicator's own type (its topology's), then the call on its core.
template <bool Async, class C, class T, class Op>
auto reduce_impl(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op op,
                 std::optional<arg_error> pre) {
  detail::static_checks<C, T, Op>();
  return reduce_on<Async>(core_of(comm), sendbuf, recvbuf, count, root, op, std::move(pre));
}
}  // namespace detail

/// On root, recvbuf[i] = sendbuf_0[i] op ... op sendbuf_{P-1}[i], `count` elements; recvbuf is not touched elsewhere
/// (see the top).
template <bound_communicator C, class T, class Op = sum_t>
void reduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op op = {}) {
  detail::reduce_impl<false>(comm, sendbuf, recvbuf, count, root, op, std::nullopt);
}

/// The same on spans: count is sendbuf's size.
template <bound_communicator C, class T, class Op = sum_t>
void reduce(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, std::size_t root, Op op = {}) {
  detail::reduce_impl<false>(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(), root, op,
                             detail::root_sizes("reduce", comm.rank() == root, sendbuf.size(), recvbuf.size()));
}

/// Nonblocking (collective/request.hpp).
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request ireduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, std::size_t root, Op op = {}) {
  return detail::reduce_impl<true>(comm, sendbuf, recvbuf, count, root, op, std::nullopt);
}

/// On spans (see reduce above).
template <bound_communicator C, class T, class Op = sum_t>
[[nodiscard]] request ireduce(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf, std::size_t root, Op op = {}) {
  return detail::reduce_impl<true>(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(), root, op,
                                   detail::root_sizes("ireduce", comm.rank() == root, sendbuf.size(), recvbuf.size()));
}

MDRING_NAMESPACE_END
