// mdring/executor/progress.hpp: the host executor of nonblocking calls, and the
// progress agent that moves them on while the caller computes.
//
// Every communicator has one host_executor. Calls on it run one after the other,
// in the order this rank issued them (every rank issues them in the same order,
// as with MPI), which is what keeps the engine's tags, scratch and request slots
// private to one call at a time:
//
//   - a blocking call with nothing in flight runs at once on the caller's thread,
//     to completion (no queue, no extra thread, no allocation);
//   - a nonblocking call is queued as a call_state: its program and its cursor
//     (executor/host/cursor.hpp). Whoever drives the executor moves the call at
//     the head of the queue as far as it can go without waiting, then returns;
//   - a blocking call issued while others are in flight is queued too, and waited.
//
// Who drives: a wait()/test() of the user's drives its executor itself; with
// progress_mode::agent a process-wide thread (progress_agent) also drives every
// executor that has calls in flight and no thread waiting on it, and sleeps on a
// condition variable when none has calls in flight. Both back off (yield, then
// short sleeps up to 100 us) while nothing moves, so a call in flight costs
// little CPU while the peers are not there yet.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../transport/transport.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Pauses a polling loop: yields while it is young, then sleeps, longer the longer
// nothing moved (up to 100 us). moved = true starts over.
class backoff {
public:
  void pause(bool moved) {
    if (moved) {
      idle_ = 0;
      return;
    }
    if (++idle_ < 32) return std::this_thread::yield();
    const unsigned us = idle_ < 40 ? 10 : idle_ < 60 ? 30 : 100;
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

private:
  unsigned idle_ = 0;
};

// True on a thread that is running mdring calls right now (an executor's driver):
// the MPI interposer sends MPI calls made from there to MPI itself.
inline int& executing_depth() noexcept {
  static thread_local int depth = 0;
  return depth;
}
struct executing {
  executing() noexcept { ++executing_depth(); }
  ~executing() { --executing_depth(); }
  executing(const executing&) = delete;
  executing& operator=(const executing&) = delete;
};

// One call: how to move it on, and how it ended.
struct call_state {
  virtual ~call_state() = default;
  // Moves the call on: to its end when block, else as far as it goes without
  // waiting. True once it has completed (successfully or with `error` set). Sets
  // `moved` when a step passed.
  virtual bool advance(bool block) = 0;

  bool moved = false;
  std::exception_ptr error;
  std::atomic<bool> done{false};

  // request::on_complete: f(error) once, outside the executor's locks, before
  // `done` is set (so a wait returns only after f has); at once, on the caller's
  // thread, when the call has already been notified. An exception from f is dropped.
  void on_complete(std::function<void(std::exception_ptr)> f) {
    std::unique_lock l(cb_m_);
    if (!notified_) return void(callback_ = std::move(f));
    l.unlock();
    run(f);
  }
  // The call has completed (its error is set): its callback, then `done`.
  void notify() {
    std::function<void(std::exception_ptr)> f;
    {
      std::lock_guard l(cb_m_);
      notified_ = true;
      f = std::move(callback_);
    }
    if (f) run(f);
    done.store(true, std::memory_order_release);
  }

private:
  void run(const std::function<void(std::exception_ptr)>& f) noexcept {
    try {
      f(error);
    } catch (...) {}
  }
  std::mutex cb_m_;
  std::function<void(std::exception_ptr)> callback_;
  bool notified_ = false;
};

class host_executor;

// The process-wide progress thread, started at the first call that needs it.
class progress_agent {
public:
  static progress_agent& instance() {
    static progress_agent a;
    return a;
  }
  // e has calls in flight: drive it until it has none.
  void add(std::shared_ptr<host_executor> e);

  ~progress_agent() {
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (th_.joinable()) th_.join();
  }

private:
  progress_agent() = default;
  void run();

  std::mutex m_;
  std::condition_variable cv_;
  static constexpr std::chrono::microseconds grace{50};
  std::vector<std::shared_ptr<host_executor>> active_;
  std::thread th_;
  bool stop_ = false;
};

class host_executor : public std::enable_shared_from_this<host_executor> {
public:
  explicit host_executor(progress_mode mode) : mode_(mode) {}
  host_executor(const host_executor&) = delete;
  host_executor& operator=(const host_executor&) = delete;
  ~host_executor() = default;  // the owner drains first

  progress_mode mode() const noexcept { return mode_; }

  // A blocking call: f() at once on this thread when nothing is in flight (true),
  // else nothing (false: the caller queues it). f's exceptions propagate.
  template <class F>
  bool run_now(F&& f) {
    std::unique_lock l(run_m_);
    if (pending_.load(std::memory_order_acquire) != 0) return false;
    executing e;
    f();
    return true;
  }

  // Queues a call; it runs when the calls before it have.
  std::shared_ptr<call_state> submit(std::shared_ptr<call_state> c) {
    {
      std::lock_guard l(q_m_);
      queue_.push_back(c);
    }
    if (pending_.fetch_add(1, std::memory_order_acq_rel) == 0) touch();
    if (mode_ == progress_mode::agent) progress_agent::instance().add(shared_from_this());
    return c;
  }

  bool busy() const noexcept { return pending_.load(std::memory_order_acquire) != 0; }

  // Moves the calls in flight on, if no other thread is doing so right now: the
  // call at the head of the queue as far as it goes, the next one when it
  // completes. True when something moved (a step passed or a call completed).
  // The calls that completed meanwhile are notified after the lock is released:
  // their on_complete callbacks run, then they are done (see notify_completed).
  bool try_step() {
    bool moved = false;
    {
      std::unique_lock l(run_m_, std::try_to_lock);
      if (!l || !busy()) return false;
      executing e;
      for (;;) {
        std::shared_ptr<call_state> c;
        {
          std::lock_guard q(q_m_);
          if (queue_.empty()) break;
          c = queue_.front();
        }
        c->moved = false;
        const bool done = c->advance(false);
        moved |= c->moved;
        if (!done) break;
        {
          std::lock_guard q(q_m_);
          queue_.pop_front();
        }
        moved = true;
        {
          std::lock_guard n(n_m_);
          completed_.push_back(std::move(c));
        }
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
    notify_completed();
    return moved;
  }

  // A thread is waiting in wait() or drain(), and drives the calls itself: the
  // agent leaves this executor alone meanwhile (two threads taking turns on one
  // call would only hand it back and forth).
  bool has_waiter() const noexcept { return waiters_.load(std::memory_order_relaxed) != 0; }

  // When the caller last handed the calls in flight over: the first call issued
  // after a quiet spell, or the last waiting thread leaving.
  deadline_clock::time_point touched() const noexcept {
    return deadline_clock::time_point(deadline_clock::duration(touched_.load(std::memory_order_relaxed)));
  }
  void touch() noexcept { touched_.store(deadline_clock::now().time_since_epoch().count(), std::memory_order_relaxed); }

  // Until c has completed (its error stays in c).
  void wait(const call_state& c) {
    waiting w(*this);
    backoff b;
    while (!c.done.load(std::memory_order_acquire)) {
      const bool moved = try_step();
      if (!c.done.load(std::memory_order_acquire)) b.pause(moved);
    }
  }
  // One attempt to move things on; whether c has completed.
  bool test(const call_state& c) {
    if (!c.done.load(std::memory_order_acquire)) try_step();
    return c.done.load(std::memory_order_acquire);
  }
  // Until nothing is in flight (what the communicator's destructor and move do).
  void drain() noexcept {
    waiting w(*this);
    backoff b;
    while (busy()) b.pause(try_step());
    while (notified_elsewhere()) b.pause(false);  // another thread runs the last callbacks
  }

private:
  // Completed calls whose callbacks another thread has still to run.
  bool notified_elsewhere() {
    notify_completed();
    std::lock_guard n(n_m_);
    return notifier_ != std::thread::id() && notifier_ != std::this_thread::get_id();
  }

  // Notifies the completed calls in completion order, one thread at a time: two
  // threads that each completed calls (the agent and one in wait) would otherwise
  // run their callbacks side by side, a later call's before an earlier one's. The
  // thread that finds another notifying leaves its calls to that one, which goes on
  // until none is left (its own wait then sees `done` set by the other thread). A
  // callback that makes a blocking call on this communicator notifies from within.
  void notify_completed() {
    const auto me = std::this_thread::get_id();
    for (;;) {
      std::shared_ptr<call_state> c;
      {
        std::lock_guard n(n_m_);
        if (notifier_ != std::thread::id() && notifier_ != me) return;
        if (completed_.empty()) {
          notifier_ = std::thread::id();
          return;
        }
        notifier_ = me;
        c = std::move(completed_.front());
        completed_.pop_front();
      }
      c->notify();
    }
  }

  // Counts a waiting thread; when the last one leaves, the agent gives the caller
  // a grace period again (wait_all waits for one request after another).
  struct waiting {
    host_executor& e;
    explicit waiting(host_executor& ex) : e(ex) { e.waiters_.fetch_add(1, std::memory_order_relaxed); }
    ~waiting() {
      if (e.waiters_.fetch_sub(1, std::memory_order_relaxed) == 1) e.touch();
    }
  };

  progress_mode mode_;
  std::mutex run_m_;  // held by whoever runs this communicator's calls
  std::mutex q_m_;
  std::deque<std::shared_ptr<call_state>> queue_;
  std::atomic<std::size_t> pending_{0};                // queued or running
  std::mutex n_m_;                                     // guards the two below
  std::deque<std::shared_ptr<call_state>> completed_;  // not yet notified, in order
  std::thread::id notifier_;                           // the thread notifying them
  std::atomic<unsigned> waiters_{0};                   // threads in wait() or drain()
  std::atomic<deadline_clock::rep> touched_{0};
};

inline void progress_agent::add(std::shared_ptr<host_executor> e) {
  bool was_idle = false;
  {
    std::lock_guard l(m_);
    if (stop_) return;
    was_idle = active_.empty();
    if (std::find(active_.begin(), active_.end(), e) == active_.end()) active_.push_back(std::move(e));
    if (!th_.joinable()) th_ = std::thread([this] { run(); });
  }
  // Only an idle agent is woken: a busy one finds e in its next round, and waking
  // it for every call issued would cost a context switch each (and e is fresh).
  if (was_idle) cv_.notify_one();
}

inline void progress_agent::run() {
  std::vector<std::shared_ptr<host_executor>> round;
  backoff b;
  for (;;) {
    {
      std::unique_lock l(m_);
      // An executor leaves the list once idle; submit() adds it again after
      // queueing, so a call queued meanwhile is never missed.
      std::erase_if(active_, [](const auto& e) { return !e->busy(); });
      cv_.wait(l, [&] { return stop_ || !active_.empty(); });
      if (stop_) return;
      round = active_;
    }
    // An executor whose calls were issued moments ago is left to its caller for
    // a grace period: a caller that waits at once drives its calls itself, and an
    // agent that took the executor's lock just then (and lost its core while
    // holding it, when threads outnumber cores) would only delay it. One with a
    // thread waiting on it is that thread's to drive.
    bool moved = false, fresh = false;
    std::size_t driven = 0;
    const auto now = deadline_clock::now();
    for (auto& e : round) {
      if (e->has_waiter()) continue;
      if (now - e->touched() < grace) {
        fresh = true;
        continue;
      }
      ++driven;
      try {  // nothing may leave the agent's thread: a call's failure is its own (advance keeps it)
        moved |= e->try_step();
      } catch (...) {}
    }
    round.clear();
    if (driven) {
      b.pause(moved);
      continue;
    }
    // Nothing to drive now: sleep until the grace period ends, and look again
    // every millisecond while callers drive their own.
    std::unique_lock l(m_);
    cv_.wait_for(l, fresh ? std::chrono::microseconds(grace) : std::chrono::microseconds(1000), [&] { return stop_; });
  }
}

}  // namespace detail

MDRING_NAMESPACE_END
