// tests/request_cases.hpp: the nonblocking collectives, written once for every
// transport (test_requests.cpp runs them on threads, test_mpi_requests.cpp on MPI
// processes, test_boost_mpi.cpp on a Boost.MPI communicator).
//
// Each case takes a factory `bind(options)` that binds a fresh communicator on
// this rank, and a `report` that collects what went wrong (the threads test turns
// it into doctest assertions on the main thread, the MPI tests on each rank). All
// expected values are exact: integer sums and maxima of closed forms, and bitwise
// equality with the blocking call for random floats.
#pragma once

#include <mdring/mdring.hpp>
#include "test_support.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace request_cases {

namespace md = mdring;
using i64 = std::int64_t;

struct report {
  std::vector<std::string> failures;
  void expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
};

// Rank r's element j of call i, and the exact sum over P ranks.
inline i64 value(std::size_t r, std::size_t i, std::size_t j) { return i64(r) * 1000 + i64(i) + i64(j % 7); }
inline i64 summed(std::size_t P, std::size_t i, std::size_t j) {
  return 1000 * i64(P * (P - 1) / 2) + i64(P) * (i64(i) + i64(j % 7));
}
// Counts from 0 and 1 up to past the pipelining threshold.
inline std::size_t count_of(std::size_t i) { return i == 0 ? 0 : i == 1 ? 1 : i % 16 == 0 ? 70000 + i : i * 37 + 3; }

// 64 all-reduces of different sizes in flight, in and out of place, waited in
// reverse order.
template <class Bind>
void many_in_flight(Bind&& bind, md::options o, report& rep) {
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank(), N = 64;
  std::vector<std::vector<i64>> in(N), out(N);
  std::vector<md::request> reqs;
  for (std::size_t i = 0; i < N; ++i) {
    const std::size_t n = count_of(i);
    in[i].resize(n);
    for (std::size_t j = 0; j < n; ++j) in[i][j] = value(r, i, j);
    if (i % 2) {
      reqs.push_back(md::iall_reduce(comm, in[i].data(), n, md::sum));
    } else {
      out[i].assign(n, -1);
      reqs.push_back(md::iall_reduce(comm, in[i].data(), out[i].data(), n, md::sum));
    }
  }
  for (std::size_t i = N; i-- > 0;) {
    reqs[i].wait();
    rep.expect(!reqs[i].valid(), "a waited request is empty");
  }
  for (std::size_t i = 0; i < N; ++i) {
    const auto& got = i % 2 ? in[i] : out[i];
    std::size_t bad = 0;
    for (std::size_t j = 0; j < got.size(); ++j) bad += got[j] != summed(P, i, j);
    rep.expect(bad == 0, "many_in_flight: call " + std::to_string(i) + " (" + std::to_string(got.size()) +
                             " elements) has " + std::to_string(bad) + " wrong elements");
  }
}

// All five collectives in flight at once, with a blocking call among them.
template <class Bind>
void mixed(Bind&& bind, md::options o, report& rep) {
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank();
  const std::size_t n = 1009, rc = 97, root_b = 1 % P, root_r = P - 1;
  std::vector<i64> ar(n), rs_in(rc * P), rs_out(rc), ag_in(13), ag_out(13 * P), bc(n), red_in(n), red_out(n, -7);
  std::vector<double> blocking(n);
  for (std::size_t j = 0; j < n; ++j) ar[j] = value(r, 1, j), bc[j] = r == root_b ? i64(j * j) : -1;
  for (std::size_t j = 0; j < n; ++j) red_in[j] = i64((r * 7919 + j) % 1013), blocking[j] = double(r + j);
  for (std::size_t j = 0; j < rc * P; ++j) rs_in[j] = i64(r + j);
  for (std::size_t j = 0; j < 13; ++j) ag_in[j] = i64(r * 100 + j);
  std::vector<md::request> reqs;
  reqs.push_back(md::iall_reduce(comm, ar.data(), n, md::sum));
  reqs.push_back(md::ireduce_scatter(comm, rs_in.data(), rs_out.data(), rc, md::sum));
  md::all_reduce(comm, blocking.data(), n, md::max);  // queued behind the two above
  reqs.push_back(md::iall_gather(comm, ag_in.data(), ag_out.data(), std::size_t(13)));
  reqs.push_back(md::ibroadcast(comm, bc.data(), n, root_b));
  reqs.push_back(md::ireduce(comm, red_in.data(), red_out.data(), n, root_r, md::max));
  md::wait_all(reqs);
  std::size_t bad[6] = {};
  for (std::size_t j = 0; j < n; ++j) {
    bad[0] += ar[j] != summed(P, 1, j);
    bad[1] += blocking[j] != double(P - 1 + j);
    bad[2] += bc[j] != i64(j * j);
    i64 mx = 0;
    for (std::size_t q = 0; q < P; ++q) mx = std::max(mx, i64((q * 7919 + j) % 1013));
    bad[3] += r == root_r ? red_out[j] != mx : red_out[j] != -7;
  }
  for (std::size_t j = 0; j < rc; ++j) bad[4] += rs_out[j] != i64(P * (r * rc + j) + P * (P - 1) / 2);
  for (std::size_t q = 0; q < P; ++q)
    for (std::size_t j = 0; j < 13; ++j) bad[5] += ag_out[q * 13 + j] != i64(q * 100 + j);
  const char* names[] = {"iall_reduce", "blocking all_reduce", "ibroadcast",
                         "ireduce",     "ireduce_scatter",     "iall_gather"};
  for (int k = 0; k < 6; ++k)
    rep.expect(bad[k] == 0, std::string("mixed: ") + names[k] + " has " + std::to_string(bad[k]) + " wrong elements");
}

// Random floats: the nonblocking result is bitwise the blocking one (large enough
// to be cut into pipeline segments where the topology has two dimensions).
template <class Bind>
void bitwise(Bind&& bind, md::options o, report& rep) {
  auto comm = bind(o);
  const std::size_t r = comm.rank(), n = 300007;
  std::vector<float> in(n), a(n), b(n);
  for (std::size_t j = 0; j < n; ++j) in[j] = float(double(mdring_test::mix(r * n + j) >> 11) * 0x1p-53 * 2.0 - 1.0);
  md::all_reduce(comm, in.data(), a.data(), n, md::sum);
  auto req = md::iall_reduce(comm, in.data(), b.data(), n, md::sum);
  req.wait();
  rep.expect(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0, "bitwise: iall_reduce differs from all_reduce");
}

// test() polled to completion, wait_any over several, and test_any.
template <class Bind>
void polling(Bind&& bind, md::options o, report& rep) {
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank(), K = 5;
  std::vector<std::vector<i64>> bufs(K);
  std::vector<md::request> reqs;
  for (std::size_t i = 0; i < K; ++i) {
    bufs[i].resize(count_of(i + 2));
    for (std::size_t j = 0; j < bufs[i].size(); ++j) bufs[i][j] = value(r, i, j);
    reqs.push_back(md::iall_reduce(comm, bufs[i].data(), bufs[i].size(), md::sum));
  }
  std::size_t polls = 0;
  while (!reqs[K - 1].test()) ++polls;  // the last one: test() drives the earlier ones too
  rep.expect(!reqs[K - 1].valid(), "polling: a request that tested true is empty");
  std::vector<bool> seen(K, false);
  seen[K - 1] = true;
  for (std::size_t left = K - 1; left > 0; --left) {
    const std::size_t i = left % 2 ? md::wait_any(reqs) : [&] {
      std::size_t k;
      while ((k = md::test_any(reqs)) == reqs.size()) {}
      return k;
    }();
    rep.expect(i < K && !seen[i], "polling: wait_any/test_any returned " + std::to_string(i));
    if (i < K) seen[i] = true;
  }
  rep.expect(md::wait_any(reqs) == reqs.size(), "polling: wait_any with no valid request returns size()");
  for (std::size_t i = 0; i < K; ++i) {
    std::size_t bad = 0;
    for (std::size_t j = 0; j < bufs[i].size(); ++j) bad += bufs[i][j] != summed(P, i, j);
    rep.expect(bad == 0, "polling: call " + std::to_string(i) + " wrong");
  }
  (void)polls;
}

// A request destroyed without wait, and a communicator destroyed with requests in
// flight: both wait; the results are there afterwards.
template <class Bind>
void destroyed(Bind&& bind, md::options o, report& rep) {
  std::vector<md::request> outlive;
  std::vector<std::vector<i64>> bufs(4);
  std::size_t P = 0;
  {
    auto comm = bind(o);
    P = comm.size();
    for (std::size_t i = 0; i < 4; ++i) {
      bufs[i].resize(count_of(i + 10));
      for (std::size_t j = 0; j < bufs[i].size(); ++j) bufs[i][j] = value(comm.rank(), i, j);
    }
    { auto dropped = md::iall_reduce(comm, bufs[0].data(), bufs[0].size(), md::sum); }  // waits here
    std::size_t bad = 0;
    for (std::size_t j = 0; j < bufs[0].size(); ++j) bad += bufs[0][j] != summed(P, 0, j);
    rep.expect(bad == 0, "destroyed: the request destroyed without wait did not complete");
    for (std::size_t i = 1; i < 4; ++i)
      outlive.push_back(md::iall_reduce(comm, bufs[i].data(), bufs[i].size(), md::sum));
  }  // the communicator waits for the three in flight
  for (auto& q : outlive) rep.expect(q.ready(), "destroyed: a request outlived its communicator unfinished");
  md::wait_all(outlive);
  for (std::size_t i = 1; i < 4; ++i) {
    std::size_t bad = 0;
    for (std::size_t j = 0; j < bufs[i].size(); ++j) bad += bufs[i][j] != summed(P, i, j);
    rep.expect(bad == 0, "destroyed: call " + std::to_string(i) + " wrong after its communicator went away");
  }
}

// Who moves the calls: with the agent, a request completes while no rank calls
// wait or test; with in_wait, it does not move until this rank waits, or polls
// (mdring::poll: one round of what the agent does).
template <class Bind>
void progress(Bind&& bind, md::options o, report& rep) {
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank();
  std::vector<i64> buf(5000);
  for (std::size_t j = 0; j < buf.size(); ++j) buf[j] = value(r, 3, j);
  auto req = md::iall_reduce(comm, buf.data(), buf.size(), md::sum);
  if (comm.progress() == md::progress_mode::agent) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!req.ready() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    rep.expect(req.ready(), "progress: the agent did not complete a call nobody waited for");
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    rep.expect(!req.ready(), "progress: in_wait moved a call without a wait or test");
    // mdring::poll moves it (as the agent would), without wait or test: until it
    // has completed, and then says nothing moved.
    bool moved = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!req.ready() && std::chrono::steady_clock::now() < until) moved |= md::poll(comm);
    rep.expect(req.ready() && moved, "progress: mdring::poll did not complete a call");
    rep.expect(!md::poll(comm), "progress: mdring::poll moved something after the last call completed");
  }
  req.wait();
  std::size_t bad = 0;
  for (std::size_t j = 0; j < buf.size(); ++j) bad += buf[j] != summed(P, 3, j);
  rep.expect(bad == 0, "progress: wrong result");
}

// A failure surfaced at wait on every rank: under collective checks, rank 0
// passes a different count; every rank's wait throws invalid_argument("count"),
// and the communicator survives (the next call works).
template <class Bind>
void failure_at_wait(Bind&& bind, md::options o, report& rep) {
  o.checks = md::check_level::collective;
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank();
  std::vector<i64> ok(100), bad(101);
  for (std::size_t j = 0; j < 100; ++j) ok[j] = value(r, 5, j);
  auto first = md::iall_reduce(comm, ok.data(), ok.size(), md::sum);
  auto second = md::iall_reduce(comm, bad.data(), r == 0 && P > 1 ? 101 : 100, md::sum);
  first.wait();
  std::string what;
  try {
    second.wait();
  } catch (const md::invalid_argument& e) {
    what = e.argument();
  }
  rep.expect(P == 1 || what == "count", "failure_at_wait: wait threw '" + what + "', expected count");
  std::size_t wrong = 0;
  for (std::size_t j = 0; j < 100; ++j) wrong += ok[j] != summed(P, 5, j);
  rep.expect(wrong == 0, "failure_at_wait: the call before the failing one is wrong");
  std::vector<i64> after(10, i64(r));
  md::all_reduce(comm, after.data(), after.size(), md::sum);
  rep.expect(after[9] == i64(P * (P - 1) / 2), "failure_at_wait: the communicator did not survive");
}

// request::on_complete: each callback runs once, in completion (= issue) order,
// after the result is in the buffer; one registered after completion runs at once
// on the caller's thread; a failing call's callback gets its error.
template <class Bind>
void callbacks(Bind&& bind, md::options o, report& rep) {
  o.checks = md::check_level::collective;
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank(), N = 8;
  std::vector<std::vector<i64>> buf(N);
  std::vector<md::request> reqs;
  std::mutex m;
  std::vector<std::size_t> order;
  std::vector<int> calls(N, 0), wrong(N, 0), errors(N, 0);
  for (std::size_t i = 0; i < N; ++i) {
    buf[i].resize(count_of(i + 2));
    for (std::size_t j = 0; j < buf[i].size(); ++j) buf[i][j] = value(r, i, j);
    reqs.push_back(md::iall_reduce(comm, buf[i].data(), buf[i].size(), md::sum));
    reqs.back().on_complete([&, i](std::exception_ptr e) {
      std::lock_guard l(m);
      order.push_back(i);
      ++calls[i];
      errors[i] += e != nullptr;
      for (std::size_t j = 0; j < buf[i].size(); ++j) wrong[i] += buf[i][j] != summed(P, i, j);
    });
  }
  md::wait_all(reqs);  // returns after every callback has
  {
    std::lock_guard l(m);
    rep.expect(order.size() == N, "callbacks: " + std::to_string(order.size()) + " of " + std::to_string(N) + " ran");
    bool in_order = true;
    for (std::size_t i = 0; i < order.size(); ++i) in_order &= order[i] == i;
    rep.expect(in_order, "callbacks: not in issue order");
    for (std::size_t i = 0; i < N; ++i) {
      rep.expect(calls[i] == 1,
                 "callbacks: call " + std::to_string(i) + " notified " + std::to_string(calls[i]) + " times");
      rep.expect(wrong[i] == 0 && errors[i] == 0,
                 "callbacks: call " + std::to_string(i) + " not complete when notified");
    }
  }
  // Registered once q is ready (notified): it runs once, at once, on this thread.
  std::vector<i64> late(100, i64(r)), later(10, 1);
  auto q = md::iall_reduce(comm, late.data(), late.size(), md::sum);
  auto q2 = md::iall_reduce(comm, later.data(), later.size(), md::sum);
  q2.wait();
  // q completed first, but another thread may still be notifying it.
  for (int spin = 0; spin < 200000 && !q.ready(); ++spin) std::this_thread::sleep_for(std::chrono::microseconds(100));
  rep.expect(q.ready(), "callbacks: an earlier call did not complete");
  std::atomic<int> ran{0};
  const auto me = std::this_thread::get_id();
  bool here = false;
  q.on_complete([&](std::exception_ptr e) { ran += e ? 100 : 1, here = std::this_thread::get_id() == me; });
  rep.expect(ran.load() == 1 && here, "callbacks: registered after completion, not run at once on the caller");
  q.wait();
  rep.expect(ran.load() == 1, "callbacks: registered after completion, ran " + std::to_string(ran.load()));
  rep.expect(late[99] == i64(P * (P - 1) / 2), "callbacks: wrong late result");
  // A failing call (rank 0 passes another count): the callback gets the error.
  std::vector<i64> bad(11, 0);
  auto f = md::iall_reduce(comm, bad.data(), r == 0 && P > 1 ? 11 : 10, md::sum);
  std::atomic<int> got{-1};
  f.on_complete([&](std::exception_ptr e) { got = e ? 1 : 0; });
  try {
    f.wait();
  } catch (const md::invalid_argument&) {}
  rep.expect(got.load() == (P > 1 ? 1 : 0),
             "callbacks: a failing call's callback got error flag " + std::to_string(got.load()));
}

// A rank that fails with k calls in flight (rank 1's last call has a null
// buffer): every other rank's wait throws remote_error naming rank 1, however it
// waits (how: 0 wait in order, 1 wait_all, 2 wait_any, 3 test), nothing escapes a
// request's destructor, and the communicator then refuses new calls with
// communicator_error. On one communicator only: a threads
// world stays failed afterwards (run it in a world of its own).
template <class Bind>
void peer_fails_in_flight(Bind&& bind, md::options o, std::size_t k, int how, report& rep) {
  auto comm = bind(o);
  const std::size_t P = comm.size(), r = comm.rank(), n = 5000;
  if (P < 2) return;
  const std::string label =
      "peer_fails_in_flight (" + std::to_string(k) + " calls, wait " + std::to_string(how) + "): ";
  std::vector<std::vector<i64>> bufs(k, std::vector<i64>(n, 1));
  std::string got = "nothing";
  std::size_t who = std::size_t(-1);
  {
    std::vector<md::request> q;
    try {
      for (std::size_t i = 0; i < k; ++i)
        q.push_back(md::iall_reduce(comm, r == 1 && i + 1 == k ? nullptr : bufs[i].data(), n, md::sum));
      if (how == 1) {
        md::wait_all(q);
      } else if (how == 2) {
        for (std::size_t left = q.size(); left; --left) (void)md::wait_any(q);
      } else if (how == 3) {
        for (auto& x : q)
          while (!x.test()) std::this_thread::yield();
      } else {
        for (auto& x : q) x.wait();
      }
    } catch (const md::remote_error& e) {
      got = "remote_error", who = e.failed_rank();
    } catch (const md::invalid_argument& e) {
      got = "invalid_argument " + e.argument();
    } catch (const std::exception& e) {
      got = e.what();
    }
  }  // requests not waited for are destroyed here: their errors dropped
  if (r == 1)
    rep.expect(got == "invalid_argument recvbuf" || got == "invalid_argument sendbuf", label + "rank 1 got " + got);
  else rep.expect(got == "remote_error" && who == 1, label + "got " + got + " naming " + std::to_string(who));
  // (The calls before the failing one may fail too on the survivors: the failure
  // stops every wait of theirs from the moment its notice arrives, and one of
  // them may still be finishing an earlier call then.)
  std::string refused = "accepted";
  std::vector<i64> after(10, 1);
  try {
    md::all_reduce(comm, after.data(), after.size(), md::sum);
  } catch (const md::communicator_error&) {
    refused = "communicator_error";
  } catch (const std::exception& e) {
    refused = e.what();
  }
  rep.expect(refused == "communicator_error", label + "a call after the failure: " + refused);
}

// Every case, in one progress mode.
template <class Bind>
void all_cases(Bind&& bind, md::progress_mode mode, report& rep) {
  md::options o;
  o.progress = mode;
  many_in_flight(bind, o, rep);
  mixed(bind, o, rep);
  bitwise(bind, o, rep);
  polling(bind, o, rep);
  destroyed(bind, o, rep);
  progress(bind, o, rep);
  failure_at_wait(bind, o, rep);
  callbacks(bind, o, rep);
}

}  // namespace request_cases
