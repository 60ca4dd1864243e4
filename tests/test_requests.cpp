// tests/test_requests.cpp: nonblocking collectives on the threads transport.
//
// The cases of request_cases.hpp on several shapes (direct stages by shared access,
// rings of messages, pipelined two-dimensional all-reduces, one rank), in both
// progress modes; plus failures surfaced at wait: a peer's bad argument
// (remote_error naming it) and a peer that never issues the call (timeout_error
// naming the collective, dimension, step and peer), and the errors at issue.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include "request_cases.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

namespace md = mdring;
using request_cases::report;

namespace {

// Runs every case on n threads bound to `topo`; failures become assertions here.
void run_cases(const char* topo, std::size_t n, md::progress_mode mode, bool shared_memory = true) {
  std::vector<report> reps(n);
  md::threads::run(n, [&](md::threads::endpoint ep) {
    auto bind = [&](md::options o) {
      o.shared_memory = shared_memory;
      return md::bind(md::parse_topology(topo), ep, o);
    };
    request_cases::all_cases(bind, mode, reps[ep.rank]);
  });
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& f : reps[r].failures)
      FAIL_CHECK("rank " << r << " (" << topo << ", " << md::to_string(mode) << "): " << f);
}

}  // namespace

TEST_CASE("requests: every case, both progress modes, several shapes") {
  for (auto mode : {md::progress_mode::agent, md::progress_mode::in_wait}) {
    CAPTURE(md::to_string(mode));
    run_cases("shm:2 x shm:*", 6, mode);            // direct stages by shared access
    run_cases("ethernet:2 x ethernet:*", 6, mode);  // rings of messages, pipelined
    run_cases("shm:*", 3, mode, false);             // direct stages by messages
    run_cases("shm:*", 1, mode);                    // one rank
  }
}

TEST_CASE("requests: a peer that fails with 1, 2 or 8 calls in flight: every wait throws, nothing terminates") {
  for (auto mode : {md::progress_mode::agent, md::progress_mode::in_wait})
    for (std::size_t k : {std::size_t(1), std::size_t(2), std::size_t(8)})
      for (int how = 0; how < 4; ++how) {
        if (k != 8 && how > 1) continue;
        for (const char* topo : {"shm:2 x shm:*", "ethernet:2 x ethernet:*"}) {
          std::vector<report> reps(4);
          try {  // a world of its own: it stays failed afterwards
            md::threads::run(4, [&](md::threads::endpoint ep) {
              md::options o;
              o.progress = mode;
              request_cases::peer_fails_in_flight(
                  [&](md::options x) { return md::bind(md::parse_topology(topo), ep, x); }, o, k, how, reps[ep.rank]);
            });
          } catch (const std::exception&) {  // run() rethrows nothing here: the ranks caught theirs
          }
          for (std::size_t r = 0; r < reps.size(); ++r)
            for (const auto& f : reps[r].failures)
              FAIL_CHECK("rank " << r << " (" << topo << ", " << md::to_string(mode) << "): " << f);
        }
      }
}

TEST_CASE("requests: options.progress resolves automatic to the agent on threads") {
  md::threads::run(2, [&](md::threads::endpoint ep) {
    md::options o;
    o.progress = md::progress_mode::automatic;
    auto comm = md::bind(md::ring<md::shm, 2>, ep, o);
    if (comm.progress() != md::progress_mode::agent) throw std::runtime_error("automatic did not become agent");
  });
}

TEST_CASE("requests: a peer's bad argument fails the others' wait with remote_error naming it") {
  for (auto mode : {md::progress_mode::agent, md::progress_mode::in_wait}) {
    std::vector<std::string> got(4);
    std::vector<std::int64_t> buf0(64, 1);
    CHECK_THROWS_AS(md::threads::run(4,
                                     [&](md::threads::endpoint ep) {
                                       md::options o;
                                       o.progress = mode;
                                       auto comm = md::bind(md::parse_topology("ethernet:2 x ethernet:2"), ep, o);
                                       std::vector<std::int64_t> buf(64, 1);
                                       auto before = md::iall_reduce(comm, buf.data(), buf.size(), md::sum);
                                       if (ep.rank == 0) {
                                         try {
                                           auto r =
                                               md::iall_reduce(comm, static_cast<std::int64_t*>(nullptr), 64, md::sum);
                                         } catch (const md::invalid_argument& e) {
                                           got[0] = e.argument() + ": " + e.what();
                                           // the call before it completed first (it was in flight)
                                           if (!before.ready())
                                             got[0] = "the call in flight did not complete before the error";
                                           throw;
                                         }
                                         return;
                                       }
                                       // Rank 0 completes `before` and then fails at issue; a peer may still
                                       // be finishing `before` then, so the error can surface at either wait.
                                       try {
                                         before.wait();
                                         auto r = md::iall_reduce(comm, buf.data(), buf.size(), md::sum);
                                         r.wait();
                                       } catch (const md::remote_error& e) {
                                         got[ep.rank] = "remote " + std::to_string(e.failed_rank());
                                       }
                                     }),
                    md::invalid_argument);
    CAPTURE(md::to_string(mode));
    CHECK_MESSAGE(got[0].rfind("sendbuf: mdring::all_reduce: sendbuf is null", 0) == 0, got[0]);
    CHECK(got[1] == "remote 0");
    CHECK(got[2] == "remote 0");
    CHECK(got[3] == "remote 0");
  }
}

TEST_CASE("requests: a peer that never issues the call times out at wait, naming where") {
  std::vector<std::string> got(3);
  md::threads::run(3, [&](md::threads::endpoint ep) {
    md::options o;
    o.timeout = std::chrono::milliseconds(300);
    o.tune.recursive_doubling_max_bytes = 0;  // a ring's reduce-scatter, not a whole-range exchange
    o.tune.one_shot_max_bytes = 0;            // nor the one-shot path (test_one_shot.cpp)
    auto comm = md::bind(md::parse_topology("ethernet:*"), ep, o);
    if (ep.rank == 2) return;  // never calls
    std::vector<float> buf(30, 1.f);
    auto r = md::iall_reduce(comm, buf.data(), buf.size(), md::sum);
    try {
      r.wait();
      got[ep.rank] = "no error";
    } catch (const md::timeout_error& e) {
      got[ep.rank] = e.collective() + " dim " + std::to_string(e.dimension()) + " " + e.phase();
    } catch (const md::remote_error& e) {
      got[ep.rank] = "remote " + std::to_string(e.failed_rank());
    }
  });
  // The first rank to time out tells the other, which may stop with remote_error.
  const bool first_timed_out = got[0].rfind("all_reduce dim 0 reduce-scatter", 0) == 0 ||
                               got[1].rfind("all_reduce dim 0 reduce-scatter", 0) == 0;
  CHECK_MESSAGE(first_timed_out, got[0] << " | " << got[1]);
  CHECK(got[0] != "no error");
  CHECK(got[1] != "no error");
}

TEST_CASE("requests: errors at issue name the argument; an empty request is harmless") {
  md::request empty;
  CHECK_FALSE(empty.valid());
  CHECK(empty.test());
  empty.wait();
  std::vector<md::request> none(3);
  CHECK(md::wait_any(none) == 3);
  CHECK(md::test_any(none) == 3);
  md::wait_all(none);
  std::string what;
  md::threads::run(1, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::ring<md::shm, 1>, ep);
    std::vector<int> a(4), b(3);
    try {
      auto r = md::iall_reduce(comm, std::span<const int>(a), std::span<int>(b));
    } catch (const md::invalid_argument& e) {
      what = e.argument() + ": " + e.what();
    }
  });
  CHECK(what == "recvbuf: mdring::iall_reduce: recvbuf has 3 elements but sendbuf has 4");
}

TEST_CASE("requests: reserve() with calls in flight waits for them before growing scratch") {
  std::vector<float> got(2, 0.f);
  std::vector<int> ready(2, 0);
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("ethernet:*"), ep);
    std::vector<float> a(100000, float(ep.rank + 1));
    auto r = md::iall_reduce(comm, a.data(), a.size(), md::sum);
    comm.reserve<float>(std::size_t(1) << 22);  // frees the block the call used, after it
    ready[ep.rank] = r.ready();
    r.wait();
    got[ep.rank] = a[99999];
  });
  CHECK(ready[0] == 1);
  CHECK(ready[1] == 1);
  CHECK(got[0] == 3.f);
  CHECK(got[1] == 3.f);
}

namespace {
// A call that completes once `open` is set (at once when it is null).
struct gated_call : md::detail::call_state {
  const std::atomic<bool>* open = nullptr;
  bool advance(bool) override { return open == nullptr || open->load(); }
};
}  // namespace

TEST_CASE("requests: callbacks run in completion order when the agent and a waiting thread both complete calls") {
  // The agent completes call 0 and runs its (slow) callback; meanwhile this thread,
  // waiting for the last call, completes calls 1..7. Their callbacks must still come
  // after call 0's: the waiting thread hands them to the thread already notifying.
  for (int round = 0; round < 5; ++round) {
    auto ex = std::make_shared<md::detail::host_executor>(md::progress_mode::agent);
    std::atomic<bool> open{false}, started{false};
    std::mutex m;
    std::vector<int> order;
    std::vector<std::shared_ptr<md::detail::call_state>> calls;
    for (int i = 0; i < 8; ++i) {
      auto c = std::make_shared<gated_call>();
      if (i > 0) c->open = &open;
      c->on_complete([&, i](std::exception_ptr) {
        if (i == 0) {
          started = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        std::lock_guard l(m);
        order.push_back(i);
      });
      calls.push_back(c);
    }
    for (auto& c : calls) ex->submit(c);
    for (int spin = 0; spin < 5000 && !started; ++spin) std::this_thread::sleep_for(std::chrono::microseconds(200));
    REQUIRE(started.load());  // the agent is in call 0's callback
    open = true;
    ex->wait(*calls.back());
    ex->drain();
    std::lock_guard l(m);
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  }
}

TEST_CASE("requests: a callback that makes a blocking call on the same executor does not deadlock") {
  auto ex = std::make_shared<md::detail::host_executor>(md::progress_mode::agent);
  std::atomic<bool> inner_done{false};
  auto first = std::make_shared<gated_call>();
  first->on_complete([&](std::exception_ptr) {
    auto inner = std::make_shared<gated_call>();
    ex->submit(inner);
    ex->wait(*inner);  // completed and notified from within this callback
    inner_done = true;
  });
  ex->submit(first);
  ex->wait(*first);
  CHECK(inner_done.load());
  ex->drain();
}
