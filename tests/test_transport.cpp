// test_transport.cpp: the contract between the engine and a transport that the
// collective tests cannot pin down deterministically (transport/transport.hpp).
#include <mdring/mdring.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <thread>

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
