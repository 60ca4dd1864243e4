// tests/ucx/test_ucx_shrink.cpp: processes of a UCX world lose some of their
// number and go on (mdring::shrink, collective/shrink.hpp): a process killed in
// a loop of all_reduce calls, the store's host (rank 0) among them, and one killed
// during the shrink itself. Every survivor agrees on the new shape, the rank whose
// node was dropped gets size 0, and the survivors' sums stay exact.
// Harness: fault_job.hpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mdring/ucx.hpp>

#include "fault_job.hpp"

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
// calls: "<topology> <size> <rank> <sum>" or "left out", and the seconds from the
// failure to the shrunk communicator.
int worker(const std::string& mode, const std::string& dir) {
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
    std::int64_t sum = 0;
    for (int attempt = 0;; ++attempt) {  // a rank that died after the agreement: shrink again
      if (s.size() == 0) return void(shape = "left out");
      try {
        sum = 0;
        for (int i = 0; i < 5; ++i) {
          std::vector<std::int64_t> y(5000, std::int64_t(s.rank()) + 1 + i);
          md::all_reduce(s, y.data(), y.size());
          sum += y[4999];
        }
        break;
      } catch (const md::communicator_error&) {
        throw;
      } catch (const md::error&) {  // remote_error, or a message to it that failed
        if (attempt == 2) throw;
        s = md::shrink(s);
      }
    }
    shape = s.topology().to_string() + " " + std::to_string(s.size()) + " " + std::to_string(s.rank()) + " " +
            std::to_string(sum);
  });
  if (o.kind == "none") o.what = shape;
  o.at = shrunk_at - failed_at;
  write_outcome(dir, rank, o);
  fault_job::linger(dir, size);
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
        CHECK(res.out[r].what == "left out");
      } else {
        CHECK(res.out[r].what == "shm:2 x ethernet:2 4 " + std::to_string(next++) + " " + sum_of(4));
      }
      CHECK(res.out[r].at < 3.0);  // from the failure to the shrunk communicator
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
      CHECK(res.out[r].what == (r < 2 ? "shm:2 x ethernet:1 2 " + std::to_string(r) + " " + sum_of(2) : "left out"));
    }
  }
}

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--worker") == 0) return worker(argv[2], argv[3]);
  self_exe = fs::canonical("/proc/self/exe").string();
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
