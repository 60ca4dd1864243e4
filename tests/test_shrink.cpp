// tests/test_shrink.cpp: a job that loses ranks goes on (collective/shrink.hpp) on
// the threads transport: the topology that survives (topology/survivors.hpp), the
// agreement on who failed (collective/failed_set.hpp) under crashes and stalls
// during itself, and shrink end to end: ranks killed with calls in flight, a rank
// that stalls, nothing failed, revoke, the rank whose node was dropped, and the old
// communicator afterwards. The UCX transport's are in tests/ucx/test_ucx_faults.cpp.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "shrink_support.hpp"

#include <algorithm>
#include <barrier>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace md = mdring;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

std::vector<char> failed_of(std::size_t n, std::initializer_list<std::size_t> ranks) {
  std::vector<char> f(n, 0);
  for (auto r : ranks) f[r] = 1;
  return f;
}

// A rank "killed": its thread ends by this exception (the world hears of it as of any
// rank whose function throws).
struct killed : std::runtime_error {
  killed() : std::runtime_error("killed by the test") {}
};

// Runs body(ep) on n threads of world w, as threads::run does (a rank that throws
// poisons the world and leaves it), without rethrowing: returns what each threw.
template <class F>
std::vector<std::exception_ptr> on_world(md::threads::world& w, F body) {
  std::vector<std::exception_ptr> errors(w.size());
  std::vector<std::thread> pool;
  for (std::size_t r = 0; r < w.size(); ++r)
    pool.emplace_back([&, r] {
      try {
        body(w.at(r));
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        w.fail(r, e.what());
      }
      w.leave(r, errors[r] != nullptr);
    });
  for (auto& t : pool) t.join();
  return errors;
}

std::string what_of(const std::exception_ptr& p) {
  if (!p) return "(nothing)";
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  }
}

md::options opts(std::chrono::milliseconds timeout = 5s) {
  md::options o;
  o.timeout = timeout;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------
// What survives
TEST_CASE("survivors_of: a failed rank takes its slab of the outermost dimension") {
  const auto t = md::parse_topology("shm:2 x ethernet:4").resolve(8);
  auto s = md::survivors_of(t, failed_of(8, {5}));
  CHECK(s.topology.to_string() == "shm:2 x ethernet:3");
  CHECK(s.members == std::vector<std::size_t>{0, 1, 2, 3, 6, 7});
  CHECK(s.dimension == 1);
  CHECK(s.dropped == std::vector<std::size_t>{2});
  CHECK(s.failed == std::vector<std::size_t>{5});
  CHECK(s.describe() == "shm:2 x ethernet:4 -> shm:2 x ethernet:3 (ethernet coordinate 2 dropped: rank 5 failed)");

  // Two ranks of one node, and one of another.
  s = md::survivors_of(t, failed_of(8, {0, 1, 6}));
  CHECK(s.topology.to_string() == "shm:2 x ethernet:2");
  CHECK(s.members == std::vector<std::size_t>{2, 3, 4, 5});
  CHECK(s.describe() ==
        "shm:2 x ethernet:4 -> shm:2 x ethernet:2 (ethernet coordinates 0, 3 dropped: ranks 0, 1, 6 failed)");

  // Three dimensions: the outermost goes, the inner two stay whole.
  const auto t3 = md::parse_topology("nvlink:2 x pcie:2 x infiniband:3").resolve(12);
  s = md::survivors_of(t3, failed_of(12, {7}));
  CHECK(s.topology.to_string() == "nvlink:2 x pcie:2 x infiniband:2");
  CHECK(s.members == std::vector<std::size_t>{0, 1, 2, 3, 8, 9, 10, 11});

  // One dimension: the rank alone. An outermost extent of 1: the next one in.
  s = md::survivors_of(md::parse_topology("shm:8").resolve(8), failed_of(8, {3}));
  CHECK(s.topology.to_string() == "shm:7");
  CHECK(s.members == std::vector<std::size_t>{0, 1, 2, 4, 5, 6, 7});
  s = md::survivors_of(md::parse_topology("shm:4 x ethernet:1").resolve(4), failed_of(4, {0}));
  CHECK(s.topology.to_string() == "shm:3 x ethernet:1");
  CHECK(s.members == std::vector<std::size_t>{1, 2, 3});
}

TEST_CASE("survivors_of: nothing failed, everything failed, a wrong size") {
  const auto t = md::parse_topology("shm:2 x ethernet:2").resolve(4);
  auto s = md::survivors_of(t, failed_of(4, {}));
  CHECK(s.topology == t);
  CHECK(s.members == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(s.describe() == "shm:2 x ethernet:2 (no rank failed)");
  s = md::survivors_of(t, failed_of(4, {1, 2}));
  CHECK(s.members.empty());
  CHECK(s.describe() == "shm:2 x ethernet:2 -> nothing (ethernet coordinates 0, 1 dropped: ranks 1, 2 failed)");
  try {
    (void)md::survivors_of(t, failed_of(5, {}));
    FAIL("no error");
  } catch (const md::topology_error& e) {
    CHECK(e.argument() == "failed");
    CHECK(contains(e.what(), "5 ranks' failures given for \"shm:2 x ethernet:2\" (4 ranks)"));
  }
}

TEST_CASE("plan_growth: the grown topology and node-major ranks, or why the shape does not fit") {
  const auto t = md::parse_topology("shm:2 x ethernet:2").resolve(4);
  auto d = [](const char* host, int pid) { return std::string(host) + "/boot\n0\n" + std::to_string(pid); };
  // Members on hosts a and b; two joiners on c, a new node.
  auto g = md::detail::plan_growth(t, 6, {d("a", 1), d("a", 2), d("b", 3), d("b", 4), d("c", 5), d("c", 6)});
  CHECK(g.why_not == "");
  CHECK(g.topology.to_string() == "shm:2 x ethernet:3");
  CHECK(g.order == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});
  // Joiners that fill a node the shrink dropped come after it in slot order; hosts
  // keep the order of their first slot.
  g = md::detail::plan_growth(t, 6, {d("a", 1), d("a", 2), d("c", 3), d("c", 4), d("b", 5), d("a", 6)});
  CHECK(g.why_not ==
        "host a would hold 3 ranks, not a multiple of 2 (the ranks of one ethernet coordinate of "
        "\"shm:2 x ethernet:3\")");
  g = md::detail::plan_growth(t, 8,
                              {d("a", 1), d("b", 2), d("a", 3), d("b", 4), d("c", 5), d("d", 6), d("c", 7), d("d", 8)});
  CHECK(g.topology.to_string() == "shm:2 x ethernet:4");
  CHECK(g.order == std::vector<std::size_t>{0, 2, 1, 3, 4, 6, 5, 7});
  // All on one host (a test machine): members first, then joiners.
  g = md::detail::plan_growth(t, 6, {d("a", 1), d("a", 2), d("a", 3), d("a", 4), d("a", 5), d("a", 6)});
  CHECK(g.order == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});
  g = md::detail::plan_growth(t, 5, {});
  CHECK(g.why_not ==
        "a size of 5 does not fit \"shm:2 x ethernet:2\": it must be a multiple of 2, the ranks of one "
        "ethernet coordinate");
  // One dimension: any host.
  g = md::detail::plan_growth(md::parse_topology("ethernet:3").resolve(3), 4,
                              {d("a", 1), d("b", 2), d("a", 3), d("c", 4)});
  CHECK(g.topology.to_string() == "ethernet:4");
  CHECK(g.order == std::vector<std::size_t>{0, 2, 1, 3});
}

// ---------------------------------------------------------------------------
// The agreement, with ranks that crash part-way through their sends and ranks that
// start late, over a threads world's survivor messages.
namespace {
struct crash {};
struct flaky_link {
  md::threads::world& w;
  std::size_t rank;
  long sends_left;  // crash before the send after this many (-1: never)
  void survivor_send(std::size_t peer, const std::string& bytes, std::uint32_t tag) {
    if (sends_left == 0) throw crash{};
    if (sends_left > 0) --sends_left;
    w.survivor_post(1, rank, peer, tag, bytes);
  }
  md::survivor_message survivor_recv(std::size_t peer, std::uint32_t tag, md::deadline_clock::time_point dl) {
    return w.survivor_take(1, peer, rank, tag, dl);
  }
};
}  // namespace

TEST_CASE("the agreement: every rank that finishes has the same set, whoever crashes or starts late") {
  for (unsigned seed = 1; seed <= 24; ++seed) {
    std::mt19937 rng(seed);
    const std::size_t n = 3 + rng() % 6;
    std::vector<long> crash_after(n, -1);
    std::vector<int> late_ms(n, 0);
    std::vector<char> dead_at_start(n, 0);
    for (std::size_t r = 0; r < n; ++r) {
      const unsigned k = rng() % 8;
      if (k == 0) dead_at_start[r] = 1;                         // never starts
      else if (k == 1) crash_after[r] = long(rng() % (2 * n));  // dies in phase 1 or 2
      else if (k == 2) late_ms[r] = int(rng() % 500);           // starts late (step: 150 ms)
    }
    dead_at_start[rng() % n] = 0;  // somebody lives
    md::threads::world w(n);
    std::vector<std::vector<char>> got(n);
    std::vector<char> finished(n, 0);
    std::vector<std::thread> pool;
    for (std::size_t r = 0; r < n; ++r)
      pool.emplace_back([&, r] {
        if (!dead_at_start[r]) {
          std::this_thread::sleep_for(std::chrono::milliseconds(late_ms[r]));
          flaky_link link{w, r, crash_after[r]};
          try {
            got[r] = md::detail::agree_on_failed(link, n, r, std::vector<char>(n, 0), 150ms, 0);
            finished[r] = 1;
          } catch (const crash&) {}
        }
        w.leave(r);
      });
    for (auto& t : pool) t.join();
    INFO("seed " << seed << ", " << n << " ranks");
    std::size_t first = n;
    for (std::size_t r = 0; r < n; ++r)
      if (finished[r]) {
        if (first == n) first = r;
        INFO("rank " << r << " against rank " << first);
        CHECK(got[r] == got[first]);
        for (std::size_t d = 0; d < n; ++d)
          if (dead_at_start[d]) CHECK(got[r][d] == 1);  // never heard of: failed everywhere
      }
    CHECK(first < n);
  }
}

TEST_CASE("the agreement: nothing failed, an empty set") {
  constexpr std::size_t n = 5;
  md::threads::world w(n);
  std::vector<std::vector<char>> got(n);
  std::vector<std::thread> pool;
  for (std::size_t r = 0; r < n; ++r)
    pool.emplace_back([&, r] {
      flaky_link link{w, r, -1};
      got[r] = md::detail::agree_on_failed(link, n, r, std::vector<char>(n, 0), 5s, 3);
    });
  for (auto& t : pool) t.join();
  for (auto& g : got) CHECK(g == std::vector<char>(n, 0));
}

TEST_CASE("the agreement: a left-out rank's error says what it saw of each failed rank") {
  using fs = md::detail::failure_seen;
  const std::vector<char> failed{1, 1, 0, 1, 1};
  const std::vector<fs> seen{fs::before, fs::during, fs::before, fs::silent, fs::named_by_others};
  CHECK(md::detail::seen_from_here(failed, seen, 4, 1500ms) ==
        "; as this rank saw them: rank 0 gone before the shrink (its process ended or its link failed), rank 1 gone "
        "during it, rank 3 silent for 1500 ms, rank 4 (this one) named by the others");
  CHECK(md::detail::seen_from_here(std::vector<char>(5, 0), seen, 4, 1500ms).empty());
}

TEST_CASE("the agreement: a rank silent from the start costs its round one step, a live coordinator's two") {
  // Rank 3 never answers (a node whose link was cut): every other rank counts it
  // failed after phase 1, so its coordinator round waits one step, not two.
  constexpr std::size_t n = 4;
  constexpr auto step = 200ms;
  struct timed_link : flaky_link {
    std::vector<std::pair<std::size_t, double>> waits;  // (coordinator, the ms its round could wait)
    md::survivor_message survivor_recv(std::size_t peer, std::uint32_t tag, md::deadline_clock::time_point dl) {
      if (tag == md::detail::survivor_tag(0, md::detail::coordinator))
        waits.emplace_back(peer, std::chrono::duration<double, std::milli>(dl - md::deadline_clock::now()).count());
      return flaky_link::survivor_recv(peer, tag, dl);
    }
  };
  md::threads::world w(n);
  std::vector<std::vector<char>> got(n);
  std::vector<std::vector<md::detail::failure_seen>> seen(n);
  std::vector<std::vector<std::pair<std::size_t, double>>> waits(n);
  std::vector<std::thread> pool;
  for (std::size_t r = 0; r + 1 < n; ++r)
    pool.emplace_back([&, r] {
      timed_link link{{w, r, -1}, {}};
      got[r] = md::detail::agree_on_failed(link, n, r, std::vector<char>(n, 0), step, 0, &seen[r]);
      waits[r] = link.waits;
    });
  for (auto& t : pool) t.join();
  w.leave(n - 1);
  using fs = md::detail::failure_seen;
  for (std::size_t r = 0; r + 1 < n; ++r) {
    INFO("rank " << r);
    CHECK(got[r] == std::vector<char>{0, 0, 0, 1});
    CHECK(seen[r][3] == fs::silent);  // what each saw itself
    CHECK(md::detail::seen_from_here(got[r], seen[r], r, step) == "; as this rank saw them: rank 3 silent for 200 ms");
    REQUIRE(waits[r].size() == n - 1);  // every coordinator but itself
    for (const auto& wait : waits[r]) {
      const std::size_t c = wait.first;  // (no structured binding: clang's INFO lambda cannot capture one)
      const double ms = wait.second;
      INFO("coordinator " << c << ": " << ms << " ms");
      if (c == n - 1) CHECK((ms > 150 && ms <= 200.5));
      else CHECK(ms > 350);
    }
  }
}

// ---------------------------------------------------------------------------
// shrink end to end
TEST_CASE("shrink: a rank killed; its node dropped, the rest go on with exact results") {
  md::threads::world w(8);
  std::vector<std::string> topo(8), old_after(8), explain(8);
  std::vector<std::size_t> size(8, 99), rank(8, 99);
  std::vector<std::int64_t> sum(8, -1);
  std::vector<std::string> left_out_call(8);
  std::barrier<> first_done(8);
  auto errors = on_world(w, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:4"), ep, opts());
    std::vector<std::int64_t> x(1000, 1);
    md::all_reduce(comm, x.data(), x.size());
    // Every rank is out of the first call before rank 5 dies: a rank still reading
    // rank 5's line of it would find the line marked broken and fail there, outside
    // the test's reach, and the others would count it failed too (seen in CI: its
    // node dropped as well, "shm:2 x ethernet:2").
    first_done.arrive_and_wait();
    if (ep.rank == 5) throw killed();
    CHECK_THROWS_AS(md::all_reduce(comm, x.data(), x.size()), md::remote_error);
    auto s = md::shrink(comm);
    topo[ep.rank] = s.topology().to_string();
    size[ep.rank] = s.size();
    try {
      md::all_reduce(comm, x.data(), x.size());
    } catch (const md::communicator_error& e) {
      old_after[ep.rank] = e.what();
    }
    if (s.size() == 0) {
      try {
        md::all_reduce(s, x.data(), x.size());
      } catch (const md::communicator_error& e) {
        left_out_call[ep.rank] = e.what();
      }
      return;
    }
    rank[ep.rank] = s.rank();
    explain[ep.rank] = s.explain<std::int64_t>(1000);
    std::vector<std::int64_t> y(1000, std::int64_t(s.rank()) + 1);
    md::all_reduce(s, y.data(), y.size());
    sum[ep.rank] = y[999];
  });
  CHECK(contains(what_of(errors[5]), "killed"));
  const std::vector<std::size_t> new_rank{0, 1, 2, 3, 99, 99, 4, 5};
  for (std::size_t r = 0; r < 8; ++r) {
    if (r == 5) continue;
    INFO("rank " << r << ": " << what_of(errors[r]));
    CHECK(!errors[r]);
    CHECK(topo[r] == "shm:2 x ethernet:3");
    CHECK(contains(old_after[r], "shrunk"));
    if (r == 4) {
      CHECK(size[r] == 0);
      CHECK(contains(left_out_call[r], "left this rank out"));
      CHECK(contains(left_out_call[r], "ethernet coordinate 2 dropped: rank 5 failed"));
    } else {
      CHECK(size[r] == 6);
      CHECK(rank[r] == new_rank[r]);
      CHECK(sum[r] == 21);  // 1 + ... + 6
      CHECK(contains(explain[r], "topology: shm:2 x ethernet:3 = 6 ranks"));
    }
  }
}

TEST_CASE("shrink with quorum majority: more than half go on, or half with rank 0; a minority stops, saying why") {
  struct outcome {
    std::size_t size = 99;
    std::string why;
    std::int64_t sum = -1;
  };
  // victims, quorum -> each rank's outcome (the victims' left empty)
  auto run = [](std::vector<std::size_t> victims, md::shrink_quorum q) {
    md::threads::world w(4);
    std::vector<outcome> out(4);
    std::barrier<> first_done(4);
    on_world(w, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("ethernet:4"), ep, opts());
      std::vector<std::int64_t> x(10, 1);
      md::all_reduce(comm, x.data(), x.size());
      // Every rank is out of the first call before a victim dies (else a rank still
      // in it fails there, outside the test's reach, and the others count it failed).
      first_done.arrive_and_wait();
      if (std::find(victims.begin(), victims.end(), ep.rank) != victims.end()) throw killed();
      CHECK_THROWS_AS(md::all_reduce(comm, x.data(), x.size()), md::remote_error);
      md::shrink_options so;
      so.quorum = q;
      auto s = md::shrink(comm, so);
      out[ep.rank].size = s.size();
      if (s.size() == 0) {
        try {
          md::all_reduce(s, x.data(), x.size());
        } catch (const md::communicator_error& e) {
          out[ep.rank].why = e.what();
        }
        return;
      }
      std::fill(x.begin(), x.end(), 1);
      md::all_reduce(s, x.data(), x.size());
      out[ep.rank].sum = x[9];
    });
    return out;
  };
  // Half left, rank 0 gone: they stop under majority, go on under none.
  auto a = run({0, 1}, md::shrink_quorum::majority);
  for (std::size_t r : {2, 3}) {
    INFO("ranks 0, 1 killed, majority: rank " << r);
    CHECK(a[r].size == 0);
    CHECK(contains(a[r].why,
                   "2 of 4 ranks are left on this side of the failure (rank 0 not among them), not a "
                   "majority (shrink_options.quorum)"));
  }
  auto b = run({0, 1}, md::shrink_quorum::none);
  for (std::size_t r : {2, 3}) {
    INFO("ranks 0, 1 killed, none: rank " << r);
    CHECK(b[r].size == 2);
    CHECK(b[r].sum == 2);
  }
  // Half left with rank 0, or 3 of 4: they go on.
  auto c = run({2, 3}, md::shrink_quorum::majority);
  for (std::size_t r : {0, 1}) {
    INFO("ranks 2, 3 killed, majority: rank " << r);
    CHECK(c[r].size == 2);
    CHECK(c[r].sum == 2);
  }
  auto d = run({1}, md::shrink_quorum::majority);
  for (std::size_t r : {0, 2, 3}) {
    INFO("rank 1 killed, majority: rank " << r);
    CHECK(d[r].size == 3);
    CHECK(d[r].sum == 3);
  }
  // The rule alone, and its default from the environment.
  using md::detail::has_quorum;
  CHECK(has_quorum({0, 0, 0, 1, 1}, md::shrink_quorum::majority));
  CHECK(!has_quorum({0, 0, 1, 1, 1}, md::shrink_quorum::majority));
  CHECK(has_quorum({0, 0, 1, 1, 1}, md::shrink_quorum::none));
  CHECK(!has_quorum({1, 0}, md::shrink_quorum::majority));
  CHECK(has_quorum({0, 1}, md::shrink_quorum::majority));
  ::setenv("MDRING_SHRINK_QUORUM", "majority", 1);
  CHECK(md::shrink_options{}.quorum == md::shrink_quorum::majority);
  ::setenv("MDRING_SHRINK_QUORUM", "most", 1);  // named on stderr; the default
  CHECK(md::shrink_options{}.quorum == md::shrink_quorum::none);
  ::unsetenv("MDRING_SHRINK_QUORUM");
  CHECK(md::shrink_options{}.quorum == md::shrink_quorum::none);
}

TEST_CASE("shrink: random topologies, victims and calls in flight; every survivor agrees and computes exactly") {
  const char* shapes[] = {"shm:2 x ethernet:3", "shm:3 x ethernet:2", "shm:2 x shm:2 x ethernet:2", "shm:6",
                          "ethernet:5",         "shm:1 x ethernet:4"};
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed * 7919);
    const auto topo = md::parse_topology(shapes[seed % std::size(shapes)]);
    const std::size_t n = topo.size();
    const std::size_t victims = 1 + rng() % 2;
    std::vector<char> dies(n, 0);
    for (std::size_t v = 0; v < victims; ++v) dies[rng() % n] = 1;
    const auto at_call = unsigned(rng() % 3);
    const bool nonblocking = rng() % 2;
    const std::size_t count = rng() % 2 ? 5 : 20000;  // one-shot, or programs
    md::threads::world w(n);
    std::mutex m;
    std::vector<std::string> shapes_after(n), bad(n);
    std::vector<char> died(n, 0);  // a victim still in an earlier call when another died survives
    auto errors = on_world(w, [&](md::threads::endpoint ep) {
      auto comm = md::bind(topo, ep, opts(10s));
      std::vector<float> buf(count * 3, 1.0f);
      bool failed = false;
      try {
        for (unsigned call = 0; call < 4; ++call) {
          if (call == at_call && dies[ep.rank]) {
            died[ep.rank] = 1;
            throw killed();
          }
          shrink_test::one_call(comm, buf.data(), count, nonblocking);
        }
      } catch (const killed&) {
        throw;
      } catch (const md::error&) {
        failed = true;
      }
      if (!failed) {
        std::lock_guard g(m);
        bad[ep.rank] = "the calls did not fail";
      }
      auto s = md::shrink(comm);
      shapes_after[ep.rank] = s.size() ? s.topology().to_string() + " " + std::to_string(s.size()) : "left out";
      if (s.size() == 0) return;
      std::string e = shrink_test::check_all(s, 100);
      if (e.empty()) {
        auto again = md::shrink(s);  // nothing failed: the same ranks
        if (again.size() != s.size() || again.rank() != s.rank()) e = "second shrink";
        else e = shrink_test::check_all(again, 200);
      }
      if (!e.empty()) {
        std::lock_guard g(m);
        bad[ep.rank] = e;
      }
    });
    const auto expect = md::survivors_of(topo, died);
    const std::string want =
        expect.members.empty() ? "" : expect.topology.to_string() + " " + std::to_string(expect.members.size());
    for (std::size_t r = 0; r < n; ++r) {
      if (died[r]) continue;
      const std::string how =
          std::string(nonblocking ? "nonblocking" : "blocking") + ", count " + std::to_string(count);
      INFO("seed " << seed << " " << topo.to_string() << ", rank " << r << ", " << victims << " victim(s) at call "
                   << at_call << ", " << how << ": " << what_of(errors[r]));
      CHECK(!errors[r]);
      CHECK(bad[r] == "");
      const bool kept = std::find(expect.members.begin(), expect.members.end(), r) != expect.members.end();
      CHECK(shapes_after[r] == (kept ? want : "left out"));
    }
  }
}

TEST_CASE("shrink: a rank that dies after the agreement; the new communicator's first call names it, at once") {
  md::threads::world w(6);
  std::vector<std::string> first(6), final_shape(6);
  std::vector<double> seconds(6, -1);
  std::vector<std::int64_t> sum(6, -1);
  auto errors = on_world(w, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, opts(30s));
    std::vector<std::int64_t> x(64, 1);
    if (ep.rank == 5) throw killed();
    try {
      md::all_reduce(comm, x.data(), x.size());
    } catch (const md::remote_error&) {}
    auto s = md::shrink(comm);  // shm:2 x ethernet:2 over ranks 0 to 3
    if (ep.rank == 4) return;   // left out
    if (ep.rank == 2) throw killed();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      md::all_reduce(s, x.data(), x.size());
      first[ep.rank] = "no error";
    } catch (const md::remote_error& e) {
      first[ep.rank] = std::to_string(e.failed_rank());
    }
    seconds[ep.rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto again = md::shrink(s);
    final_shape[ep.rank] = again.size() ? again.topology().to_string() : "left out";
    if (again.size() == 0) return;
    std::vector<std::int64_t> y(64, std::int64_t(again.rank()) + 1);
    md::all_reduce(again, y.data(), y.size());
    sum[ep.rank] = y[63];
  });
  for (std::size_t r : {0, 1, 3}) {
    INFO("rank " << r << ": " << what_of(errors[r]));
    CHECK(!errors[r]);
    CHECK(first[r] == "2");   // its new rank
    CHECK(seconds[r] < 5.0);  // not the 30 s deadline
    CHECK(final_shape[r] == (r == 3 ? "left out" : "shm:2 x ethernet:1"));
    if (r != 3) CHECK(sum[r] == 3);
  }
}

TEST_CASE("shrink with requests of the old communicator not waited for: they end with an error after it") {
  md::threads::world w(4);
  std::vector<std::string> waited(4);
  std::vector<std::size_t> size(4, 0);
  auto errors = on_world(w, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:4"), ep, opts(30s));
    std::vector<std::vector<float>> bufs(3, std::vector<float>(50000, 1.0f));
    if (ep.rank == 3) throw killed();
    std::vector<md::request> q;
    for (auto& b : bufs) {
      try {
        q.push_back(md::iall_reduce(comm, b.data(), b.size()));
      } catch (const md::communicator_error&) {
        // (the progress agent may already have failed an earlier request on rank 3's
        // death, leaving the communicator unusable: then the call is refused at once)
        waited[ep.rank] += "error ";
      }
    }
    auto s = md::shrink(comm);  // the calls in flight end first (with the failure)
    size[ep.rank] = s.size();
    for (auto& r : q) {
      try {
        r.wait();
        waited[ep.rank] += "done ";
      } catch (const md::error&) {
        waited[ep.rank] += "error ";
      }
    }
  });
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << what_of(errors[r]));
    CHECK(!errors[r]);
    CHECK(size[r] == 3);
    CHECK(waited[r] == "error error error ");
  }
}

TEST_CASE("shrink: a rank that stalls past the deadline is out on every survivor, and learns it") {
  md::threads::world w(4);
  std::vector<std::string> shape(4);
  std::vector<std::int64_t> sum(4, -1);
  std::string why;
  auto errors = on_world(w, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:4"), ep, opts(800ms));
    std::vector<std::int64_t> x(100, 1);
    if (ep.rank == 2) std::this_thread::sleep_for(2500ms);  // the others time out, then agree without it
    try {
      md::all_reduce(comm, x.data(), x.size());
    } catch (const md::error&) {}
    auto s = md::shrink(comm);
    shape[ep.rank] = s.size() ? s.topology().to_string() : "left out";
    if (s.size() == 0) return void(why = s.failure());
    std::vector<std::int64_t> y(100, std::int64_t(s.rank()) + 1);
    md::all_reduce(s, y.data(), y.size());
    sum[ep.rank] = y[0];
  });
  for (std::size_t r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << what_of(errors[r]));
    CHECK(!errors[r]);
    CHECK(shape[r] == (r == 2 ? "left out" : "shm:3"));
    if (r != 2) CHECK(sum[r] == 6);
  }
  // It learns why: the others named it (it heard from every one of them).
  CHECK(why ==
        "mdring::shrink left this rank out: shm:4 -> shm:3 (shm coordinate 2 dropped: rank 2 failed); as "
        "this rank saw them: rank 2 (this one) named by the others");
}

TEST_CASE("shrink when nothing failed: the same ranks; the old communicator is released") {
  md::threads::world w(4);
  std::vector<std::string> out(4);
  auto errors = on_world(w, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::ring<md::shm, 2> * md::ring<md::ethernet, 2>, ep, opts());
    auto s = md::shrink(comm);
    std::vector<int> x(10, int(ep.rank) + 1);
    md::all_reduce(s, x.data(), x.size());
    out[ep.rank] = s.topology().to_string() + " " + std::to_string(s.rank()) + " " + std::to_string(x[0]);
    CHECK_THROWS_AS(md::all_reduce(comm, x.data(), x.size()), md::communicator_error);
    CHECK_THROWS_AS((void)comm.explain(10), md::communicator_error);
    CHECK_THROWS_AS((void)comm.get_transport(), md::communicator_error);
    CHECK_THROWS_AS((void)md::shrink(comm), md::communicator_error);
    CHECK(comm.scratch_bytes() == 0);
  });
  for (std::size_t r = 0; r < 4; ++r) {
    INFO(what_of(errors[r]));
    CHECK(!errors[r]);
    CHECK(out[r] == "shm:2 x ethernet:2 " + std::to_string(r) + " 10");
  }
}

TEST_CASE("revoke: the other ranks' calls stop at once, naming the rank; then they shrink to the same ranks") {
  md::threads::world w(4);
  std::vector<std::string> seen(4);
  std::vector<double> seconds(4, -1);
  std::vector<std::size_t> after(4, 0);
  auto errors = on_world(w, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:4"), ep, opts(30s));
    std::vector<float> x(100, 1.0f);
    if (ep.rank == 0) {
      std::this_thread::sleep_for(200ms);  // the others are waiting for it in all_reduce
      md::revoke(comm, "the test saw enough");
      CHECK_THROWS_AS(md::all_reduce(comm, x.data(), x.size()), md::communicator_error);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        md::all_reduce(comm, x.data(), x.size());
      } catch (const md::remote_error& e) {
        seen[ep.rank] = std::to_string(e.failed_rank()) + ": " + e.what();
      }
      seconds[ep.rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    after[ep.rank] = md::shrink(comm).size();
  });
  for (std::size_t r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << what_of(errors[r]) << " / " << seen[r]);
    CHECK(!errors[r]);
    CHECK(after[r] == 4);
    if (r == 0) continue;
    CHECK(seen[r].rfind("0: ", 0) == 0);
    CHECK(contains(seen[r], "mdring::revoke by rank 0: the test saw enough"));
    CHECK(seconds[r] < 5.0);
  }
}

TEST_CASE("shrink: bad options and a left-out rank's communicator") {
  md::threads::run(2, [](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2"), ep, opts());
    md::shrink_options so;
    so.timeout = -1ms;
    try {
      (void)md::shrink(comm, so);
      FAIL("no error");
    } catch (const md::invalid_argument& e) {
      CHECK(e.argument() == "timeout");
      CHECK(contains(e.what(), "mdring::shrink: shrink_options.timeout must not be negative"));
    }
  });
  // MDRING_SHRINK_TIMEOUT: the default of shrink_options.timeout, in seconds.
  ::setenv("MDRING_SHRINK_TIMEOUT", "0.25", 1);
  CHECK(md::shrink_options{}.timeout == 250ms);
  ::setenv("MDRING_SHRINK_TIMEOUT", "soon", 1);  // named on stderr; the default
  CHECK(md::shrink_options{}.timeout == 0ms);
  ::unsetenv("MDRING_SHRINK_TIMEOUT");
  CHECK(md::shrink_options{}.timeout == 0ms);
  md::communicator<md::runtime_topology, md::threads::transport> none(md::parse_topology("shm:3").resolve(3), opts(),
                                                                      "threads", "left out by the test");
  CHECK(none.size() == 0);
  CHECK(!none.usable());
  CHECK(none.topology().to_string() == "shm:3");
  std::vector<float> x(4);
  CHECK_THROWS_AS(md::all_reduce(none, x.data(), x.size()), md::communicator_error);
  CHECK_THROWS_AS(md::broadcast(none, x.data(), x.size(), 0), md::communicator_error);
  CHECK_THROWS_AS((void)md::iall_reduce(none, x.data(), x.size()), md::communicator_error);
  CHECK_THROWS_AS((void)none.explain(4), md::communicator_error);
  CHECK_THROWS_AS(none.reserve<float>(4), md::communicator_error);
}
