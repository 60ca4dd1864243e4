// tests/test_p2p_mailbox.cpp: point-to-point messages of the GPU path's ipc
// transport, the parts that need no GPU (transport/p2p_mailbox.hpp, ipc_window's
// mailboxes), on threads standing in for the processes of a node:
//   - p2p_schedule: the exact rounds of a group, and its refusals;
//   - the mailbox: notes arrive in order, a sender waits only p2p_depth ahead, a
//     failed peer or a deadline ends a wait, naming the peer;
//   - the whole protocol: each rank's host thread takes and posts notes while a
//     second thread per rank runs its "stream" (flag words as host atomics, copies
//     as memcpy), in random groups that every rank orders differently (sends to
//     each other before receiving, sends to itself, many messages to one peer),
//     the senders overwriting their buffers on their streams right after each
//     group: every message arrives exact, nothing deadlocks, every flag word ends
//     at 0 (the same values every group, as a replayed CUDA graph needs).
#include <doctest/doctest.h>
#include <mdring/transport/ipc_window.hpp>

#include "node_threads.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace md = mdring;
namespace mdd = mdring::detail;

namespace {

using node_threads::in;
using node_threads::on_threads;
using thread_exchange = node_threads::exchange;

using action = mdd::p2p_action;

// A stream: work runs in order on a thread of its own, after the host enqueued it.
class fake_stream {
public:
  fake_stream() : t_([this] { run(); }) {}
  ~fake_stream() {
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  void enqueue(std::function<void()> f) {
    {
      std::lock_guard l(m_);
      q_.push_back(std::move(f));
    }
    cv_.notify_all();
  }
  void synchronize() {
    std::unique_lock l(m_);
    idle_.wait(l, [&] { return q_.empty() && !busy_; });
  }

private:
  void run() {
    std::unique_lock l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      auto f = std::move(q_.front());
      q_.pop_front();
      busy_ = true;
      l.unlock();
      f();
      l.lock();
      busy_ = false;
      if (q_.empty()) idle_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false, busy_ = false;
  std::thread t_;
};

}  // namespace

TEST_CASE("p2p: the rounds of a group, exactly") {
  // Rank 0 of 3: sends to 1, 2, 1, 0 (indices 0..3); receives from 2, 1, 0, 1.
  const std::vector<std::uint32_t> to{1, 2, 1, 0}, from{2, 1, 0, 1};
  const auto got = mdd::p2p_schedule(3, 0, to, from);
  const std::vector<action> want{
      // round 0: posts, receives (and the copy to itself), completes
      {action::post, 1, 0, 0},
      {action::post, 2, 1, 0},
      {action::self_copy, 0, 3, 2},
      {action::receive, 1, 0, 1},
      {action::receive, 2, 0, 0},
      {action::complete, 1, 0, 0},
      {action::complete, 2, 1, 0},
      // round 1: the second send to 1 and the second receive from 1
      {action::post, 1, 2, 0},
      {action::receive, 1, 0, 3},
      {action::complete, 1, 2, 0},
  };
  CHECK(got == want);
  CHECK(mdd::p2p_schedule(3, 1, {}, {}).empty());
  // Refusals, naming "peer".
  const std::vector<std::uint32_t> far{3}, self{0};
  CHECK_THROWS_WITH_AS(mdd::p2p_schedule(3, 0, far, {}), doctest::Contains("expected a rank in [0, 3)"),
                       md::invalid_argument);
  CHECK_THROWS_WITH_AS(mdd::p2p_schedule(3, 0, self, {}),
                       doctest::Contains("sends to itself 1 times but receives from itself 0 times"),
                       md::invalid_argument);
}

TEST_CASE("p2p: the flag operations of a message, exactly") {
  std::vector<mdd::flag_op> ops;
  mdd::p2p_post_ops(4, 1, 3, ops);  // rank 1 of 4 posts to 3: 3's ready[1] = word 2 * 4 + 1
  mdd::p2p_before_copy_ops(4, 2, ops);
  mdd::p2p_after_copy_ops(4, 1, 2, ops);  // 2's done[1] = word 3 * 4 + 1
  mdd::p2p_complete_ops(4, 3, ops);
  REQUIRE(ops.size() == 6);
  CHECK((ops[0].kind == mdd::flag_op::write_peer && ops[0].peer == 3 && ops[0].index == 9 && ops[0].value == 1));
  CHECK((ops[1].kind == mdd::flag_op::wait_own && ops[1].index == 10 && ops[1].value == 1));
  CHECK((ops[2].kind == mdd::flag_op::write_own && ops[2].index == 10 && ops[2].value == 0));
  CHECK((ops[3].kind == mdd::flag_op::write_peer && ops[3].peer == 2 && ops[3].index == 13 && ops[3].value == 1));
  CHECK((ops[4].kind == mdd::flag_op::wait_own && ops[4].index == 15 && ops[4].value == 1));
  CHECK((ops[5].kind == mdd::flag_op::write_own && ops[5].index == 15 && ops[5].value == 0));
  CHECK(mdd::p2p_flag_words(4) == 16);
}

TEST_CASE("p2p: mailboxes deliver notes in order, at most p2p_depth ahead") {
  constexpr std::size_t p = 3;
  constexpr std::uint32_t per_pair = 5 * mdd::p2p_depth + 3;
  thread_exchange x(p);
  std::vector<mdd::ipc_window> w(p);
  std::atomic<int> bad{0};
  on_threads(p, [&](std::size_t me) {
    thread_exchange::member ex{&x, me};
    REQUIRE(w[me].open(ex, p, me, true));
    CHECK(w[me].has_p2p());
    // A thread posts to every peer in turn while this one takes from every peer
    // in turn, each at its own random pace.
    std::thread poster([&, me] {
      std::mt19937 rng(unsigned(me * 13 + 5));
      for (std::uint32_t k = 0; k < per_pair; ++k)
        for (std::size_t j = 0; j < p; ++j) {
          if (j == me) continue;
          if (rng() % 4 == 0) std::this_thread::yield();
          mdd::p2p_note n;
          n.offset = k;
          n.bytes = 1000 * me + j;
          if (w[me].post(j, n, in(30)).kind != md::wait_status::done) ++bad;
        }
    });
    std::mt19937 rng(unsigned(me * 17 + 1));
    for (std::uint32_t k = 0; k < per_pair; ++k)
      for (std::size_t j = 0; j < p; ++j) {
        if (j == me) continue;
        if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
        mdd::p2p_note n;
        if (w[me].take(j, n, in(30)).kind != md::wait_status::done) ++bad;
        if (n.offset != k || n.bytes != 1000 * j + me) ++bad;
      }
    poster.join();
  });
  CHECK(bad == 0);

  // Nobody takes: p2p_depth notes are posted at once, the next waits until the
  // deadline, naming the receiver.
  thread_exchange y(2);
  std::vector<mdd::ipc_window> v(2);
  std::vector<md::wait_status> posted;
  on_threads(2, [&](std::size_t me) {
    thread_exchange::member ex{&y, me};
    REQUIRE(v[me].open(ex, 2, me, true));
    if (me == 1)
      for (std::uint32_t k = 0; k <= mdd::p2p_depth; ++k) posted.push_back(v[me].post(0, {}, in(0.05)));
  });
  REQUIRE(posted.size() == mdd::p2p_depth + 1);
  for (std::uint32_t k = 0; k < mdd::p2p_depth; ++k) CHECK(posted[k].kind == md::wait_status::done);
  CHECK(posted.back().kind == md::wait_status::timeout);
  CHECK(posted.back().index == 0);
}

TEST_CASE("p2p: a failed peer and a deadline end mailbox waits, naming the peer") {
  constexpr std::size_t p = 3;
  thread_exchange x(p);
  std::vector<mdd::ipc_window> w(p);
  md::wait_status taking, posting;
  on_threads(p, [&](std::size_t me) {
    thread_exchange::member ex{&x, me};
    REQUIRE(w[me].open(ex, p, me, true));
    ex.all_gather(&me, sizeof me, std::vector<std::size_t>(p).data());
    if (me == 2) return w[me].fail("rank 2: a bad peer");
    mdd::p2p_note n;
    if (me == 0) {
      taking = w[me].take(2, n, in(30));  // rank 2 never posts; it failed
    } else {
      for (std::uint32_t k = 0; k <= mdd::p2p_depth; ++k)  // the last one waits on rank 0, which never takes
        posting = w[me].post(0, n, k < mdd::p2p_depth ? in(30) : in(0.05));
    }
  });
  CHECK(taking.kind == md::wait_status::peer_failed);
  CHECK(taking.failed_rank == 2);
  CHECK(taking.reason == "rank 2: a bad peer");
  CHECK(posting.kind == md::wait_status::peer_failed);

  // Without a failure: the deadline, naming the peer waited for.
  thread_exchange y(2);
  std::vector<mdd::ipc_window> v(2);
  md::wait_status t;
  on_threads(2, [&](std::size_t me) {
    thread_exchange::member ex{&y, me};
    REQUIRE(v[me].open(ex, 2, me, true));
    mdd::p2p_note n;
    if (me == 0) t = v[me].take(1, n, in(0.05));
  });
  CHECK(t.kind == md::wait_status::timeout);
  CHECK(t.index == 1);
}

// The random groups' buffers: a send and a receive region per call of a group, ints each.
constexpr std::size_t slots = 32, ints = 17;

TEST_CASE("p2p: random groups through mailboxes and flags, streams on threads, replayed") {
  for (std::size_t p : {2u, 3u, 5u}) {
    CAPTURE(p);
    thread_exchange x(p);
    std::vector<mdd::ipc_window> w(p);
    // Each rank's flag words ("device memory") and its buffers: a send region and a
    // receive region per message slot, ints.
    std::vector<std::vector<std::atomic<std::uint32_t>>> flags(p);
    for (auto& f : flags) f = std::vector<std::atomic<std::uint32_t>>(mdd::p2p_flag_words(p));
    std::vector<std::vector<int>> sendbuf(p, std::vector<int>(slots * ints)),
        recvbuf(p, std::vector<int>(slots * ints));
    std::atomic<int> bad{0}, stuck{0};
    constexpr std::size_t groups = 60;
    // The groups, the same on every rank: messages (from, to), in the order that
    // pairs them (the k-th of a pair on both sides).
    struct message {
      std::size_t from, to;
    };
    std::vector<std::vector<message>> plan(groups);
    std::mt19937 g(unsigned(p * 31));
    for (auto& grp : plan) {
      const std::size_t n = g() % (2 * p + 3);
      for (std::size_t i = 0; i < n; ++i) grp.push_back({g() % p, g() % p});
    }
    on_threads(p, [&](std::size_t me) {
      thread_exchange::member ex{&x, me};
      REQUIRE(w[me].open(ex, p, me, true));
      fake_stream stream;
      std::mt19937 rng(unsigned(me * 7 + 3));
      auto run_ops = [&](std::vector<mdd::flag_op> ops) {
        stream.enqueue([&, me, ops = std::move(ops)] {
          for (const auto& op : ops) {
            if (op.kind == mdd::flag_op::write_peer) flags[op.peer][op.index].store(op.value);
            else if (op.kind == mdd::flag_op::write_own) flags[me][op.index].store(op.value);
            else {
              const auto until = in(10);
              while (flags[me][op.index].load() != op.value) {
                if (stuck || md::deadline_clock::now() > until) return void(++stuck);  // (one stuck wait ends all)
                std::this_thread::yield();
              }
            }
          }
        });
      };
      for (std::size_t gi = 0; gi < groups; ++gi) {
        // This rank's calls: its sends and receives in pair order, then shuffled
        // across pairs (each pair's own order kept), as a user may call them.
        struct call {
          bool send;
          std::size_t peer, slot, serial;  // serial: the message's index in the group
        };
        std::vector<call> mine;
        for (std::size_t m = 0; m < plan[gi].size(); ++m) {
          const auto& msg = plan[gi][m];
          if (msg.from == me) mine.push_back({true, msg.to, 0, m});
          if (msg.to == me) mine.push_back({false, msg.from, 0, m});
        }
        for (std::size_t i = 1; i < mine.size(); ++i) {  // random adjacent swaps of different pairs
          const std::size_t k = rng() % i;
          if (mine[k].send != mine[k + 1].send || mine[k].peer != mine[k + 1].peer) std::swap(mine[k], mine[k + 1]);
        }
        std::vector<std::uint32_t> to, from;
        std::vector<std::size_t> send_slot, recv_slot, recv_serial;
        for (std::size_t i = 0; i < mine.size(); ++i) {
          auto& c = mine[i];
          c.slot = i % slots;
          if (c.send) {
            to.push_back(std::uint32_t(c.peer));
            send_slot.push_back(c.slot);
          } else {
            from.push_back(std::uint32_t(c.peer));
            recv_slot.push_back(c.slot);
            recv_serial.push_back(c.serial);
          }
        }
        // The send data, written on the stream (it overwrites the last group's,
        // which must have been read by then): group, message and index.
        for (std::size_t i = 0; i < mine.size(); ++i)
          if (mine[i].send)
            stream.enqueue([&, me, gi, s = mine[i].slot, serial = mine[i].serial] {
              for (std::size_t e = 0; e < ints; ++e) sendbuf[me][s * ints + e] = int(gi * 100000 + serial * 100 + e);
            });
        for (const action& a : mdd::p2p_schedule(p, me, to, from)) {
          if (rng() % 8 == 0) std::this_thread::yield();
          std::vector<mdd::flag_op> ops;
          switch (a.kind) {
            case action::post: {
              mdd::p2p_note n;
              n.alloc.base = reinterpret_cast<std::uintptr_t>(sendbuf[me].data());
              n.offset = send_slot[a.send] * ints * sizeof(int);
              n.bytes = ints * sizeof(int);
              if (w[me].post(a.peer, n, in(30)).kind != md::wait_status::done) return void(++bad);
              mdd::p2p_post_ops(p, me, a.peer, ops);
              run_ops(std::move(ops));
              break;
            }
            case action::receive: {
              mdd::p2p_note n;
              if (w[me].take(a.peer, n, in(30)).kind != md::wait_status::done) return void(++bad);
              if (n.bytes != ints * sizeof(int)) ++bad;
              mdd::p2p_before_copy_ops(p, a.peer, ops);
              run_ops(std::move(ops));
              int* dst = recvbuf[me].data() + recv_slot[a.recv] * ints;
              const char* src = reinterpret_cast<const char*>(n.alloc.base) + n.offset;
              stream.enqueue([dst, src, bytes = n.bytes] { std::memcpy(dst, src, bytes); });
              std::vector<mdd::flag_op> after;
              mdd::p2p_after_copy_ops(p, me, a.peer, after);
              run_ops(std::move(after));
              break;
            }
            case action::complete:
              mdd::p2p_complete_ops(p, a.peer, ops);
              run_ops(std::move(ops));
              break;
            case action::self_copy: {
              int* dst = recvbuf[me].data() + recv_slot[a.recv] * ints;
              const int* src = sendbuf[me].data() + send_slot[a.send] * ints;
              stream.enqueue([dst, src] { std::memcpy(dst, src, ints * sizeof(int)); });
              break;
            }
          }
        }
        // Check the received data on the stream, without waiting for it here.
        for (std::size_t i = 0; i < from.size(); ++i)
          stream.enqueue([&, me, gi, s = recv_slot[i], serial = recv_serial[i]] {
            for (std::size_t e = 0; e < ints; ++e)
              if (recvbuf[me][s * ints + e] != int(gi * 100000 + serial * 100 + e)) ++bad;
          });
      }
      stream.synchronize();
    });
    CHECK(stuck == 0);
    CHECK(bad == 0);
    for (auto& f : flags)
      for (auto& v : f) CHECK(v.load() == 0);
  }
}
