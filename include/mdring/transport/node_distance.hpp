// mdring/transport/node_distance.hpp: how far apart the cores of a node's ranks
// are, as the time a cache line takes from one to the other; measured once, at bind.
//
//   detail::node_distance d = detail::measure_node_distance(group, measure, deadline, failed);
//   d.trip_ns     // rank 0's one-way trip to its farthest peer; the same on every rank
//
// What it decides: whether a broadcast or reduce above the one-shot cap is streamed
// over node memory (tuning::one_shot_stream_max_trip_ns, plan/one_shot.hpp). Each
// of a streamed call's steps waits for such a trip, and its copies cross the same
// distance: on a 2-core EPYC VM, 32 and 64 KiB streamed took 0.66 to 0.89 x Open
// MPI's time where the two cores were 0.05 us apart and 2.3 to 4.2 x where they
// were 0.2 us apart (docs/DESIGN.md, "Streamed rooted calls"). Which it is depends
// on where the hypervisor or the scheduler put the ranks, so it is measured per bind.
//
// The protocol runs over the first cache line of each rank's data buffer 0 of an
// access group (transport/shared_access.hpp) whose window was just made (zeroed):
//
//   rank 0   for each peer r, batches x rounds times: ping = (r, k), wait for r's pong == k
//            (the least batch, halved, is the trip to r; at most distance_budget per
//            peer, on a machine busy with other work); then trip and verdict = 1 + the
//            farthest peer; then waits for every peer's bit in its own acks word
//   rank r   answers each ping (r, k) with pong = k until the verdict is set, reads it
//            and the trip, and sets its bit in rank 0's acks word
//
// Rank 0 alone decides whether to measure (`measure`: not where the node's ranks
// outnumber its cores, where a trip is a scheduler's time slice); a peer answers what
// it is asked. A batch of rounds spins; a wait that spinning does not end yields and
// watches the deadline and failed() (a peer's failure), as every shared-access wait.
// After the acknowledgements nobody reads the lines again, so the one-shot path may
// write data buffer 0 from its first call on. The acknowledgements are in rank 0's
// line, not the peers': a peer that returned may write its own buffer at once (a
// reduce's leaf or a broadcast's root, with eager_rooted, waits for nobody), while
// rank 0 writes its own only after every peer acknowledged. A window too small for
// the line (tune.shared_staging_bytes below 32) measures nothing, on every rank.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "shared_access.hpp"
#include "transport.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

MDRING_NAMESPACE_BEGIN

namespace detail {

/// What measure_node_distance found; the same on every rank of the group.
struct node_distance {
  static constexpr std::uint32_t unmeasured = UINT32_MAX;
  /// Rank 0's one-way trip to its farthest peer, in nanoseconds (the least batch of
  /// round trips, halved); unmeasured where rank 0 did not measure.
  std::uint32_t trip_ns = unmeasured;
  /// That peer's index in the group (0 where unmeasured).
  std::size_t farthest = 0;
  bool measured() const noexcept { return trip_ns != unmeasured; }
};

// The words of the protocol, in a rank's first cache line of data buffer 0.
struct alignas(64) distance_line {
  std::atomic<std::uint32_t> ping;     // rank 0's: the peer (high 8 bits) and the round (low 24)
  std::atomic<std::uint32_t> verdict;  // rank 0's: 0 until done, then 1 + the farthest peer
  std::atomic<std::uint32_t> trip_ns;  // rank 0's: node_distance::trip_ns, set before verdict
  std::atomic<std::uint32_t> pong;     // a peer's: the round it answers
  std::atomic<std::uint64_t> acks;     // rank 0's: bit r set by peer r once it read the verdict
};
static_assert(sizeof(distance_line) == 64 && std::atomic<std::uint32_t>::is_always_lock_free &&
              std::atomic<std::uint64_t>::is_always_lock_free && access_group::max_ranks <= 64);

// Batches of round trips to each peer, and rounds per batch: 8 x 32 round trips
// cost about 100 us per peer at 0.2 us a trip; the least batch leaves out a batch
// that the scheduler or the hypervisor interrupted.
inline constexpr std::uint32_t distance_batches = 8, distance_rounds = 32;
// At most this long per peer (a machine busy with other work: then the batches that
// fit, or the part of the first one, and the peer counts as far).
inline constexpr std::chrono::milliseconds distance_budget{2};

inline distance_line& distance_line_of(const access_group& g, std::size_t j) noexcept {
  return *reinterpret_cast<distance_line*>(g.region(j));
}

// Waits until ready() holds: spins, then yields, watching the deadline and failed().
// Throws timeout_error naming `peer`, or remote_error where `peer` failed. Another
// rank's failure does not end the wait, nor `peer`'s once ready() holds: a rank may
// answer and fail in its first call after the bind before this one looks (the call
// reports it).
template <class Ready, class Failed>
void distance_wait(Ready&& ready, std::size_t peer, deadline_clock::time_point deadline, Failed&& failed) {
  for (unsigned spins = 0; !ready();) {
    if (++spins < (1u << 12)) {
      MDRING_CPU_RELAX();
      continue;
    }
    std::this_thread::yield();  // then the deadline each time (a yield may give up a time slice)
    if ((spins & 255u) == 0)
      if (auto st = failed(); st.kind == wait_status::peer_failed && st.failed_rank == peer && !ready())
        throw remote_error("mdring bind: rank " + std::to_string(st.failed_rank) +
                               " failed while the node's ranks measured their distance: " + st.reason,
                           st.failed_rank);
    if (deadline_clock::now() >= deadline && !ready())
      throw timeout_error("mdring bind: rank " + std::to_string(peer) +
                              " did not answer while the node's ranks measured their distance (a cache line's trip "
                              "between their cores) before the deadline (options.timeout)",
                          "bind", 0, "node distance", 0, peer);
  }
}

/// The protocol above on group g (collective over its ranks). `measure`: whether
/// rank 0 measures (the others follow rank 0, whatever they pass); `stop_ns`: rank 0
/// stops measuring once a peer is farther (the verdict is then that peer's trip).
template <class Failed>
node_distance measure_node_distance(const access_group& g, bool measure, std::uint32_t stop_ns,
                                    deadline_clock::time_point deadline, Failed&& failed) {
  const std::size_t p = g.size(), me = g.index();
  node_distance d;
  if (2 * g.staging_bytes() < sizeof(distance_line) || p < 2 || p > access_group::max_ranks) return d;
  distance_line& zero = distance_line_of(g, 0);
  if (me == 0) {
    if (measure) {
      d.trip_ns = 0;
      for (std::size_t r = 1; r < p && d.trip_ns <= stop_ns; ++r) {
        distance_line& peer = distance_line_of(g, r);
        double best = 1e300;  // the least batch's ns per round trip
        std::uint32_t k = 0;
        const auto start = deadline_clock::now();
        for (std::uint32_t b = 0; b < distance_batches; ++b) {
          const auto t0 = deadline_clock::now();
          std::uint32_t i = 0;
          for (; i < distance_rounds; ++i) {
            ++k;
            zero.ping.store(std::uint32_t(r) << 24 | k, std::memory_order_release);
            distance_wait([&] { return peer.pong.load(std::memory_order_acquire) == k; }, r, deadline, failed);
            if (deadline_clock::now() - start > distance_budget) break;
          }
          const double ns = std::chrono::duration<double, std::nano>(deadline_clock::now() - t0).count();
          if (i == distance_rounds) best = ns / distance_rounds < best ? ns / distance_rounds : best;
          else if (b == 0) best = ns / (i + 1);  // no whole batch in the budget: as slow as this one
          if (i < distance_rounds) break;
        }
        const double trip = best / 2.0;
        const std::uint32_t t =
            trip >= double(node_distance::unmeasured - 1) ? node_distance::unmeasured - 1 : std::uint32_t(trip + 0.5);
        if (t >= d.trip_ns) d.trip_ns = t, d.farthest = r;
      }
    }
    zero.trip_ns.store(d.trip_ns, std::memory_order_relaxed);
    zero.verdict.store(std::uint32_t(1 + d.farthest), std::memory_order_release);
    for (std::size_t r = 1; r < p; ++r)
      distance_wait([&] { return (zero.acks.load(std::memory_order_acquire) >> r & 1u) != 0; }, r, deadline, failed);
    // As the window began (nobody reads them now).
    zero.ping.store(0, std::memory_order_relaxed);
    zero.acks.store(0, std::memory_order_relaxed);
    return d;
  }
  distance_line& mine = distance_line_of(g, me);
  for (std::uint32_t k = 1;;) {
    std::uint32_t verdict = 0;
    distance_wait(
        [&] {
          verdict = zero.verdict.load(std::memory_order_acquire);
          return verdict != 0 || zero.ping.load(std::memory_order_acquire) == (std::uint32_t(me) << 24 | k);
        },
        0, deadline, failed);
    if (verdict != 0) {
      d.trip_ns = zero.trip_ns.load(std::memory_order_relaxed);
      d.farthest = verdict - 1;
      zero.acks.fetch_or(std::uint64_t(1) << me, std::memory_order_acq_rel);
      return d;
    }
    mine.pong.store(k++, std::memory_order_release);
  }
}

}  // namespace detail

MDRING_NAMESPACE_END
