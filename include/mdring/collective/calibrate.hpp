// mdring/collective/calibrate.hpp: measure a machine's links for the cost model.
//
//   mdring::profile p = mdring::calibrate(comm);  // collective: every rank calls it
//   if (comm.rank() == 0) p.save("machine.profile");
//   // later, in any program on this machine:
//   mdring::options o;
//   o.profile = "machine.profile";                 // or MDRING_PROFILE=machine.profile
//   auto comm2 = mdring::bind(topo, world, o);     // plans with the measured figures
//
// For each executed dimension of more than one rank, every ring of that dimension
// runs ring steps at once (each rank sends a message to its next neighbour and
// receives one from its previous), the concurrency a ring stage of the plan has:
// all rings of the dimension together, so the ranks of a node share its NIC as
// they do in a collective. Each size in `how.bytes` is timed `how.trials` times
// (several steps back to back after a barrier, so that the ranks' skew does not
// count); a rank keeps its fastest trial and every rank then takes the slowest
// rank's figure, so all ranks fit the same numbers. A size's time is capped by the
// next size's (noise aside, a message never takes longer than a larger one).
//
// Each size up to `how.train_max_bytes` is also timed as a train: `how.train`
// messages in flight at once from each rank to its next neighbour (as a pipelined
// all_reduce has several segments' messages in flight). LogGP's gap: a train of c
// takes about latency + c x busy, one message latency + busy, so the two tell how
// much of a message's time keeps the link busy (what other messages in flight must
// wait for) and how much is latency (what they overlap with). profile::with_curve
// turns both into the link's curve; without trains, everything beyond the smallest
// message's time counts as busy. The
// fit, per link:
//
//   t(b) = latency + overhead + b / bandwidth
//   bandwidth  from the slope between the two largest sizes
//   overhead   what the second size takes beyond the first one and its bytes
//              (a message's cost that is not latency: 0 on an ideal network)
//   latency    the first (smallest) size's time, less the overhead
//
// The bandwidth is the rank's own; for a link with ports (a NIC shared by the
// node's ranks, topology/link.hpp) the profile stores the port's figure that gives
// that share. A link measured in two dimensions (a ring split in two) keeps the
// first dimension's figures. The calls in flight are waited for first.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../plan/profile.hpp"
#include "../reduce/ops.hpp"
#include "all_reduce.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// What calibrate() measures: the message sizes, the trials per size and the trains (see the top).
struct calibration {
  /// Message sizes, increasing: the first is the latency, the second the overhead,
  /// the last two the bandwidth; all of them the curve (at most link_curve::max_points).
  /// The segments of a pipelined all_reduce send messages of a few KiB to a few
  /// MiB, so the curve has points there: between points it is linear, and real
  /// message times are not.
  std::vector<std::size_t> bytes = {8,
                                    std::size_t(4) << 10,
                                    std::size_t(16) << 10,
                                    std::size_t(64) << 10,
                                    std::size_t(256) << 10,
                                    std::size_t(1) << 20,
                                    std::size_t(8) << 20};
  std::size_t trials = 3;  ///< times each size is timed; a rank keeps its fastest
  ///@{
  /// Messages in flight per rank in a train (0: no trains; else at least 2), and the
  /// largest size timed as one (a train needs `train` receive buffers of the size).
  std::size_t train = 4;
  std::size_t train_max_bytes = std::size_t(1) << 20;
  ///@}
};

namespace detail {

inline void check_calibration(const calibration& how) {
  bool increasing = how.bytes.size() >= 3;
  for (std::size_t i = 1; increasing && i < how.bytes.size(); ++i) increasing = how.bytes[i] > how.bytes[i - 1];
  if (!increasing || how.bytes[0] == 0 || how.bytes.size() > link_curve::max_points)
    throw invalid_argument("how.bytes", "mdring::calibrate: how.bytes must hold 3 to " +
                                            std::to_string(link_curve::max_points) +
                                            " increasing sizes above 0 (latency, overhead, bandwidth), e.g. "
                                            "{8, 65536, 1048576, 8388608}");
  if (how.trials == 0) throw invalid_argument("how.trials", "mdring::calibrate: how.trials must be at least 1");
  if (how.train == 1)
    throw invalid_argument("how.train",
                           "mdring::calibrate: how.train must be 0 (no trains) or at least 2 messages "
                           "in flight, not 1");
}

// `reps` ring steps of `bytes` in dimension d, each a train of `train` messages to
// the next rank and as many from the previous, all in flight at once (received
// into `train` consecutive buffers of `bytes`); seconds per step on this rank.
template <class Comm>
double ring_steps(Comm& comm, std::size_t d, std::size_t bytes, std::size_t reps, unsigned char* send,
                  unsigned char* recv, std::size_t train = 1) {
  auto& tr = comm.get_transport();
  const auto b = detail::binding_of(detail::core_of(comm));
  auto& ch = b.channels[d];
  const bound_dimension& dim = b.layout.dims[d];
  const std::size_t p = dim.extent, c = dim.coord;
  std::vector<typename Comm::transport_type::request> rq(2 * train);
  const double t0 = seconds_on(tr);
  for (std::size_t r = 0; r < reps; ++r) {
    for (std::size_t j = 0; j < train; ++j) {
      const int tag = int((r % 2) * train + j);
      tr.irecv(ch, recv + j * bytes, bytes, (c + p - 1) % p, tag, rq[2 * j]);
      tr.isend(ch, send, bytes, (c + 1) % p, tag, rq[2 * j + 1]);
    }
    const wait_status st = tr.wait_all(std::span(rq), deadline_clock::now() + comm.get_options().timeout);
    if (st.kind == wait_status::peer_failed)
      throw remote_error("mdring::calibrate: rank " + std::to_string(st.failed_rank) + " failed: " + st.reason,
                         st.failed_rank);
    if (st.kind != wait_status::done) {
      tr.cancel_all(rq);
      throw timeout_error("mdring::calibrate: timed out in dimension " + std::to_string(d) + " (" + dim.link.name +
                              "), a ring step of " + std::to_string(bytes) + " bytes",
                          "calibrate", d, "ring step", r, dim.members[(c + p - 1) % p]);
    }
  }
  return (seconds_on(tr) - t0) / double(reps);
}

}  // namespace detail

/// Measures every executed dimension's links and fits the cost model's figures
/// (see above). Collective; every rank returns the same profile.
template <class Comm>
profile calibrate(Comm& comm, const calibration& how = {}) {
  detail::check_calibration(how);
  detail::executor_of(detail::core_of(comm))->drain();
  const runtime_topology& ex = comm.executed_topology();
  profile pr;
  pr.topology = ex.to_string();
  pr.ranks = comm.size();
  const std::size_t top = how.bytes.back(), n = how.bytes.size();
  std::size_t trains = 0;  // the sizes timed as trains: the first `trains`
  while (how.train && trains < n && how.bytes[trains] <= how.train_max_bytes) ++trains;
  const std::size_t recv_bytes = std::max(top, trains ? how.train * how.bytes[trains - 1] : 0);
  // From options.memory, as all scratch (under SimGrid SMPI: shared pages, not
  // buffers of every simulated rank in the one process).
  std::pmr::memory_resource* mr = comm.get_options().memory_or_default();
  std::pmr::vector<unsigned char> send(top, 0x5a, mr), recv(recv_bytes, mr);
  const auto& dims = comm.layout().dims;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d].extent < 2) continue;
    // t[i]: one message of bytes[i]; t[n + i]: a train of them (i < trains)
    std::vector<double> t(n + trains, std::numeric_limits<double>::infinity());
    for (std::size_t i = 0; i < n + trains; ++i) {
      const std::size_t b = how.bytes[i % n], train = i < n ? 1 : how.train;
      const std::size_t reps = b <= (std::size_t(64) << 10) ? 16 : b <= (std::size_t(1) << 20) ? 4 : 2;
      detail::ring_steps(comm, d, b, 1, send.data(), recv.data(), train);  // warm-up: first touch, connections
      for (std::size_t k = 0; k < how.trials; ++k) {
        int go = 0;
        all_reduce(comm, &go, 1, max);  // a barrier
        t[i] = std::min(t[i], detail::ring_steps(comm, d, b, reps, send.data(), recv.data(), train));
      }
    }
    all_reduce(comm, t.data(), t.size(), max);  // the slowest rank's: the same everywhere
    // A message never takes longer than a larger one (noise can say otherwise); nor a train.
    for (std::size_t i = n - 1; i-- > 0;) t[i] = std::min(t[i], t[i + 1]);
    for (std::size_t i = trains; i-- > 1;) t[n + i - 1] = std::min(t[n + i - 1], t[n + i]);
    const double db = double(how.bytes[n - 1] - how.bytes[n - 2]), dt = t[n - 1] - t[n - 2];
    const double bw = dt > 0 ? db / dt : double(how.bytes[n - 1]) / t[n - 1];
    const double overhead = std::max(0.0, t[1] - t[0] - double(how.bytes[1] - how.bytes[0]) / bw);
    link_info l = ex.dim(d).link;
    const std::size_t sharers = ex.port_sharers(d);
    l.bandwidth = l.ports && sharers > l.ports ? bw * double(sharers) / double(l.ports) : bw;
    l.latency = std::max(0.0, t[0] - overhead);
    l.overhead = overhead;
    if (!pr.find(l.name)) pr.links.push_back(l);
    for (std::size_t i = 0; i < n; ++i) pr.points.push_back({l.name, d, how.bytes[i], t[i]});
    for (std::size_t i = 0; i < trains; ++i) pr.trains.push_back({l.name, d, how.bytes[i], how.train, t[n + i]});
  }
  return pr;
}

MDRING_NAMESPACE_END
