// tests/ucx/fault_job.hpp: the harness of the UCX fault tests (test_ucx_faults.cpp,
// test_ucx_shrink.cpp). The test (one process, doctest) starts the job itself: it
// forks N copies of its own program in worker mode with torchrun's variables set
// (as mdring-run would, but it must kill one of them at a chosen moment), and each
// worker writes what happened to it into a file: the exception it caught, the rank
// that exception names, and when (CLOCK_MONOTONIC, which all processes share). A
// worker that is about to be killed writes the time first. Each program's main()
// sets self_exe and dispatches "--worker MODE DIR" to its workers.
#pragma once

#include <doctest/doctest.h>
#include <mdring/ucx.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace fault_job {

namespace md = mdring;
namespace fs = std::filesystem;

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- worker side --------------------------------------------------------------
struct outcome {
  std::string kind = "none";  // none, remote_error, timeout_error, invalid_argument, topology_error, other
  long failed_rank = -1;
  double at = 0;
  std::string what;
};

inline void write_outcome_as(const std::string& dir, const std::string& name, const outcome& o) {
  const std::string p = dir + "/" + name;
  {
    std::ofstream f(p + ".tmp");
    f << o.kind << "\n" << o.failed_rank << "\n" << std::to_string(o.at) << "\n" << o.what << "\n";
  }
  fs::rename(p + ".tmp", p);
}
inline void write_outcome(const std::string& dir, std::size_t rank, const outcome& o) {
  write_outcome_as(dir, "rank" + std::to_string(rank), o);
}

// A survivor stays until every rank has written what happened to it (at most
// 10 s): one that exited at once would look, to a rank still waiting, like a
// second failure, and be named instead of the rank that was killed (CI saw
// "rank 0 ... is gone" on rank 3, rank 0 having caught rank 1's death and exited).
inline void linger(const std::string& dir, std::size_t size) {
  for (int i = 0; i < 1000; ++i) {
    std::size_t have = 0;
    for (std::size_t r = 0; r < size; ++r) have += fs::exists(dir + "/rank" + std::to_string(r));
    if (have == size) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

template <class F>
outcome catching(F&& f) {
  outcome o;
  try {
    f();
  } catch (const md::remote_error& e) {
    o = {"remote_error", long(e.failed_rank()), now_s(), e.what()};
  } catch (const md::timeout_error& e) {
    o = {"timeout_error", long(e.peer()), now_s(), e.what()};
  } catch (const md::topology_error& e) {
    o = {"topology_error", -1, now_s(), e.what()};
  } catch (const md::invalid_argument& e) {
    o = {"invalid_argument", -1, now_s(), e.argument() + ": " + e.what()};
  } catch (const std::exception& e) {
    o = {"other", -1, now_s(), e.what()};
  }
  return o;
}

// ---- test side ------------------------------------------------------------------
inline std::string self_exe;  // this program (main sets it)

struct job_result {
  std::vector<outcome> out;
  outcome joiner;  // a process a worker started to join the job (file "joiner"), if any
  std::vector<int> status;
};

inline outcome read_outcome(const std::string& file) {
  outcome o;
  std::ifstream f(file);
  if (!f) return {"missing", -1, 0, ""};
  std::string at, fr;
  std::getline(f, o.kind);
  std::getline(f, fr);
  std::getline(f, at);
  std::getline(f, o.what);
  o.failed_rank = std::atol(fr.c_str());
  o.at = std::atof(at.c_str());
  return o;
}

// Runs n workers of `mode` with torchrun's variables (extra: more of them).
inline job_result run_job(const std::string& mode, std::size_t n, std::vector<std::string> extra = {}) {
  static int serial = 0;
  const std::string dir =
      (fs::temp_directory_path() / ("mdring-ucx-faults-" + std::to_string(getpid()) + "-" + std::to_string(serial++)))
          .string();
  fs::create_directories(dir + "/store");
  // A free port: bind port 0, read it, close (the job's rank 0 takes it next).
  int port = 0;
  {
    md::rendezvous::tcp_store_options o;
    o.secret = "probe";
    md::rendezvous::tcp_store probe(true, o);
    port = probe.port();
  }
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("MDRING_SECRET", "test-secret-0123456789", 1);
      for (const auto& e : extra) putenv(strdup(e.c_str()));
      execl(self_exe.c_str(), self_exe.c_str(), "--worker", mode.c_str(), dir.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  job_result res;
  for (auto p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    res.status.push_back(st);
  }
  for (std::size_t r = 0; r < n; ++r) res.out.push_back(read_outcome(dir + "/rank" + std::to_string(r)));
  res.joiner = read_outcome(dir + "/joiner");
  fs::remove_all(dir);
  return res;
}

}  // namespace fault_job
