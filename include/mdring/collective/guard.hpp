// mdring/collective/guard.hpp: step 5 of every call, on the host path and the
// GPU path alike: a failure inside a call marks the communicator unusable on this
// rank and is announced to the peers, which stop waiting with remote_error; a
// timeout or a peer's failure also writes this rank's hang-report line.
//
//   guarded(comm, peers, [&] { ... the call's work ... });
//
// `peers` says how this rank's failure reaches the others, per executor:
//   peers.failed_here(why)   this rank failed (why: "rank R: what"): tell the peers
//                            (the host transport's abort, each device link's abort);
//   peers.peer_failed(e)     a peer failed (remote_error e): give up what this rank has
//                            in flight and pass the failure on where the transport
//                            learns of deaths only from neighbours; may throw a
//                            remote_error that names the rank that failed first.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../executor/state.hpp"
#include "communicator_base.hpp"

#include <exception>
#include <string>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class Peers, class F>
decltype(auto) guarded(communicator_base& comm, Peers&& peers, F&& f) {
  try {
    return f();
  } catch (const remote_error& e) {
    mark_broken(comm, e.what());
    peers.peer_failed(e);
    throw;
  } catch (const std::exception& e) {
    mark_broken(comm, e.what());
    peers.failed_here(std::string("rank ") + std::to_string(comm.rank()) + ": " + e.what());
    throw;
  }
}

// A call has ended with `e` (null: completed): the board says so, and a call that
// failed on its deadline or on a peer's failure writes this rank's line
// (options::hang_report, executor/state.hpp).
inline void report_end(const communicator_base& comm, const std::exception_ptr& e) {
  state_board& b = board_of(comm);
  b.end_call(bool(e));
  if (!e || !comm.get_options().hang_report) return;
  try {
    std::rethrow_exception(e);
  } catch (const timeout_error&) {
    report_failure(b);
  } catch (const remote_error&) {
    report_failure(b);
  } catch (...) {}
}

}  // namespace detail

MDRING_NAMESPACE_END
