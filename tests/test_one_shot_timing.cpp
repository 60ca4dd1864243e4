// tests/test_one_shot_timing.cpp: broadcasts and reduces above the one-shot cap
// streamed or by their programs as their first calls timed both ways
// (plan/stream_choice.hpp, executor/host/one_shot.hpp, collective/launch.hpp
// call_runner): the choice's arithmetic, the trials on threads (exact results, the
// same way on every rank, explain()), and a peer that stalls at the exchange.
// Between processes: test_mpi_options.cpp ("streamed rooted calls").
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "one_shot_support.hpp"

#include <chrono>
#include <cstdint>
#include <latch>
#include <string>
#include <thread>
#include <vector>

namespace md = mdring;

namespace {

using mdring_test::on_threads;
using mdring_test::one_shot_calls;

}  // namespace

TEST_CASE("streamed or not by timing: the trials alternate, every rank's times decide (plan/stream_choice.hpp)") {
  using md::collective;
  using choice = md::detail::stream_choice;
  using way = choice::way;
  // Size classes: the bytes rounded up to a power of two, per collective.
  CHECK(choice::slot_of(collective::broadcast, 8193) == 14);
  CHECK(choice::slot_of(collective::broadcast, 16384) == 14);
  CHECK(choice::slot_of(collective::broadcast, 16385) == 15);
  CHECK(choice::slot_of(collective::reduce, 65536) == choice::classes + 16);
  CHECK(choice::slot_of(collective::all_reduce, 65536) == choice::npos);
  CHECK(choice::kind_of(choice::classes + 16) == collective::reduce);
  CHECK(choice::kind_of(16) == collective::broadcast);
  CHECK(choice::class_max(choice::classes + 16) == 65536);
  choice c;
  CHECK_FALSE(c.armed());
  c.arm(65536, 0);
  CHECK_FALSE(c.armed());  // no trials: never timed
  c.arm(65536, 2);
  REQUIRE(c.armed());
  CHECK(c.requested() == 65536);
  const std::size_t s = choice::slot_of(collective::broadcast, 40000);
  // 2 x 2 trials: program, stream, program, stream; each left pending once.
  const way expect[] = {way::program, way::stream, way::program, way::stream};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK_FALSE(c.must_agree(s));
    CHECK(c.begin(s) == expect[i]);
    const auto t = c.take_pending();
    REQUIRE(t);
    CHECK(t->slot == s);
    CHECK(t->w == expect[i]);
    CHECK_FALSE(c.take_pending());
    c.record(s, t->w, t->w == way::stream ? 900 - 100 * i : 1000 + i);  // least: program 1000, stream 600
  }
  CHECK(c.at(s).calls == 4);
  CHECK(c.must_agree(s));
  std::uint64_t mine[2];
  c.times(s, mine);
  CHECK(mine[0] == 1000);
  CHECK(mine[1] == 600);
  // Rank 1 streamed slower than rank 0's program and its own: the slowest ranks compare, 1200 against 1100.
  const std::uint64_t all[] = {mine[0], mine[1], 1100, 1200};
  c.decide(s, all, 2);
  CHECK_FALSE(c.must_agree(s));
  CHECK(c.at(s).decided == 0);
  CHECK(c.at(s).slowest[0] == 1100);
  CHECK(c.at(s).slowest[1] == 1200);
  CHECK(c.begin(s) == way::program);
  CHECK_FALSE(c.take_pending());  // decided: nothing more timed
  CHECK(c.at(s).calls == 4);
  // Another class, where streaming wins on the slowest rank; a reduce's classes are its own.
  const std::size_t r = choice::slot_of(collective::reduce, 40000);
  CHECK(c.at(r).calls == 0);
  for (int i = 0; i < 4; ++i) (void)c.begin(r), (void)c.take_pending();
  const std::uint64_t faster[] = {5000, 3000, 4000, 3500};
  c.decide(r, faster, 2);
  CHECK(c.at(r).decided == 1);
  CHECK(c.next(r) == way::stream);
  // A rank that timed no call of a way counts as infinitely slow that way: no stream.
  const std::size_t u = choice::slot_of(collective::reduce, 10000);
  const std::uint64_t untimed[] = {5000, choice::untimed, 9000, 10};
  c.decide(u, untimed, 2);
  CHECK(c.at(u).decided == 0);
  c.decide(u, nullptr, 0);  // nothing exchanged (a cap under 16 bytes): the program
  CHECK(c.at(u).decided == 0);
}

TEST_CASE("streamed or not by timing: on threads, the first calls alternate, then every rank takes one way") {
  using md::collective;
  // Two threads on a machine of at least two cores: not crowded, so bind leaves the
  // choice to the calls (ranks of one process measure no distance).
  if (std::thread::hardware_concurrency() < 2) return;
  const auto fails = on_threads("shm:2", md::options{}, [&](auto& comm, std::vector<std::string>& f) {
    const std::size_t r = comm.rank(), n = 10000;  // 40000 B: a class of 32 KiB to 64 KiB, 5 steps when streamed
    const std::string before = comm.template explain<float>(n, collective::broadcast, md::sum, 1);
    if (before.find("streamed or not by timing: the first 8 broadcasts of 32769 to 65536 B alternate between the "
                    "stages below and streaming over node memory, then every rank takes the way whose slowest rank "
                    "was faster (tune.one_shot_stream_trials = 4; ranks of one process measure nothing at bind, "
                    "tune.one_shot_stream_max_trip_ns = 100); 0 of them so far") == std::string::npos)
      f.push_back("explain before the calls:\n" + before);
    if (comm.runs_one_shot(collective::broadcast, n, 4)) f.push_back("runs_one_shot before any call");
    std::vector<float> a(n), b(n, float(r + 1)), c(n);
    for (std::size_t k = 0; k < 12; ++k) {
      const std::uint64_t calls = one_shot_calls(comm);
      for (std::size_t i = 0; i < n; ++i) a[i] = r == 1 ? float(i % 1000) + float(k) : -1.0f;
      md::broadcast(comm, a.data(), n, 1);
      for (std::size_t i = 0; i < n; ++i)
        if (a[i] != float(i % 1000) + float(k)) {
          f.push_back("broadcast " + std::to_string(k) + " [" + std::to_string(i) + "] " + std::to_string(a[i]));
          break;
        }
      // Calls 1, 3, 5, 7 run the program, 2, 4, 6, 8 stream; the 9th exchanges the
      // times first (a one-shot all_gather), then goes the way decided.
      const bool decided_stream = comm.runs_one_shot(collective::broadcast, n, 4);
      const std::uint64_t want = k < 8 ? k % 2 : (k == 8) + decided_stream;
      if (one_shot_calls(comm) - calls != want)
        f.push_back("call " + std::to_string(k) + ": " + std::to_string(one_shot_calls(comm) - calls) +
                    " one-shot calls, expected " + std::to_string(want));
      if (k == 3) {
        const std::string e = comm.template explain<float>(n, collective::broadcast, md::sum, 1);
        if (e.find("; 4 of them so far") == std::string::npos) f.push_back("explain after 4 calls:\n" + e);
      }
      // Nonblocking reduces in flight meanwhile, a class of their own (timed as they complete).
      md::request q = md::ireduce(comm, b.data(), c.data(), n, 0);
      q.wait();
      if (r == 0 && (c[0] != 3.0f || c[n - 1] != 3.0f)) f.push_back("ireduce " + std::to_string(k));
    }
    const std::string after = comm.template explain<float>(n, collective::broadcast, md::sum, 1);
    const bool streams = comm.runs_one_shot(collective::broadcast, n, 4);
    const char* said = streams ? "one-shot: this call runs over node memory in 5 steps of at most 8192 B"
                               : "not streamed over node memory: the first 8 broadcasts of 32769 to 65536 B were "
                                 "timed both ways and the slowest rank's least time was ";
    if (after.find(said) == std::string::npos) f.push_back("explain after the choice:\n" + after);
    if (streams && after.find("; chosen by timing the first 8 broadcasts of 32769 to 65536 B both ways: the slowest "
                              "rank's least time was ") == std::string::npos)
      f.push_back("explain of the streamed choice:\n" + after);
    // Other sizes of the class follow it; a class not yet timed does not.
    if (comm.runs_one_shot(collective::broadcast, 16384, 4) != streams) f.push_back("64 KiB broadcast differs");
    if (comm.runs_one_shot(collective::broadcast, 4096, 4)) f.push_back("16 KiB broadcast decided untimed");
    f.push_back(std::string("decided ") + (streams ? "stream" : "program"));  // (compared below, then dropped)
  });
  std::vector<std::string> decided, real;
  for (const auto& f : fails) (f.find("decided ") != std::string::npos ? decided : real).push_back(f);
  for (auto& f : real) FAIL_CHECK(f);
  CHECK(real.empty());
  REQUIRE(decided.size() == 2);
  CHECK(decided[0] == decided[1]);  // every rank took the same way
}

TEST_CASE("streamed or not by timing: a peer that stalls at the exchange is named, no rank hangs") {
  using namespace std::chrono_literals;
  if (std::thread::hardware_concurrency() < 2) return;  // (crowded: nothing timed)
  md::options o;
  o.timeout = 300ms;
  std::string what;
  std::size_t peer = 99;
  std::latch done(2);
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2"), ep, o);
    std::vector<float> v(10000, 1.0f);
    for (int k = 0; k < 8; ++k) md::broadcast(comm, v.data(), v.size(), 0);  // the trials
    if (ep.rank == 0) {
      try {
        md::broadcast(comm, v.data(), v.size(), 0);  // exchanges the times first; rank 1 is away
      } catch (const md::timeout_error& e) {
        what = e.what(), peer = e.peer();
      }
    }
    done.arrive_and_wait();
  });
  INFO(what);
  CHECK(peer == 1);
  CHECK(what.find("mdring::broadcast (exchanging its first calls' times): timed out after 0.3 s") != std::string::npos);
  CHECK(what.find("waiting for rank 1") != std::string::npos);
}
