// mdring/collective/shrink.hpp: a job that loses ranks goes on without them, in
// the same processes.
//
//   try {
//     mdring::all_reduce(comm, grad.data(), grad.size());
//   } catch (const mdring::remote_error&) {          // or timeout_error: a peer died or stalled
//     auto survivors = mdring::shrink(comm);        // every survivor calls it
//     if (survivors.size() == 0) return;            // this rank's node was dropped
//     ...                                           // go on with survivors: shm:2 x ethernet:3
//   }
//   mdring::revoke(comm);                           // a rank that saw a failure stops everyone's calls now
//
// shrink(comm):
//   1. waits for comm's calls in flight (they complete with their errors);
//   2. agrees with the other survivors on who failed (collective/failed_set.hpp):
//      every survivor gets the same set, also when ranks die or stall during the
//      agreement; a rank that is only slow is in on every survivor or out on every
//      survivor, never split;
//   3. drops each failed rank's slab of the outermost dimension (its node: "shm:2 x
//      ethernet:4" losing rank 5 becomes "shm:2 x ethernet:3"; topology/survivors.hpp);
//   4. binds that topology over the survivors (new rank = order among them), on a
//      transport the old one makes for them (transport/transport.hpp
//      survives_failures: threads, UCX), and releases comm's node windows,
//      mappings, scratch and transport (comm's calls throw communicator_error after).
// A survivor whose node was dropped gets a communicator of size() 0, whose calls
// throw communicator_error; so does every survivor where shrink_options.quorum asks
// for a majority and they are not one. Nothing failed: a communicator over the same ranks.
// explain() of the result shows the new topology; survivors_of(...).describe(),
// which the old communicator's and a left-out rank's errors carry, says what went.
//
// Transports that cannot survive a failure (MPI, Boost.MPI: ULFM's
// MPIX_Comm_shrink is not used) refuse with invalid_argument naming why, before
// anything happens: comm stays as it was.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "../topology/runtime.hpp"
#include "../topology/survivors.hpp"
#include "../transport/transport.hpp"
#include "communicator.hpp"
#include "failed_set.hpp"
#include "fingerprint.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// Whether the survivors of a failure need to be most of the communicator to go on.
///   none      they go on whatever their number (a job that lost half its nodes keeps training).
///   majority  they go on only if they are more than half of the communicator's ranks, or exactly
///             half with its rank 0 among them; otherwise each gets a communicator of size() 0 that
///             says why. A network partition looks to each side like the other side's failure: with
///             majority at most one side goes on.
enum class shrink_quorum { none, majority };

namespace detail {
inline shrink_quorum default_shrink_quorum() {
  const char* s = env_choice("MDRING_SHRINK_QUORUM", {"none", "majority"}, "none or majority");
  return s && std::string_view(s) == "majority" ? shrink_quorum::majority : shrink_quorum::none;
}
// The ranks not in `failed`.
inline std::size_t alive_count(const std::vector<char>& failed) {
  return failed.size() - std::size_t(std::count(failed.begin(), failed.end(), 1));
}
// Whether the ranks not in `failed` may go on under q (see shrink_quorum).
inline bool has_quorum(const std::vector<char>& failed, shrink_quorum q) {
  if (q == shrink_quorum::none || failed.empty()) return true;
  const std::size_t size = failed.size(), alive = alive_count(failed);
  return 2 * alive > size || (2 * alive == size && !failed[0]);
}
}  // namespace detail

/// How mdring::shrink waits, and whether the survivors need a majority.
struct shrink_options {
  /// Each wait of the agreement (a rank silent that long is counted failed); 0: the communicator's
  /// options.timeout. Default: MDRING_SHRINK_TIMEOUT seconds where set, else 0. A rank that
  /// stalls costs the survivors about 3 x this; a node whose link was cut, 1 + its ranks x this.
  /// Shorter recovers sooner; a rank still computing that long after the others began to shrink
  /// is counted failed (and finds itself left out).
  std::chrono::milliseconds timeout = detail::env_seconds("MDRING_SHRINK_TIMEOUT", std::chrono::milliseconds(0));
  /// See shrink_quorum. Default: MDRING_SHRINK_QUORUM (none or majority) where set, else none.
  shrink_quorum quorum = detail::default_shrink_quorum();
};

namespace detail {
inline std::string shrink_why(const survivors& s, bool left_out) {
  return left_out ? "mdring::shrink left this rank out: " + s.describe()
                  : "the communicator was shrunk (" + s.describe() + "); use the one mdring::shrink returned";
}
// "; as this rank saw them: rank 2 silent for 20000 ms, rank 5 gone before the shrink
// (...)": why the agreed set holds each rank, from here (a left-out rank's error).
inline std::string seen_from_here(const std::vector<char>& failed, const std::vector<failure_seen>& seen,
                                  std::size_t rank, std::chrono::milliseconds step) {
  std::string s;
  for (std::size_t r = 0; r < failed.size() && r < seen.size(); ++r) {
    if (!failed[r]) continue;
    s += (s.empty() ? "; as this rank saw them: rank " : ", rank ") + std::to_string(r) +
         (r == rank ? " (this one)" : "");
    switch (seen[r]) {
      case failure_seen::before:
        s += " gone before the shrink (its process ended or its link failed)";
        break;
      case failure_seen::during:
        s += " gone during it";
        break;
      case failure_seen::silent:
        s += " silent for " + std::to_string(step.count()) + " ms";
        break;
      default:
        s += " named by the others";
    }
  }
  return s;
}
}  // namespace detail

/// The survivors' communicator after a failure (see the top). Collective over
/// comm's living ranks; every one of them calls it.
template <transport Transport>
communicator<runtime_topology, Transport> shrink(detail::communicator_core<Transport>& comm, shrink_options so = {}) {
  if (so.timeout.count() < 0)
    throw invalid_argument("timeout", "mdring::shrink: shrink_options.timeout must not be negative");
  if constexpr (!survives_failures<Transport>) {
    std::string why = "it has no messages that survive a failure";
    if constexpr (requires { Transport::shrink_refusal(); }) why = Transport::shrink_refusal();
    throw invalid_argument("comm", "mdring::shrink: the " + comm.get_transport().name() +
                                       " transport cannot go on after a rank's failure: " + why +
                                       "; bind over UCX (mdring-run, torchrun) or threads to shrink");
  } else {
    Transport& t = comm.get_transport();  // communicator_error once shrunk
    detail::executor_of(comm)->drain();   // the calls in flight end (with their errors)
    const std::size_t size = comm.size(), rank = comm.rank();
    std::vector<char> known(size, 0);
    for (std::size_t r = 0; r < size; ++r) known[r] = r != rank && t.gone(r);
    const auto step = so.timeout.count() ? so.timeout : comm.get_options().timeout;
    const std::uint32_t epoch = comm.next_shrink();
    std::vector<detail::failure_seen> seen;
    const std::vector<char> failed = detail::agree_on_failed(t, size, rank, std::move(known), step, epoch, &seen);
    const survivors s = survivors_of(comm.topology(), failed);
    options o = comm.bind_options();  // resolved afresh for the survivors
    const bool quorum = detail::has_quorum(failed, so.quorum);
    if (!quorum || std::find(s.members.begin(), s.members.end(), rank) == s.members.end()) {
      std::string name = t.name();
      std::string why = detail::shrink_why(s, true) + detail::seen_from_here(failed, seen, rank, step);
      if (!quorum) {
        why = "mdring::shrink: " + std::to_string(detail::alive_count(failed)) + " of " + std::to_string(size) +
              " ranks are left on this side of the failure" + (failed[0] ? " (rank 0 not among them)" : "") +
              ", not a majority (shrink_options.quorum): another part of the job may be going on; " + s.describe();
      }
      comm.release(detail::shrink_why(s, false));  // (t goes with it)
      return communicator<runtime_topology, Transport>(s.topology, std::move(o), std::move(name), std::move(why));
    }
    // The fingerprint of the survivors' bind names the agreement, so that ranks
    // that agreed differently (they cannot: see failed_set.hpp) would not meet.
    const std::string fp = detail::fingerprint(s.topology, o) + "|shrink " + std::to_string(epoch) + " " +
                           std::to_string(detail::fnv1a(detail::pack_ranks(failed)));
    auto tr = t.shrunk(s.members, o, fp);
    communicator<runtime_topology, Transport> next(s.topology, std::move(tr), o);
    comm.release(detail::shrink_why(s, false));
    return next;
  }
}

/// Stops every rank's calls on comm now (ULFM's revoke): they throw remote_error
/// naming this rank, instead of each waiting to notice a failure itself; comm is
/// unusable here at once. Then shrink. `why` goes into the others' errors.
template <transport Transport>
void revoke(detail::communicator_core<Transport>& comm, const std::string& why = "revoked") {
  Transport& t = comm.get_transport();
  const std::string reason = "mdring::revoke by rank " + std::to_string(comm.rank()) + ": " + why;
  mark_broken(comm, reason);
  t.abort(reason);
}

MDRING_NAMESPACE_END
