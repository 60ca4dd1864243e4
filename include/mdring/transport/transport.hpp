// mdring/transport/transport.hpp: what a transport must provide.
//
// A transport moves bytes between the ranks of one dimension. One transport object
// exists per rank and bound communicator; it hands out one `channel` per dimension
// (the p ranks that differ only in that coordinate, indexed by that coordinate) and
// nonblocking point-to-point operations on them. The collectives (collective/) are
// written once against this concept, so swapping threads for MPI is a template
// argument, not a virtual call.
//
//   t.size(), t.rank()                       the bound communicator
//   t.make_channel(dim, members, my_index)   members[j] = global rank of coordinate j
//   t.isend(ch, buf, bytes, peer, tag, req)  peer is an index into the channel
//   t.irecv(ch, buf, bytes, peer, tag, req)
//   t.wait_all(reqs, deadline) -> wait_status   never blocks past the deadline
//   optional, for segments that finish out of order (collective/engine.hpp):
//   t.wait_any(reqs, deadline) -> wait_status   returns once a request that was
//                                            pending when it was called completes
//   T::complete(req) -> bool                 what the last wait saw: it changes only
//                                            inside this rank's waits, never because
//                                            a peer moved (else a completion between
//                                            complete() and wait_any() is lost)
//   t.cancel_all(reqs)                       after a failure: forget what is pending
//   t.abort(reason)                          tell every other rank that this one failed
#pragma once

#include "../config.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>

MDRING_NAMESPACE_BEGIN

using deadline_clock = std::chrono::steady_clock;

struct wait_status {
  enum kind_t { done, timeout, peer_failed };
  kind_t kind = done;
  std::size_t index = 0;        // timeout: the first request that had not completed
  std::size_t failed_rank = 0;  // peer_failed: who said so
  std::string reason;           // peer_failed: what it said

  static wait_status ok() { return {}; }
};

template <class T>
concept transport = requires(T& t, const T& ct, typename T::channel& ch, typename T::request& r,
                             std::span<typename T::request> rs, std::span<const std::size_t> members,
                             const void* cbuf, void* buf, std::size_t n, int tag, deadline_clock::time_point dl,
                             const std::string& why) {
  { ct.size() } -> std::convertible_to<std::size_t>;
  { ct.rank() } -> std::convertible_to<std::size_t>;
  { ct.name() } -> std::convertible_to<std::string>;
  { t.make_channel(n, members, n) } -> std::same_as<typename T::channel>;
  t.isend(ch, cbuf, n, n, tag, r);
  t.irecv(ch, buf, n, n, tag, r);
  { t.wait_all(rs, dl) } -> std::same_as<wait_status>;
  t.cancel_all(rs);
  t.abort(why);
  requires std::default_initializable<typename T::request>;
};

MDRING_NAMESPACE_END
