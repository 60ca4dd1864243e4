// mdring/collective/request.hpp: the handle of a nonblocking collective.
//
//   std::vector<mdring::request> reqs;
//   for (auto& b : buckets)                       // as gradients become ready
//     reqs.push_back(mdring::iall_reduce(comm, b.data(), b.size(), mdring::avg));
//   compute_more();                               // communication proceeds meanwhile
//   mdring::wait_all(reqs);                       // or reqs[i].wait(), reqs[i].test()
//
// As with MPI's nonblocking collectives:
//   - every rank issues the collectives of one communicator in the same order
//     (blocking and nonblocking ones together); they complete in that order;
//   - the buffers belong to the call until it has completed: do not read recvbuf
//     or write sendbuf before wait() returns or test() says true;
//   - the result is bitwise identical to the blocking call's with the same
//     arguments (the same engine runs it).
// A failure (timeout, a peer's failure, a transport error, disagreeing arguments
// under check_level::collective) is thrown by wait() (or by test() when it
// completes), naming the collective, dimension, step and peer as the blocking
// call would. A request is move-only. Destroying one that has not completed waits
// for it (its error, if any, is dropped; the communicator is unusable after it).
// After wait() returns or throws, or test() returns true, the request is empty
// (valid() is false) and waiting on it again does nothing.
#pragma once

#include "../config.hpp"
#include "../executor/progress.hpp"

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <utility>

MDRING_NAMESPACE_BEGIN

/// The handle of a nonblocking collective (see the top): wait(), test(). Move-only.
class request {
public:
  request() noexcept = default;
  /// A request for call `st` queued on executor `ex` (the nonblocking collectives make it).
  request(std::shared_ptr<detail::host_executor> ex, std::shared_ptr<detail::call_state> st) noexcept
      : ex_(std::move(ex)), st_(std::move(st)) {}
  request(request&&) noexcept = default;  ///< moves; the moved-from request is left empty
  /// Moves: waits for the call this request held, if any, then takes `o`'s.
  request& operator=(request&& o) noexcept {
    if (this != &o) {
      settle();
      ex_ = std::move(o.ex_);
      st_ = std::move(o.st_);
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { settle(); }

  /// Issued and not yet waited for.
  bool valid() const noexcept { return st_ != nullptr; }
  /// Completed (successfully or not) but not yet waited for.
  bool ready() const noexcept { return st_ && st_->done.load(std::memory_order_acquire); }

  /// Until the call has completed; rethrows its failure.
  void wait() {
    if (!st_) return;
    ex_->wait(*st_);
    finish();
  }
  /// f(error) once, when the call completes (error is null on success): on the
  /// thread that completed it (the progress agent, or one in wait/test), after
  /// mdring's locks are released, and before wait() returns or ready() says true;
  /// at once, on this thread, if that has happened already. The request must still
  /// be waited for (or destroyed) as usual. Keep f short, do not throw from it (an
  /// exception is dropped), and do not wait in it for this communicator's calls.
  /// Empty request: f is not called.
  void on_complete(std::function<void(std::exception_ptr)> f) {
    if (st_) st_->on_complete(std::move(f));
  }
  /// Moves things on once (in any progress mode) and says whether the call has
  /// completed; when it has, the request is empty afterwards and a failure is thrown.
  bool test() {
    if (!st_) return true;
    if (!ex_->test(*st_)) return false;
    finish();
    return true;
  }

private:
  friend std::size_t wait_any(std::span<request>);
  friend std::size_t test_any(std::span<request>);

  void finish() {
    auto st = std::move(st_);
    ex_.reset();
    if (st->error) std::rethrow_exception(st->error);
  }
  // (noexcept: a destroyed request's failure is dropped, whatever happens while
  // the call is finished.)
  void settle() noexcept {
    try {
      if (st_ && !st_->done.load(std::memory_order_acquire)) ex_->wait(*st_);
    } catch (...) {}
    st_.reset();
    ex_.reset();
  }
  bool try_step() { return st_ && ex_->try_step(); }

  std::shared_ptr<detail::host_executor> ex_;
  std::shared_ptr<detail::call_state> st_;
};

/// Waits for every request, then throws the first failure (in the order of rs):
/// when it throws, every call has completed and no buffer is in use any more.
inline void wait_all(std::span<request> rs) {
  std::exception_ptr first;
  for (auto& r : rs) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

/// One pass over the requests: the index of the first that has completed (it is
/// empty afterwards, and its failure is thrown), or rs.size() when none has. No
/// valid request at all also gives rs.size().
inline std::size_t test_any(std::span<request> rs) {
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (rs[i].ready()) return rs[i].finish(), i;
  for (auto& r : rs) r.try_step();
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (rs[i].ready()) return rs[i].finish(), i;
  return rs.size();
}

/// Until one request completes: its index (it is empty afterwards, and its failure
/// is thrown). rs.size() when no request is valid.
inline std::size_t wait_any(std::span<request> rs) {
  bool any = false;
  for (auto& r : rs) any |= r.valid();
  if (!any) return rs.size();
  detail::backoff b;
  for (;;) {
    for (std::size_t i = 0; i < rs.size(); ++i)
      if (rs[i].ready()) return rs[i].finish(), i;
    bool moved = false;
    for (auto& r : rs) moved |= r.try_step();
    b.pause(moved);
  }
}

MDRING_NAMESPACE_END
