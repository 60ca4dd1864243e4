// mdring/transport/threads_world.hpp: the in-process world of the threads
// transport (transport/threads.hpp): its ranks' mailboxes, its first failure, the
// shared-access slots of its dimensions, and run(), which starts its threads.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "shared_access.hpp"
#include "transport.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
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

namespace threads {

namespace detail {

struct message_key {
  std::uint64_t context = 0;
  std::uint32_t dim = 0;
  std::size_t src = 0;
  int tag = 0;
  friend bool operator==(const message_key&, const message_key&) = default;
};

struct send_desc {
  enum : int { idle, posted, taken, done };
  message_key key;
  const void* data = nullptr;
  std::size_t bytes = 0;
  std::atomic<int> state{idle};
  send_desc* next = nullptr;
};

struct mailbox {
  std::mutex m;
  std::condition_variable cv;
  send_desc* head = nullptr;  // FIFO of sends addressed to this rank
  send_desc* tail = nullptr;
  std::uint64_t events = 0;  // bumped on every change that may end a wait
  std::uint64_t next_context = 0;

  void push(send_desc* d) {
    d->next = nullptr;
    if (tail) tail->next = d;
    else head = d;
    tail = d;
  }
  bool unlink(send_desc* d) {
    send_desc* prev = nullptr;
    for (send_desc* c = head; c; prev = c, c = c->next)
      if (c == d) {
        (prev ? prev->next : head) = c->next;
        if (tail == c) tail = prev;
        c->next = nullptr;
        return true;
      }
    return false;
  }
};

}  // namespace detail

class world;

/// One rank's handle on a world: what bind() takes.
struct endpoint {
  world* w = nullptr;    ///< the world
  std::size_t rank = 0;  ///< this rank
};

/// N ranks of one process that communicate through mailboxes; threads::run makes one, or a program makes its own and
/// hands each thread at(rank).
class world {
public:
  /// A world of n ranks (n >= 1).
  explicit world(std::size_t n) : n_(n), boxes_(n ? new detail::mailbox[n] : nullptr), left_(n, 0) {
    if (n == 0) throw invalid_argument("n", "mdring::threads::world: the number of ranks must be at least 1");
  }
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  std::size_t size() const noexcept { return n_; }  ///< ranks in the world

  /// The handle of rank `rank`, to pass to bind() on that rank's thread.
  threads::endpoint at(std::size_t rank) {
    if (rank >= n_)
      throw invalid_argument("rank", "mdring::threads::world::at: rank " + std::to_string(rank) +
                                         " is not below the world's size " + std::to_string(n_));
    return {this, rank};
  }

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }  ///< some rank failed (fail())

  /// Poisons the world: every rank's current and future waits end with peer_failed.
  /// The first failure is the one remembered.
  void fail(std::size_t rank, const std::string& reason) noexcept {
    {
      std::lock_guard lock(fail_m_);
      if (!failed_.load(std::memory_order_relaxed)) {
        failed_rank_ = rank;
        try {
          const wait_status st = received_failure(rank, reason);  // a relayed one names the first to fail
          failed_rank_ = st.failed_rank;
          reason_ = st.reason;
        } catch (...) {}
        failed_.store(true, std::memory_order_release);
      }
    }
    for (std::size_t r = 0; r < n_; ++r) {
      {
        std::lock_guard lock(boxes_[r].m);
        ++boxes_[r].events;
      }
      boxes_[r].cv.notify_all();
    }
  }

  /// The rank that failed first.
  std::size_t failed_rank() const {
    std::lock_guard lock(fail_m_);
    return failed_rank_;
  }
  /// What it said.
  std::string failure_reason() const {
    std::lock_guard lock(fail_m_);
    return reason_;
  }

  detail::mailbox& box(std::size_t r) noexcept { return boxes_[r]; }  ///< rank r's mailbox (the transports')

  /// The control regions (slot and staging buffers, access_region_bytes each) of one
  /// ring (communicator context, dimension, first member), created by the first
  /// member that asks.
  unsigned char* access_regions(std::uint64_t ctx, std::size_t dim, std::size_t first, std::size_t p,
                                std::size_t staging) {
    std::lock_guard lock(ctx_m_);
    auto& r = regions_[{ctx, dim, first}];
    if (!r) {
      const std::size_t bytes = p * mdring::detail::access_region_bytes(staging);
      r.reset(static_cast<unsigned char*>(::operator new(bytes, std::align_val_t{64})));
      std::memset(r.get(), 0, bytes);  // staging starts zeroed, as a node window's (one_shot_line)
      for (std::size_t j = 0; j < p; ++j)
        new (r.get() + j * mdring::detail::access_region_bytes(staging)) mdring::detail::access_slot{};
    }
    return r.get();
  }

  /// Rank `rank` left the world: its function returned or, `died`, threw (run()
  /// says so; a program that runs its own threads may too). Shrink's agreement
  /// (collective/failed_set.hpp) stops waiting for a rank that left; one that died
  /// also fails the shrunk worlds it is a member of (sub_world), where the
  /// survivors' calls then end naming it instead of waiting for the deadline.
  void leave(std::size_t rank, bool died = false) noexcept {
    std::vector<std::pair<std::shared_ptr<world>, std::size_t>> also;
    {
      std::lock_guard lock(survive_m_);
      if (rank < n_) left_[rank] = 1;
      for (auto& [key, sub] : subs_)
        for (std::size_t i = 0; died && i < sub.members.size(); ++i)
          if (sub.members[i] == rank) also.emplace_back(sub.w, i);
    }
    survive_cv_.notify_all();
    for (auto& [w, i] : also) {
      w->fail(i, "rank " + std::to_string(i) + " is gone: its thread ended by an exception");
      w->leave(i, true);
    }
  }
  /// Whether rank `rank` left (leave()).
  bool has_left(std::size_t rank) const {
    std::lock_guard lock(survive_m_);
    return rank < n_ && left_[rank];
  }

  /// Shrink's messages (transport/transport.hpp survives_failures): queued here,
  /// by communicator context, sender, receiver and tag, whatever failed before.
  ///@{
  void survivor_post(std::uint64_t ctx, std::size_t from, std::size_t to, std::uint32_t tag, std::string bytes) {
    {
      std::lock_guard lock(survive_m_);
      survive_q_[{ctx, from, to, tag}].push_back(std::move(bytes));
    }
    survive_cv_.notify_all();
  }
  survivor_message survivor_take(std::uint64_t ctx, std::size_t from, std::size_t to, std::uint32_t tag,
                                 deadline_clock::time_point deadline) {
    std::unique_lock lock(survive_m_);
    for (bool last = false;; last = deadline_clock::now() >= deadline) {
      if (auto it = survive_q_.find({ctx, from, to, tag}); it != survive_q_.end() && !it->second.empty()) {
        survivor_message m{survivor_message::got, std::move(it->second.front())};
        it->second.pop_front();
        return m;
      }
      if (from < n_ && left_[from]) return {survivor_message::gone, {}};
      if (last) return {survivor_message::timeout, {}};
      survive_cv_.wait_until(lock, deadline);
    }
  }
  ///@}

  /// The world of a shrunk communicator (collective/shrink.hpp) over `members`
  /// (ranks of this world; rank i there is members[i]): made by the first survivor
  /// that asks with `key`, shared by the others.
  std::shared_ptr<world> sub_world(const std::string& key, std::span<const std::size_t> members) {
    std::vector<std::size_t> dead;
    std::shared_ptr<world> w;
    {
      std::lock_guard lock(survive_m_);
      auto& sub = subs_[key];
      if (sub.w) return sub.w;
      sub.w = w = std::make_shared<world>(members.size());
      sub.members.assign(members.begin(), members.end());
      for (std::size_t i = 0; i < members.size(); ++i)
        if (members[i] < n_ && left_[members[i]]) dead.push_back(i);  // already gone (leave() missed it)
    }
    for (std::size_t i : dead) {
      w->fail(i, "rank " + std::to_string(i) + " is gone: its thread ended before the shrunk world was made");
      w->leave(i, true);
    }
    return w;
  }

  /// Every rank binds its communicators in the same order (as with MPI), so the
  /// k-th bind on each rank gets context k. The first rank to bind context k records
  /// its topology; the others must match.
  std::uint64_t new_context(std::size_t rank, const std::string& topology) {
    const std::uint64_t ctx = boxes_[rank].next_context++;
    std::lock_guard lock(ctx_m_);
    auto [it, inserted] = topologies_.emplace(ctx, std::make_pair(rank, topology));
    if (!inserted && it->second.second != topology)
      throw topology_error("topology", "mdring::bind: rank " + std::to_string(rank) + " bound \"" + topology +
                                           "\" but rank " + std::to_string(it->second.first) + " bound \"" +
                                           it->second.second + "\" (communicator " + std::to_string(ctx) +
                                           " of this threads::world)");
    return ctx;
  }

private:
  std::size_t n_;
  std::unique_ptr<detail::mailbox[]> boxes_;
  std::atomic<bool> failed_{false};
  mutable std::mutex fail_m_;
  std::size_t failed_rank_ = 0;
  std::string reason_;
  std::mutex ctx_m_;
  std::map<std::uint64_t, std::pair<std::size_t, std::string>> topologies_;
  struct aligned_delete {
    void operator()(unsigned char* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }
  };
  std::map<std::tuple<std::uint64_t, std::size_t, std::size_t>, std::unique_ptr<unsigned char, aligned_delete>>
      regions_;
  mutable std::mutex survive_m_;  // left_, survive_q_, subs_
  std::condition_variable survive_cv_;
  std::vector<char> left_;
  std::map<std::tuple<std::uint64_t, std::size_t, std::size_t, std::uint32_t>, std::deque<std::string>> survive_q_;
  struct shrunk_world {  // sub_world()'s
    std::shared_ptr<world> w;
    std::vector<std::size_t> members;
  };
  std::map<std::string, shrunk_world> subs_;
};

/// Runs f(endpoint) on n threads of a fresh world and joins them. If any rank's f
/// throws, the world is poisoned (so no other rank waits for it), and after the join
/// the first failure's exception is rethrown. A rank whose f returns or throws has
/// left (world::leave): a shrink among the others does not wait for it.
template <class F>
void run(std::size_t n, F&& f) {
  world w(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> pool;
  pool.reserve(n);
  for (std::size_t r = 0; r < n; ++r)
    pool.emplace_back([&, r] {
      try {
        f(w.at(r));
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        w.fail(r, e.what());
      } catch (...) {
        errors[r] = std::current_exception();
        w.fail(r, "an exception that is not a std::exception");
      }
      w.leave(r, errors[r] != nullptr);
    });
  for (auto& t : pool) t.join();
  if (w.failed() && errors[w.failed_rank()]) std::rethrow_exception(errors[w.failed_rank()]);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace threads

MDRING_NAMESPACE_END
