// mdring/transport/ucx_requests.hpp: one message of the UCX transport
// (transport/ucx.hpp): its 64-bit tag, its request, and finding out that it
// completed. A receive that got a different length than expected means the ranks
// passed different counts, and throws transport_error.
#pragma once

#include "../config.hpp"
#include "../error.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace ucx {

namespace detail {
// The 64-bit tag: kind (2 bits) | channel (6) | sender (24) | the bind's stamp (16) |
// mdring's tag (16; the executor's are 15 bits, what MPI guarantees).
// survive: shrink's messages (transport/ucx_exchange.hpp).
enum kind : std::uint64_t { data = 0, control = 1, setup = 2, survive = 3 };
constexpr ucp_tag_t make_tag(kind k, std::size_t channel, std::size_t sender, std::uint32_t tag) {
  return (ucp_tag_t(k) << 62) | (ucp_tag_t(channel & 63) << 56) | (ucp_tag_t(sender & 0xffffff) << 32) | tag;
}
constexpr std::size_t sender_of(ucp_tag_t t) { return std::size_t((t >> 32) & 0xffffff); }
constexpr ucp_tag_t full_mask = ~ucp_tag_t(0);
constexpr ucp_tag_t kind_mask = ucp_tag_t(3) << 62;
constexpr ucp_tag_t stamp_mask = ucp_tag_t(0xffff) << 16;
constexpr std::size_t max_ranks = std::size_t(1) << 24;
constexpr std::size_t max_channels = 64;

struct ucx_request {
  void* r = nullptr;  // UCX's request while pending
  bool pending = false;
  bool recv = false;
  std::size_t peer = 0;  // global rank
  std::size_t bytes = 0;
};

[[noreturn]] inline void wrong_size(const ucx_request& rq, const std::string& got, std::size_t rank) {
  throw transport_error("mdring::ucx: rank " + std::to_string(rq.peer) + " sent a message of " + got + " where rank " +
                            std::to_string(rank) + " expected " + std::to_string(rq.bytes) +
                            ": the ranks passed different counts, types or roots to the same collective",
                        0);
}
// hosts: where each rank runs (the world's), for the message.
[[noreturn]] inline void message_failed(const ucx_request& rq, ucs_status_t st, std::size_t rank,
                                        const std::vector<std::string>* hosts = nullptr) {
  if (st == UCS_ERR_MESSAGE_TRUNCATED) wrong_size(rq, "more bytes", rank);
  const std::string host =
      hosts && rq.peer < hosts->size() && !(*hosts)[rq.peer].empty() ? " (host " + (*hosts)[rq.peer] + ")" : "";
  throw transport_error("mdring::ucx: a message " + std::string(rq.recv ? "from" : "to") + " rank " +
                            std::to_string(rq.peer) + host + " failed: " + ucs_status_string(st),
                        int(st));
}

// Completes rq if its message is done (true); throws if it failed.
inline bool test_request(ucx_request& rq, std::size_t rank, const std::vector<std::string>* hosts = nullptr) {
  ucs_status_t st;
  ucp_tag_recv_info_t info{};
  if (rq.recv) st = ucp_tag_recv_request_test(rq.r, &info);
  else st = ucp_request_check_status(rq.r);
  if (st == UCS_INPROGRESS) return false;
  ucp_request_free(rq.r);
  rq.r = nullptr;
  rq.pending = false;
  if (st != UCS_OK) message_failed(rq, st, rank, hosts);
  if (rq.recv && info.length != rq.bytes) wrong_size(rq, std::to_string(info.length) + " bytes", rank);
  return true;
}

}  // namespace detail

}  // namespace ucx

MDRING_NAMESPACE_END
