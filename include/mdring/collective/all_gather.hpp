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
#include "run.hpp"

#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {
template <class C, class T>
void all_gather_impl(C& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount, std::optional<arg_error> pre) {
  detail::static_checks<C, T, sum_t>();
  constexpr const char* name = "all_gather";
  const std::size_t total = sendcount * comm.size();
  const bool in_place = addr(sendbuf) == addr(recvbuf) + comm.rank() * sendcount * sizeof(T);
  auto err = detail::first_error(
      std::move(pre),
      detail::check_null(name, "sendbuf", sendbuf, sendcount, "sendcount"),
      detail::check_null(name, "recvbuf", recvbuf, total, "size() * sendcount"),
      detail::check_overlap(name, sendbuf, sendcount * sizeof(T), recvbuf, total * sizeof(T), in_place,
                            "sendbuf must be recvbuf + rank() * sendcount"));
  detail::run_collective<T>(comm, name, sum_t{}, std::move(err), sendcount, 0,
                            [&](auto& e) { e.all_gather(sendbuf, recvbuf, sendcount); });
}
}  // namespace detail

template <bound_communicator C, class T>
void all_gather(C& comm, const T* sendbuf, T* recvbuf, std::size_t sendcount) {
  detail::all_gather_impl(comm, sendbuf, recvbuf, sendcount, std::nullopt);
}

template <bound_communicator C, class T>
void all_gather(C& comm, std::span<const T> sendbuf, std::span<T> recvbuf) {
  std::optional<detail::arg_error> pre;
  if (recvbuf.size() != sendbuf.size() * comm.size())
    pre = detail::arg_error{"recvbuf",
                            "mdring::all_gather: recvbuf has " + std::to_string(recvbuf.size()) +
                                " elements; expected size() * sendbuf.size() = " +
                                std::to_string(sendbuf.size() * comm.size())};
  detail::all_gather_impl(comm, sendbuf.data(), recvbuf.data(), sendbuf.size(), std::move(pre));
}

MDRING_NAMESPACE_END
