// mdring/collective/broadcast.hpp
//
//   broadcast(comm, buf, count, root)
//
// Postcondition: every rank's buf equals root's. Stages: the root's data is
// scattered along dimensions 0..k-1 (each stage only on the ranks that hold the
// range), then all-gathered along k-1..0, so every link carries each byte about
// once, as in van de Geijn's scatter + all-gather broadcast.
#pragma once

#include "../config.hpp"
#include "launch.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
template <bool Async, transport Tr, class T>
auto broadcast_on(communicator_core<Tr>& comm, T* buf, std::size_t count, std::size_t root) {
  constexpr const char* name = "broadcast";
  auto err = broadcast_buffers(name, root, comm.size(), buf, count);
  return detail::launch<Async, T>(comm, name, sum_t{}, std::move(err), count, root,
                                  [=](auto& e) { e.start_broadcast(buf, count, root); });
}
// The checks that need the communicator's own type (its topology's), then the call on its core.
template <bool Async, class C, class T>
auto broadcast_impl(C& comm, T* buf, std::size_t count, std::size_t root) {
  detail::static_checks<C, T, sum_t>();
  return broadcast_on<Async>(core_of(comm), buf, count, root);
}
}  // namespace detail

/// Every rank's buf (`count` elements) becomes root's (see the top).
template <bound_communicator C, class T>
void broadcast(C& comm, T* buf, std::size_t count, std::size_t root) {
  detail::broadcast_impl<false>(comm, buf, count, root);
}

/// The same on a span.
template <bound_communicator C, class T>
void broadcast(C& comm, std::span<T> buf, std::size_t root) {
  broadcast(comm, buf.data(), buf.size(), root);
}

/// Nonblocking (collective/request.hpp).
template <bound_communicator C, class T>
[[nodiscard]] request ibroadcast(C& comm, T* buf, std::size_t count, std::size_t root) {
  return detail::broadcast_impl<true>(comm, buf, count, root);
}

/// On a span.
template <bound_communicator C, class T>
[[nodiscard]] request ibroadcast(C& comm, std::span<T> buf, std::size_t root) {
  return ibroadcast(comm, buf.data(), buf.size(), root);
}

MDRING_NAMESPACE_END
