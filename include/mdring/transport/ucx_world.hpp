// mdring/transport/ucx_world.hpp: the processes of a job without MPI.
//
//   auto world = mdring::ucx::world::from_env();    // torchrun's or mdring-run's variables
//   auto comm = mdring::bind(mdring::parse_topology("shm:*"), world);
//
// A world is this process's place in the job (rank, size, its node's share) and
// the two things every communicator bound to it uses: the job's rendezvous store
// (rendezvous/store.hpp) and one UCP context per process. Each bind() gets a
// UCP worker of its own and finds the other ranks' workers through the store
// (transport/ucx.hpp); a communicator destroyed cleanly leaves its worker to the
// process's next bind (worker_pool below). A world is a cheap handle: copies share
// the same state.
//
// from_env() reads, as torchrun sets them (MDRING_* names take precedence):
//   RANK, WORLD_SIZE                  this process and the job's size
//   LOCAL_RANK, LOCAL_WORLD_SIZE      its place on its node (else from host names)
//   MASTER_ADDR, MASTER_PORT          where rank 0 hosts the store (MDRING_STORE_PORT
//                                     overrides the port: torch's own store may hold it)
//   MDRING_SECRET                     the job's secret, which every connection to the
//                                     store must present (mdring-run generates one)
//   MDRING_TIMEOUT                    the rendezvous deadline, seconds (default 300)
// A single process (WORLD_SIZE 1 or unset) needs none of them.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "../rendezvous/launch.hpp"
#include "../rendezvous/store.hpp"
#include "../rendezvous/tcp_store.hpp"
#include "../topology/detect.hpp"
#include "node_window.hpp"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

MDRING_NAMESPACE_BEGIN

/// The UCX transport (`ucx::world`, `ucx::transport`, include <mdring/ucx.hpp>).
namespace ucx {

namespace detail {
inline void check(ucs_status_t st, const char* call) {
  if (st != UCS_OK)
    throw transport_error(std::string("mdring::ucx: ") + call + " failed: " + ucs_status_string(st), int(st));
}

// Workers that communicators destroyed cleanly left behind, for the next bind of
// any world of this process: making a worker opens every transport's interface,
// 15 to 20 ms of CPU (more than the rest of a bind together; 80 ms a bind with 6
// processes on 2 cores), and a job binds a communicator per group, topology or
// option set. At most `capacity` wait (each holds about 4 MB, mostly the
// shared-memory transports' receive queues); the context's end destroys them. Whoever
// takes one owns it alone, as before (SERIALIZED mode: one thread at a time).
// Messages meant for its earlier owner never match the new one's receives: every
// tag carries 16 bits of the bind (ucx.hpp, world::next_bind).
struct worker_pool {
  static constexpr std::size_t capacity = 4;
  std::mutex m;
  std::vector<ucp_worker_h> idle;
  std::size_t reused = 0;  // workers taken from the pool (tests/ucx/test_ucx_faults.cpp checks it)
};
inline worker_pool& process_workers() {
  static auto* p = new worker_pool;  // never destroyed: a world in static storage may end after it
  return *p;
}

// A worker for a new communicator: one an earlier communicator of this process left
// cleanly (the pool), else a new one.
inline ucp_worker_h take_worker(ucp_context_h ctx) {
  auto& pool = process_workers();
  {
    std::lock_guard g(pool.m);
    if (!pool.idle.empty()) {
      ucp_worker_h w = pool.idle.back();
      pool.idle.pop_back();
      ++pool.reused;
      return w;
    }
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // the executor's lock serializes our calls
  ucp_worker_h w = nullptr;
  check(ucp_worker_create(ctx, &wp, &w), "ucp_worker_create");
  return w;
}
// Drops what arrived unmatched (nothing, after a clean end, but a peer's late
// control message), then pools the worker; false when the pool is full.
inline bool give_back_worker(ucp_worker_h w) noexcept {
  auto& pool = process_workers();
  {
    std::lock_guard g(pool.m);
    if (pool.idle.size() >= worker_pool::capacity) return false;
  }
  try {
    for (int i = 0; i < 1000 && ucp_worker_progress(w) != 0; ++i) {}
    std::vector<char> sink;
    for (int i = 0; i < 1024; ++i) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h msg = ucp_tag_probe_nb(w, 0, 0, 1, &info);
      if (!msg) break;
      sink.resize(std::max<std::size_t>(info.length, 1));
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(w, sink.data(), info.length, msg, &prm);
      if (UCS_PTR_IS_ERR(sp)) return false;
      const auto until = deadline_clock::now() + std::chrono::milliseconds(100);
      while (sp && ucp_request_check_status(sp) == UCS_INPROGRESS && deadline_clock::now() < until)
        ucp_worker_progress(w);
      if (sp) {
        const bool done = ucp_request_check_status(sp) != UCS_INPROGRESS;
        if (!done) ucp_request_cancel(w, sp);
        ucp_request_free(sp);
        if (!done) return false;
      }
    }
  } catch (...) {
    return false;
  }
  std::lock_guard g(pool.m);
  if (pool.idle.size() >= worker_pool::capacity) return false;
  pool.idle.push_back(w);
  return true;
}

// The process's UCP context, made on first use and shared by every world.
// Peer failures must be seen within a second (an endpoint error, see ucx.hpp):
// unless the user set them, keepalive runs every 250 ms, and the shared-memory
// transports keep working with per-peer error handling.
inline std::shared_ptr<ucp_context> process_context() {
  static std::mutex m;
  static std::weak_ptr<ucp_context> cached;
  worker_pool& pool = process_workers();
  std::lock_guard l(m);
  if (auto c = cached.lock()) return c;
  setenv("UCX_KEEPALIVE_INTERVAL", "250ms", 0);
  // Without InfiniBand, the links between nodes are TCP, where UCX's rendezvous
  // (a get emulated by a request and its reply) waits a round trip per message
  // behind the data queued in every switch: on 4 nodes of 1 Gbit/s it took 1.5 to 3 x
  // the eager time (docs/perf/cluster.md). mdring posts its receives ahead and bounds
  // the bytes in flight per peer (pipeline_depth segments), so eager is safe there.
  // A user's own UCX_RNDV_THRESH or UCX_RNDV_SCHEME wins.
  if (!std::getenv("UCX_RNDV_SCHEME") && !mdring::detail::has_infiniband()) setenv("UCX_RNDV_THRESH", "inf", 0);
  // (Only where those transports may load: UCX warns of variables nothing reads.)
  const char* tls = std::getenv("UCX_TLS");
  const std::string t = tls ? tls : "";
  if (t.empty() || t[0] == '^' || t.find("all") != std::string::npos || t.find("shm") != std::string::npos ||
      t.find("posix") != std::string::npos || t.find("sysv") != std::string::npos) {
    setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
  }
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  params.mt_workers_shared = 1;
  ucp_context_h ctx = nullptr;
  const ucs_status_t st = ucp_init(&params, config, &ctx);
  ucp_config_release(config);
  check(st, "ucp_init");
  std::shared_ptr<ucp_context> c(ctx, [&pool](ucp_context_h h) {
    {
      std::lock_guard g(pool.m);
      for (ucp_worker_h w : pool.idle) ucp_worker_destroy(w);
      pool.idle.clear();
    }
    ucp_cleanup(h);
  });
  cached = c;
  return c;
}

}  // namespace detail

/// The processes of one job, found through a rendezvous::store, and their UCX context: what bind() takes for the UCX
/// transport.
class world {
public:
  /// A world over a store that every process of the job reaches (the PyTorch
  /// backend passes torch's). local_size 0: found from the processes' host names.
  world(rendezvous::store& store, std::size_t rank, std::size_t size, std::size_t local_size = 0,
        std::chrono::milliseconds timeout = mdring::detail::default_timeout())
      : world(nullptr, &store, rank, size, local_size, timeout) {}

  /// From the launcher's environment (see the top); rank 0 hosts the store.
  static world from_env() {
    const auto timeout = mdring::detail::default_timeout();
    auto j = rendezvous::launched_job::from_env("mdring::ucx::world::from_env", timeout);
    return world(std::move(j.job_store), nullptr, j.rank, j.size, j.local_size, timeout);
  }

  std::size_t rank() const noexcept { return s_->rank; }  ///< this process's rank
  std::size_t size() const noexcept { return s_->size; }  ///< processes in the job
  /// Processes on this node (LOCAL_WORLD_SIZE, or counted from host names).
  std::size_t local_size() const noexcept { return s_->local; }
  /// Where the processes run, as detect_topology() sees MPI's (topology/detect.hpp).
  const node_layout& layout() const noexcept { return s_->layout; }
  /// The topology the processes' layout gives (topology/detect.hpp).
  runtime_topology topology() const { return topology_of(s_->layout); }
  rendezvous::store& store() const noexcept { return *s_->store; }  ///< the store the world rendezvouses through
  /// The host each rank runs on, by rank (its name; "" where the node identity is unknown).
  const std::vector<std::string>& hosts() const noexcept { return s_->hosts; }
  /// The other processes of this node: (rank, process id).
  const std::vector<std::pair<std::size_t, long>>& node_peers() const noexcept { return s_->node_peers; }
  /// Whether rank r is a process of this node that has ended.
  bool node_peer_ended(std::size_t r) const noexcept {
    for (const auto& [p, pid] : s_->node_peers)
      if (p == r) return mdring::detail::process_gone(pid);
    return false;
  }
  /// For each rank: 1 where it is a process of this node that has ended.
  std::vector<char> ended_node_peers() const {
    std::vector<char> ended(s_->size, 0);
    for (const auto& [r, pid] : s_->node_peers) ended[r] = mdring::detail::process_gone(pid);
    return ended;
  }
  ucp_context_h context() const noexcept { return s_->context.get(); }        ///< the UCX context
  std::chrono::milliseconds timeout() const noexcept { return s_->timeout; }  ///< the deadline of every wait

  /// The next bind's key prefix in the store, and its 16-bit stamp: the same on every
  /// rank (they bind in the same order), different for consecutive binds of a world
  /// (the world's random salt plus the bind's number), so that a message meant for
  /// an earlier communicator never matches a later one on a reused worker.
  struct bind_ticket {
    std::string prefix;       ///< the key prefix
    std::uint32_t stamp = 0;  ///< the 16-bit stamp
  };
  /// The world of a shrunk communicator's survivors (collective/shrink.hpp):
  /// members[i], a rank of this world, is rank i there (`me` is this process's);
  /// the same store, context and deadline. `salt`, the same on every member, keeps
  /// its binds' stamps apart from this world's.
  world subset(std::span<const std::size_t> members, std::size_t me, std::uint64_t salt) const {
    world w;
    w.s_ = std::make_shared<state>();
    state& n = *w.s_;
    const state& o = *s_;
    n.parent = s_;  // the store it may own
    n.store = o.store;
    n.rank = me;
    n.size = members.size();
    n.context = o.context;
    n.timeout = o.timeout;
    n.salt = salt;
    for (std::size_t m : members) {
      n.nodes.push_back(o.nodes[m]);
      n.pids.push_back(o.pids[m]);
      n.hosts.push_back(o.hosts[m]);
    }
    n.layout = layout_from_node_ids(n.nodes, me, o.layout.network == "infiniband");
    for (std::size_t i = 0; i < n.size; ++i)
      if (n.nodes[i] == n.nodes[me]) {
        ++n.local;
        if (i != me) n.node_peers.emplace_back(i, n.pids[i]);
      }
    return w;
  }

  /// This process as mdring::grow's rendezvous describes it: "node\nib\npid" (node:
  /// host name and boot id; ib: 1 with an InfiniBand device).
  static std::string self_description() {
    return mdring::detail::node_identity() + (mdring::detail::has_infiniband() ? "\n1\n" : "\n0\n") +
           std::to_string(getpid());
  }
  /// The world of a grown communicator (collective/grow_ucx.hpp): who[r] is rank r's
  /// self_description(), this process is `rank`. The store is `members`'s (a member
  /// of the communicator that grew) or `owned` (a process that joined).
  static world assembled(const std::vector<std::string>& who, std::size_t rank, std::uint64_t salt,
                         const world* members, std::unique_ptr<rendezvous::store> owned,
                         std::chrono::milliseconds timeout) {
    world w;
    w.s_ = std::make_shared<state>();
    state& n = *w.s_;
    if (members) n.parent = members->s_, n.store = members->s_->store;
    n.owned = std::move(owned);
    if (!n.store) n.store = n.owned.get();
    n.rank = rank;
    n.size = who.size();
    n.context = detail::process_context();
    n.timeout = timeout;
    n.salt = salt;
    std::map<std::string, int> ids;
    bool ib = true;
    for (const auto& d : who) {
      const auto b = d.rfind('\n'), a = d.rfind('\n', b - 1);
      n.nodes.push_back(ids.try_emplace(d.substr(0, a), int(ids.size())).first->second);
      n.hosts.push_back(d.substr(0, std::min(a, d.find('/'))));
      ib = ib && d.substr(a + 1, b - a - 1) == "1";
      n.pids.push_back(std::atol(d.c_str() + b + 1));
    }
    n.layout = layout_from_node_ids(n.nodes, rank, ib);
    for (std::size_t i = 0; i < n.size; ++i)
      if (n.nodes[i] == n.nodes[rank]) {
        ++n.local;
        if (i != rank) n.node_peers.emplace_back(i, n.pids[i]);
      }
    return w;
  }

  /// The next bind's ticket (see bind_ticket).
  bind_ticket next_bind() const {
    const std::size_t n = s_->binds++;
    const std::string sub = s_->parent ? std::to_string(s_->salt) + "/" : "";  // a subset's keys apart
    return {"mdring/ucx/" + sub + std::to_string(n) + "/", std::uint32_t((s_->salt + n) & 0xffff)};
  }

private:
  world() = default;
  struct state {
    std::shared_ptr<const state> parent;  // a subset's (it may own the store)
    std::unique_ptr<rendezvous::store> owned;
    rendezvous::store* store = nullptr;
    std::size_t rank = 0, size = 1, local = 0;
    node_layout layout;
    std::shared_ptr<ucp_context> context;
    std::chrono::milliseconds timeout{};
    std::size_t binds = 0;
    std::uint64_t salt = 0;  // from every rank's random token: the same everywhere
    std::vector<std::pair<std::size_t, long>> node_peers;
    std::vector<std::string> hosts;  // by rank
    std::vector<int> nodes;          // by rank: the node's number
    std::vector<long> pids;          // by rank
  };

  world(std::unique_ptr<rendezvous::store> owned, rendezvous::store* store, std::size_t rank, std::size_t size,
        std::size_t local, std::chrono::milliseconds timeout)
      : s_(std::make_shared<state>()) {
    if (size == 0) throw invalid_argument("size", "mdring::ucx::world: size must be at least 1");
    if (rank >= size)
      throw invalid_argument(
          "rank", "mdring::ucx::world: rank " + std::to_string(rank) + " is not below size " + std::to_string(size));
    s_->owned = std::move(owned);
    s_->store = store ? store : s_->owned.get();
    s_->rank = rank;
    s_->size = size;
    s_->timeout = timeout;
    s_->context = detail::process_context();
    // Which node each process runs on, through the store.
    const auto deadline = rendezvous::clock::now() + timeout;
    // "node\nib\npid token" (node: "host/boot id"; token: random, for the bind stamps' salt)
    const std::string me = mdring::detail::node_identity() + (mdring::detail::has_infiniband() ? "\n1\n" : "\n0\n") +
                           std::to_string(getpid()) + " " + std::to_string(std::random_device{}());
    const auto all = rendezvous::all_gather(*s_->store, "mdring/ucx/world/node", rank, size, me, deadline);
    std::string tokens;
    for (const auto& a : all) tokens += a.substr(a.rfind(' ') + 1) + ",";
    s_->salt = mdring::detail::fnv1a(tokens);
    std::map<std::string, int> ids;
    std::vector<int> given(size);
    bool ib = true;
    std::vector<long> pids(size);
    s_->hosts.resize(size);
    for (std::size_t r = 0; r < size; ++r) {
      const auto b = all[r].rfind('\n'), a = all[r].rfind('\n', b - 1);
      given[r] = ids.try_emplace(all[r].substr(0, a), int(ids.size())).first->second;
      s_->hosts[r] = all[r].substr(0, std::min(a, all[r].find('/')));
      ib = ib && all[r].substr(a + 1, b - a - 1) == "1";
      pids[r] = std::atol(all[r].c_str() + b + 1);
    }
    s_->layout = layout_from_node_ids(given, rank, ib);
    s_->nodes = given;
    s_->pids = pids;
    // The launcher's LOCAL_WORLD_SIZE wins over host names (containers may differ).
    std::size_t here = 0;
    for (std::size_t r = 0; r < size; ++r) here += given[r] == given[rank];
    s_->local = local ? local : here;
    for (std::size_t r = 0; r < size; ++r)
      if (r != rank && given[r] == given[rank]) s_->node_peers.emplace_back(r, pids[r]);
  }

  std::shared_ptr<state> s_;
};

/// Rank 0 hosts the built-in store: before the job's processes end, call this on
/// every one (collective), so that rank 0 leaves only after the others are done
/// with the store. Bound communicators should be destroyed before it.
inline void wait_to_leave(const world& w, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const std::string key = "mdring/ucx/leave/";
  if (w.rank() != 0) return w.store().set(key + std::to_string(w.rank()), "");
  const auto deadline = rendezvous::clock::now() + timeout;
  for (std::size_t r = 1; r < w.size(); ++r) (void)w.store().get(key + std::to_string(r), deadline);
}

}  // namespace ucx

MDRING_NAMESPACE_END
