// mdring/transport/threads.hpp: N ranks as N threads of one process.
//
// The embedded transport: no MPI needed, so it is what the demo and most unit tests
// run on, and what a program uses to reduce across worker threads.
//
//   mdring::threads::run(8, [&](mdring::threads::endpoint ep) {      // 8 threads
//     auto comm = mdring::bind(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm>, ep);
//     mdring::all_reduce(comm, data.data(), data.size(), mdring::sum);
//   });
//
// Messages are rendezvous: isend publishes (pointer, size) in the receiver's
// mailbox, and the receiver copies straight from the sender's buffer once; the send
// completes when that copy is done. A world is poisoned by the first failure (a
// timeout, a bad argument, an exception escaping run()'s function): every rank
// waiting in it wakes up with remote_error instead of waiting for a dead peer.
#pragma once

#include "../config.hpp"
#include "../topology/runtime.hpp"
#include "../error.hpp"
#include "shared_access.hpp"
#include "transport.hpp"
#include "threads_world.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// The in-process transport: N ranks as N threads of one process (`threads::run`, `threads::endpoint`).
namespace threads {

/// The transport object of one rank in one bound communicator.
class transport {
public:
  /// One dimension's ranks, as make_channel() returns them.
  struct channel {
    std::uint32_t dim = 0;               ///< executed dimension
    std::vector<std::size_t> members;    ///< global ranks, by coordinate
    std::size_t index = 0;               ///< this rank's coordinate
    mdring::detail::access_group group;  ///< shared access (all threads share memory)
  };

  /// Shared access: every dimension of threads has it, and peers' pointers are
  /// dereferenced directly (no copy into scratch).
  static constexpr bool same_address_space = true;

  /// One send or receive in flight.
  struct request {
    /// What the request is.
    enum kind_t { none, send, recv };
    kind_t kind = none;    ///< send, recv, or none (idle)
    std::size_t peer = 0;  ///< global rank of the other side
    /// send
    detail::send_desc desc;
    bool sent = false;  ///< desc reached done, as this rank's last wait saw it (complete())
    /// recv
    detail::message_key key;
    /// recv: the buffer, its bytes, and whether the message has been copied in.
    ///@{
    void* buf = nullptr;
    std::size_t bytes = 0;
    bool done = false;
    ///@}
  };

  /// Rank ep.rank of ep's world; `topology`, the bound topology, must match every rank's; shared access on when
  /// `shared_memory`, `staging` bytes per staging buffer.
  transport(endpoint ep, const std::string& topology, bool shared_memory = true,
            std::size_t staging = std::size_t(16) << 10)
      : w_(ep.w),
        rank_(ep.rank),
        context_(ep.w->new_context(ep.rank, topology)),
        shared_memory_(shared_memory),
        staging_((staging + 63) / 64 * 64) {}

  std::size_t size() const noexcept { return w_->size(); }  ///< ranks in the world
  std::size_t rank() const noexcept { return rank_; }       ///< this rank
  std::string name() const { return "threads"; }            ///< "threads"
  world& get_world() const noexcept { return *w_; }         ///< the world the ranks share

  /// The channel of dimension `dim`: members[j] is the global rank of coordinate j, `my_index` this rank's.
  channel make_channel(std::size_t dim, std::span<const std::size_t> members, std::size_t my_index) {
    channel ch{static_cast<std::uint32_t>(dim), {members.begin(), members.end()}, my_index, {}};
    if (shared_memory_ && members.size() <= mdring::detail::access_group::max_ranks) {
      auto* regions = w_->access_regions(context_, dim, members[0], members.size(), staging_);
      std::vector<mdring::detail::access_slot*> ptrs;
      for (std::size_t j = 0; j < members.size(); ++j)
        ptrs.push_back(reinterpret_cast<mdring::detail::access_slot*>(
            regions + j * mdring::detail::access_region_bytes(staging_)));
      ch.group = mdring::detail::access_group(ptrs.data(), members.size(), my_index, staging_, false,
                                              mdring::detail::oversubscribed(w_->size()));
    }
    return ch;
  }

  /// Shared access (transport/shared_access.hpp): whether the channel has it, its access group, a peer's failure, and
  /// copies to and from a peer's memory (memcpy: one address space).
  ///@{
  bool shared(const channel& ch) const noexcept { return ch.group.size() == ch.members.size(); }
  mdring::detail::access_group& group(channel& ch) noexcept { return ch.group; }
  wait_status shared_failure() const { return w_->failed() ? failure() : wait_status::ok(); }
  void read(channel&, std::size_t, const void* remote, void* local, std::size_t bytes) {
    if (bytes) std::memcpy(local, remote, bytes);
  }
  void write(channel&, std::size_t, const void* local, void* remote, std::size_t bytes) {
    if (bytes) std::memcpy(remote, local, bytes);
  }
  ///@}

  /// Posts a send or a receive of `bytes` to or from coordinate `peer` of the channel, with `tag`, into `r`
  /// (transport/transport.hpp).
  ///@{
  void isend(channel& ch, const void* buf, std::size_t bytes, std::size_t peer, int tag, request& r) {
    r.kind = request::send;
    r.peer = ch.members[peer];
    r.desc.key = {context_, ch.dim, rank_, tag};
    r.desc.data = buf;
    r.desc.bytes = bytes;
    r.desc.state.store(detail::send_desc::posted, std::memory_order_relaxed);
    r.sent = false;
    auto& box = w_->box(r.peer);
    {
      std::lock_guard lock(box.m);
      box.push(&r.desc);
      ++box.events;
    }
    box.cv.notify_all();
  }

  void irecv(channel& ch, void* buf, std::size_t bytes, std::size_t peer, int tag, request& r) {
    r.kind = request::recv;
    r.peer = ch.members[peer];
    r.key = {context_, ch.dim, r.peer, tag};
    r.buf = buf;
    r.bytes = bytes;
    r.done = false;
  }
  ///@}

  /// Waits until every request in rs completes, a peer fails or the deadline passes.
  wait_status wait_all(std::span<request> rs, deadline_clock::time_point deadline) {
    return wait_until(rs, deadline, false);
  }
  /// Returns once at least one request that was pending in rs has completed (at
  /// once when none was); complete() says which.
  wait_status wait_any(std::span<request> rs, deadline_clock::time_point deadline) {
    return wait_until(rs, deadline, true);
  }
  /// What this rank's last wait saw: a send that the receiver finishes copying
  /// becomes complete at the sender's next wait, not in between (see transport.hpp).
  static bool complete(const request& r) noexcept {
    switch (r.kind) {
      case request::send:
        return r.sent;
      case request::recv:
        return r.done;
      default:
        return true;
    }
  }

  /// Withdraws pending sends (waiting out a copy already under way) and forgets
  /// pending receives, so no peer can later touch this rank's buffers.
  void cancel_all(std::span<request> rs) noexcept {
    for (auto& r : rs) {
      if (r.kind == request::send) {
        auto& box = w_->box(r.peer);
        {
          std::lock_guard lock(box.m);
          if (r.desc.state.load(std::memory_order_acquire) == detail::send_desc::posted) {
            box.unlink(&r.desc);
            r.desc.state.store(detail::send_desc::idle, std::memory_order_relaxed);
          }
        }
        while (r.desc.state.load(std::memory_order_acquire) == detail::send_desc::taken) std::this_thread::yield();
      }
      r.kind = request::none;
    }
  }

  /// Tells every other rank of the world that this one failed.
  void abort(const std::string& reason) noexcept { w_->fail(rank_, reason); }

  /// Survives a peer's failure (transport/transport.hpp survives_failures): shrink's
  /// messages go through the world's queues of this communicator, a rank that left
  /// the world is gone, and the survivors' transport is in a world of their own
  /// (world::sub_world), which the new transport keeps alive.
  ///@{
  void survivor_send(std::size_t peer, const std::string& bytes, std::uint32_t tag) {
    w_->survivor_post(context_, rank_, peer, tag, bytes);
  }
  survivor_message survivor_recv(std::size_t peer, std::uint32_t tag, deadline_clock::time_point deadline) {
    return w_->survivor_take(context_, peer, rank_, tag, deadline);
  }
  bool gone(std::size_t peer) const { return w_->has_left(peer); }
  std::unique_ptr<transport> shrunk(std::span<const std::size_t> members, const options& o,
                                    const std::string& fingerprint) {
    const auto me = std::size_t(std::find(members.begin(), members.end(), rank_) - members.begin());
    if (me == members.size())
      throw invalid_argument("members", "mdring::threads: this rank is not among the survivors");
    auto sub = w_->sub_world(std::to_string(context_) + "|" + fingerprint, members);
    auto t =
        std::make_unique<transport>(endpoint{sub.get(), me}, fingerprint, o.shared_memory, o.tune.shared_staging_bytes);
    t->owned_ = std::move(sub);
    return t;
  }
  ///@}

private:
  wait_status wait_until(std::span<request> rs, deadline_clock::time_point deadline, bool any) {
    auto& me = w_->box(rank_);
    std::size_t pending = 0;
    for (auto& r : rs) pending += !complete(r);
    for (;;) {
      std::uint64_t seen;
      {
        std::lock_guard lock(me.m);
        seen = me.events;
      }
      std::size_t left = 0;
      for (auto& r : rs) left += !progress(r);
      if (left == 0 || (any && left < pending)) return wait_status::ok();
      if (w_->failed()) return failure();
      std::unique_lock lock(me.m);
      const bool woke = me.cv.wait_until(lock, deadline, [&] { return me.events != seen; });
      if (!woke) {
        lock.unlock();
        left = 0;
        for (auto& r : rs) left += !progress(r);
        if (left == 0 || (any && left < pending)) return wait_status::ok();
        for (std::size_t i = 0; i < rs.size(); ++i)
          if (!complete(rs[i])) return wait_status{wait_status::timeout, i, 0, {}};
        return wait_status::ok();
      }
    }
  }

  wait_status failure() const {
    return wait_status{wait_status::peer_failed, 0, w_->failed_rank(), w_->failure_reason()};
  }

  // Moves r on as far as it can go now (a receive copies a posted send; a send
  // notes that its receiver copied it) and says whether it is complete.
  bool progress(request& r) {
    if (r.kind == request::recv && !r.done) try_receive(r);
    if (r.kind == request::send && !r.sent)
      r.sent = r.desc.state.load(std::memory_order_acquire) == detail::send_desc::done;
    return complete(r);
  }

  void try_receive(request& r) {
    auto& me = w_->box(rank_);
    detail::send_desc* d = nullptr;
    {
      std::lock_guard lock(me.m);
      for (auto* c = me.head; c; c = c->next)
        if (c->key == r.key) {
          d = c;
          break;
        }
      if (!d) return;
      me.unlink(d);
      d->state.store(detail::send_desc::taken, std::memory_order_relaxed);
    }
    const std::size_t sent = d->bytes;
    if (sent == r.bytes && sent) std::memcpy(r.buf, d->data, sent);
    auto& box = w_->box(r.peer);
    {
      std::lock_guard lock(box.m);
      d->state.store(detail::send_desc::done, std::memory_order_release);  // d may vanish now
      ++box.events;
    }
    box.cv.notify_all();
    if (sent != r.bytes)
      throw transport_error("mdring::threads: rank " + std::to_string(r.peer) + " sent " + std::to_string(sent) +
                                " bytes but rank " + std::to_string(rank_) + " expected " + std::to_string(r.bytes) +
                                ": the ranks passed different counts, types or roots to the same collective",
                            0);
    r.done = true;
  }

  std::shared_ptr<world> owned_;  // a shrunk communicator's world (shrunk())
  world* w_;
  std::size_t rank_;
  std::uint64_t context_;
  bool shared_memory_;
  std::size_t staging_;
};

}  // namespace threads

static_assert(transport<threads::transport>);
static_assert(waits_for_any<threads::transport>);
static_assert(shared_access_transport<threads::transport>);
static_assert(survives_failures<threads::transport>);

MDRING_NAMESPACE_END
