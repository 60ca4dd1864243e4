// mdring/collective/status.hpp: moving a communicator's calls on by hand, and
// seeing what it is doing.
//
//   mdring::poll(comm);                    // progress_mode::in_wait: between computations
//   std::string s = mdring::state_line(comm);  // "rank=3 size=8 ... state=waiting ..."
//
// state_line() and dump_state() take any communicator (the host path's and the GPU
// path's: collective/communicator_base.hpp); poll() moves a host communicator's
// nonblocking calls (executor/progress.hpp).
#pragma once

#include "../config.hpp"
#include "../executor/state.hpp"
#include "communicator.hpp"
#include "communicator_base.hpp"

#include <string>

MDRING_NAMESPACE_BEGIN

/// Moves the communicator's calls in flight on, once, without waiting: what the
/// progress agent does in each round, for programs that run without it
/// (progress_mode::in_wait, and simulated ranks under SimGrid SMPI, which have no
/// threads) and compute between the calls. True when something moved (a step
/// passed, or a call completed). Any thread may call it; it does nothing while
/// another thread is moving the same calls.
template <bound_communicator C>
bool poll(C& comm) {
  return detail::executor_of(detail::core_of(comm))->try_step();
}

/// The hang report's line for this rank of `comm` (executor/state.hpp): the call in
/// flight (sequence number, collective, count, type), its step, dimension and link,
/// the peer it waits on and for how long, or "state=idle". Any thread may call it,
/// at any time, without disturbing the call.
inline std::string state_line(const detail::communicator_base& comm) { return board_of(comm).line(); }
/// Writes state_line(comm) to stderr (and to MDRING_STATE_DIR, where mdring-run
/// collects the job's lines into one table).
inline void dump_state(const detail::communicator_base& comm) {
  detail::write_lines(state_line(comm) + "\n");
  detail::write_state_file();
}

MDRING_NAMESPACE_END
