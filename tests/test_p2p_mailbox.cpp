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
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
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

// A rank's "device" for p2p_enqueue: flag words as host atomics (every rank's,
// shared), streams as fake_streams, copies as memcpy, allocations as addresses.
struct host_device {
  std::size_t me;
  std::vector<std::vector<std::atomic<std::uint32_t>>>& flag_words;
  std::atomic<int>& stuck;
  mdd::ipc_allocation export_of(const void* p, std::uint64_t& offset) {
    offset = 0;
    mdd::ipc_allocation a;
    a.base = reinterpret_cast<std::uintptr_t>(p);
    return a;
  }
  char* map(std::size_t, const mdd::ipc_allocation& a) { return reinterpret_cast<char*>(a.base); }
  void flags(fake_stream* s, const std::vector<mdd::flag_op>& ops) {
    s->enqueue([this, ops] {
      for (const auto& op : ops) {
        if (op.kind == mdd::flag_op::write_peer) flag_words[op.peer][op.index].store(op.value);
        else if (op.kind == mdd::flag_op::write_own) flag_words[me][op.index].store(op.value);
        else {
          const auto until = in(10);
          while (flag_words[me][op.index].load() != op.value) {
            if (stuck || md::deadline_clock::now() > until) return void(++stuck);  // (one stuck wait ends all)
            std::this_thread::yield();
          }
        }
      }
    });
  }
  void copy(void* dst, const void* src, std::size_t bytes, fake_stream* s) {
    s->enqueue([=] { std::memcpy(dst, src, bytes); });
  }
  fake_stream* last = nullptr;  // the stream of the previous group's end
  void begin_group(fake_stream* g) {
    if (last && last != g) join(last, g);
  }
  void end_group(fake_stream* g) { last = g; }
  void join(fake_stream* before, fake_stream* after) {
    if (before == after) return;
    auto done = std::make_shared<std::atomic<bool>>(false);
    before->enqueue([done] { done->store(true); });
    after->enqueue([done] {
      while (!done->load()) std::this_thread::yield();
    });
  }
  void waited(const md::wait_status& st, std::size_t peer, const char* what) {
    if (st.kind != md::wait_status::done)
      throw std::runtime_error("rank " + std::to_string(me) + " waited for rank " + std::to_string(peer) + " " + what);
  }
  [[noreturn]] void mismatch(std::size_t peer, std::size_t sent, std::size_t expected) {
    throw std::length_error("rank " + std::to_string(peer) + " sends " + std::to_string(sent) + " bytes, " +
                            std::to_string(expected) + " expected");
  }
};
using host_send = mdd::p2p_message<const void*, fake_stream*>;
using host_recv = mdd::p2p_message<void*, fake_stream*>;

// The random groups' buffers: a send and a receive region per call of a group, ints
// each, for each of `groups` groups (no buffer is used twice: the streams that use
// one are then ordered only through the group's joins, as NCCL's users rely on).
constexpr std::size_t slots = 32, ints = 17, groups = 60, streams_per_rank = 3;

TEST_CASE("p2p: random groups through p2p_enqueue, each message on a random stream, replayed") {
  for (std::size_t p : {2u, 3u, 5u}) {
    CAPTURE(p);
    thread_exchange x(p);
    std::vector<mdd::ipc_window> w(p);
    // Each rank's flag words ("device memory") and its buffers: a send region and a
    // receive region per message slot, ints.
    std::vector<std::vector<std::atomic<std::uint32_t>>> flags(p);
    for (auto& f : flags) f = std::vector<std::atomic<std::uint32_t>>(mdd::p2p_flag_words(p));
    std::vector<std::vector<int>> sendbuf(p, std::vector<int>(groups * slots * ints)),
        recvbuf(p, std::vector<int>(groups * slots * ints));
    std::atomic<int> bad{0}, stuck{0};
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
      // Each message on a random one of the rank's streams.
      fake_stream streams[streams_per_rank];
      host_device dev{me, flags, stuck};
      std::mt19937 rng(unsigned(me * 7 + 3));
      for (std::size_t gi = 0; gi < groups; ++gi) {
        // This rank's calls: its sends and receives in pair order, then shuffled
        // across pairs (each pair's own order kept), as a user may call them.
        struct call {
          bool send;
          std::size_t peer, serial;  // serial: the message's index in the group
        };
        std::vector<call> mine;
        for (std::size_t m = 0; m < plan[gi].size(); ++m) {
          const auto& msg = plan[gi][m];
          if (msg.from == me) mine.push_back({true, msg.to, m});
          if (msg.to == me) mine.push_back({false, msg.from, m});
        }
        for (std::size_t i = 1; i < mine.size(); ++i) {  // random adjacent swaps of different pairs
          const std::size_t k = rng() % i;
          if (mine[k].send != mine[k + 1].send || mine[k].peer != mine[k + 1].peer) std::swap(mine[k], mine[k + 1]);
        }
        std::vector<host_send> sends;
        std::vector<host_recv> recvs;
        std::vector<std::size_t> to, from, recv_serial;
        for (std::size_t i = 0; i < mine.size(); ++i) {
          const call& c = mine[i];
          const std::size_t slot = gi * slots + i % slots;
          fake_stream* const stream = &streams[rng() % streams_per_rank];
          if (c.send) {
            int* data = sendbuf[me].data() + slot * ints;
            // The data, written on the message's stream before the group.
            stream->enqueue([data, gi, serial = c.serial] {
              for (std::size_t e = 0; e < ints; ++e) data[e] = int(gi * 100000 + serial * 100 + e);
            });
            sends.push_back({data, ints * sizeof(int), c.peer, stream});
            to.push_back(c.peer);
          } else {
            recvs.push_back({recvbuf[me].data() + slot * ints, ints * sizeof(int), c.peer, stream});
            from.push_back(c.peer);
            recv_serial.push_back(c.serial);
          }
        }
        std::vector<std::uint32_t> to32(to.begin(), to.end()), from32(from.begin(), from.end());
        try {
          mdd::p2p_enqueue<mdd::flag_op>(w[me], p, me, mdd::p2p_schedule(p, me, to32, from32),
                                         std::span<const host_send>(sends), std::span<const host_recv>(recvs), in(30),
                                         dev);
        } catch (const std::exception&) {
          return void(++bad);
        }
        // Check the received data on the receive's stream, without waiting for it here.
        for (std::size_t i = 0; i < recvs.size(); ++i)
          recvs[i].stream->enqueue([&bad, data = static_cast<int*>(recvs[i].ptr), gi, serial = recv_serial[i]] {
            for (std::size_t e = 0; e < ints; ++e)
              if (data[e] != int(gi * 100000 + serial * 100 + e)) ++bad;
          });
      }
      for (auto& s : streams) s.synchronize();
    });
    CHECK(stuck == 0);
    CHECK(bad == 0);
    for (auto& f : flags)
      for (auto& v : f) CHECK(v.load() == 0);
  }
}

TEST_CASE("p2p: a receive of another size fails on the receiver once its group is enqueued; no stream hangs") {
  // Rank 1 receives 8 bytes from rank 0, which sends 16, and 16 from rank 2 in the
  // same group: it throws after the group, the second message arrives, and both
  // senders' streams go on.
  constexpr std::size_t p = 3;
  thread_exchange x(p);
  std::vector<mdd::ipc_window> w(p);
  std::vector<std::vector<std::atomic<std::uint32_t>>> flags(p);
  for (auto& f : flags) f = std::vector<std::atomic<std::uint32_t>>(mdd::p2p_flag_words(p));
  std::atomic<int> stuck{0};
  std::string error;
  int data[4] = {1, 2, 3, 4}, got0[4] = {}, got2[4] = {};
  on_threads(p, [&](std::size_t me) {
    thread_exchange::member ex{&x, me};
    REQUIRE(w[me].open(ex, p, me, true));
    fake_stream s;
    host_device dev{me, flags, stuck};
    const std::vector<std::uint32_t> to_1{1}, from_0_2{0, 2};
    if (me != 1) {
      const host_send m{data, sizeof data, 1, &s};
      mdd::p2p_enqueue<mdd::flag_op>(w[me], p, me, mdd::p2p_schedule(p, me, to_1, {}),
                                     std::span<const host_send>(&m, 1), std::span<const host_recv>(), in(30), dev);
    } else {
      const host_recv m[2] = {{got0, 2 * sizeof(int), 0, &s}, {got2, sizeof got2, 2, &s}};
      try {
        mdd::p2p_enqueue<mdd::flag_op>(w[me], p, me, mdd::p2p_schedule(p, me, {}, from_0_2),
                                       std::span<const host_send>(), std::span<const host_recv>(m, 2), in(30), dev);
      } catch (const std::length_error& e) {
        error = e.what();
      }
    }
    s.synchronize();  // the senders' streams too: the receiver released them
  });
  CHECK(error == "rank 0 sends 16 bytes, 8 expected");
  CHECK(stuck == 0);
  CHECK(got0[0] == 0);  // nothing copied from the mismatched send
  CHECK((got2[0] == 1 && got2[3] == 4));
  for (auto& f : flags)
    for (auto& v : f) CHECK(v.load() == 0);
}
