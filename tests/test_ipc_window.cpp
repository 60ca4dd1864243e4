// tests/test_ipc_window.cpp: the host side of the GPU path's IPC transport
// (transport/ipc_window.hpp), run on threads standing in for the processes of a
// node (they share the segment as processes would).
//   - publications: every rank sees every peer's publication of the same step,
//     never the one after it, however far the others run ahead (parity entries);
//   - the flag protocol (barrier_ops) executed on host atomics as the GPU's stream
//     memory operations would be, with random delays: no rank passes barrier b
//     before every rank has reached it, over many calls replayed like a captured
//     graph (the same barrier indices each call, an even number per call);
//   - a rank that fails, or a deadline, ends every peer's wait with a clear status;
//   - publication_builder shares an allocation's table entry between addresses.
#include <doctest/doctest.h>
#include <mdring/transport/ipc_window.hpp>

#include "node_threads.hpp"

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace md = mdring;
namespace mdd = mdring::detail;

namespace {

using node_threads::in;
using node_threads::on_threads;
using thread_exchange = node_threads::exchange;

}  // namespace

TEST_CASE("ipc window: every rank reads every peer's publication of the same step") {
  for (std::size_t p : {2u, 3u, 5u}) {
    thread_exchange x(p);
    std::vector<mdd::ipc_window> w(p);
    std::atomic<int> bad{0}, opened{0};
    constexpr int rounds = 300;
    on_threads(p, [&](std::size_t r) {
      thread_exchange::member ex{&x, r};
      if (!w[r].open(ex, p, r)) return;
      ++opened;
      std::mt19937 rng(unsigned(r * 7 + 1));
      for (int k = 1; k <= rounds; ++k) {
        auto& e = w[r].next();
        e.kind = mdd::ipc_publication::arrive;
        e.signature = std::uint64_t(k) * 1000 + r;
        w[r].publish();
        if (w[r].wait(in(30)).kind != md::wait_status::done) {
          ++bad;
          return;
        }
        // Read slowly while faster peers run ahead: the entry must not change.
        for (int rep = 0; rep < 2; ++rep) {
          for (std::size_t j = 0; j < p; ++j)
            if (w[r].entry(j).signature != std::uint64_t(k) * 1000 + j) ++bad;
          if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        }
      }
    });
    CHECK(opened == int(p));
    CHECK(bad == 0);
  }
}

TEST_CASE("ipc window: barrier_ops as stream memory operations, replayed like a captured graph") {
  // Each rank's flag words live in "device memory" (here: host atomics), [2][p].
  for (std::size_t p : {2u, 3u, 4u, 7u}) {
    std::vector<std::vector<std::atomic<std::uint32_t>>> flags(p);
    for (auto& f : flags) f = std::vector<std::atomic<std::uint32_t>>(2 * p);
    // The call: 4 barriers (an even number), replayed 200 times with the same ops.
    constexpr std::size_t per_call = 4, calls = 200;
    std::vector<std::atomic<std::size_t>> reached(p);
    std::atomic<int> bad{0};
    on_threads(p, [&](std::size_t me) {
      std::vector<std::vector<mdd::flag_op>> call(per_call);
      for (std::size_t b = 0; b < per_call; ++b) mdd::barrier_ops(p, me, b, call[b]);
      std::mt19937 rng(unsigned(me + 11));
      for (std::size_t c = 0; c < calls; ++c)
        for (std::size_t b = 0; b < per_call; ++b) {
          const std::size_t global = c * per_call + b + 1;
          reached[me].store(global);
          for (const auto& op : call[b]) {
            if (rng() % 8 == 0) std::this_thread::yield();
            auto& own = flags[me][op.index];
            switch (op.kind) {
              case mdd::flag_op::write_peer:
                flags[op.peer][op.index].store(op.value);
                break;
              case mdd::flag_op::write_own:
                own.store(op.value);
                break;
              case mdd::flag_op::wait_own: {
                const auto until = in(20);
                while (own.load() != op.value) {  // (yielding: 7 threads on 2 cores spun 16 s)
                  if (md::deadline_clock::now() > until) return void(bad += 1000);
                  std::this_thread::yield();
                }
                break;
              }
            }
          }
          // Past the barrier: every rank has reached it.
          for (std::size_t j = 0; j < p; ++j)
            if (reached[j].load() < global) ++bad;
        }
    });
    CHECK(bad == 0);
    for (auto& f : flags)
      for (auto& v : f) CHECK(v.load() == 0);  // every word reset at the end of each call
  }
}

TEST_CASE("ipc window: barrier_ops, exact operations of a barrier") {
  std::vector<mdd::flag_op> ops;
  mdd::barrier_ops(3, 1, 1, ops);  // member 1 of 3, parity 1: words 3 + j
  REQUIRE(ops.size() == 6);
  CHECK((ops[0].kind == mdd::flag_op::write_peer && ops[0].peer == 0 && ops[0].index == 4 && ops[0].value == 1));
  CHECK((ops[1].kind == mdd::flag_op::write_peer && ops[1].peer == 2 && ops[1].index == 4 && ops[1].value == 1));
  CHECK((ops[2].kind == mdd::flag_op::wait_own && ops[2].index == 3 && ops[2].value == 1));
  CHECK((ops[3].kind == mdd::flag_op::write_own && ops[3].index == 3 && ops[3].value == 0));
  CHECK((ops[4].kind == mdd::flag_op::wait_own && ops[4].index == 5 && ops[4].value == 1));
  CHECK((ops[5].kind == mdd::flag_op::write_own && ops[5].index == 5 && ops[5].value == 0));
}

TEST_CASE("ipc window: a failed rank and a deadline end the peers' waits") {
  constexpr std::size_t p = 3;
  thread_exchange x(p);
  std::vector<mdd::ipc_window> w(p);
  std::vector<md::wait_status> got(p);
  on_threads(p, [&](std::size_t r) {
    thread_exchange::member ex{&x, r};
    REQUIRE(w[r].open(ex, p, r));
    ex.all_gather(&r, sizeof r, std::vector<std::size_t>(p).data());  // everyone opened
    if (r == 2) return w[r].fail("rank 2: bad sendbuf");
    w[r].publish();
    got[r] = w[r].wait(in(30));
  });
  for (std::size_t r : {0u, 1u}) {
    CHECK(got[r].kind == md::wait_status::peer_failed);
    CHECK(got[r].failed_rank == 2);
    CHECK(got[r].reason == "rank 2: bad sendbuf");
  }
  // A peer that never publishes: the deadline, naming it.
  thread_exchange y(2);
  std::vector<mdd::ipc_window> v(2);
  md::wait_status late;
  on_threads(2, [&](std::size_t r) {
    thread_exchange::member ex{&y, r};
    REQUIRE(v[r].open(ex, 2, r));
    if (r == 0) {
      v[r].publish();
      late = v[r].wait(in(0.05));
    }
  });
  CHECK(late.kind == md::wait_status::timeout);
  CHECK(late.index == 1);
}

TEST_CASE("ipc window: publication_builder") {
  mdd::ipc_publication pub;
  mdd::publication_builder b(pub);
  mdd::ipc_allocation a{11, 4096, 0x1000, {}}, c{12, 8192, 0x8000, {}};
  const auto p1 = b.add(a, 16), p2 = b.add(c, 0), p3 = b.add(a, 1024);
  CHECK(pub.allocations == 2);
  CHECK((p1.allocation == 1 && p1.offset == 16));
  CHECK((p2.allocation == 2 && p2.offset == 0));
  CHECK((p3.allocation == 1 && p3.offset == 1024));
  b.message(3, p3, 100);
  CHECK(pub.messages_count == 1);
  CHECK((pub.msg[0].peer == 3 && pub.msg[0].bytes == 100 && pub.msg[0].at.offset == 1024));
  for (std::uint64_t id = 20; id < 20 + mdd::ipc_max_allocations - 2; ++id) b.add({id, 64, id * 64, {}}, 0);
  CHECK_THROWS_AS(b.add({99, 64, 0, {}}, 0), md::transport_error);
}
