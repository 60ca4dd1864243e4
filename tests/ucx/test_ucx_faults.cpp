// tests/ucx/test_ucx_faults.cpp: what the processes of a UCX world see when one
// of them dies, stalls or fails, and the rendezvous from a user's own store.
// Harness: fault_job.hpp (workers forked with torchrun's variables, each writing
// what happened to it).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mdring/ucx.hpp>

#include "fault_job.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace md = mdring;
namespace fs = std::filesystem;
using namespace fault_job;

namespace {

// A store in a directory: each key a file, written to a temporary name and renamed.
class directory_store final : public md::rendezvous::store {
public:
  explicit directory_store(std::string dir) : dir_(std::move(dir)) {}
  void set(const std::string& key, const std::string& value) override {
    const std::string p = path(key), tmp = p + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary) << value;
    fs::rename(tmp, p);
  }
  std::string get(const std::string& key, md::rendezvous::clock::time_point deadline) override {
    for (;;) {
      std::ifstream f(path(key), std::ios::binary);
      if (f) {
        std::ostringstream ss;
        ss << f.rdbuf();
        return ss.str();
      }
      if (md::rendezvous::clock::now() >= deadline) throw md::rendezvous::missing_key(key, "directory_store");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

private:
  std::string path(const std::string& key) const {
    std::string k = key;
    for (auto& c : k)
      if (c == '/') c = '_';
    return dir_ + "/" + k;
  }
  std::string dir_;
};

// The job of a reported termination: "shm:2 x ethernet:*", one blocking all_reduce, then k iall_reduce
// calls of 1 Mi floats; rank 1 dies (SIGKILL) right after issuing its k calls.
// Every survivor must get the failure from how it waits (mode
// "inflight_<k>_<wait|wait_all|wait_any|test>"), never terminate; and the
// communicator then refuses new calls with communicator_error.
int inflight_worker(const std::string& mode, const std::string& dir) {
  const int k = std::atoi(mode.c_str() + std::strlen("inflight_"));
  const std::string how = mode.substr(mode.find('_', std::strlen("inflight_")) + 1);
  auto w = md::ucx::world::from_env();
  const std::size_t rank = w.rank();
  md::options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  outcome o = catching([&] {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:*"), w, opts);
    std::vector<float> warm(1000, 1.0f);
    md::all_reduce(comm, warm.data(), warm.size());
    std::vector<std::vector<float>> bufs(std::size_t(k), std::vector<float>(std::size_t(1) << 20, 1.0f));
    std::vector<md::request> q;
    // Rank 1 issues its calls once every other rank has issued its own (a rank
    // still issuing would have its next call refused, communicator_error, the
    // communicator being broken, which the waits below are not about), and dies
    // right after issuing them: the calls cannot have finished by then. (It used
    // to wait for the files after issuing, and with its progress agent running
    // on an oversubscribed machine a call could finish within that wait: CI saw
    // the survivors' waits succeed.)
    if (rank == 1) {
      for (std::size_t r = 0; r < w.size(); ++r)
        while (r != rank && !fs::exists(dir + "/issued." + std::to_string(r)))
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      write_outcome(dir, rank, {"killed", -1, now_s(), ""});
      for (auto& b : bufs) q.push_back(md::iall_reduce(comm, b.data(), b.size()));
      std::raise(SIGKILL);
    }
    for (auto& b : bufs) q.push_back(md::iall_reduce(comm, b.data(), b.size()));
    std::ofstream(dir + "/issued." + std::to_string(rank)).put('1');
    try {
      if (how == "wait_all") {
        md::wait_all(q);
      } else if (how == "wait_any") {
        for (std::size_t left = q.size(); left; --left) (void)md::wait_any(q);
      } else if (how == "test") {
        for (auto& r : q)
          while (!r.test()) std::this_thread::yield();
      } else {
        for (auto& r : q) r.wait();
      }
    } catch (...) {
      // The failure, from the waiting call; then the calls not waited for are
      // dropped with their requests, and a new call is refused.
      q.clear();
      std::string refused = "accepted";
      try {
        md::all_reduce(comm, warm.data(), warm.size());
      } catch (const md::communicator_error&) {
        refused = "communicator_error";
      } catch (const std::exception& e) {
        refused = e.what();
      }
      try {
        throw;
      } catch (const md::remote_error& e) {
        throw md::remote_error(std::string(e.what()) + " | then: " + refused, e.failed_rank());
      }
    }
  });
  if (o.kind != "killed") write_outcome(dir, rank, o);
  fault_job::linger(dir, w.size());
  return 0;
}

// A worker that a communicator left is taken by the next bind (ucx_world.hpp,
// worker_pool): a peer that fails on the old communicator after this rank was
// done with it must not fail the new one. Ranks 0 and 2 end X (their workers go to
// the pool); rank 1, still holding X, fails a call on it (a bad root: it tells every
// rank of X, ucx.hpp abort, so its control messages reach the pooled workers);
// then all bind Y, which takes the pooled workers, and Y's calls must be right.
int late_failure_worker(const std::string& dir) {
  auto w = md::ucx::world::from_env();
  const std::size_t rank = w.rank(), size = w.size();
  md::options opts;
  opts.timeout = std::chrono::milliseconds(20000);
  opts.shared_memory = false;
  const auto& pool = md::ucx::detail::process_workers();
  std::string on_x = "none";
  {
    std::optional<decltype(md::bind(md::parse_topology("shm:*"), w, opts))> x;
    x.emplace(md::bind(md::parse_topology("shm:*"), w, opts));
    std::vector<float> v(1000, 1.0f);
    md::all_reduce(*x, v.data(), v.size());
    if (rank != 1) {
      x.reset();
      std::ofstream(dir + "/ended." + std::to_string(rank)).put('1');
    } else {
      for (std::size_t r : {std::size_t(0), std::size_t(2)})
        while (!fs::exists(dir + "/ended." + std::to_string(r)))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      on_x = catching([&] { md::broadcast(*x, v.data(), v.size(), size); }).kind;
    }
  }
  const std::size_t reused = pool.reused;
  std::int64_t got = 0;
  outcome o = catching([&] {
    auto y = md::bind(md::parse_topology("shm:*"), w, opts);
    for (int i = 0; i < 5; ++i) {
      std::vector<std::int64_t> v(4099, std::int64_t(rank) + 1 + i);
      md::all_reduce(y, v.data(), v.size());
      got += v[4098];
    }
  });
  o.what = "x: " + on_x + ", y: " + std::to_string(got) + ", reused " + std::to_string(pool.reused - reused) +
           (o.what.empty() ? "" : ", " + o.what);
  write_outcome(dir, rank, o);
  fault_job::linger(dir, size);
  return 0;
}

int worker(const std::string& mode, const std::string& dir) {
  if (mode == "late_failure") return late_failure_worker(dir);
  if (mode == "user_store") {
    directory_store s(dir + "/store");
    const std::size_t rank = std::size_t(std::atoi(std::getenv("RANK")));
    const std::size_t size = std::size_t(std::atoi(std::getenv("WORLD_SIZE")));
    md::ucx::world w(s, rank, size);
    auto comm = md::bind(md::parse_topology("shm:*"), w);
    std::vector<std::int64_t> x(1000, std::int64_t(rank) + 1);
    md::all_reduce(comm, x.data(), x.size());
    outcome o;
    o.what = std::to_string(x[999]) + " local " + std::to_string(w.local_size());
    write_outcome(dir, rank, o);
    return 0;
  }
  if (mode == "env_errors") {
    outcome o = catching([] { (void)md::ucx::world::from_env(); });
    write_outcome(dir, 0, o);
    return 0;
  }
  if (mode.rfind("inflight", 0) == 0) return inflight_worker(mode, dir);
  if (mode == "store_killed") {
    // WORLD_SIZE is one more than the processes started: the rendezvous cannot
    // finish, and rank 0, the store's host, dies in the middle of it.
    // Rank 0 dies 1 s after the others have started their rendezvous (they are
    // connected to its store by then, waiting for rank 3).
    const std::size_t rank = std::size_t(std::atoi(std::getenv("RANK")));
    std::ofstream(dir + "/started." + std::to_string(rank)).put('1');
    if (rank == 0)
      std::thread([dir] {
        for (int i = 0; i < 3000 && !(fs::exists(dir + "/started.1") && fs::exists(dir + "/started.2")); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        write_outcome(dir, 0, {"killed", -1, now_s(), ""});
        std::raise(SIGKILL);
      }).detach();
    outcome o = catching([] { (void)md::ucx::world::from_env(); });
    if (o.kind == "none") o.what = "the rendezvous finished";
    write_outcome(dir, rank, o);
    return 0;
  }
  auto w = md::ucx::world::from_env();
  const std::size_t rank = w.rank(), size = w.size();
  md::options opts;
  opts.timeout = std::chrono::milliseconds(mode == "stall" ? 1500 : 20000);
  if (mode == "kill_messages") opts.shared_memory = false;
  const std::string topo = mode == "mismatch" && rank == 1 ? "ethernet:*" : "shm:*";
  outcome o = catching([&] {
    auto comm = md::bind(md::parse_topology(topo), w, opts);
    // "..._small": 8 floats, the one-shot path (plan/one_shot.hpp); else 256 KiB, programs.
    const bool small = mode.size() > 6 && mode.compare(mode.size() - 6, 6, "_small") == 0;
    std::vector<float> x(small ? 8 : 1 << 16, 1.0f);
    for (int i = 0; i < 3; ++i) md::all_reduce(comm, x.data(), x.size());
    if (rank == 1 && (mode == "kill_shared" || mode == "kill_messages" || mode == "kill_small")) {
      write_outcome(dir, rank, {"killed", -1, now_s(), ""});
      std::raise(SIGKILL);
    }
    if (rank == 1 && mode == "stall") std::this_thread::sleep_for(std::chrono::seconds(4));
    if (mode == "bad_root" || mode == "bad_root_small") {
      md::broadcast(comm, x.data(), x.size(), rank == 1 ? size : 0);
    } else {
      for (int i = 0; i < 20; ++i) md::all_reduce(comm, x.data(), x.size());
    }
  });
  if (o.kind != "killed") write_outcome(dir, rank, o);
  fault_job::linger(dir, size);
  return 0;
}

void check_killed(const std::string& mode) {
  const auto res = run_job(mode, 3);
  REQUIRE(res.out.size() == 3);
  CHECK(WIFSIGNALED(res.status[1]));
  CHECK(res.out[1].kind == "killed");
  for (std::size_t r : {std::size_t(0), std::size_t(2)}) {
    INFO(mode << ", rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    CHECK(res.out[r].kind == "remote_error");
    CHECK(res.out[r].failed_rank == 1);
    CHECK(res.out[r].what.find("rank 1") != std::string::npos);
    const double after = res.out[r].at - res.out[1].at;
    INFO("noticed " << after << " s after the kill");
    CHECK(after < 1.0);
  }
}

}  // namespace

TEST_CASE("a process killed in a collective: the others get remote_error naming it within 1 s (shared access)") {
  check_killed("kill_shared");
}

TEST_CASE("a process killed in a collective: the others get remote_error naming it within 1 s (messages)") {
  check_killed("kill_messages");
}

TEST_CASE("a process killed in a small call: the others get remote_error naming it within 1 s (one-shot)") {
  check_killed("kill_small");
}

TEST_CASE("a process killed with nonblocking calls in flight: every survivor's wait throws, nobody terminates") {
  // 4 processes, "shm:2 x ethernet:*": rank 0 shares rank 1's node, ranks 2 and 3
  // reach it through the ethernet dimension only (they once terminated).
  for (const char* progress : {"agent", "in_wait"})
    for (int k : {1, 2, 3, 8})
      for (const char* how : {"wait_all", "wait", "wait_any", "test"}) {
        if (k != 8 && std::string(how) != "wait_all" && std::string(how) != "wait") continue;
        const std::string mode = "inflight_" + std::to_string(k) + "_" + how;
        const auto res = run_job(mode, 4, {std::string("MDRING_PROGRESS=") + progress});
        REQUIRE(res.out.size() == 4);
        CHECK(res.out[1].kind == "killed");
        for (std::size_t r : {std::size_t(0), std::size_t(2), std::size_t(3)}) {
          INFO(mode << ", progress " << std::string(progress) << ", rank " << r << ": " << res.out[r].kind << ": "
                    << res.out[r].what);
          CHECK(WIFEXITED(res.status[r]));
          CHECK(res.out[r].kind == "remote_error");
          CHECK(res.out[r].failed_rank == 1);
          CHECK(res.out[r].what.find("then: communicator_error") != std::string::npos);
          CHECK(res.out[r].at - res.out[1].at < 2.0);
        }
      }
}

TEST_CASE("a process that stalls: the others hit the deadline, naming the collective") {
  const auto res = run_job("stall", 3);
  for (std::size_t r : {std::size_t(0), std::size_t(2)}) {
    INFO("rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    // The first to time out tells the other, which may then stop with remote_error.
    CHECK((res.out[r].kind == "timeout_error" || res.out[r].kind == "remote_error"));
  }
  CHECK((res.out[0].kind == "timeout_error" || res.out[2].kind == "timeout_error"));
  CHECK(res.out[1].kind != "none");  // it comes back to a job that has given up
}

TEST_CASE("a bad argument on one process: it throws invalid_argument, the others remote_error naming it") {
  for (const char* mode : {"bad_root", "bad_root_small"}) {  // a program's broadcast, and a one-shot one
    const auto res = run_job(mode, 3);
    CHECK(res.out[1].kind == "invalid_argument");
    CHECK(res.out[1].what.rfind("root", 0) == 0);
    for (std::size_t r : {std::size_t(0), std::size_t(2)}) {
      INFO(mode << ", rank " << r << ": " << res.out[r].what);
      CHECK(res.out[r].kind == "remote_error");
      CHECK(res.out[r].failed_rank == 1);
    }
  }
}

TEST_CASE("different topologies: topology_error on every process") {
  const auto res = run_job("mismatch", 3);
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << res.out[r].what);
    CHECK(res.out[r].kind == "topology_error");
  }
}

TEST_CASE("the rendezvous through a user's store (files in a directory)") {
  const auto res = run_job("user_store", 3);
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(res.out[r].kind == "none");
    CHECK(res.out[r].what == "6 local 3");  // every element: 1 + 2 + 3
  }
}

TEST_CASE("the store's host (rank 0) killed during the rendezvous: the others fail naming the store, promptly") {
  const auto t0 = now_s();
  const auto res = run_job("store_killed", 3, {"WORLD_SIZE=4", "MDRING_TIMEOUT=60"});
  REQUIRE(res.out.size() == 3);
  CHECK(res.out[0].kind == "killed");
  for (std::size_t r : {std::size_t(1), std::size_t(2)}) {
    INFO("rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    CHECK(WIFEXITED(res.status[r]));
    CHECK(res.out[r].kind == "other");  // transport_error: not a topology or argument error
    CHECK(res.out[r].what.find("store") != std::string::npos);
    CHECK(res.out[r].what.find("127.0.0.1:") != std::string::npos);
    CHECK(res.out[r].at - res.out[0].at < 5.0);  // not the 60 s deadline
  }
  CHECK(now_s() - t0 < 30.0);
}

TEST_CASE("a reused worker: a peer's failure on an ended communicator does not reach the next one") {
  const auto res = run_job("late_failure", 3);
  // Y's sums: 5 calls, each element 1 + 2 + 3 + 3 i.
  const std::string y = ", y: " + std::to_string(5 * 6 + 3 * (0 + 1 + 2 + 3 + 4));
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << res.out[r].kind << ": " << res.out[r].what);
    CHECK(res.out[r].kind == "none");
    const std::string x = r == 1 ? "x: invalid_argument" : "x: none";
    // Ranks 0 and 2 bound Y on the worker X left; rank 1's X failed, so it made a new one.
    CHECK(res.out[r].what == x + y + ", reused " + (r == 1 ? "0" : "1"));
  }
}

TEST_CASE("from_env: missing or wrong variables name the variable") {
  auto one = [](std::vector<std::string> env) { return run_job("env_errors", 1, std::move(env)).out[0]; };
  auto o = one({"WORLD_SIZE=2", "MASTER_PORT=", "MDRING_STORE_PORT="});
  CHECK(o.kind == "invalid_argument");
  CHECK(o.what.rfind("MASTER_PORT", 0) == 0);
  o = one({"WORLD_SIZE=2", "MDRING_SECRET="});
  CHECK(o.kind == "invalid_argument");
  CHECK(o.what.rfind("MDRING_SECRET", 0) == 0);
  o = one({"WORLD_SIZE=2", "RANK=2"});
  CHECK(o.kind == "invalid_argument");
  CHECK(o.what.rfind("RANK", 0) == 0);
  o = one({"WORLD_SIZE=two"});
  CHECK(o.kind == "invalid_argument");
  CHECK(o.what.rfind("WORLD_SIZE", 0) == 0);
}

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--worker") == 0) return worker(argv[2], argv[3]);
  self_exe = fs::canonical("/proc/self/exe").string();
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
