// mdring/collective/all_gather.hpp
//
//   all_gather(comm, sendbuf, recvbuf, sendcount)
//
// MPI_Allgather semantics: every rank receives size() * sendcount elements, block r
// being rank r's sendbuf. In place (as NCCL): sendbuf == recvbuf + rank() * sendcount.
// Example, 3 ranks, sendcount 1, rank r passes {r}: every rank gets {0, 1, 2}.
// Stages: all-gather in dimensions k-1..0.
#pragma once

#include "../config.hpp"
#include "launch.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
inline std::optional<arg_error> gathered_sizes(const char* name, std::size_t size, std::size_t send, std::size_t recv) {
  if (recv == send * size) return std::nullopt;
  return arg_error{"recvbuf", std::string("mdring::") + name + ": recvbuf has " + std::to_string(recv) +
                                  " elements; expected size() * sendbuf.size() = " + std::to_string(send * size)};
}

template <bool Async, transport Tr, class T>
auto all_gather_on(communicator_core<Tr>& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount,
                   std::optional<arg_error> pre) {
  constexpr const char* name = "all_gather";
  std::optional<arg_error> err =
      all_gather_buffers(name, comm.rank(), comm.size(), sendbuf, recvbuf, sendcount, sizeof(T));
  if (pre) err = std::move(pre);  // (an error found before this one comes first)
  return detail::launch<Async, T>(comm, name, sum_t{}, std::move(err), sendcount, 0,
                                  [=](auto& e) { e.start_all_gather(sendbuf, recvbuf, sendcount); });
}
// The checks that need the communicator's own type (its topology's), then the call on its core.
template <bool Async, class C, class T>
auto all_gather_impl(C& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount, std::optional<arg_error> pre) {
  detail::static_checks<C, T, sum_t>();
  return all_gather_on<Async>(core_of(comm), sendbuf, recvbuf, sendcount, std::move(pre));
}
}  // namespace detail

/// Every rank receives size() * sendcount elements, block r being rank r's sendbuf (see the top).
template <bound_communicator C, class T>
void all_gather(C& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount) {
  detail::all_gather_impl<false>(comm, sendbuf, recvbuf, sendcount, std::nullopt);
}

/// The same on spans: recvbuf's size is size() times sendbuf's.
template <bound_communicator C, class T>
void all_gather(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf) {
  detail::all_gather_impl<false>(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(),
                                 detail::gathered_sizes("all_gather", comm.size(), sendbuf.size(), recvbuf.size()));
}

/// Nonblocking (collective/request.hpp).
template <bound_communicator C, class T>
[[nodiscard]] request iall_gather(C& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount) {
  return detail::all_gather_impl<true>(comm, sendbuf, recvbuf, sendcount, std::nullopt);
}

/// On spans (see all_gather above).
template <bound_communicator C, class T>
[[nodiscard]] request iall_gather(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf) {
  return detail::all_gather_impl<true>(
      comm, sendbuf.data(), recvbuf.data(), sendbuf.size(),
      detail::gathered_sizes("iall_gather", comm.size(), sendbuf.size(), recvbuf.size()));
}

MDRING_NAMESPACE_END
