// mdring/transport/ucx.hpp: UCX tagged messages, a UCP worker per communicator.
//
//   auto world = mdring::ucx::world::from_env();
//   auto comm = mdring::bind(mdring::ring<mdring::shm, 4> * mdring::ring<mdring::ethernet>, world);
//
// bind() (collective/bind_ucx.hpp) is collective over the world: each rank takes a worker (one that an
// earlier communicator of this process left cleanly, else a new one: ucx_world.hpp, worker_pool), publishes
// its address and the fingerprint of what it binds (topology, algorithms, options) in the world's store,
// reads everyone's, and connects an endpoint to each (UCX picks the transport: shared memory, cma, tcp,
// InfiniBand verbs; UCX_TLS narrows it). Different fingerprints throw topology_error on every rank. A
// message is one ucp_tag_send_nbx / ucp_tag_recv_nbx; its 64-bit tag holds the kind (data, control, setup,
// survive), the channel (dimension), the sender, the bind's stamp and mdring's tag, so the dimensions never
// mix, and a message sent to a worker's earlier owner (a peer that failed after this rank was done) never
// matches its new owner's receives.
//
// The ranks of a dimension that share a node read each other's buffers in place (node_window.hpp), as over MPI.
// Failures reach every rank without a launcher's help:
//   - a rank that fails sends a control message to all (remote_error there);
//   - a process that dies: its endpoints fail (the connection closes, or keepalive misses it within about
//     250 ms), and the processes of its node see its pid gone (checked every 50 ms while waiting); the
//     survivors get remote_error naming it, not a timeout;
//   - a process that stalls: the deadline (options.timeout), as over MPI.
// Survivors go on with mdring::shrink: its messages (kind survive) flow after a failure; shrunk() wires them.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../fnv.hpp"
#include "../options.hpp"
#include "node_window.hpp"
#include "shared_access.hpp"
#include "transport.hpp"
#include "ucx_requests.hpp"
#include "ucx_exchange.hpp"
#include "ucx_world.hpp"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace ucx {

/// The transport object of one rank in one bound communicator, over a ucx::world.
class transport {
public:
  static constexpr bool same_address_space = false;  ///< a peer's buffers are in another process
  /// One dimension's ranks, as make_channel() returns them.
  struct channel {
    std::size_t id = 0;                  ///< the channel's number in tags
    std::vector<std::size_t> members;    ///< global ranks, by coordinate
    mdring::detail::node_window window;  ///< shared access to the node's ranks of the channel
  };
  using request = detail::ucx_request;  ///< one send or receive in flight

  using address_gather = std::function<std::vector<std::string>(const std::string&)>;  ///< see the constructor

  /// Collective over the world. `fingerprint` (topology and algorithms) must be the same everywhere.
  /// The addresses go through the world's store, or `gather` (every rank's from this one's: shrunk()).
  transport(const world& w, const options& opts, const std::string& fingerprint, address_gather gather = {})
      : shrunk_(bool(gather)),
        world_(w),
        rank_(w.rank()),
        size_(w.size()),
        shared_memory_(opts.shared_memory),
        staging_((opts.tune.shared_staging_bytes + 63) / 64 * 64),
        timeout_(opts.timeout),
        crowded_(mdring::detail::oversubscribed(w.local_size())) {
    if (size_ > detail::max_ranks)
      throw invalid_argument("world", "mdring::ucx: at most 2^24 ranks, not " + std::to_string(size_));
    worker_ = detail::take_worker(w.context());
    try {
      connect(fingerprint, gather);
      post_control();
    } catch (...) {
      free_all(true);
      throw;
    }
  }
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;
  ~transport() { free_all(failed_ || aborted_); }

  std::size_t size() const noexcept { return size_; }  ///< ranks in the world
  std::size_t rank() const noexcept { return rank_; }  ///< this rank
  std::string name() const { return "ucx"; }           ///< "ucx"
  /// Where rank r runs, for error messages (executor/host/core.hpp).
  std::string peer_host(std::size_t r) const { return r < size_ ? world_.hosts()[r] : std::string(); }
  ucp_worker_h worker() const noexcept { return worker_; }    ///< the UCX worker the transport runs on
  const world& get_world() const noexcept { return world_; }  ///< the world it was bound over

  /// Collective: every rank calls it for the same dimensions in the same order.
  channel make_channel(std::size_t dim, std::span<const std::size_t> members, std::size_t my_index) {
    if (channels_ >= detail::max_channels)
      throw invalid_argument("topology", "mdring::ucx: at most 64 dimensions per communicator");
    (void)dim;
    channel ch{channels_++, {members.begin(), members.end()}, {}};
    if (shared_memory_) {
      detail::window_exchange<transport> ex{*this, ch, my_index, shrunk_};  // (a shrunk one's may miss a rank)
      if (ch.window.open(ex, ch.members, my_index, staging_, mdring::detail::oversubscribed(world_.local_size())))
        ex.failed ? void(ch.window = {}) : void(++shared_channels_);
    }
    return ch;
  }

  /// The transport concept's operations (transport/transport.hpp) and shared access (transport/shared_access.hpp).
  ///@{
  bool shared(const channel& ch) const noexcept { return ch.window.shared(); }
  mdring::detail::access_group& group(channel& ch) noexcept { return ch.window.group(); }
  void read(channel& ch, std::size_t j, const void* remote, void* local, std::size_t bytes) {
    ch.window.read(mappings_, j, remote, local, bytes);
  }
  void write(channel& ch, std::size_t j, const void* local, void* remote, std::size_t bytes) {
    ch.window.write(mappings_, j, local, remote, bytes);
  }
  void* local_address(channel& ch, std::size_t j, const void* remote, std::size_t bytes) {
    return ch.window.local_address(mappings_, j, remote, bytes);
  }
  std::size_t mapped_segments() const noexcept { return mappings_.count(); }  ///< peers' memory segments mapped so far
  bool shared_channels() const noexcept { return shared_channels_ != 0; }  ///< whether some channel has shared access

  /// Polled by the shared stages while they wait: a peer's control message, a
  /// failed endpoint, or a peer process of this node that is gone.
  wait_status shared_failure() {
    ucp_worker_progress(worker_);
    if (auto f = poll_failure()) return *f;
    const auto now = deadline_clock::now();
    if (now - last_pid_check_ > std::chrono::milliseconds(50)) {
      last_pid_check_ = now;
      for (const auto& [r, pid] : world_.node_peers())
        if (mdring::detail::process_gone(pid)) return gone(r, "its process ended");
    }
    return wait_status::ok();
  }

  void isend(channel& ch, const void* buf, std::size_t bytes, std::size_t peer, int tag, request& rq) {
    post(ch.members[peer], detail::make_tag(detail::data, ch.id, rank_, stamped(tag)), const_cast<void*>(buf), bytes,
         rq, true);
  }
  void irecv(channel& ch, void* buf, std::size_t bytes, std::size_t peer, int tag, request& rq) {
    post(ch.members[peer], detail::make_tag(detail::data, ch.id, ch.members[peer], stamped(tag)), buf, bytes, rq,
         false);
  }

  wait_status wait_all(std::span<request> rs, deadline_clock::time_point deadline) {
    return wait_until(rs, deadline, false);
  }
  wait_status wait_any(std::span<request> rs, deadline_clock::time_point deadline) {
    return wait_until(rs, deadline, true);
  }
  static bool complete(const request& rq) noexcept { return !rq.pending; }
  ///@}

  /// Cancels what is pending: receives are cancelled and completed (UCX will not
  /// write into the caller's buffers later); sends are released.
  void cancel_all(std::span<request> rs) noexcept {
    for (auto& rq : rs) {
      if (!rq.pending) continue;
      if (rq.recv) {
        ucp_request_cancel(worker_, rq.r);
        const auto until = deadline_clock::now() + std::chrono::milliseconds(200);
        while (ucp_request_check_status(rq.r) == UCS_INPROGRESS && deadline_clock::now() < until)
          ucp_worker_progress(worker_);
      }
      ucp_request_free(rq.r);
      rq = request{};
    }
  }

  /// A process that dies is noticed by its neighbours only (its node, its endpoints): a rank that stops
  /// because of it passes the failure on (collective step 5, transport.hpp relayed_failure).
  static constexpr bool relays_failures = true;

  /// Survives a peer's failure (transport/transport.hpp survives_failures, transport/ucx_exchange.hpp). A
  /// peer is gone when its endpoint failed or, on this node, its process ended.
  ///@{
  void survivor_send(std::size_t peer, const std::string& bytes, std::uint32_t tag) {
    if (peer < size_ && eps_[peer] && !ep_failed_[peer])
      survivors_.send(eps_[peer], detail::make_tag(detail::survive, 0, rank_, stamped(int(tag))), bytes);
  }
  survivor_message survivor_recv(std::size_t peer, std::uint32_t tag, deadline_clock::time_point deadline) {
    return survivors_.receive(worker_, detail::make_tag(detail::survive, 0, peer, stamped(int(tag))), deadline,
                              [&] { return gone(peer); });
  }
  bool gone(std::size_t peer) {
    if (peer >= size_ || peer == rank_) return false;
    if (ucp_worker_progress(worker_), !eps_[peer] || ep_failed_[peer]) return true;
    return world_.node_peer_ended(peer);
  }
  ///@}
  /// This rank's transport over `members` (ranks of this one; this rank must be
  /// one): a new worker, whose address the members exchange by survivor messages.
  std::unique_ptr<transport> shrunk(std::span<const std::size_t> members, const options& o,
                                    const std::string& fingerprint) {
    const auto me = std::size_t(std::find(members.begin(), members.end(), rank_) - members.begin());
    if (me == members.size()) throw invalid_argument("members", "mdring::ucx: this rank is not among the survivors");
    const std::uint64_t h = mdring::detail::fnv1a(fingerprint + "|" + std::to_string(stamp_));
    const auto tag = std::uint32_t(0x8000 | (h & 0x7fff));  // apart from the agreement's (below 0x8000)
    const auto deadline = deadline_clock::now() + timeout_;
    return std::make_unique<transport>(world_.subset(members, me, h), o, fingerprint, [&](const std::string& mine) {
      return all_gather_among(*this, members, me, mine, tag, deadline);
    });
  }

  /// Tells every other rank that this one failed; they stop waiting with remote_error.
  void abort(const std::string& reason) noexcept {
    if (aborted_) return;
    aborted_ = true;
    try {
      reason_ = reason.substr(0, 1000);
    } catch (...) {}
    std::vector<void*> sent;
    for (std::size_t r = 0; r < size_; ++r) {
      if (r == rank_ || !eps_[r] || ep_failed_[r]) continue;
      ucp_request_param_t prm{};
      ucs_status_ptr_t sp = ucp_tag_send_nbx(eps_[r], reason_.data(), reason_.size(),
                                             detail::make_tag(detail::control, 0, rank_, stamped(0)), &prm);
      if (UCS_PTR_IS_PTR(sp)) sent.push_back(sp);
    }
    // Give them up to 200 ms to leave (this process may be about to exit).
    const auto until = deadline_clock::now() + std::chrono::milliseconds(200);
    for (void* r : sent) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS && deadline_clock::now() < until)
        ucp_worker_progress(worker_);
      ucp_request_free(r);
    }
  }

private:
  template <class>
  friend struct detail::window_exchange;

  // Worker addresses and fingerprints through the store (or gather: a rank it has
  // none of is gone from the start), then one endpoint per rank.
  void connect(const std::string& fingerprint, const address_gather& gather) {
    ucp_address_t* addr = nullptr;
    std::size_t len = 0;
    ucx::detail::check(ucp_worker_get_address(worker_, &addr, &len), "ucp_worker_get_address");
    const std::uint64_t h = mdring::detail::fnv1a(fingerprint);
    std::string mine(sizeof h, '\0');
    std::memcpy(mine.data(), &h, sizeof h);
    mine.append(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    const auto deadline = deadline_clock::now() + timeout_;
    const auto ticket = world_.next_bind();
    const std::string& prefix = ticket.prefix;
    stamp_ = ticket.stamp;
    const auto all = gather ? gather(mine)
                            : rendezvous::all_gather(world_.store(), prefix + "address", rank_, size_, mine, deadline);
    // Rank 0 hosts the store: it goes on (or throws and maybe exits) only once
    // every rank has read every address.
    if (!gather && rank_ != 0) world_.store().set(prefix + "read/" + std::to_string(rank_), "");
    for (std::size_t r = 1; !gather && rank_ == 0 && r < size_; ++r)
      (void)world_.store().get(prefix + "read/" + std::to_string(r), deadline);
    for (std::size_t r = 0; r < size_; ++r)
      if (!(gather && all[r].empty()) && (all[r].size() < sizeof h || std::memcmp(all[r].data(), &h, sizeof h) != 0))
        throw topology_error("topology", "mdring::bind: rank " + std::to_string(r) +
                                             " of the UCX world bound a different topology, algorithms or options "
                                             "(this rank: \"" +
                                             fingerprint + "\")");
    eps_.assign(size_, nullptr);
    ep_failed_.assign(size_, 0);
    peers_.resize(size_);
    // A shrunk one's member of this node that died after sending its address: no endpoint
    // (UCX's attach to its memory fails, "shmat ... Invalid argument"; best not tried).
    const std::vector<char> dead = gather ? world_.ended_node_peers() : std::vector<char>(size_, 0);
    for (std::size_t r = 0; r < size_; ++r) {
      peers_[r] = {this, r};
      ucp_ep_params_t ep{};
      ep.field_mask =
          UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = all[r].empty() ? nullptr : reinterpret_cast<const ucp_address_t*>(all[r].data() + sizeof h);
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &transport::on_ep_error;
      ep.err_handler.arg = &peers_[r];
      const ucs_status_t st = all[r].empty() || dead[r] ? UCS_ERR_UNREACHABLE : ucp_ep_create(worker_, &ep, &eps_[r]);
      // A shrunk communicator's member gone after the agreement: its first call names it.
      if (st != UCS_OK && gather) eps_[r] = nullptr, ep_failed_[r] = 1, ep_status_ = st, ++ep_errors_;
      else ucx::detail::check(st, "ucp_ep_create");
    }
  }

  struct peer_ref {
    transport* t = nullptr;
    std::size_t rank = 0;
  };
  static void on_ep_error(void* arg, ucp_ep_h, ucs_status_t st) {
    auto* p = static_cast<peer_ref*>(arg);
    if (!p->t->ep_failed_[p->rank]) p->t->ep_status_ = st;
    p->t->ep_failed_[p->rank] = 1;
    ++p->t->ep_errors_;
  }

  void post_control() {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    control_req_ = ucp_tag_recv_nbx(worker_, control_buf_, sizeof control_buf_ - 1,
                                    detail::make_tag(detail::control, 0, 0, stamped(0)),
                                    detail::kind_mask | detail::stamp_mask, &prm);
    if (UCS_PTR_IS_ERR(control_req_)) {
      control_req_ = nullptr;
      ucx::detail::check(UCS_PTR_STATUS(control_req_), "ucp_tag_recv_nbx");
    }
  }

  void post(std::size_t peer, ucp_tag_t tag, void* buf, std::size_t bytes, request& rq, bool send) {
    rq = request{nullptr, false, !send, peer, bytes};
    ucp_request_param_t prm{};
    ucs_status_ptr_t sp;
    if (send) {
      if (!eps_[peer]) return;  // gone (connect): the wait reports it
      sp = ucp_tag_send_nbx(eps_[peer], buf, bytes, tag, &prm);
    } else {
      prm.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      sp = ucp_tag_recv_nbx(worker_, buf, bytes, tag, detail::full_mask, &prm);
    }
    if (UCS_PTR_IS_ERR(sp)) detail::message_failed(rq, UCS_PTR_STATUS(sp), rank_, &world_.hosts());
    if (sp) {
      rq.r = sp;
      rq.pending = true;
    }
  }

  // Completes rq if its message is done (true); throws if it failed.
  bool test(request& rq) { return detail::test_request(rq, rank_, &world_.hosts()); }

  // Polls until the requests are done (any: one of them). Spins, yielding every 64
  // polls; on a node with more ranks than cores (crowded_) it yields at every poll
  // instead, the rank it waits for may need the core, and after 64 polls in a row
  // that found nothing naps (20 us, then 100 us) so that a rank waiting for a peer
  // still computing leaves the core to it.
  wait_status wait_until(std::span<request> rs, deadline_clock::time_point deadline, bool any) {
    unsigned idle = 0;
    for (unsigned spin = 0;; ++spin) {
      const bool moved = ucp_worker_progress(worker_) != 0;
      bool all = true, some = false;
      for (auto& rq : rs) {
        if (!rq.pending) continue;
        if (test(rq)) some = true;
        else all = false;
      }
      if (all || (any && some)) return wait_status::ok();
      if (auto f = poll_failure()) return *f;
      if (crowded_ || (spin & 63) == 63) {
        // A dead process of this node first, then the deadline (a test polls too, and a
        // peer's death may reach no endpoint of ours: test_ucx_faults once waited 10 s).
        if (auto f = shared_failure(); f.kind != wait_status::done) return f;
        if (deadline_clock::now() >= deadline) {
          for (std::size_t i = 0; i < rs.size(); ++i)
            if (rs[i].pending) return wait_status{wait_status::timeout, i, 0, {}};
        }
        idle = moved ? 0 : idle + 1;
        if (!crowded_ || idle < 64) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(idle < 256 ? 20 : 100));
      }
    }
  }

  std::optional<wait_status> poll_failure() {
    if (failed_) return failure_;
    if (control_req_ && ucp_request_check_status(control_req_) != UCS_INPROGRESS) {
      ucp_tag_recv_info_t info{};
      const ucs_status_t st = ucp_tag_recv_request_test(control_req_, &info);
      ucp_request_free(control_req_);
      control_req_ = nullptr;
      if (st == UCS_OK || st == UCS_ERR_MESSAGE_TRUNCATED) {
        control_buf_[std::min(info.length, sizeof control_buf_ - 1)] = '\0';
        failed_ = true;
        failure_ = received_failure(detail::sender_of(info.sender_tag), control_buf_);
        return failure_;
      }
    }
    if (ep_errors_ != seen_ep_errors_) {
      seen_ep_errors_ = ep_errors_;
      for (std::size_t r = 0; r < size_; ++r)
        if (ep_failed_[r])
          return gone(r, std::string("its connection failed (UCX: ") + ucs_status_string(ep_status_) + ")");
    }
    return std::nullopt;
  }
  std::string peer_where(std::size_t r) const {
    const std::string h = peer_host(r);
    return h.empty() ? "" : " (host " + h + ")";
  }
  wait_status gone(std::size_t r, const std::string& why) {
    failed_ = true;
    failure_ = wait_status{wait_status::peer_failed, 0, r,
                           "rank " + std::to_string(r) + peer_where(r) + " is gone: " + why + " (killed, or crashed?)"};
    return failure_;
  }

  void free_all(bool force) noexcept {
    if (!worker_) return;
    if (control_req_) {
      ucp_request_cancel(worker_, control_req_);
      while (ucp_request_check_status(control_req_) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(control_req_);
      control_req_ = nullptr;
    }
    survivors_.finish(worker_, std::chrono::milliseconds(force ? 100 : 1000));
    const bool closed = detail::close_endpoints(worker_, eps_, ep_failed_, force);
    mappings_.release();
    // A clean end leaves the worker to the next bind; after a failure, or an endpoint
    // not closed in time (its error handler points here), it goes.
    if (!(force || failed_ || !closed) && detail::give_back_worker(worker_)) worker_ = nullptr;
    if (worker_) ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }

  // mdring's tag (16 bits) under the bind's stamp.
  std::uint32_t stamped(int tag) const noexcept { return (stamp_ << 16) | (std::uint32_t(tag) & 0xffff); }

  bool shrunk_ = false;  // made by shrunk(): a member may be gone already
  world world_;
  std::size_t rank_ = 0, size_ = 0;
  bool shared_memory_ = true;
  std::size_t staging_ = 0;
  std::chrono::milliseconds timeout_;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<peer_ref> peers_;
  std::vector<char> ep_failed_;
  ucs_status_t ep_status_ = UCS_OK;
  std::size_t ep_errors_ = 0, seen_ep_errors_ = 0;
  std::size_t channels_ = 0, shared_channels_ = 0;
  std::uint32_t setup_seq_ = 0;
  std::uint32_t stamp_ = 0;  // this bind's (world::next_bind)
  mdring::detail::segment_mappings mappings_;
  detail::survivor_messages survivors_;
  deadline_clock::time_point last_pid_check_{};
  bool crowded_ = false;  // more ranks on this node than cores (wait_until)
  void* control_req_ = nullptr;
  char control_buf_[1024] = {};
  bool aborted_ = false, failed_ = false;
  std::string reason_;
  wait_status failure_;
};

}  // namespace ucx

static_assert(transport<ucx::transport>);
static_assert(waits_for_any<ucx::transport>);
static_assert(shared_access_transport<ucx::transport>);
static_assert(maps_peer_memory<ucx::transport>);
static_assert(survives_failures<ucx::transport>);

MDRING_NAMESPACE_END
