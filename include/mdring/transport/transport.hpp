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
//   optional, for segments that finish out of order (executor/host/cursor.hpp):
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
#include "../options.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

MDRING_NAMESPACE_BEGIN

using deadline_clock = std::chrono::steady_clock;  ///< the clock of the transports' deadlines

/// What a wait ended with: done, a timeout, or a peer's failure.
struct wait_status {
  /// done, timeout or peer_failed.
  enum kind_t { done, timeout, peer_failed };
  kind_t kind = done;           ///< how the wait ended
  std::size_t index = 0;        ///< timeout: the first request that had not completed
  std::size_t failed_rank = 0;  ///< peer_failed: who said so
  std::string reason;           ///< peer_failed: what it said

  static wait_status ok() { return {}; }  ///< done
};

/// A failure passed on. A rank that stops because a peer failed tells the others
/// too (its abort message), naming the rank that failed first, so that ranks that
/// never talk to the failed one directly (another node, another dimension) stop as
/// well and name the right rank. The message is the failed rank and the reason.
inline std::string relayed_failure(std::size_t failed_rank, const std::string& reason) {
  return "\x1b" + std::to_string(failed_rank) + ":" + reason;
}
/// A peer_failed status as a transport received it (failed_rank: the sender):
/// a relayed failure names the rank that failed first instead.
inline wait_status received_failure(std::size_t sender, std::string reason) {
  wait_status st{wait_status::peer_failed, 0, sender, std::move(reason)};
  if (st.reason.size() > 2 && st.reason[0] == '\x1b') {
    const std::size_t colon = st.reason.find(':');
    if (colon != std::string::npos && colon > 1) {
      std::size_t r = 0;
      bool digits = true;
      for (std::size_t i = 1; i < colon; ++i) {
        digits = digits && st.reason[i] >= '0' && st.reason[i] <= '9';
        r = r * 10 + std::size_t(st.reason[i] - '0');
      }
      if (digits) {
        st.failed_rank = r;
        st.reason = "(told by rank " + std::to_string(sender) + ") " + st.reason.substr(colon + 1);
      }
    }
  }
  return st;
}

/// What a transport must provide (see the top).
template <class T>
concept transport = requires(T& t, const T& ct, typename T::channel& ch, typename T::request& r,
                             std::span<typename T::request> rs, std::span<const std::size_t> members, const void* cbuf,
                             void* buf, std::size_t n, int tag, deadline_clock::time_point dl, const std::string& why) {
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

// Optional capabilities. Each is a named concept, asserted right after every
// transport that has it (static_assert below its definition), so that a signature
// that drifts fails to compile there instead of silently turning the feature off
// in the engine, which tests them with if constexpr.

/// Segments of a pipelined all_reduce may complete their steps out of order.
template <class T>
concept waits_for_any = transport<T> && requires(T& t, std::span<typename T::request> rs, const typename T::request& r,
                                                 deadline_clock::time_point dl) {
  { t.wait_any(rs, dl) } -> std::same_as<wait_status>;
  { T::complete(r) } -> std::convertible_to<bool>;
};

/// A peer's buffer in node memory (mdring::node_alloc) is reachable by pointer:
/// local_address(ch, j, remote, bytes) is this process's address of peer j's
/// `remote`, or nullptr when it is not mapped (then: cross-memory attach).
template <class T>
concept maps_peer_memory = requires(T& t, typename T::channel& ch, std::size_t j, const void* p, std::size_t n) {
  { t.local_address(ch, j, p, n) } -> std::convertible_to<const void*>;
};

/// Says whether a progress thread may call it while the user's threads do (MPI:
/// only under MPI_THREAD_MULTIPLE). A transport without it allows it.
template <class T>
concept reports_background_progress = requires(const T& t) {
  { t.background_progress() } -> std::convertible_to<bool>;
};

/// A message of shrink's agreement (collective/failed_set.hpp), or why none came:
/// the peer is gone (its process ended, its thread left the world, its connection
/// failed), or the deadline passed first.
struct survivor_message {
  /// got, gone or timeout.
  enum kind_t { got, gone, timeout };
  kind_t kind = timeout;  ///< how the receive ended
  std::string bytes;      ///< got: the message
};

/// Survives a peer's failure (mdring::shrink, collective/shrink.hpp): messages that
/// still flow between the living ranks after a failure broke the communicator
/// (their tags apart from the collectives', no wait ended by the failure), which
/// ranks are known dead, and a transport over the survivors.
///   t.survivor_send(peer, bytes, tag)        buffered: never waits for the peer
///   t.survivor_recv(peer, tag, deadline)     the next message from peer with tag
///   t.gone(peer)                             known dead (not merely slow)
///   t.shrunk(members, opts, fingerprint)     this rank's transport over members (old
///                                            ranks; new rank = index), collective over them
template <class T>
concept survives_failures =
    transport<T> && requires(T& t, const std::string& s, std::size_t r, std::uint32_t tag,
                             deadline_clock::time_point dl, std::span<const std::size_t> members, const options& o) {
      t.survivor_send(r, s, tag);
      { t.survivor_recv(r, tag, dl) } -> std::same_as<survivor_message>;
      { t.gone(r) } -> std::convertible_to<bool>;
      { t.shrunk(members, o, s) } -> std::same_as<std::unique_ptr<T>>;
    };

/// Has a clock of its own, in seconds (MPI: MPI_Wtime, which under SimGrid SMPI is
/// the simulated time): calibration and measured planning time with it.
template <class T>
concept has_clock = requires(const T& t) {
  { t.seconds() } -> std::convertible_to<double>;
};

/// Seconds on the transport's clock, or the steady clock's.
template <class T>
double seconds_on(const T& t) {
  if constexpr (has_clock<T>) return t.seconds();
  else return (void)t, std::chrono::duration<double>(deadline_clock::now().time_since_epoch()).count();
}

MDRING_NAMESPACE_END