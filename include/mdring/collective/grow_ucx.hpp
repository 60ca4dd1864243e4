// mdring/collective/grow_ucx.hpp: processes join a running UCX job, and its
// communicator grows back (after mdring::shrink, or to add nodes).
//
//   // the members (every rank of comm):
//   auto bigger = mdring::grow(comm, {.size = 8});       // shm:2 x ethernet:3 -> shm:2 x ethernet:4
//   // each joining process (mdring-run --replace starts one with MDRING_JOIN=1):
//   auto comm = mdring::ucx::join_from_env(opts);          // or ucx::join(world, opts): a rank shrink left out
//
// The rendezvous goes through the job's store (keys under "mdring/grow/"), with
// the job's secret: a process without it never reaches the store. Rank 0 of comm
// counts a new generation g, offers "open g SIZE TOPOLOGY" under
// "mdring/grow/offer", and every member publishes how it runs (node, pid); each
// joiner waits for an open offer, takes a slot with the store's counter
// (add()), and publishes its own. Rank 0 then decides for everyone: "ok" once the
// SIZE - comm.size() joiners are there and the shape fits, else why not (the
// deadline passed; a node would split an inner ring; more joiners than slots), and
// closes the offer. On "ok" every process computes the same new ranks, node-major
// (each host's ranks together, hosts in the order of their lowest member; all on
// one host: members first, by rank, then joiners, by slot), and binds the grown
// topology (the outermost dimension of more than one rank, larger) over a new
// transport whose worker addresses go through the store. Anything else leaves comm
// as it was, usable, on every member (timeout_error or topology_error), and the
// joiners throw the same.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "../rendezvous/launch.hpp"
#include "../rendezvous/store.hpp"
#include "../topology/runtime.hpp"
#include "../topology/survivors.hpp"
#include "../transport/ucx.hpp"
#include "../transport/ucx_world.hpp"
#include "bind_ucx.hpp"
#include "broadcast.hpp"
#include "communicator.hpp"
#include "fingerprint.hpp"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// How mdring::grow waits and how large the communicator becomes.
struct grow_options {
  std::size_t size = 0;                  ///< the size after (required: more than the communicator's)
  std::chrono::milliseconds timeout{0};  ///< how long to wait for the joiners; 0: options.timeout
};

namespace detail {

// Parses "open G SIZE TOPOLOGY"; false for anything else (a closed offer).
inline bool parse_offer(const std::string& v, std::int64_t& g, std::size_t& size, std::string& topology) {
  if (v.rfind("open ", 0) != 0) return false;
  const auto a = v.find(' ', 5), b = a == std::string::npos ? a : v.find(' ', a + 1);
  if (b == std::string::npos) return false;
  g = std::atoll(v.substr(5, a - 5).c_str());
  size = std::size_t(std::atoll(v.substr(a + 1, b - a - 1).c_str()));
  topology = v.substr(b + 1);
  return true;
}

// Both sides after the verdict: read every slot, renumber, bind over a new transport.
inline communicator<runtime_topology, ucx::transport> grown(rendezvous::store& st, const std::string& G,
                                                            const runtime_topology& now, std::size_t size,
                                                            std::size_t my_slot, const options& o,
                                                            const ucx::world* members,
                                                            std::unique_ptr<rendezvous::store> owned,
                                                            rendezvous::clock::time_point deadline) {
  const std::size_t n = now.size();
  std::vector<std::string> who(size);
  for (std::size_t s = 0; s < size; ++s)
    who[s] = st.get(s < n ? G + "member/" + std::to_string(s) : G + "join/" + std::to_string(s - n), deadline);
  const growth g = plan_growth(now, size, who);
  const std::size_t me = std::size_t(std::find(g.order.begin(), g.order.end(), my_slot) - g.order.begin());
  std::vector<std::string> ranked(size);
  for (std::size_t r = 0; r < size; ++r) ranked[r] = who[g.order[r]];
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
  ucx::world w = ucx::world::assembled(ranked, me, fnv1a(G), members, std::move(owned), timeout);
  const std::string fp = fingerprint(g.topology, o) + "|grow " + G;
  auto tr = std::make_unique<ucx::transport>(w, o, fp, [&](const std::string& mine) {
    return rendezvous::all_gather(w.store(), G + "address", me, size, mine, deadline);
  });
  return communicator<runtime_topology, ucx::transport>(g.topology, std::move(tr), o);
}

// The value of `key`, waited for while `w` (the members' UCX worker) keeps moving:
// connections its endpoints have started, and the peers' keepalive, are answered
// meanwhile (a worker left alone for the seconds a growth may wait saw endpoints to
// live peers fail, "Endpoint timeout", on the namespace cluster).
inline std::string get_moving(rendezvous::store& st, const std::string& key, rendezvous::clock::time_point deadline,
                              ucp_worker_h w) {
  for (;;) {
    try {
      return st.get(key, std::min(deadline, rendezvous::clock::now() + std::chrono::milliseconds(100)));
    } catch (const timeout_error&) {
      if (rendezvous::clock::now() >= deadline) throw;
    }
    for (int i = 0; i < 1000 && ucp_worker_progress(w) != 0; ++i) {}
  }
}

[[noreturn]] inline void refuse_growth(const std::string& fn, const std::string& verdict) {
  if (verdict.rfind("timeout ", 0) == 0) throw timeout_error(fn + ": " + verdict.substr(8), "grow", 0, "grow", 0, 0);
  throw topology_error("size", fn + ": " + verdict.substr(verdict.find(' ') + 1));
}

}  // namespace detail

/// The members' side (see the top): collective over comm, which must be usable;
/// returns the grown communicator and releases comm (its calls then throw
/// communicator_error). On any refusal comm stays as it was.
template <class Topology>
communicator<runtime_topology, ucx::transport> grow(communicator<Topology, ucx::transport>& comm, grow_options go) {
  const std::string fn = "mdring::grow";
  const std::size_t n = comm.size(), me = comm.rank();
  if (go.size <= n)
    throw invalid_argument("size", fn + ": grow_options.size must be more than the communicator's " +
                                       std::to_string(n) + " ranks, not " + std::to_string(go.size));
  if (go.timeout.count() < 0) throw invalid_argument("timeout", fn + ": grow_options.timeout must not be negative");
  const runtime_topology now = comm.topology();
  if (auto g = detail::plan_growth(now, go.size, {}); !g.why_not.empty())
    throw invalid_argument("size", fn + ": " + g.why_not);
  detail::executor_of(comm)->drain();  // no call in flight: this thread may move the worker
  const ucx::world& w = comm.get_transport().get_world();
  ucp_worker_h worker = comm.get_transport().worker();
  rendezvous::store& st = w.store();
  const options o = comm.bind_options();
  const auto deadline = rendezvous::clock::now() + (go.timeout.count() ? go.timeout : o.timeout);
  std::int64_t gen = 0;  // rank 0 counts the generation; -1: it could not reach the store
  std::string unreachable = "rank 0 could not reach it";
  if (me == 0) try {
      gen = st.add("mdring/grow/generation", 1);
    } catch (const error& e) {
      gen = -1, unreachable = e.what();
    }
  broadcast(comm, &gen, 1, 0);  // (every member learns it, so none waits for the others)
  if (gen < 0)
    throw transport_error(
        fn + ": the job's store cannot be reached (" + unreachable +
            "); growing needs it (mdring-run hosts it in a process of its own unless MDRING_RUN_STORE=rank0; under "
            "torchrun or another launcher it lives in the job's first rank 0's process)",
        0);
  const std::string G = "mdring/grow/" + std::to_string(gen) + "/";
  st.set(G + "member/" + std::to_string(me), ucx::world::self_description());
  if (me == 0) {
    st.set("mdring/grow/offer", "open " + std::to_string(gen) + " " + std::to_string(go.size) + " " + now.to_string());
    std::string verdict = "ok";
    std::size_t came = 0;  // joiners seen
    try {
      std::vector<std::string> who(go.size);
      for (std::size_t s = 0; s < go.size; ++s) {
        who[s] = detail::get_moving(st, s < n ? G + "member/" + std::to_string(s) : G + "join/" + std::to_string(s - n),
                                    deadline, worker);
        if (s >= n) came = s - n + 1;
      }
      if (auto g = detail::plan_growth(now, go.size, who); !g.why_not.empty()) verdict = "shape " + g.why_not;
    } catch (const timeout_error&) {
      verdict = "timeout only " + std::to_string(came) + " of the " + std::to_string(go.size - n) +
                " joining processes arrived before the deadline";
    }
    st.set(G + "verdict", verdict);
    st.set("mdring/grow/offer", "closed " + std::to_string(gen));
  }
  const std::string verdict = detail::get_moving(st, G + "verdict", deadline + std::chrono::seconds(10), worker);
  if (verdict != "ok") detail::refuse_growth(fn, verdict);
  auto next = detail::grown(st, G, now, go.size, me, o, &w, nullptr, deadline + std::chrono::seconds(10));
  comm.release("the communicator grew to " + next.topology().to_string() + "; use the one mdring::grow returned");
  return next;
}

namespace ucx {

/// The joining side (see the top) over `st`, the job's store (taken: the grown
/// communicator keeps it), or over a world's store (`members`: a rank that shrink
/// left out). `opts` must be the members' (their fingerprints are compared).
/// Waits up to `timeout` for an open offer.
inline communicator<runtime_topology, transport> join(std::unique_ptr<rendezvous::store> owned, const world* members,
                                                      options opts, std::chrono::milliseconds timeout) {
  const std::string fn = "mdring::ucx::join";
  mdring::detail::validate(opts);
  rendezvous::store& st = owned ? *owned : members->store();
  const auto deadline = rendezvous::clock::now() + timeout;
  std::int64_t gen = 0;
  std::size_t size = 0;
  std::string text;
  for (;;) {  // an open offer (a closed one: the members have not called grow yet)
    if (mdring::detail::parse_offer(st.get("mdring/grow/offer", deadline), gen, size, text)) break;
    if (rendezvous::clock::now() >= deadline)
      throw timeout_error(fn + ": no mdring::grow was offered before the deadline", "grow", 0, "join", 0, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const runtime_topology now = parse_topology(text);
  const std::string G = "mdring/grow/" + std::to_string(gen) + "/";
  const std::int64_t slot = st.add(G + "joined", 1) - 1;
  if (slot < 0 || std::size_t(slot) >= size - now.size())
    throw invalid_argument("size", fn + ": grow " + std::to_string(gen) + " of \"" + text + "\" to " +
                                       std::to_string(size) + " ranks already has its " +
                                       std::to_string(size - now.size()) + " joining processes");
  st.set(G + "join/" + std::to_string(slot), world::self_description());
  const std::string verdict = st.get(G + "verdict", deadline + opts.timeout);
  if (verdict != "ok") mdring::detail::refuse_growth(fn, verdict);
  return mdring::detail::grown(st, G, now, size, now.size() + std::size_t(slot), opts, members, std::move(owned),
                               deadline + opts.timeout);
}
/// A rank that shrink left out joins again, over its world's store.
inline communicator<runtime_topology, transport> join(const world& w, options opts = {},
                                                      std::chrono::milliseconds timeout = std::chrono::minutes(5)) {
  return join(nullptr, &w, std::move(opts), timeout);
}
/// A new process joins (mdring-run --replace starts it with MDRING_JOIN=1): the
/// store from MASTER_ADDR, MASTER_PORT and MDRING_SECRET.
inline communicator<runtime_topology, transport> join_from_env(
    options opts = {}, std::chrono::milliseconds timeout = std::chrono::minutes(5)) {
  return join(rendezvous::launched_job::client_from_env("mdring::ucx::join_from_env", timeout), nullptr,
              std::move(opts), timeout);
}

}  // namespace ucx

MDRING_NAMESPACE_END
