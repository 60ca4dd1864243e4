// test_transport.cpp: the contract between the engine and a transport that the
// collective tests cannot pin down deterministically (transport/transport.hpp).
#include <mdring/mdring.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <span>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace md = mdring;
using tt = md::threads::transport;

namespace {
void wait_for(const std::atomic<int>& flag, int value) {
  while (flag.load() < value) std::this_thread::yield();
}
md::deadline_clock::time_point soon() { return md::deadline_clock::now() + std::chrono::seconds(10); }

// One rank of a 2-rank world: its transport and the channel over both ranks.
struct end_of_pair {
  tt t;
  tt::channel ch;
  end_of_pair(md::threads::world& w, std::size_t rank) : t(w.at(rank), "contract"), ch(make(t, rank)) {}
  static tt::channel make(tt& t, std::size_t rank) {
    const std::size_t members[] = {0, 1};
    return t.make_channel(0, members, rank);
  }
};
}  // namespace

// The engine asks complete() which segments are done, and only then calls
// wait_any(), which returns when a request that was pending at its call completes.
// If a send could become complete in between (its receiver copying it on another
// thread), that completion would be lost and the rank would wait forever: it was
// how pipelined all_reduce over threads hung, about once in 500 calls.
TEST_CASE("threads transport: a send becomes complete at the sender's own wait, not when the peer copies it") {
  md::threads::world w(2);
  std::atomic<int> step{0};
  std::uint64_t got = 0;
  const std::uint64_t value = 0x0123456789abcdefull;
  bool before = true, after = false;
  md::wait_status any_status;
  any_status.kind = md::wait_status::timeout;
  std::thread receiver([&] {
    end_of_pair e(w, 0);
    auto& t = e.t;
    auto& ch = e.ch;
    tt::request rs[1];
    wait_for(step, 1);
    t.irecv(ch, &got, sizeof got, 1, 7, rs[0]);
    (void)t.wait_all(std::span<tt::request>(rs, 1), soon());
    step = 2;
  });
  std::thread sender([&] {
    end_of_pair e(w, 1);
    auto& t = e.t;
    auto& ch = e.ch;
    tt::request rs[2];  // rs[1] is idle, complete from the start
    t.isend(ch, &value, sizeof value, 0, 7, rs[0]);
    step = 1;
    wait_for(step, 2);  // the receiver has copied the message
    before = tt::complete(rs[0]);
    any_status = t.wait_any(std::span<tt::request>(rs, 2), soon());
    after = tt::complete(rs[0]);
  });
  receiver.join();
  sender.join();
  CHECK(got == value);
  CHECK_FALSE(before);  // not yet: the sender has not waited since
  CHECK(any_status.kind == md::wait_status::done);
  CHECK(after);
}

TEST_CASE("threads transport: wait_any returns at once when nothing is pending, and at the first completion") {
  md::threads::world w(2);
  std::atomic<int> step{0};
  int a = 1, b = 2, ra = 0, rb = 0;
  std::size_t done_after_first = 99;
  std::thread receiver([&] {
    end_of_pair e(w, 0);
    auto& t = e.t;
    auto& ch = e.ch;
    tt::request rs[2];
    t.irecv(ch, &ra, sizeof ra, 1, 1, rs[0]);
    t.irecv(ch, &rb, sizeof rb, 1, 2, rs[1]);
    step = 1;
    wait_for(step, 2);  // only the message tagged 1 was sent
    (void)t.wait_any(std::span<tt::request>(rs, 2), soon());
    done_after_first = std::size_t(tt::complete(rs[0])) + std::size_t(tt::complete(rs[1]));
    step = 3;
    (void)t.wait_all(std::span<tt::request>(rs, 2), soon());
    // nothing pending: returns at once
    CHECK(t.wait_any(std::span<tt::request>(rs, 2), md::deadline_clock::now()).kind == md::wait_status::done);
  });
  std::thread sender([&] {
    end_of_pair e(w, 1);
    auto& t = e.t;
    auto& ch = e.ch;
    tt::request rs[2];
    wait_for(step, 1);
    t.isend(ch, &a, sizeof a, 0, 1, rs[0]);
    step = 2;
    wait_for(step, 3);
    t.isend(ch, &b, sizeof b, 0, 2, rs[1]);
    (void)t.wait_all(std::span<tt::request>(rs, 2), soon());
  });
  receiver.join();
  sender.join();
  CHECK(done_after_first == 1);
  CHECK(ra == 1);
  CHECK(rb == 2);
}

TEST_CASE("transport: a failure passed on names the rank that failed first") {
  // A rank that stops because rank 1 failed tells the others (relayed_failure);
  // they name rank 1, and say who told them.
  const md::wait_status relayed = md::received_failure(3, md::relayed_failure(1, "rank 1 is gone"));
  CHECK(relayed.kind == md::wait_status::peer_failed);
  CHECK(relayed.failed_rank == 1);
  CHECK(relayed.reason == "(told by rank 3) rank 1 is gone");
  // A rank's own failure names itself.
  const md::wait_status own = md::received_failure(2, "rank 2: bad root");
  CHECK(own.failed_rank == 2);
  CHECK(own.reason == "rank 2: bad root");
  // Something that only looks like a relay is taken as it is.
  CHECK(md::received_failure(4,
                             "\x1b"
                             "ab:cd")
            .failed_rank == 4);
  CHECK(md::received_failure(4,
                             "\x1b"
                             ":cd")
            .failed_rank == 4);
  // Through a threads world: the first failure is remembered, a relayed one by its origin.
  md::threads::world w(3);
  w.fail(2, md::relayed_failure(0, "rank 0 threw"));
  CHECK(w.failed_rank() == 0);
  w.fail(1, "later");
  CHECK(w.failed_rank() == 0);
}

// ---- transport/node_distance.hpp: rank 0 times a cache line's trip to each other
// rank of a node at bind; every rank returns rank 0's verdict.
namespace {
// p ranks' access slots, each followed by its two staging buffers, in zeroed memory
// (as a node window or a threads world gives them), and each rank's access group.
struct node_regions {
  std::size_t p, staging;
  unsigned char* mem;
  std::vector<md::detail::access_slot*> slots;
  explicit node_regions(std::size_t ranks, std::size_t staging_bytes = 4096)
      : p(ranks),
        staging(staging_bytes),
        mem(new(std::align_val_t{64}) unsigned char[ranks * md::detail::access_region_bytes(staging_bytes)]()) {
    for (std::size_t j = 0; j < p; ++j)
      slots.push_back(reinterpret_cast<md::detail::access_slot*>(mem + j * md::detail::access_region_bytes(staging)));
  }
  ~node_regions() { ::operator delete[](mem, std::align_val_t{64}); }
  node_regions(const node_regions&) = delete;
  node_regions& operator=(const node_regions&) = delete;
  md::detail::access_group group(std::size_t me) const { return {slots.data(), p, me, staging}; }
};
md::wait_status no_failure() { return md::wait_status::ok(); }
// Every rank of `ranks` runs the protocol on its own thread; what each returned.
std::vector<md::detail::node_distance> measure_on_threads(node_regions& n, bool measure, std::uint32_t stop_ns) {
  std::vector<md::detail::node_distance> out(n.p);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < n.p; ++r)
    threads.emplace_back(
        [&, r] { out[r] = md::detail::measure_node_distance(n.group(r), measure, stop_ns, soon(), no_failure); });
  for (auto& t : threads) t.join();
  return out;
}
}  // namespace

TEST_CASE("node distance: rank 0 measures every peer, and every rank returns its verdict") {
  node_regions n(3);
  const auto d = measure_on_threads(n, true, md::detail::node_distance::unmeasured - 1);
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(d[r].measured());
    CHECK(d[r].trip_ns > 0);
    CHECK(d[r].trip_ns == d[0].trip_ns);
    CHECK(d[r].farthest == d[0].farthest);
    CHECK((d[r].farthest == 1 || d[r].farthest == 2));
  }
}

TEST_CASE("node distance: rank 0 stops at the first peer over stop_ns; unmeasured where it does not measure") {
  {  // every trip takes more than 0 ns: rank 0 measures rank 1 and stops there
    node_regions n(4);
    const auto d = measure_on_threads(n, true, 0);
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("rank " << r);
      CHECK(d[r].measured());
      CHECK(d[r].farthest == 1);
      CHECK(d[r].trip_ns == d[0].trip_ns);
    }
  }
  {  // rank 0 alone decides: its peers pass measure = true and follow it
    node_regions n(3);
    std::vector<md::detail::node_distance> d(3);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < 3; ++r)
      threads.emplace_back(
          [&, r] { d[r] = md::detail::measure_node_distance(n.group(r), r != 0, 1000, soon(), no_failure); });
    for (auto& t : threads) t.join();
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("rank " << r);
      CHECK_FALSE(d[r].measured());
      CHECK(d[r].farthest == 0);
    }
  }
  {  // one rank: nothing to measure
    node_regions n(1);
    CHECK_FALSE(md::detail::measure_node_distance(n.group(0), true, 1000, soon(), no_failure).measured());
  }
  {  // staging buffers too small for the line (tune.shared_staging_bytes 0 or 16): every
     // rank returns unmeasured at once, without waiting for the others or writing
    for (std::size_t staging : {0u, 16u}) {
      node_regions n(2, staging);
      for (std::size_t r = 0; r < 2; ++r) {
        INFO("staging " << staging << ", rank " << r << " alone");
        CHECK_FALSE(md::detail::measure_node_distance(n.group(r), true, 1000, soon(), no_failure).measured());
      }
      const std::size_t bytes = 2 * md::detail::access_region_bytes(staging);
      CHECK(std::count(n.mem, n.mem + bytes, 0) == std::ptrdiff_t(bytes));
    }
  }
}

TEST_CASE("node distance: a peer may write its own line as soon as it returned (its first call), rank 0 still ends") {
  // A reduce's leaf or a broadcast's root with eager_rooted waits for nobody in its
  // first call: it writes its data buffer 0 while rank 0 may still be waiting for a
  // slower peer's acknowledgement. 8 ranks on this machine's cores: some are
  // descheduled while the others return and write.
  for (bool measure : {false, true}) {
    node_regions n(8);
    std::vector<md::detail::node_distance> out(8);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < 8; ++r)
      threads.emplace_back([&, r] {
        const md::detail::access_group g = n.group(r);
        out[r] = md::detail::measure_node_distance(g, measure, 1000000, soon(), no_failure);
        if (r == 0) return;
        md::detail::distance_line& mine = md::detail::distance_line_of(g, r);
        const auto until = md::deadline_clock::now() + std::chrono::milliseconds(20);
        while (md::deadline_clock::now() < until)  // what a call's data copy does to the line
          for (std::uint32_t v : {0xffffffffu, 0x00ffffffu, 0u}) {
            mine.ping.store(v, std::memory_order_relaxed);
            mine.verdict.store(v, std::memory_order_relaxed);
            mine.trip_ns.store(v, std::memory_order_relaxed);
            mine.pong.store(v, std::memory_order_relaxed);
            mine.acks.store(v, std::memory_order_relaxed);
          }
      });
    for (auto& t : threads) t.join();
    for (std::size_t r = 0; r < 8; ++r) {
      INFO("measure " << measure << ", rank " << r);
      CHECK(out[r].measured() == measure);
      CHECK(out[r].trip_ns == out[0].trip_ns);
      CHECK(out[r].farthest == out[0].farthest);
    }
  }
}

TEST_CASE("node distance: an absent or failed peer ends the wait with an error naming it, by the deadline") {
  using namespace std::chrono_literals;
  node_regions n(2);
  const auto start = md::deadline_clock::now();
  // Rank 0 alone: rank 1 never answers its first ping.
  try {
    md::detail::measure_node_distance(n.group(0), true, 1000, start + 100ms, no_failure);
    FAIL("no timeout_error");
  } catch (const md::timeout_error& e) {
    CHECK(e.peer() == 1);
    CHECK(std::string(e.what()).find("rank 1 did not answer") != std::string::npos);
    CHECK(std::string(e.what()).find("options.timeout") != std::string::npos);
  }
  CHECK(md::deadline_clock::now() - start < 5s);
  // Rank 1 alone (on fresh regions): rank 0 never sends its verdict.
  node_regions m(2);
  try {
    md::detail::measure_node_distance(m.group(1), true, 1000, md::deadline_clock::now() + 100ms, no_failure);
    FAIL("no timeout_error");
  } catch (const md::timeout_error& e) {
    CHECK(e.peer() == 0);
  }
  // The awaited peer failed: remote_error naming it at once; another rank's failure
  // does not end the wait (that rank may have answered and failed in its first call).
  node_regions f(3);
  const auto failed_rank = [](std::size_t who) {
    return [who] { return md::wait_status{md::wait_status::peer_failed, 0, who, "killed"}; };
  };
  try {
    md::detail::measure_node_distance(f.group(0), true, 1000, md::deadline_clock::now() + 10s, failed_rank(1));
    FAIL("no remote_error");
  } catch (const md::remote_error& e) {
    CHECK(e.failed_rank() == 1);
    CHECK(std::string(e.what()).find("rank 1 failed while the node's ranks measured their distance: killed") !=
          std::string::npos);
  }
  node_regions g(3);
  CHECK_THROWS_AS(
      md::detail::measure_node_distance(g.group(0), true, 1000, md::deadline_clock::now() + 100ms, failed_rank(2)),
      md::timeout_error);
}
