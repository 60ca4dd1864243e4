// test_launcher: mdring-run (tools/mdring_run.cpp) from the outside. Each case runs
// mdring-run ($MDRING_RUN) on launcher_probe ($LAUNCHER_PROBE) with fork/exec,
// reads its exit status, stdout and stderr, and what the probes wrote into a fresh
// directory. This process is a child subreaper (PR_SET_CHILD_SUBREAPER): a process
// that mdring-run left behind would become its child, so "no child left" is a
// check that nothing was left behind.
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

std::string required_env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (ctest sets it)");
  return v;
}

std::string mdring_run() { return required_env("MDRING_RUN"); }
std::string probe() { return required_env("LAUNCHER_PROBE"); }

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

job run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
        const std::vector<int>& ignored = {}) {
  job j;
  j.start(args, env, ignored);
  j.finish();
  return j;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Nothing was left behind: every process mdring-run started is gone, and none
// became our child (we are a subreaper) after mdring-run exited.
void check_nothing_left(const job& j, const std::vector<pid_t>& pids) {
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

std::vector<pid_t> pids_of(const scratch& s, int n) {
  std::vector<pid_t> out;
  for (int r = 0; r < n; ++r) out.push_back(s.pid_of(r));
  return out;
}

using env_map = std::map<std::string, std::string>;

std::vector<env_map> read_envs(const scratch& s) {
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

bool is_hex32(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("env: each rank sees torchrun's variables, once each, and the job's port and secret") {
  scratch s;
  const job j = run({"-n", "4", probe(), "env", s.str()}, {"MDRING_SECRET", "LAUNCHER_TEST_INHERITED=kept as is"});
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  CHECK(j.err.empty());
  const auto envs = read_envs(s);
  REQUIRE(envs.size() == 4);
  std::set<std::string> ranks;
  for (const auto& e : envs) {
    const std::string r = e.at("RANK");
    ranks.insert(r);
    CHECK(e.at("WORLD_SIZE") == "4");
    CHECK(e.at("LOCAL_RANK") == r);
    CHECK(e.at("LOCAL_WORLD_SIZE") == "4");
    CHECK(e.at("GROUP_RANK") == "0");
    CHECK(e.at("GROUP_WORLD_SIZE") == "1");
    CHECK(e.at("ROLE_RANK") == r);
    CHECK(e.at("ROLE_WORLD_SIZE") == "4");
    CHECK(e.at("ROLE_NAME") == "default");
    CHECK(e.at("MDRING_RANK") == r);
    CHECK(e.at("MDRING_WORLD_SIZE") == "4");
    CHECK(e.at("MDRING_LOCAL_RANK") == r);
    CHECK(e.at("MDRING_LOCAL_WORLD_SIZE") == "4");
    CHECK(e.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(e.at("MASTER_PORT") == envs[0].at("MASTER_PORT"));
    CHECK(e.at("MDRING_SECRET") == envs[0].at("MDRING_SECRET"));
    CHECK(e.at("LAUNCHER_TEST_INHERITED") == "kept as is");
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3"});
  const long port = std::stol(envs[0].at("MASTER_PORT"));
  CHECK(port >= 1);
  CHECK(port <= 65535);
  CHECK(is_hex32(envs[0].at("MDRING_SECRET")));

  // A second run: another secret.
  scratch s2;
  const job j2 = run({"-n", "1", probe(), "env", s2.str()}, {"MDRING_SECRET"});
  REQUIRE(j2.exit_code() == 0);
  const auto envs2 = read_envs(s2);
  REQUIRE(envs2.size() == 1);
  CHECK(is_hex32(envs2[0].at("MDRING_SECRET")));
  CHECK(envs2[0].at("MDRING_SECRET") != envs[0].at("MDRING_SECRET"));
  CHECK(envs2[0].at("RANK") == "0");
  CHECK(envs2[0].at("WORLD_SIZE") == "1");
}

TEST_CASE("options: --master-addr, --master-port, --nproc=N, and -- before the program") {
  scratch s;
  const job j = run({"--master-addr", "127.0.0.1", "--master-port=29577", "--nproc=2", "--", probe(), "env", s.str()});
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  const auto envs = read_envs(s);
  REQUIRE(envs.size() == 2);
  for (const auto& e : envs) {
    CHECK(e.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(e.at("MASTER_PORT") == "29577");
    CHECK(e.at("WORLD_SIZE") == "2");
  }
  // A host name: the free port is found on what it resolves to.
  scratch s2;
  const job j2 = run({"-n2", "--master-addr", "localhost", probe(), "env", s2.str()});
  INFO("stderr: " << j2.err);
  REQUIRE(j2.exit_code() == 0);
  const auto envs2 = read_envs(s2);
  REQUIRE(envs2.size() == 2);
  CHECK(envs2[0].at("MASTER_ADDR") == "localhost");
  CHECK(std::stol(envs2[0].at("MASTER_PORT")) > 0);
}

TEST_CASE("path: the program is found on PATH") {
  scratch s;
  const std::string dir = fs::path(probe()).parent_path().string();
  const char* path = std::getenv("PATH");
  const job j = run({"-n", "2", fs::path(probe()).filename().string(), "env", s.str()},
                    {"PATH=" + dir + ":" + (path ? path : "/usr/bin:/bin")});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 0);
  CHECK(read_envs(s).size() == 2);
}

TEST_CASE("secret: an MDRING_SECRET in the environment is passed on unchanged") {
  scratch s;
  const std::string given = "my secret, not hex: 0123";
  const job j = run({"-n", "3", probe(), "env", s.str()}, {"MDRING_SECRET=" + given});
  REQUIRE(j.exit_code() == 0);
  const auto envs = read_envs(s);
  REQUIRE(envs.size() == 3);
  for (const auto& e : envs) CHECK(e.at("MDRING_SECRET") == given);

  // An empty one is no secret (mdring refuses it): a fresh one replaces it.
  scratch s2;
  const job j2 = run({"-n", "1", probe(), "env", s2.str()}, {"MDRING_SECRET="});
  REQUIRE(j2.exit_code() == 0);
  const auto envs2 = read_envs(s2);
  REQUIRE(envs2.size() == 1);
  CHECK(is_hex32(envs2[0].at("MDRING_SECRET")));
}

TEST_CASE("exit_code: a rank exits 3; the others are terminated after the grace period") {
  scratch s;
  const job j = run({"-n", "4", "--grace", "0.5", probe(), "pid", s.str(), "wait-files", s.str(), "pid", "4",
                     "exit-if", "2", "3", "sleep", "60"});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 3);
  const auto pids = pids_of(s, 4);
  const auto errs = lines(j.err);
  REQUIRE(!errs.empty());
  CHECK(errs[0] == "mdring-run: rank 2 (pid " + std::to_string(pids[2]) + ") exited with code 3");
  CHECK(contains(j.err, "mdring-run: sending SIGTERM to 3 ranks still running after the 0.5 s grace period"));
  CHECK(j.seconds_taken >= 0.5);
  CHECK(j.seconds_taken < 10);
  check_nothing_left(j, pids);
}

TEST_CASE("grace: the other ranks may finish on their own within it") {
  scratch s;
  const job j = run({"-n", "3", "--grace", "20", probe(), "pid", s.str(), "wait-files", s.str(), "pid", "3",
                     "exit-if", "1", "5", "sleep", "0.3", "done", s.str(), "wait-gone", s.str(), "1", "exit-if", "2", "4"});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 5);  // the first failure, not rank 2's later one
  CHECK(lines(j.err) == std::vector<std::string>{"mdring-run: rank 1 (pid " + std::to_string(s.pid_of(1)) +
                                                 ") exited with code 5"});
  CHECK(s.files("done") == std::vector<std::string>{"done.0", "done.2"});
  CHECK(j.seconds_taken < 15);
  check_nothing_left(j, pids_of(s, 3));
}

TEST_CASE("escalation: ranks that ignore SIGTERM get SIGKILL 2 s later") {
  scratch s;
  const job j = run({"-n", "3", "--grace", "0.2", probe(), "ignore", std::to_string(SIGTERM), "pid", s.str(),
                     "wait-files", s.str(), "pid", "3", "exit-if", "0", "1", "sleep", "60"});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 1);
  CHECK(contains(j.err, "mdring-run: rank 0 (pid " + std::to_string(s.pid_of(0)) + ") exited with code 1"));
  CHECK(contains(j.err, "sending SIGTERM to 2 ranks"));
  CHECK(contains(j.err, "sending SIGKILL to 2 ranks still running 2 s after SIGTERM"));
  CHECK(j.seconds_taken >= 2.2);
  CHECK(j.seconds_taken < 15);
  check_nothing_left(j, pids_of(s, 3));
}

TEST_CASE("killed_by_signal: a rank killed by SIGKILL makes mdring-run exit 137") {
  scratch s;
  const job j = run({"-n", "3", probe(), "pid", s.str(), "wait-files", s.str(), "pid", "3", "raise-if", "1",
                     std::to_string(SIGKILL), "sleep", "0.2"});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 137);
  CHECK(lines(j.err) == std::vector<std::string>{"mdring-run: rank 1 (pid " + std::to_string(s.pid_of(1)) +
                                                 ") was killed by signal 9 (Killed)"});
  check_nothing_left(j, pids_of(s, 3));
}

TEST_CASE("forwarding: SIGTERM, SIGINT and SIGHUP sent to mdring-run reach every rank") {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    CAPTURE(sig);
    scratch s;
    job j;
    j.start({"-n", "3", "--grace", "30", probe(), "trap", s.str(), "pid", s.str(), "sleep", "60"});
    REQUIRE(s.wait_files("pid", 3));
    const auto pids = pids_of(s, 3);
    REQUIRE(kill(j.pid, sig) == 0);
    j.finish();
    INFO("stderr: " << j.err);
    CHECK(j.exit_code() == 128 + sig);  // every rank dies of it; the first to be reaped is reported
    CHECK(contains(j.err, ") was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")"));
    CHECK(j.seconds_taken < 20);  // not the grace period
    for (int r = 0; r < 3; ++r) CHECK(s.read("signal." + std::to_string(r)) == std::to_string(sig) + "\n");
    check_nothing_left(j, pids);
  }
}

TEST_CASE("nohup: a signal that mdring-run starts with ignored stays ignored, in the ranks too") {
  scratch s;
  const job j = run({"-n", "2", probe(), "ignored", s.str()}, {}, {SIGHUP});
  REQUIRE(j.exit_code() == 0);
  for (int r = 0; r < 2; ++r) CHECK(s.read("ignored." + std::to_string(r)) == std::to_string(SIGHUP) + "\n");
  scratch s2;
  const job k = run({"-n", "2", probe(), "ignored", s2.str()});
  REQUIRE(k.exit_code() == 0);
  for (int r = 0; r < 2; ++r) CHECK(s2.read("ignored." + std::to_string(r)) == "");
}

TEST_CASE("second_signal: a second SIGINT kills ranks that ignore it") {
  scratch s;
  job j;
  j.start({"-n", "2", "--grace", "30", probe(), "ignore", std::to_string(SIGINT), "pid", s.str(), "sleep", "60"});
  REQUIRE(s.wait_files("pid", 2));
  const auto pids = pids_of(s, 2);
  REQUIRE(kill(j.pid, SIGINT) == 0);
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(j.running());  // ignored: the grace period runs
  REQUIRE(kill(j.pid, SIGINT) == 0);
  j.finish();
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 137);
  CHECK(contains(j.err, "mdring-run: SIGINT after SIGINT: sending SIGKILL to 2 ranks"));
  CHECK(j.seconds_taken < 20);
  check_nothing_left(j, pids);
}

TEST_CASE("pdeathsig: the ranks die with a SIGKILLed mdring-run") {
  scratch s;
  job j;
  j.start({"-n", "3", probe(), "pid", s.str(), "sleep", "60"});
  REQUIRE(s.wait_files("pid", 3));
  const auto pids = pids_of(s, 3);
  REQUIRE(kill(j.pid, SIGKILL) == 0);
  j.finish();
  CHECK(WIFSIGNALED(j.status));
  CHECK(j.seconds_taken < 20);
  // Orphaned, they became our children (subreaper): each must die of SIGKILL.
  std::set<pid_t> left(pids.begin(), pids.end());
  const auto until = steady_clock::now() + seconds(20);
  while (!left.empty() && steady_clock::now() < until) {
    int st = 0;
    const pid_t r = waitpid(-1, &st, WNOHANG);
    if (r > 0) {
      CHECK(left.count(r) == 1);
      CHECK(WIFSIGNALED(st));
      if (WIFSIGNALED(st)) CHECK(WTERMSIG(st) == SIGKILL);
      left.erase(r);
    } else {
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  CHECK(left.empty());
  check_nothing_left(j, pids);
}

TEST_CASE("bad_arguments: exit 2 and a message that names the argument") {
  scratch s;
  const std::string p = probe();
  const std::string d = s.str();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-n", "0", p, "done", d}, "mdring-run: -n expects a positive process count, got \"0\""},
      {{"-n", "x", p, "done", d}, "mdring-run: -n expects a positive process count, got \"x\""},
      {{"-n", "-2", p, "done", d}, "mdring-run: -n expects a positive process count, got \"-2\""},
      {{"-n", "100000", p, "done", d}, "mdring-run: -n expects a positive process count of at most 4096, got \"100000\""},
      {{"-n", "2"}, "mdring-run: no program to run"},
      {{"-n", "2", "--"}, "mdring-run: no program to run"},
      {{p, "done", d}, "mdring-run: missing -n N"},
      {{"-n"}, "mdring-run: -n expects a value"},
      {{"-n", "2", "--grace", "soon", p, "done", d}, "mdring-run: --grace expects a number of seconds >= 0, got \"soon\""},
      {{"-n", "2", "--grace", "-1", p, "done", d}, "mdring-run: --grace expects a number of seconds >= 0, got \"-1\""},
      {{"-n", "2", "--master-port", "0", p, "done", d}, "mdring-run: --master-port expects a TCP port number, got \"0\""},
      {{"-n", "2", "--master-port", "65536", p, "done", d},
       "mdring-run: --master-port expects a TCP port number of at most 65535, got \"65536\""},
      {{"-n", "2", "--master-addr", "no-such-host.invalid", p, "done", d},
       "mdring-run: --master-addr expects an address of this machine, got \"no-such-host.invalid\""},
      {{"-n", "2", "--bogus", p, "done", d}, "mdring-run: unknown option \"--bogus\""},
      {{"-n", "2", "--bind-to", "socket", p, "done", d}, "mdring-run: --bind-to expects core or none, got \"socket\""},
      {{"-n", "2", "--bind-to"}, "mdring-run: --bind-to expects a value"},
  };
  for (const auto& [args, message] : cases) {
    std::string joined;
    for (const auto& a : args) joined += " " + a;
    CAPTURE(joined);
    const job j = run(args);
    INFO("stderr: " << j.err);
    CHECK(j.exit_code() == 2);
    CHECK(j.out.empty());
    CHECK(j.err.starts_with(message));
    CHECK(contains(j.err, "usage: mdring-run -n N"));
  }
  CHECK(s.files("done").empty());  // nothing was started
}

// The CPUs this process may run on (mdring-run, started by it, inherits them).
std::vector<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (const int c : cpus) s += (s.empty() ? "" : " ") + std::to_string(c);
  return s;
}

TEST_CASE("bind: --bind-to core puts rank r on the r-th allowed CPU, round robin; none leaves all") {
  const std::vector<int> cpus = own_cpus();
  REQUIRE(!cpus.empty());
  const long n = long(cpus.size()) + 1;  // one more than the CPUs: the last one wraps around
  scratch s;
  const job j = run({"-n", std::to_string(n), "--bind-to", "core", probe(), "affinity", s.str()});
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  for (long r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(s.read("affinity." + std::to_string(r)).value_or("(none)") == std::to_string(cpus[std::size_t(r) % cpus.size()]));
  }
  for (const std::string none : {"--bind-to=none", "--tag-output"}) {  // explicit, and the default
    scratch s2;
    const job j2 = run({"-n", "2", none, probe(), "affinity", s2.str()});
    INFO("stderr: " << j2.err);
    REQUIRE(j2.exit_code() == 0);
    CHECK(s2.read("affinity.0").value_or("(none)") == cpu_list(cpus));
    CHECK(s2.read("affinity.1").value_or("(none)") == cpu_list(cpus));
  }
}

TEST_CASE("help: -h and --help print the usage, with how to launch across machines") {
  for (const char* h : {"-h", "--help"}) {
    const job j = run({h});
    CHECK(j.exit_code() == 0);
    CHECK(j.err.empty());
    CHECK(j.out.starts_with("usage: mdring-run -n N [options] [--] program [args...]\n"));
    CHECK(contains(j.out, "torchrun --nnodes M --nproc-per-node K --rdzv-backend c10d"));
    CHECK(contains(j.out, "export MDRING_SECRET=$(openssl rand -hex 16)"));
    CHECK(contains(j.out, "--hosts A:2,B:2"));
    CHECK(contains(j.out, "--agent CMD"));
    CHECK(contains(j.out, "MDRING_STATE_SIGNAL"));
  }
}

TEST_CASE("exec_failure: a program that cannot be run exits 127") {
  const job j = run({"-n", "2", "no-such-program-for-mdring-run"});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 127);
  const auto errs = lines(j.err);
  CHECK(std::count(errs.begin(), errs.end(),
                   "mdring-run: cannot run \"no-such-program-for-mdring-run\": No such file or directory") == 2);
  CHECK(std::count_if(errs.begin(), errs.end(), [](const std::string& l) {
          return l.starts_with("mdring-run: rank ") && l.ends_with(") exited with code 127");
        }) == 1);

  const job k = run({"-n", "1", "/"});  // a directory
  CHECK(k.exit_code() == 127);
  CHECK(contains(k.err, "mdring-run: cannot run \"/\": Permission denied"));
}

TEST_CASE("tag_output: each line is prefixed with [rank]") {
  const job j = run({"-n", "3", "--tag-output", probe(), "print"});
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  auto out = lines(j.out);
  for (int r = 0; r < 3; ++r) {
    const std::string t = "[" + std::to_string(r) + "] ";
    const auto a = std::find(out.begin(), out.end(), t + "out RANK=" + std::to_string(r));
    const auto b = std::find(out.begin(), out.end(), t + "tail " + std::to_string(r));
    CHECK(a != out.end());
    CHECK(b != out.end());
    CHECK(a < b);
  }
  CHECK(out.size() == 6);
  auto err = lines(j.err);
  std::sort(err.begin(), err.end());
  CHECK(err == std::vector<std::string>{"[0] err RANK=0", "[1] err RANK=1", "[2] err RANK=2"});

  // And the exec failure's message, through the pipes too.
  const job k = run({"-n", "1", "--tag-output", "no-such-program-for-mdring-run"});
  CHECK(k.exit_code() == 127);
  CHECK(contains(k.err, "[0] mdring-run: cannot run \"no-such-program-for-mdring-run\""));
}

// ---- across hosts: the agent here runs the host's mdring-run on this machine, in an
// environment as bare as ssh gives (env -i), so only what mdring-run sends arrives.

std::vector<std::string> bare_agent() { return {"--agent", "env -i PATH=/usr/bin:/bin LAUNCHER_TEST_HOST={host}"}; }

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_CASE("hosts: --hosts a:2,b:1: each host's ranks get global and local ranks, the store's address, the secret") {
  scratch s;
  const job j = run(with(with({"--hosts", "hostA:2,hostB:1", "--master-addr", "127.0.0.1", "-x", "LAUNCHER_TEST_X=given"},
                              bare_agent()),
                         {probe(), "env", s.str(), "cwd", s.str(), "secret-seen", s.str()}),
                    {"MDRING_SECRET", "LAUNCHER_TEST_INHERITED=not forwarded", "MDRING_TEST_FORWARDED=forwarded"});
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  CHECK(j.err.empty());
  const auto envs = read_envs(s);
  REQUIRE(envs.size() == 3);
  std::map<std::string, env_map> by_rank;
  for (const auto& e : envs) by_rank[e.at("RANK")] = e;
  REQUIRE(by_rank.size() == 3);
  const std::string hosts[] = {"hostA", "hostA", "hostB"};
  const std::string local[] = {"0", "1", "0"}, local_size[] = {"2", "2", "1"}, group[] = {"0", "0", "1"};
  for (int r = 0; r < 3; ++r) {
    const env_map& e = by_rank.at(std::to_string(r));
    CAPTURE(r);
    CHECK(e.at("WORLD_SIZE") == "3");
    CHECK(e.at("MDRING_RANK") == std::to_string(r));
    CHECK(e.at("MDRING_WORLD_SIZE") == "3");
    CHECK(e.at("LOCAL_RANK") == local[r]);
    CHECK(e.at("MDRING_LOCAL_RANK") == local[r]);
    CHECK(e.at("LOCAL_WORLD_SIZE") == local_size[r]);
    CHECK(e.at("MDRING_LOCAL_WORLD_SIZE") == local_size[r]);
    CHECK(e.at("GROUP_RANK") == group[r]);
    CHECK(e.at("GROUP_WORLD_SIZE") == "2");
    CHECK(e.at("ROLE_RANK") == std::to_string(r));
    CHECK(e.at("LAUNCHER_TEST_HOST") == hosts[r]);
    CHECK(e.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(e.at("MASTER_PORT") == envs[0].at("MASTER_PORT"));
    CHECK(is_hex32(e.at("MDRING_SECRET")));
    CHECK(e.at("MDRING_SECRET") == envs[0].at("MDRING_SECRET"));
    CHECK(e.at("LAUNCHER_TEST_X") == "given");
    CHECK(e.at("MDRING_TEST_FORWARDED") == "forwarded");
    CHECK(e.count("LAUNCHER_TEST_INHERITED") == 0);
    CHECK(s.read("cwd." + std::to_string(r)) == fs::current_path().string() + "\n");
    CHECK(s.read("seen." + std::to_string(r)) == "no\n");
  }
  CHECK(std::stol(envs[0].at("MASTER_PORT")) > 0);
}

TEST_CASE("hosts: a host file, -n fewer than the slots, and a given secret and port") {
  scratch s;
  {
    std::ofstream f(s.dir / "hostfile");
    f << "# the job's hosts\nhostA slots=2\n\n  hostB:2   # two more\nhostC\n";
  }
  const job j = run(with(with({"--hostfile", (s.dir / "hostfile").string(), "-n", "3", "--master-addr", "127.0.0.1",
                               "--master-port", "29581"},
                              bare_agent()),
                         {probe(), "env", s.str()}),
                    {"MDRING_SECRET=0123456789abcdef0123456789abcdef"});
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  const auto envs = read_envs(s);
  REQUIRE(envs.size() == 3);
  std::set<std::string> where;
  for (const auto& e : envs) {
    where.insert(e.at("RANK") + "@" + e.at("LAUNCHER_TEST_HOST") + ":" + e.at("LOCAL_RANK") + "/" +
                 e.at("LOCAL_WORLD_SIZE") + " group " + e.at("GROUP_RANK") + "/" + e.at("GROUP_WORLD_SIZE"));
    CHECK(e.at("MASTER_PORT") == "29581");
    CHECK(e.at("MDRING_SECRET") == "0123456789abcdef0123456789abcdef");
  }
  CHECK(where == std::set<std::string>{"0@hostA:0/2 group 0/2", "1@hostA:1/2 group 0/2", "2@hostB:0/1 group 1/2"});
}

TEST_CASE("hosts: a rank on the second host exits 3: the job exits 3 naming the host and rank, nothing is left") {
  scratch s;
  job j;
  j.start(with(with({"--hosts", "hostA:2,hostB:2", "--master-addr", "127.0.0.1", "--grace", "0.5"}, bare_agent()),
               {probe(), "pid", s.str(), "wait-files", s.str(), "pid", "4", "exit-if", "3", "3", "sleep", "30"}));
  REQUIRE(s.wait_files("pid", 4));
  const auto pids = pids_of(s, 4);
  j.finish();
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 3);
  CHECK(contains(j.err, "rank 3 (pid " + std::to_string(pids[3]) + ") on host hostB exited with code 3"));
  CHECK(contains(j.err, "host hostB (ranks 2-3) failed"));
  CHECK(j.seconds_taken < 15);
  check_nothing_left(j, pids);
}

TEST_CASE("hosts: SIGTERM to mdring-run reaches every rank on every host once") {
  scratch s;
  job j;
  j.start(with(with({"--hosts", "hostA:1,hostB:2", "--master-addr", "127.0.0.1"}, bare_agent()),
               {probe(), "trap", s.str(), "pid", s.str(), "sleep", "30"}));
  REQUIRE(s.wait_files("pid", 3));
  const auto pids = pids_of(s, 3);
  kill(j.pid, SIGTERM);
  j.finish();
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 128 + SIGTERM);
  for (int r = 0; r < 3; ++r) CHECK(s.read("signal." + std::to_string(r)) == std::to_string(SIGTERM) + "\n");
  check_nothing_left(j, pids);
}

TEST_CASE("hosts: MDRING_STATE_SIGNAL to mdring-run reaches every rank on every host; each host prints its table") {
  scratch s;
  job j;
  // The probe is no mdring program: it ignores the signal and writes no state line.
  j.start(with(with({"--hosts", "hostA:1,hostB:2", "--master-addr", "127.0.0.1"}, bare_agent()),
               {probe(), "ignore", std::to_string(SIGUSR1), "pid", s.str(), "sleep", "4"}),
          {"MDRING_STATE_SIGNAL=USR1"});
  REQUIRE(s.wait_files("pid", 3));
  kill(j.pid, SIGUSR1);
  j.finish();
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 0);  // the signal ends nothing
  std::size_t tables = 0;
  for (std::size_t at = 0; (at = j.err.find("mdring-run: hang report (on SIGUSR1)", at)) != std::string::npos; ++at)
    ++tables;
  CHECK(tables == 2);  // one per host
  CHECK(contains(j.err, "mdring-run: behind: rank 0 wrote no line"));
  CHECK(contains(j.err, "mdring-run: behind: ranks 1, 2 wrote no line"));
}

TEST_CASE("hosts: SIGKILL of mdring-run takes every host's ranks with it") {
  scratch s;
  job j;
  j.start(with(with({"--hosts", "hostA:1,hostB:1", "--master-addr", "127.0.0.1"}, bare_agent()),
               {probe(), "pid", s.str(), "sleep", "30"}));
  REQUIRE(s.wait_files("pid", 2));
  const auto pids = pids_of(s, 2);
  REQUIRE(kill(j.pid, SIGKILL) == 0);
  j.finish();
  // Orphaned, the hosts' mdring-runs and the ranks die of SIGKILL (ended, or zombies
  // waiting for whichever process adopted them).
  auto gone = [](pid_t p) {
    if (kill(p, 0) != 0) return true;
    std::ifstream st("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    std::getline(st, line);
    const auto close_paren = line.rfind(')');
    return close_paren != std::string::npos && close_paren + 2 < line.size() && line[close_paren + 2] == 'Z';
  };
  const auto until = steady_clock::now() + seconds(20);
  for (const pid_t p : pids) {
    while (!gone(p) && steady_clock::now() < until) {
      while (waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    CHECK_MESSAGE(gone(p), "rank process " << p << " outlived mdring-run");
  }
  for (int spin = 0; spin < 100; ++spin) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  check_nothing_left(j, pids);
}

TEST_CASE("hosts: bad hosts, host files and agents are refused, naming the argument") {
  scratch s;
  {
    std::ofstream f(s.dir / "bad");
    f << "hostA slots=x\n";
    std::ofstream e(s.dir / "empty");
    e << "# nothing\n";
  }
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--hosts", "a:2,b:0", probe()}, "--hosts expects NAME:SLOTS with a positive SLOTS, got \"0\""},
      {{"--hosts", "a:2,,b", probe()}, "--hosts expects host names"},
      {{"--hosts", "a;rm:2", probe()}, "--hosts expects host names"},
      {{"--hosts", "a:2,b:1", "-n", "4", probe()}, "-n 4 is more than the 3 slots of the hosts given"},
      {{"-x", "FOO", "-n", "2", probe()}, "-x is for --hosts or --hostfile"},
      {{"--hosts", "a", "-x", "1BAD", probe()}, "-x expects NAME or NAME=VALUE"},
      {{"--hostfile", (s.dir / "bad").string(), probe()}, ":1 expects slots=SLOTS with a positive SLOTS, got \"x\""},
      {{"--hostfile", (s.dir / "empty").string(), probe()}, "names no host"},
      {{"--hostfile", (s.dir / "missing").string(), probe()}, "--hostfile expects a readable host file"},
      {{"--hosts", "a", "--agent", " ", probe()}, "--agent expects a command"},
      {{"--hosts", "a", "--launcher-path", "relative/mdring-run", probe()}, "--launcher-path expects an absolute path"},
  };
  for (const auto& [args, message] : cases) {
    const job j = run(args);
    CAPTURE(j.err);
    CHECK(j.exit_code() == 2);
    CHECK(contains(j.err, message));
  }
  // An agent that cannot reach the host: a clear error naming it, exit 1.
  const job j = run({"--hosts", "hostA:1", "--agent", "false", probe()});
  CAPTURE(j.err);
  CHECK(j.exit_code() == 1);
  CHECK(contains(j.err, "cannot find a free port on host hostA through the agent (\"false hostA"));
  // And with the port given, the host's failure is reported as such.
  const job k = run({"--hosts", "hostA:1", "--master-port", "29582", "--agent", "false", probe()});
  CAPTURE(k.err);
  CHECK(k.exit_code() == 1);
  CHECK(contains(k.err, "host hostA (rank 0) failed"));
}

TEST_CASE("hosts: --tag-output prefixes each host's lines with the global rank; a missing program exits 127") {
  const job j =
      run(with(with({"--hosts", "hostA:1,hostB:2", "--master-addr", "127.0.0.1", "--tag-output"}, bare_agent()),
               {probe(), "print"}));
  INFO("stderr: " << j.err);
  REQUIRE(j.exit_code() == 0);
  auto err = lines(j.err);
  std::sort(err.begin(), err.end());
  CHECK(err == std::vector<std::string>{"[0] err RANK=0", "[1] err RANK=1", "[2] err RANK=2"});
  auto out = lines(j.out);
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<std::string>{"[0] out RANK=0", "[0] tail 0", "[1] out RANK=1", "[1] tail 1",
                                        "[2] out RANK=2", "[2] tail 2"});
  const job k = run(with(with({"--hosts", "hostA:1,hostB:1", "--master-addr", "127.0.0.1"}, bare_agent()),
                         {"no-such-program-for-mdring-run"}));
  CHECK(k.exit_code() == 127);
  CHECK(contains(k.err, "mdring-run: cannot run \"no-such-program-for-mdring-run\" on host host"));
}
