// tests/ucx/test_ucx_shrink.cpp: processes of a UCX world lose some of their
// number and go on (mdring::shrink, collective/shrink.hpp): a process killed in
// a loop of all_reduce calls, the store's host (rank 0) among them, and one killed
// during the shrink itself. Every survivor agrees on the new shape, the rank whose
// node was dropped gets size 0, and the survivors' sums stay exact.
// Harness: fault_job.hpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mdring/ucx.hpp>

#include "../shrink_support.hpp"
#include "fault_job.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace md = mdring;
using namespace fault_job;

namespace {

// "kill_<v>": rank v dies (SIGKILL) at the 4th of a loop of all_reduce calls on
// "shm:2 x ethernet:*". "during_<v>_<w>": also rank w, on another node, dies
// 0 to 5 ms into its own shrink (or, when that was quicker, before its first call
// on the shrunk communicator). The survivors shrink, then run 5 all_reduce
// calls: "<topology> <size> <sum> rank <rank>" or "left out (<why>)", and the seconds from the
// failure to the shrunk communicator.
int grow_worker(const std::string& mode, const std::string& dir);
int joiner(const std::string& dir);

// 5 all_reduce calls on c, each element rank + 1 + i: "<topology> <size> <sum of the
// last elements>".
template <class C>
std::string five_sums(C& c) {
  std::int64_t sum = 0;
  for (int i = 0; i < 5; ++i) {
    std::vector<std::int64_t> y(5000, std::int64_t(c.rank()) + 1 + i);
    md::all_reduce(c, y.data(), y.size());
    sum += y[4999];
  }
  return c.topology().to_string() + " " + std::to_string(c.size()) + " " + std::to_string(sum);
}

// "random_<seed>": the seed chooses, the same on every process, a topology of 6
// ranks, 1 or 2 victims, the call (2nd to 4th of 4) they die at, blocking calls
// or 3 nonblocking ones in flight, and small (one-shot) or large calls. Never
// before the first call: a victim's first call ends only once every rank has
// bound, and one that died right after its own bind could fail another's bind
// (collective: "setting up shared access with rank 1 failed: rank 1 ... is
// gone"), leaving nothing to shrink. A victim still in the call before when
// another died survives. The survivors shrink (again if
// a call on the shrunk communicator fails) and check every collective:
// "ok <topology> <size>", "bad <collective>" or "left out".
int random_worker(unsigned seed, const std::string& dir) {
  auto w = md::ucx::world::from_env();
  const std::size_t rank = w.rank(), size = w.size();
  std::mt19937 rng(seed);
  const char* shapes[] = {"shm:2 x ethernet:3", "shm:3 x ethernet:2", "ethernet:6", "shm:6", "shm:1 x ethernet:6"};
  const auto topo = md::parse_topology(shapes[rng() % 5]);
  std::vector<char> dies(size, 0);
  for (unsigned v = 1 + rng() % 2; v > 0; --v) dies[rng() % size] = 1;
  const unsigned at_call = 1 + rng() % 3;
  const bool nonblocking = rng() % 2;
  const std::size_t count = rng() % 2 ? 5 : 20000;
  md::options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  std::string what;
  outcome o = catching([&] {
    auto comm = md::bind(topo, w, opts);
    std::vector<float> buf(count * 3, 1.0f);
    try {
      for (unsigned call = 0; call < 4; ++call) {
        if (call == at_call && dies[rank]) {
          write_outcome(dir, rank, {"killed", -1, now_s(), ""});
          std::raise(SIGKILL);
        }
        shrink_test::one_call(comm, buf.data(), count, nonblocking);
      }
    } catch (const md::error&) {}
    auto s = md::shrink(comm);
    for (int attempt = 0;; ++attempt) {
      if (s.size() == 0) return void(what = "left out");
      try {
        const std::string e = shrink_test::check_all(s, 100);
        what = e.empty() ? "ok " + s.topology().to_string() + " " + std::to_string(s.size()) : "bad " + e;
        return;
      } catch (const md::communicator_error&) {
        throw;
      } catch (const md::error&) {
        if (attempt == 2) throw;
        s = md::shrink(s);
      }
    }
  });
  if (o.kind == "none") o.what = what;
  write_outcome(dir, rank, o);
  fault_job::linger(dir, size);
  return 0;
}

int worker(const std::string& mode, const std::string& dir) {
  if (mode.rfind("random_", 0) == 0) return random_worker(unsigned(std::atoi(mode.c_str() + 7)), dir);
  if (mode == "joiner") return joiner(dir);
  if (mode.rfind("grow", 0) == 0) return grow_worker(mode, dir);
  auto w = md::ucx::world::from_env();
  const std::size_t rank = w.rank(), size = w.size();
  const std::size_t v = std::size_t(std::atoi(mode.c_str() + mode.find('_') + 1));
  const bool during = mode.rfind("during_", 0) == 0;
  const std::size_t v2 = during ? std::size_t(std::atoi(mode.c_str() + mode.rfind('_') + 1)) : size;
  md::options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  double failed_at = 0, shrunk_at = 0;
  std::string shape;
  outcome o = catching([&] {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:*"), w, opts);
    std::vector<std::int64_t> x(5000, 1);
    try {
      for (int i = 0; i < 10; ++i) {
        if (i == 3 && rank == v) {
          write_outcome(dir, rank, {"killed", -1, now_s(), ""});
          std::raise(SIGKILL);
        }
        md::all_reduce(comm, x.data(), x.size());
      }
    } catch (const md::error&) {
      failed_at = now_s();
    }
    if (rank == v2)
      std::thread([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(std::random_device{}() % 5000));
        write_outcome(dir, rank, {"killed", -1, now_s(), ""});
        std::raise(SIGKILL);
      }).detach();
    auto s = md::shrink(comm);
    shrunk_at = now_s();
    while (rank == v2) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // until its timer kills it
    for (int attempt = 0;; ++attempt) {  // a rank that died after the agreement: shrink again
      if (s.size() == 0) return void(shape = "left out (" + s.failure() + ")");  // (which ranks failed)
      try {
        shape = five_sums(s) + " rank " + std::to_string(s.rank());
        break;
      } catch (const md::communicator_error&) {
        throw;
      } catch (const md::error&) {  // remote_error, or a message to it that failed
        if (attempt == 2) throw;
        s = md::shrink(s);
      }
    }
  });
  if (o.kind == "none") o.what = shape;
  o.at = shrunk_at - failed_at;
  write_outcome(dir, rank, o);
  fault_job::linger(dir, size);
  return 0;
}

// "grow" and "grow_bad_secret": rank 5 starts a process to replace it ("joiner",
// with the job's secret or a wrong one), then dies at the 4th call; "grow_no_store":
// rank 0, the store's host, dies instead, and nobody can join. The survivors
// shrink ("shm:2 x ethernet:2" over ranks 0 to 3); rank 4, left out, joins again,
// and so does the new process, while the members grow back to 6 ranks. Every
// process writes "<topology> <size> <sum>" after 5 all_reduce calls on the grown
// communicator, or its error; after a refused grow, the members' sum on the
// shrunk communicator shows it still works.
int grow_worker(const std::string& mode, const std::string& dir) {
  auto w = md::ucx::world::from_env();
  const std::size_t rank = w.rank(), size = w.size();
  md::options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  const bool bad = mode == "grow_bad_secret";
  std::string what;
  outcome o = catching([&] {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:*"), w, opts);
    std::vector<std::int64_t> x(5000, 1);
    try {
      for (int i = 0; i < 10; ++i) {
        if (i == 3 && rank == 0 && mode == "grow_no_store") {
          write_outcome(dir, rank, {"killed", -1, now_s(), ""});
          write_outcome_as(dir, "joiner", {"none", -1, 0, "no joiner"});
          std::raise(SIGKILL);
        }
        if (i == 3 && rank == 5 && mode != "grow_no_store") {
          if (fork() == 0) {
            if (bad) setenv("MDRING_SECRET", "not-the-job-secret", 1);
            execl(self_exe.c_str(), self_exe.c_str(), "--worker", "joiner", dir.c_str(), static_cast<char*>(nullptr));
            _exit(127);
          }
          write_outcome(dir, rank, {"killed", -1, now_s(), ""});
          std::raise(SIGKILL);
        }
        md::all_reduce(comm, x.data(), x.size());
      }
    } catch (const md::error&) {}
    auto s = md::shrink(comm);
    md::grow_options go;
    go.size = 6;
    go.timeout = std::chrono::milliseconds(bad ? 3000 : 30000);
    if (s.size() == 0) {
      auto g = md::ucx::join(w, opts, go.timeout);
      what = five_sums(g);
      return;
    }
    const double t0 = now_s();
    try {
      auto g = md::grow(s, go);
      what = five_sums(g);
    } catch (const md::timeout_error& e) {
      what = "refused (" + std::string(e.what()) + "), then " + five_sums(s);
    } catch (const md::transport_error& e) {  // grow_no_store
      what = "refused after " + std::to_string(int(now_s() - t0)) + " s (" + std::string(e.what()) + "), then " +
             five_sums(s);
    }
  });
  if (o.kind == "none") o.what = what;
  write_outcome(dir, rank, o);
  for (int i = 0; i < 2000 && !fs::exists(dir + "/joiner"); ++i)  // the joiner is not a child of the test
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fault_job::linger(dir, size);
  return 0;
}

int joiner(const std::string& dir) {
  md::options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  std::string what;
  outcome o = catching([&] {
    auto g = md::ucx::join_from_env(opts, std::chrono::seconds(30));
    what = five_sums(g);
  });
  if (o.kind == "none") o.what = what;
  write_outcome_as(dir, "joiner", o);
  return 0;
}

// n ranks' sum over 5 calls of (new rank + 1 + i), every element.
std::string sum_of(std::size_t n) {
  std::int64_t s = 0;
  for (int i = 0; i < 5; ++i)
    for (std::size_t r = 0; r < n; ++r) s += std::int64_t(r) + 1 + i;
  return std::to_string(s);
}

}  // namespace

TEST_CASE("a process killed: its node is dropped, the rest go on with exact sums, in about a second") {
  for (std::size_t victim : {std::size_t(3), std::size_t(0)}) {  // 0: the store's host too
    const auto res = run_job("kill_" + std::to_string(victim), 6);
    REQUIRE(res.out.size() == 6);
    CHECK(res.out[victim].kind == "killed");
    const std::size_t mate = victim ^ 1;  // its node's other rank
    std::size_t next = 0;
    for (std::size_t r = 0; r < 6; ++r) {
      if (r == victim) continue;
      INFO("victim " << victim << ", rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
      CHECK(WIFEXITED(res.status[r]));
      CHECK(res.out[r].kind == "none");
      if (r == mate) {
        CHECK(res.out[r].what ==
              "left out (mdring::shrink left this rank out: shm:2 x ethernet:3 -> shm:2 x "
              "ethernet:2 (ethernet coordinate " +
                  std::to_string(victim / 2) + " dropped: rank " + std::to_string(victim) +
                  " failed); as this rank saw them: rank " + std::to_string(victim) +
                  " gone before the shrink (its process ended or its link failed))");
      } else {
        CHECK(res.out[r].what == "shm:2 x ethernet:2 4 " + sum_of(4) + " rank " + std::to_string(next++));
      }
      CHECK(res.out[r].at < 3.0);  // from the failure to the shrunk communicator
    }
  }
}

TEST_CASE("random topologies, victims and calls in flight: the survivors agree and every collective is exact") {
  const char* shapes[] = {"shm:2 x ethernet:3", "shm:3 x ethernet:2", "ethernet:6", "shm:6", "shm:1 x ethernet:6"};
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const auto res = run_job("random_" + std::to_string(seed), 6);
    REQUIRE(res.out.size() == 6);
    std::mt19937 rng(seed);  // the worker's first choice: the topology
    const auto topo = md::parse_topology(shapes[rng() % 5]).resolve(6);
    std::vector<char> died(6, 0);
    for (std::size_t r = 0; r < 6; ++r) died[r] = res.out[r].kind == "killed";
    const auto expect = md::survivors_of(topo, died);
    for (std::size_t r = 0; r < 6; ++r) {
      if (died[r]) continue;
      INFO("seed " << seed << ", " << topo.to_string() << ", rank " << r << ": " << res.out[r].kind << ": "
                   << res.out[r].what);
      CHECK(res.out[r].kind == "none");
      const bool kept = std::find(expect.members.begin(), expect.members.end(), r) != expect.members.end();
      CHECK(res.out[r].what ==
            (kept ? "ok " + expect.topology.to_string() + " " + std::to_string(expect.members.size()) : "left out"));
    }
  }
}

TEST_CASE("a process killed during the shrink: every survivor ends on the same shape, sums exact") {
  // Rank 5 dies in the loop; rank 2 (another node) dies 0 to 5 ms into its shrink:
  // the agreement counts it failed, or the shrunk communicator's first call finds it
  // and the survivors shrink again; either way ranks 0 and 1 go on alone, and ranks
  // 3 and 4, whose nodes lost a rank, are left out.
  for (int round = 0; round < 4; ++round) {
    const auto res = run_job("during_5_2", 6);
    REQUIRE(res.out.size() == 6);
    CHECK(res.out[5].kind == "killed");
    CHECK(res.out[2].kind == "killed");
    for (std::size_t r : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(4)}) {
      INFO("round " << round << ", rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
      CHECK(res.out[r].kind == "none");
      if (r < 2) CHECK(res.out[r].what == "shm:2 x ethernet:1 2 " + sum_of(2) + " rank " + std::to_string(r));
      else  // (after one shrink or two: the text names the failed ranks either way)
        CHECK(res.out[r].what.rfind("left out (mdring::shrink left this rank out: ", 0) == 0);
    }
  }
}

TEST_CASE("grow: the left-out rank and a new process join; the members grow back to 6 ranks, sums exact") {
  const auto res = run_job("grow", 6);
  REQUIRE(res.out.size() == 6);
  CHECK(res.out[5].kind == "killed");
  const std::string want = "shm:2 x ethernet:3 6 " + sum_of(6);
  for (std::size_t r = 0; r < 5; ++r) {
    INFO("rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    CHECK(res.out[r].kind == "none");
    CHECK(res.out[r].what == want);
  }
  INFO("joiner: " << res.joiner.kind << ": " << res.joiner.what);
  CHECK(res.joiner.kind == "none");
  CHECK(res.joiner.what == want);
}

TEST_CASE("grow: a joiner with the wrong secret is refused; the members' communicator goes on") {
  const auto res = run_job("grow_bad_secret", 6);
  REQUIRE(res.out.size() == 6);
  INFO("joiner: " << res.joiner.kind << ": " << res.joiner.what);
  CHECK(res.joiner.kind == "other");
  CHECK(res.joiner.what.find("refused this process's secret") != std::string::npos);
  for (std::size_t r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    CHECK(res.out[r].kind == "none");
    CHECK(res.out[r].what.find("refused (mdring::grow: only 1 of the 2 joining processes arrived") == 0);
    CHECK(res.out[r].what.find("then shm:2 x ethernet:2 4 " + sum_of(4)) != std::string::npos);
  }
  INFO("rank 4: " << res.out[4].kind << ": " << res.out[4].what);
  CHECK(res.out[4].kind == "timeout_error");
  CHECK(res.out[4].what.find("mdring::ucx::join: only 1 of the 2") == 0);
}

TEST_CASE("grow without the store (its host, rank 0, died): refused at once on every member, which go on") {
  const auto res = run_job("grow_no_store", 6);
  REQUIRE(res.out.size() == 6);
  CHECK(res.out[0].kind == "killed");
  INFO("rank 1: " << res.out[1].kind << ": " << res.out[1].what);
  CHECK(res.out[1].kind == "other");  // left out, and cannot join: the store is gone
  for (std::size_t r = 2; r < 6; ++r) {
    INFO("rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    CHECK(res.out[r].kind == "none");
    CHECK(res.out[r].what.find("refused after 0 s (mdring::grow: the job's store cannot be reached") == 0);
    CHECK(res.out[r].what.find("then shm:2 x ethernet:2 4 " + sum_of(4)) != std::string::npos);
  }
}

int main(int argc, char** argv) {
  self_exe = fs::canonical("/proc/self/exe").string();  // (a worker starts the joiner with it)
  if (argc >= 4 && std::strcmp(argv[1], "--worker") == 0) return worker(argv[2], argv[3]);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
