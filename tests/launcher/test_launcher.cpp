// test_launcher: mdring-run (tools/mdring_run.cpp) from the outside. Each case runs
// mdring-run ($MDRING_RUN) on launcher_probe ($LAUNCHER_PROBE) with fork/exec,
// reads its exit status, stdout and stderr, and what the probes wrote into a fresh
// directory. This process is a child subreaper (PR_SET_CHILD_SUBREAPER): a process
// that mdring-run left behind would become its child, so "no child left" is a
// check that nothing was left behind.
// The cases across hosts: test_launcher_hosts.cpp; the harness: launcher_support.hpp.
#include <doctest/doctest.h>

#include "launcher_support.hpp"

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
    CHECK(e.at("MDRING_STORE_HOSTED") == "1");                            // mdring-run hosts the store, not rank 0,
    CHECK(e.at("MDRING_STORE_PORT") == envs[0].at("MDRING_STORE_PORT"));  // on a port of its own
    CHECK(e.at("MDRING_STORE_PORT") != e.at("MASTER_PORT"));
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
  CHECK(envs2[0].count("MDRING_STORE_HOSTED") == 0);  // a job of one needs no store
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
  const job j = run({"-n", "4", "--grace", "0.5", probe(), "pid", s.str(), "wait-files", s.str(), "pid", "4", "exit-if",
                     "2", "3", "sleep", "60"});
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
  const job j =
      run({"-n", "3", "--grace", "20",  probe(), "pid",   s.str(),     "wait-files", s.str(), "pid",     "3", "exit-if",
           "1",  "5", "sleep",   "0.3", "done",  s.str(), "wait-gone", s.str(),      "1",     "exit-if", "2", "4"});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 5);  // the first failure, not rank 2's later one
  CHECK(lines(j.err) ==
        std::vector<std::string>{"mdring-run: rank 1 (pid " + std::to_string(s.pid_of(1)) + ") exited with code 5"});
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

TEST_CASE("on_failure: with --on-failure shrink a rank that fails does not stop the others") {
  scratch s;
  // Rank 1 dies of SIGKILL; the others keep going for longer than the grace period, and finish.
  const job j = run({"-n",
                     "3",
                     "--grace",
                     "0.2",
                     "--on-failure",
                     "shrink",
                     probe(),
                     "pid",
                     s.str(),
                     "wait-files",
                     s.str(),
                     "pid",
                     "3",
                     "raise-if",
                     "1",
                     std::to_string(SIGKILL),
                     "sleep",
                     "1",
                     "done",
                     s.str()});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 0);
  CHECK(lines(j.err) == std::vector<std::string>{"mdring-run: rank 1 (pid " + std::to_string(s.pid_of(1)) +
                                                 ") was killed by signal 9; the others go on (--on-failure shrink)"});
  CHECK(s.files("done") == std::vector<std::string>{"done.0", "done.2"});
  check_nothing_left(j, pids_of(s, 3));

  // A rank that exits with an error does not stop the others either, but the job's
  // status is its; every rank killed: 137.
  scratch s2;
  const job j2 = run({"-n", "2", "--grace", "0.2", "--on-failure=shrink", probe(), "pid", s2.str(), "wait-files",
                      s2.str(), "pid", "2", "exit-if", "0", "4", "sleep", "1", "done", s2.str()});
  CHECK(j2.exit_code() == 4);
  CHECK(contains(j2.err, "exited with code 4; the others go on (--on-failure shrink)"));
  CHECK(!contains(j2.err, "SIGTERM"));
  CHECK(s2.files("done") == std::vector<std::string>{"done.1"});
  scratch s3;
  const job j3 = run({"-n", "2", "--on-failure", "shrink", probe(), "raise-if", "0", std::to_string(SIGKILL),
                      "raise-if", "1", std::to_string(SIGKILL)});
  CHECK(j3.exit_code() == 137);
  // And the value is checked; --replace needs shrink.
  const job j4 = run({"-n", "2", "--on-failure", "retry", probe()});
  CHECK(j4.exit_code() == 2);
  CHECK(contains(j4.err, "--on-failure expects stop or shrink, got \"retry\""));
  const job j5 = run({"-n", "2", "--replace", probe()});
  CHECK(j5.exit_code() == 2);
  CHECK(contains(j5.err, "--replace expects --on-failure shrink too"));
}

TEST_CASE("on_failure: --replace starts a process in a killed rank's place, once, with MDRING_JOIN=1") {
  scratch s;
  // Rank 1 dies of SIGKILL; the process in its place does not (raise-first-if), says it
  // joined, and finishes; a second death of the same rank would not be replaced.
  const job j = run({"-n", "3", "--on-failure", "shrink", "--replace", probe(), "joined", s.str(), "raise-first-if",
                     "1", std::to_string(SIGKILL), "sleep", "0.5", "done", s.str()});
  INFO("stderr: " << j.err);
  CHECK(j.exit_code() == 0);
  CHECK(contains(j.err, "was killed by signal 9; the others go on (--on-failure shrink)"));
  CHECK(contains(j.err, "in rank 1's place (MDRING_JOIN=1, --replace)"));
  CHECK(s.files("done") == std::vector<std::string>{"done.0", "done.1", "done.2"});
  CHECK(s.files("joined") == std::vector<std::string>{"joined.1"});
  CHECK(s.read("joined.1") == "1 1\n");
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
  // Orphaned, they became our children (subreaper): each must die of SIGKILL, and
  // so must the process that hosted the job's store (the one orphan not a rank).
  // Reap until no child is left: the store process may die after the ranks (CI
  // once saw it still alive when the last rank had been reaped).
  std::set<pid_t> left(pids.begin(), pids.end());
  int store_processes = 0;
  const auto until = steady_clock::now() + seconds(20);
  while (steady_clock::now() < until) {
    int st = 0;
    const pid_t r = waitpid(-1, &st, WNOHANG);
    if (r > 0) {
      if (left.count(r) == 0) CHECK(++store_processes == 1);
      CHECK(WIFSIGNALED(st));
      if (WIFSIGNALED(st)) CHECK(WTERMSIG(st) == SIGKILL);
      left.erase(r);
    } else if (r == -1 && errno == ECHILD) {
      break;
    } else {
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  CHECK(left.empty());
  if (!contains(j.err, "rank 0 hosts it")) CHECK(store_processes == 1);
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
      {{"-n", "100000", p, "done", d},
       "mdring-run: -n expects a positive process count of at most 4096, got \"100000\""},
      {{"-n", "2"}, "mdring-run: no program to run"},
      {{"-n", "2", "--"}, "mdring-run: no program to run"},
      {{p, "done", d}, "mdring-run: missing -n N"},
      {{"-n"}, "mdring-run: -n expects a value"},
      {{"-n", "2", "--grace", "soon", p, "done", d},
       "mdring-run: --grace expects a number of seconds >= 0, got \"soon\""},
      {{"-n", "2", "--grace", "-1", p, "done", d}, "mdring-run: --grace expects a number of seconds >= 0, got \"-1\""},
      {{"-n", "2", "--master-port", "0", p, "done", d},
       "mdring-run: --master-port expects a TCP port number, got \"0\""},
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
    CHECK(s.read("affinity." + std::to_string(r)).value_or("(none)") ==
          std::to_string(cpus[std::size_t(r) % cpus.size()]));
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
