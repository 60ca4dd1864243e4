// test_launcher_hosts: mdring-run --hosts from the outside (the single-host cases:
// test_launcher.cpp; the harness: launcher_support.hpp). The agent here runs each
// host's mdring-run on this machine, in an environment as bare as ssh gives.
#include <doctest/doctest.h>

#include "launcher_support.hpp"

namespace {

std::vector<std::string> bare_agent() { return {"--agent", "env -i PATH=/usr/bin:/bin LAUNCHER_TEST_HOST={host}"}; }

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("hosts: --hosts a:2,b:1: each host's ranks get global and local ranks, the store's address, the secret") {
  scratch s;
  const job j =
      run(with(with({"--hosts", "hostA:2,hostB:1", "--master-addr", "127.0.0.1", "-x", "LAUNCHER_TEST_X=given"},
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
      while (waitpid(-1, nullptr, WNOHANG) > 0) {}
      std::this_thread::sleep_for(milliseconds(5));
    }
    CHECK_MESSAGE(gone(p), "rank process " << p << " outlived mdring-run");
  }
  for (int spin = 0; spin < 100; ++spin) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {}
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
