// tests/launcher/launcher_support.hpp: the harness of test_launcher.cpp and
// test_launcher_hosts.cpp: mdring-run and the probe from the environment, a fresh
// scratch directory, running a job (fork/exec, exit status, stdout, stderr), what
// the probes wrote, and the check that nothing was left behind.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace fs = std::filesystem;
using namespace std::chrono;

namespace {

inline std::string required_env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (ctest sets it)");
  return v;
}

inline std::string mdring_run() { return required_env("MDRING_RUN"); }
inline std::string probe() { return required_env("LAUNCHER_PROBE"); }

// A fresh directory for the probes' files, removed at the end.
struct scratch {
  fs::path dir;
  scratch() {
    std::string tmpl = (fs::temp_directory_path() / "mdring-launcher-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string str() const { return dir.string(); }
  std::optional<std::string> read(const std::string& name) const {
    std::ifstream f(dir / name);
    if (!f) return std::nullopt;
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::vector<std::string> files(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with(prefix + ".") && n.find(".tmp") == std::string::npos) out.push_back(n);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // Waits until `count` files prefix.* exist.
  bool wait_files(const std::string& prefix, std::size_t count, seconds limit = seconds(30)) const {
    const auto until = steady_clock::now() + limit;
    while (files(prefix).size() < count)
      if (steady_clock::now() > until) return false;
      else std::this_thread::sleep_for(milliseconds(5));
    return true;
  }
  pid_t pid_of(int rank) const {
    const auto s = read("pid." + std::to_string(rank));
    REQUIRE_MESSAGE(s.has_value(), "rank " << rank << " wrote no pid file");
    return pid_t(std::stol(*s));
  }
};

// One run of mdring-run: started by start(), finished by finish().
struct job {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  steady_clock::time_point started;
  int status = 0;
  std::string out, err;
  double seconds_taken = 0;
  bool reaped = false;
  bool pipes_held_open = false;  // its stdout/stderr stayed open after it exited

  // args after mdring-run; env: NAME=VALUE to set, NAME alone to unset; ignored:
  // signals mdring-run starts with ignored (the others are SIG_DFL, none blocked).
  void start(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
             const std::vector<int>& ignored = {}) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) envs.emplace_back(*e);
    for (const auto& m : env) {
      const auto eq = m.find('=');
      const std::string name = m.substr(0, eq);
      std::erase_if(envs, [&](const std::string& s) { return s.starts_with(name + "="); });
      if (eq != std::string::npos) envs.push_back(m);
    }
    std::vector<std::string> argv_s{mdring_run()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv_p, env_p;
    for (auto& s : argv_s) argv_p.push_back(s.data());
    argv_p.push_back(nullptr);
    for (auto& s : envs) env_p.push_back(s.data());
    env_p.push_back(nullptr);
    int o[2], e[2];
    REQUIRE(pipe2(o, O_CLOEXEC) == 0);
    REQUIRE(pipe2(e, O_CLOEXEC) == 0);
    started = steady_clock::now();
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
      for (const int sig : ignored) signal(sig, SIG_IGN);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(o[1], 1);
      dup2(e[1], 2);
      execve(argv_p[0], argv_p.data(), env_p.data());
      _exit(126);
    }
    close(o[1]);
    close(e[1]);
    out_fd = o[0];
    err_fd = e[0];
  }

  bool running() {
    if (reaped) return false;
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) != pid) return true;
    status = st;
    reaped = true;
    return false;
  }

  // Reads its output until it exits and closes it (at most `limit`: then it is killed).
  void finish(seconds limit = seconds(60)) {
    const auto until = started + limit;
    bool exited = reaped;
    steady_clock::time_point exited_at = steady_clock::now();
    for (;;) {
      pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
      poll(fds, 2, 10);
      for (int k = 0; k < 2; ++k) {
        int& fd = k == 0 ? out_fd : err_fd;
        if (fd < 0 || !fds[k].revents) continue;
        char buf[4096];
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) (k == 0 ? out : err).append(buf, std::size_t(n));
        else if (n == 0 || errno != EINTR) {
          close(fd);
          fd = -1;
        }
      }
      if (!exited && !running()) {
        exited = true;
        exited_at = steady_clock::now();
        seconds_taken = duration<double>(exited_at - started).count();
      }
      if (exited && out_fd < 0 && err_fd < 0) break;
      if (exited && steady_clock::now() - exited_at > seconds(5)) {
        pipes_held_open = true;  // something it started still holds them
        break;
      }
      if (!exited && steady_clock::now() > until) {
        kill(pid, SIGKILL);
        FAIL("mdring-run did not finish within " << limit.count() << " s; stderr so far:\n" << err);
      }
    }
    for (int* fd : {&out_fd, &err_fd})
      if (*fd >= 0) close(*fd), *fd = -1;
  }

  int exit_code() const {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 1000 + WTERMSIG(status);  // mdring-run itself killed: never a valid expectation
  }
};

inline job run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
               const std::vector<int>& ignored = {}) {
  job j;
  j.start(args, env, ignored);
  j.finish();
  return j;
}

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Nothing was left behind: every process mdring-run started is gone, and none
// became our child (we are a subreaper) after mdring-run exited.
inline void check_nothing_left(const job& j, const std::vector<pid_t>& pids) {
  CHECK_FALSE(j.pipes_held_open);
  for (const pid_t p : pids) {
    errno = 0;
    const int rc = kill(p, 0);
    CHECK_MESSAGE((rc == -1 && errno == ESRCH), "process " << p << " is still there");
  }
  int st = 0;
  const pid_t r = waitpid(-1, &st, WNOHANG);
  CHECK_MESSAGE((r == -1 && errno == ECHILD), "an orphan of mdring-run became our child (waitpid gave " << r << ")");
  for (const pid_t p : pids) kill(p, SIGKILL);  // after a failed check: leave nothing either
}

inline std::vector<pid_t> pids_of(const scratch& s, int n) {
  std::vector<pid_t> out;
  for (int r = 0; r < n; ++r) out.push_back(s.pid_of(r));
  return out;
}

using env_map = std::map<std::string, std::string>;

inline std::vector<env_map> read_envs(const scratch& s) {
  std::vector<env_map> out;
  for (const auto& f : s.files("env")) {
    env_map m;
    for (const auto& l : lines(*s.read(f))) {
      const auto eq = l.find('=');
      m[l.substr(0, eq)] = l.substr(eq + 1);
    }
    out.push_back(m);
  }
  return out;
}

inline bool is_hex32(const std::string& s) {
  return s.size() == 32 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

}  // namespace
