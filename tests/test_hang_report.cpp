// test_hang_report.cpp: the hang report (executor/state.hpp) on the threads
// transport: each communicator's line idle, waiting and failed, with the exact
// call, step, dimension, link, peer and bytes; the line every rank writes when a
// call fails on its deadline or a peer's failure (and not with hang_report off);
// the line of every communicator of the process on the signal the user names,
// in MDRING_STATE_DIR too; a bad MDRING_STATE_SIGNAL named.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "stderr_capture.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

namespace md = mdring;
using namespace std::chrono_literals;
using mdring_test::stderr_of;

namespace {

// Before main, so before any communicator: the signal and the state directory.
std::string make_state_dir() {
  char tmpl[] = "/tmp/mdring-state-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  const std::string dir = d ? d : "/tmp";
  setenv("MDRING_STATE_SIGNAL", "USR1", 1);
  setenv("MDRING_STATE_DIR", dir.c_str(), 1);
  return dir;
}
const std::string state_dir = make_state_dir();

bool contains(std::string_view s, std::string_view w) { return s.find(w) != std::string_view::npos; }

// The value of key= in a state line ("" when absent).
std::string field(const std::string& line, const std::string& key) {
  const std::string k = " " + key + "=";
  const auto at = line.find(k);
  if (at == std::string::npos) return {};
  const auto start = at + k.size();
  return line.substr(start, line.find(' ', start) - start);
}

md::options opts(std::chrono::milliseconds timeout) {
  md::options o;
  o.timeout = timeout;
  o.checks = md::check_level::local;  // the line shows the collective's own program
  o.progress = md::progress_mode::in_wait;
  return o;
}

constexpr auto ring2 = md::ring<md::ethernet, 2>;  // messages (a ring-only link)

}  // namespace

TEST_CASE("idle, then every completed call counted with what its messages received") {
  const std::size_t n = 1000;
  std::vector<std::string> before(2), after(2);
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(ring2, ep, opts(30s));
    before[ep.rank] = md::state_line(comm);
    std::vector<float> x(n, 1.0f);
    for (int k = 0; k < 3; ++k) md::all_reduce(comm, x.data(), n);
    after[ep.rank] = md::state_line(comm);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO(before[r]);
    INFO(after[r]);
    CHECK(before[r].rfind("mdring-state: rank=" + std::to_string(r) + " size=2 ", 0) == 0);
    CHECK(field(before[r], "call") == "0");
    CHECK(field(before[r], "state") == "idle");
    CHECK(field(before[r], "transport") == "threads");
    CHECK(field(before[r], "pid") == std::to_string(getpid()));
    CHECK(field(before[r], "collective").empty());
    CHECK(field(after[r], "call") == "3");
    CHECK(field(after[r], "done") == "3");
    CHECK(field(after[r], "state") == "idle");
    CHECK(field(after[r], "collective") == "all_reduce");
    CHECK(field(after[r], "type") == "float");
    CHECK(field(after[r], "op") == "sum");
    CHECK(field(after[r], "count") == "1000");
    // Two ranks: whatever the algorithm, each receives the other's n floats once.
    CHECK(field(after[r], "recv_bytes") == std::to_string(n * sizeof(float)));
    const std::string steps = field(after[r], "step");
    const auto slash = steps.find('/');
    REQUIRE(slash != std::string::npos);
    CHECK(steps.substr(0, slash) == steps.substr(slash + 1));  // every step passed
    CHECK(std::stoul(steps.substr(0, slash)) > 0);
    CHECK(field(after[r], "peer").empty());  // nothing waited for when idle
  }
}

TEST_CASE(
    "a stalled peer: the waiting line names the step, link and peer; at the deadline every rank writes its line") {
  const std::size_t n = 1000;
  std::vector<std::string> waiting(2), failed(2);
  std::atomic<bool> rank0_failed{false};
  const std::string err = stderr_of([&] {
    md::threads::run(2, [&](md::threads::endpoint ep) {
      auto o = opts(ep.rank == 0 ? 1500ms : 30000ms);
      o.algorithms = {md::algorithm::ring};  // two steps of n/2 elements
      auto comm = md::bind(ring2, ep, o);
      std::vector<float> x(n, 1.0f);
      if (ep.rank == 0) {
        std::atomic<bool> stop{false};
        std::thread watcher([&] {  // another thread reads the line while the call waits
          while (!stop) {
            const std::string l = md::state_line(comm);
            if (field(l, "state") == "waiting" && std::stod(field(l, "waiting_s")) > 0.2) {
              waiting[0] = l;
              return;
            }
            std::this_thread::sleep_for(10ms);
          }
        });
        CHECK_THROWS_AS(md::all_reduce(comm, x.data(), n), md::timeout_error);
        stop = true;
        watcher.join();
        rank0_failed = true;
      } else {
        while (!rank0_failed) std::this_thread::sleep_for(10ms);  // arrives after the deadline
        CHECK_THROWS_AS(md::all_reduce(comm, x.data(), n), md::remote_error);
      }
      failed[ep.rank] = md::state_line(comm);
    });
  });
  INFO("stderr: " << err);
  INFO("waiting: " << waiting[0]);
  const std::string& w = waiting[0];
  CHECK(field(w, "call") == "1");
  CHECK(field(w, "done") == "0");
  CHECK(field(w, "collective") == "all_reduce");
  CHECK(field(w, "count") == "1000");
  CHECK(field(w, "phase") == "reduce-scatter");
  CHECK(field(w, "phase_step") == "0");
  CHECK(field(w, "dim") == "0");
  CHECK(field(w, "link") == "ethernet:2");
  CHECK(field(w, "peer") == "1");
  CHECK(field(w, "dir") == "recv");
  CHECK(field(w, "recv_bytes") == "0");
  CHECK(field(w, "step_bytes") == std::to_string(n / 2 * sizeof(float)));
  CHECK(field(w, "step") == "0/2");
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("failed line of rank " << r << ": " << failed[r]);
    CHECK(field(failed[r], "state") == "failed");
    CHECK(field(failed[r], "call") == "1");
    CHECK(field(failed[r], "done") == "0");
  }
  CHECK(field(failed[0], "peer") == "1");
  CHECK(std::stod(field(failed[0], "waited_s")) >= 1.4);
  // What each rank wrote on stderr when its call failed: its own line.
  std::istringstream lines(err);
  std::string l;
  std::vector<int> written(2, 0);
  while (std::getline(lines, l))
    if (l.rfind("mdring-state: ", 0) == 0 && field(l, "state") == "failed" && field(l, "transport") == "threads") {
      const auto rank = std::stoul(field(l, "rank"));
      if (rank < 2) ++written[rank];
      if (rank == 0) {
        CHECK(field(l, "peer") == "1");
        CHECK(field(l, "link") == "ethernet:2");
      }
    }
  CHECK(written[0] == 1);
  CHECK(written[1] == 1);
}

TEST_CASE("options.hang_report = false: a failing call writes nothing") {
  std::atomic<bool> rank0_failed{false};
  const std::string err = stderr_of([&] {
    md::threads::run(2, [&](md::threads::endpoint ep) {
      auto o = opts(ep.rank == 0 ? 300ms : 30000ms);
      o.hang_report = false;
      auto comm = md::bind(ring2, ep, o);
      int x = 1;
      if (ep.rank == 0) {
        CHECK_THROWS_AS(md::all_reduce(comm, &x, 1), md::timeout_error);
        rank0_failed = true;
      } else {
        while (!rank0_failed) std::this_thread::sleep_for(10ms);
        CHECK_THROWS_AS(md::all_reduce(comm, &x, 1), md::remote_error);
      }
    });
  });
  CHECK(!contains(err, "mdring-state:"));
}

TEST_CASE("the signal the user names: every communicator's line, on stderr and in MDRING_STATE_DIR") {
  std::atomic<bool> go{false}, seen{false}, bound1{false};
  std::string file_text;
  const std::string err = stderr_of([&] {
    md::threads::run(2, [&](md::threads::endpoint ep) {
      auto comm = md::bind(ring2, ep, opts(30s));
      if (ep.rank == 1) bound1 = true;  // its communicator is on the list the signal prints
      int x = int(ep.rank) + 1;
      if (ep.rank == 0) {
        std::thread poker([&] {
          // Once rank 0 waits for rank 1, which has not called: the signal, and the file.
          // (And once rank 1's bind has returned: CI once saw the signal print rank 0's
          // line only, rank 1's thread not yet back from bind.)
          while (field(md::state_line(comm), "state") != "waiting" || !bound1) std::this_thread::sleep_for(5ms);
          std::raise(SIGUSR1);
          const std::string path = state_dir + "/state." + [] {
            char h[256] = {};
            gethostname(h, sizeof h - 1);
            return std::string(h);
          }() + "." + std::to_string(getpid());
          for (int i = 0; i < 500 && !seen; ++i) {
            std::ifstream in(path);
            std::stringstream ss;
            ss << in.rdbuf();
            if (contains(ss.str(), "state=waiting")) file_text = ss.str(), seen = true;
            else std::this_thread::sleep_for(10ms);
          }
          go = true;
        });
        md::all_reduce(comm, &x, 1);
        poker.join();
      } else {
        while (!go) std::this_thread::sleep_for(5ms);
        md::all_reduce(comm, &x, 1);
      }
      CHECK(x == 3);
    });
  });
  INFO("stderr: " << err);
  INFO("file: " << file_text);
  REQUIRE(seen);
  // Both ranks' communicators (one process), rank 0 waiting on rank 1, rank 1 idle.
  bool r0 = false, r1 = false;
  std::istringstream lines(file_text);
  std::string l;
  while (std::getline(lines, l)) {
    if (field(l, "transport") != "threads" || field(l, "size") != "2") continue;
    if (field(l, "rank") == "0" && field(l, "state") == "waiting" && field(l, "peer") == "1") r0 = true;
    if (field(l, "rank") == "1" && field(l, "state") == "idle") r1 = true;
  }
  CHECK(r0);
  CHECK(r1);
  CHECK(contains(err, "mdring-state: rank=0 size=2"));
}

TEST_CASE("MDRING_STATE_SIGNAL: a value that is not a usable signal is named, and ignored") {
  const char* saved = std::getenv("MDRING_STATE_SIGNAL");
  const std::string keep = saved ? saved : "";
  for (const char* bad : {"BOGUS", "KILL", "9", "0", "-1", "SIGSEGV"}) {
    setenv("MDRING_STATE_SIGNAL", bad, 1);
    int sig = -1;
    const std::string err = stderr_of([&] { sig = md::detail::state_signal_from_env(); });
    INFO(bad << ": " << err);
    CHECK(sig == 0);
    CHECK(contains(err, "MDRING_STATE_SIGNAL"));
    CHECK(contains(err, bad));
  }
  for (auto [v, want] : {std::pair{"USR2", SIGUSR2}, {"SIGUSR1", SIGUSR1}, {"10", 10}, {"", 0}}) {
    setenv("MDRING_STATE_SIGNAL", v, 1);
    CHECK(md::detail::state_signal_from_env() == want);
  }
  setenv("MDRING_STATE_SIGNAL", keep.c_str(), 1);
}

// executor/state_line.hpp: the one definition of the line that state_board writes
// and mdring-run reads. Every field of state_fields is set here to a value other
// than its default (a field added there is set here too), so a field that
// format_state_line does not write, or parse_state_line does not read, fails.
TEST_CASE("the line's format: every field written is read back, in the documented order") {
  md::detail::state_fields f;
  f.rank = 3;
  f.size = 8;
  f.comm = 1;
  f.pid = 4242;
  f.host = "n1";
  f.transport = "ucx";
  f.call = 12;
  f.done = 11;
  f.state = "waiting";
  md::detail::state_call_fields& c = f.call_fields.emplace();
  c.collective = "all_reduce";
  c.type = "float";
  c.op = "sum";
  c.count = 1048576;
  c.steps_done = 5;
  c.steps_total = 14;
  md::detail::state_step_fields& s = c.step.emplace();
  s.phase = "reduce-scatter";
  s.phase_step = 2;
  s.dim = 1;
  s.link = "ethernet:4";
  s.peer = 7;
  s.dir = "recv";
  s.step_bytes = 1048576;
  c.recv_bytes = 3145728;
  c.seconds = 2.31;
  const std::string line = md::detail::format_state_line(f);
  CHECK(line ==
        "mdring-state: rank=3 size=8 comm=1 pid=4242 host=n1 transport=ucx call=12 done=11 state=waiting "
        "collective=all_reduce type=float op=sum count=1048576 step=5/14 phase=reduce-scatter phase_step=2 dim=1 "
        "link=ethernet:4 peer=7 dir=recv step_bytes=1048576 recv_bytes=3145728 waiting_s=2.310");
  const auto back = md::detail::parse_state_line(line);
  REQUIRE(back);
  CHECK(*back == f);

  // Failed: the seconds are waited_s; without a step; before any call.
  f.state = "failed";
  c.step.reset();
  const std::string failed = md::detail::format_state_line(f);
  CHECK(failed ==
        "mdring-state: rank=3 size=8 comm=1 pid=4242 host=n1 transport=ucx call=12 done=11 state=failed "
        "collective=all_reduce type=float op=sum count=1048576 step=5/14 recv_bytes=3145728 waited_s=2.310");
  CHECK(md::detail::parse_state_line(failed) == f);
  f.state = "idle";
  f.call_fields.reset();
  CHECK(md::detail::format_state_line(f) ==
        "mdring-state: rank=3 size=8 comm=1 pid=4242 host=n1 transport=ucx call=12 done=11 state=idle");
  CHECK(md::detail::parse_state_line(md::detail::format_state_line(f)) == f);
}

TEST_CASE("the line's parser: a board's every state reads back to the same line; garbage is skipped") {
  using board = md::detail::state_board;
  board b(3, 8, "threads", {"ethernet:4", "nvlink:2"}, 5s);
  std::vector<std::string> lines;
  lines.push_back(b.line());
  b.begin_call("all_reduce", "float", "sum", 1000);
  b.begin_program(14);
  lines.push_back(b.line());
  b.waiting(1, 0, 2, 7, board::dir::recv, 4096, std::chrono::steady_clock::now() + 5s);
  lines.push_back(b.line());
  b.step_done(4096);
  lines.push_back(b.line());
  b.waiting(5, 9, 0, -1, board::dir::group, 0, std::chrono::steady_clock::now() + 4s);  // no such link, phase
  lines.push_back(b.line());
  b.end_call(true);
  lines.push_back(b.line());
  b.begin_call("broadcast", nullptr, "", 7);
  b.end_call(false);
  lines.push_back(b.line());
  for (const std::string& l : lines) {
    INFO(l);
    const auto f = md::detail::parse_state_line(l);
    REQUIRE(f);
    CHECK(md::detail::format_state_line(*f) == l);
    CHECK(f->pid == getpid());
    CHECK(f->transport == "threads");
  }
  const auto waiting = md::detail::parse_state_line(lines[2]);
  REQUIRE(waiting);
  REQUIRE(waiting->call_fields);
  REQUIRE(waiting->call_fields->step);
  CHECK(waiting->state == "waiting");
  CHECK(waiting->call_fields->step->peer == 7);
  CHECK(waiting->call_fields->step->link == "nvlink:2");
  CHECK(waiting->call_fields->seconds.has_value());

  // Not a state line; then unknown keys, tokens without '=', bad numbers and a
  // repeated key (the first counts): what can be read is, the rest keeps defaults.
  CHECK(!md::detail::parse_state_line("state=idle"));
  CHECK(!md::detail::parse_state_line(""));
  const auto g = md::detail::parse_state_line(
      "mdring-state: rank=x  pid=12 bogus state=idle state=failed new_field=1 dim=3 peer=-9999999999999999999999 "
      "collective=reduce step=7 waiting_s=nan");
  REQUIRE(g);
  CHECK(g->rank == 0);
  CHECK(g->pid == 12);
  CHECK(g->state == "idle");
  REQUIRE(g->call_fields);
  CHECK(g->call_fields->collective == "reduce");
  CHECK(g->call_fields->steps_done == 7);
  CHECK(g->call_fields->steps_total == 0);
  REQUIRE(g->call_fields->step);
  CHECK(g->call_fields->step->dim == 3);
  CHECK(g->call_fields->step->peer == -1);
  CHECK(!g->call_fields->seconds);
}
