// mdring/executor/state.hpp: what each communicator is doing, for the hang report.
//
// Every communicator owns a state_board: a few relaxed atomics the executor
// writes as a call moves (the call's sequence number, collective, count and type
// when it starts; the step, dimension, peer and time when a step is first waited
// for; the bytes its messages received when a step passes), and that any thread
// may read at any time. Reading it never stops the call; a line read while the
// call moves may mix two neighbouring steps (call= says which call).
//
// One line per communicator (state_board::line; the format, and the parser
// mdring-run reads it with, are executor/state_line.hpp's):
//   mdring-state: rank=3 size=8 comm=1 pid=4242 host=n1 transport=ucx call=12 done=11
//     state=waiting collective=all_reduce type=float op=sum count=1048576 step=5/14
//     phase=reduce-scatter phase_step=2 dim=1 link=ethernet:4 peer=7 dir=recv
//     step_bytes=1048576 recv_bytes=3145728 waiting_s=2.310
// step=k/K: steps passed of the program now running (the agreement's under
// check_level::collective, then the collective's); phase_step: the step within
// its phase and dimension (what timeout_error calls the step); step_bytes: what the step
// waited for receives; recv_bytes: what the call's messages received so far
// (stages that read a peer's memory directly move no messages: 0).
// state is idle (no call in flight), running (a step is posted, not yet waited
// for), waiting, or failed (the call ended with an error; its last step stays).
// dir is recv (the step receives from peer), send, or group (a shared-memory stage
// waits for every rank of the dimension; peer=-1).
//
// When it is written:
//   - when a call fails with a deadline or a peer's failure (options::hang_report,
//     on by default; MDRING_HANG_REPORT=0 turns it off): that rank's line on stderr;
//   - on a signal the user names (MDRING_STATE_SIGNAL=USR1, or SIGUSR2, or a
//     number; off by default): every communicator's line of the process, from a
//     thread of mdring's (the handler only writes a byte to a pipe), handled from
//     the program's start;
//   - on demand: mdring::dump_state(comm), mdring::state_line(comm).
// With MDRING_STATE_DIR set (mdring-run sets it), the process's lines also go to
// DIR/state.<host>.<pid>, rewritten each time, where mdring-run reads them to
// print one table for the job.
#pragma once

#include "../config.hpp"
#include "state_line.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

MDRING_NAMESPACE_BEGIN

namespace detail {

class state_board;

// The process's live boards (the signal thread prints them all).
struct board_registry {
  std::mutex m;
  std::vector<const state_board*> boards;
  int next_id = 0;
  // Every live board's line (all_state_lines), set by the first board: the signal
  // thread, which a program may start before any board exists (at its start, from
  // MDRING_STATE_SIGNAL), calls it through here, so that a file which includes
  // mdring but makes no communicator compiles no line formatting.
  std::string (*lines)() = nullptr;
  static board_registry& get() {
    static board_registry* r = new board_registry;  // never destroyed: boards may outlive static destruction
    return *r;
  }
};

inline void install_state_signal();
inline std::string all_state_lines();

class state_board {
public:
  enum class st : std::uint8_t { idle, running, waiting, failed };
  enum class dir : std::uint8_t { none, recv, send, group };

  // rank/size of the communicator; links[d]: "ethernet:4" per executed dimension;
  // timeout: the communicator's (a wait's deadline minus it is when the wait began).
  state_board(std::size_t rank, std::size_t size, std::string transport, std::vector<std::string> links,
              std::chrono::nanoseconds timeout)
      : rank_(rank),
        size_(size),
        transport_(std::move(transport)),
        links_(std::move(links)),
        timeout_ns_(timeout.count()) {
    auto& r = board_registry::get();
    {
      std::lock_guard<std::mutex> g(r.m);
      id_ = r.next_id++;
      r.boards.push_back(this);
      r.lines = &all_state_lines;
    }
    install_state_signal();
  }
  ~state_board() {
    auto& r = board_registry::get();
    std::lock_guard<std::mutex> g(r.m);
    for (auto& b : r.boards)
      if (b == this) {
        b = r.boards.back();
        r.boards.pop_back();
        break;
      }
  }
  state_board(const state_board&) = delete;
  state_board& operator=(const state_board&) = delete;

  // ---- written by the thread that runs the call (the executor) -----------------------
  void begin_call(const char* coll, const char* type, const char* op, std::uint64_t count) noexcept {
    coll_.store(coll, std::memory_order_relaxed);
    type_.store(type, std::memory_order_relaxed);
    op_.store(op, std::memory_order_relaxed);
    count_.store(count, std::memory_order_relaxed);
    steps_done_.store(0, std::memory_order_relaxed);
    steps_total_.store(0, std::memory_order_relaxed);
    moved_.store(0, std::memory_order_relaxed);
    dim_.store(-1, std::memory_order_relaxed);
    state_.store(st::running, std::memory_order_relaxed);
    bump(started_);
  }
  // A program of `steps` steps (the agreement's, then the collective's).
  void begin_program(std::size_t steps) noexcept {
    steps_done_.store(0, std::memory_order_relaxed);
    steps_total_.store(std::uint32_t(steps), std::memory_order_relaxed);
  }
  // A step is first waited for: what it waits on, until `deadline` (the wait began
  // the communicator's timeout before it).
  void waiting(std::size_t dim, int ph, std::size_t step, long long peer, dir d, std::uint64_t step_bytes,
               std::chrono::steady_clock::time_point deadline) noexcept {
    dim_.store(int(dim), std::memory_order_relaxed);
    phase_.store(ph, std::memory_order_relaxed);
    step_.store(std::uint32_t(step), std::memory_order_relaxed);
    peer_.store(peer, std::memory_order_relaxed);
    dir_.store(d, std::memory_order_relaxed);
    step_bytes_.store(step_bytes, std::memory_order_relaxed);
    deadline_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count(),
                    std::memory_order_relaxed);
    state_.store(st::waiting, std::memory_order_relaxed);
  }
  // The peer a timed-out wait was left waiting on (the exact request).
  void waiting_on(long long peer, dir d) noexcept {
    peer_.store(peer, std::memory_order_relaxed);
    dir_.store(d, std::memory_order_relaxed);
  }
  void step_done(std::uint64_t bytes) noexcept {
    bump(steps_done_);
    bump(moved_, bytes);
    state_.store(st::running, std::memory_order_relaxed);
  }
  void end_call(bool failed) noexcept {
    state_.store(failed ? st::failed : st::idle, std::memory_order_relaxed);
    if (!failed) bump(finished_);
  }

  // ---- read by anyone --------------------------------------------------------------
  MDRING_COLD std::string line() const {
    static const char* const phases[] = {"reduce-scatter", "all-gather", "scatter", "gather",
                                         "all-reduce",     "broadcast",  "reduce"};
    static const char* const states[] = {"idle", "running", "waiting", "failed"};
    static const char* const dirs[] = {"none", "recv", "send", "group"};
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    state_fields f;  // the line's fields (executor/state_line.hpp writes them)
    f.call = started_.load(std::memory_order_acquire);
    f.done = finished_.load(std::memory_order_acquire);
    const st s = state_.load(std::memory_order_relaxed);
    f.rank = rank_;
    f.size = size_;
    f.comm = id_;
    f.pid = long(getpid());
    f.host = host;
    f.transport = transport_;
    f.state = states[int(s)];
    const char* coll = coll_.load(std::memory_order_relaxed);
    if (!coll) return format_state_line(f);  // no call yet
    state_call_fields& c = f.call_fields.emplace();
    const char* type = type_.load(std::memory_order_relaxed);
    const char* op = op_.load(std::memory_order_relaxed);
    c.collective = coll;
    c.type = type ? type : "?";
    c.op = op && *op ? op : "-";
    c.count = count_.load(std::memory_order_relaxed);
    c.steps_done = steps_done_.load(std::memory_order_relaxed);
    c.steps_total = steps_total_.load(std::memory_order_relaxed);
    const int d = dim_.load(std::memory_order_relaxed);
    if (d >= 0 && s != st::idle) {
      const int ph = phase_.load(std::memory_order_relaxed);
      state_step_fields& w = c.step.emplace();
      w.phase = ph >= 0 && ph < 7 ? phases[ph] : "?";
      w.phase_step = step_.load(std::memory_order_relaxed);
      w.dim = d;
      w.link = std::size_t(d) < links_.size() ? links_[std::size_t(d)] : "?";
      w.peer = peer_.load(std::memory_order_relaxed);
      w.dir = dirs[int(dir_.load(std::memory_order_relaxed))];
      w.step_bytes = step_bytes_.load(std::memory_order_relaxed);
    }
    c.recv_bytes = moved_.load(std::memory_order_relaxed);
    if (s == st::waiting || s == st::failed) {  // waiting_s, or waited_s once failed
      const std::int64_t since = deadline_.load(std::memory_order_relaxed) - timeout_ns_;
      c.seconds = double(now_ns() - since) * 1e-9;
    }
    return format_state_line(f);
  }

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

private:
  // One writer at a time (the thread that moves the call, under the executor's
  // lock): a load and a store, not a locked read-modify-write, on the hot path.
  template <class A, class V = int>
  static void bump(A& a, V by = 1) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_release);
  }

  std::size_t rank_, size_;
  std::string transport_;
  std::vector<std::string> links_;
  std::int64_t timeout_ns_ = 0;
  int id_ = 0;
  std::atomic<std::uint64_t> started_{0}, finished_{0}, count_{0}, moved_{0}, step_bytes_{0};
  std::atomic<const char*> coll_{nullptr}, type_{nullptr}, op_{nullptr};
  std::atomic<std::uint32_t> steps_done_{0}, steps_total_{0}, step_{0};
  std::atomic<int> dim_{-1}, phase_{-1};
  std::atomic<long long> peer_{-1};
  std::atomic<dir> dir_{dir::none};
  std::atomic<st> state_{st::idle};
  std::atomic<std::int64_t> deadline_{0};
};

// Writes lines to stderr in one write (lines of several processes do not mix).
inline void write_lines(const std::string& text) {
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t w = ::write(2, text.data() + off, text.size() - off);
    if (w <= 0) break;
    off += std::size_t(w);
  }
}

// Every live board's line, one per line.
inline std::string all_state_lines() {
  auto& r = board_registry::get();
  std::lock_guard<std::mutex> g(r.m);
  std::string out;
  for (const state_board* b : r.boards) out += b->line() + "\n";
  return out;
}

// MDRING_STATE_DIR: the process's lines in DIR/state.<host>.<pid>, rewritten whole.
MDRING_COLD inline void write_state_file(const std::string& lines) {
  const char* dir = std::getenv("MDRING_STATE_DIR");
  if (!dir || !*dir) return;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string path = std::string(dir) + "/state." + host + "." + std::to_string(long(getpid()));
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::size_t off = 0;
  while (off < lines.size()) {
    const ssize_t w = ::write(fd, lines.data() + off, lines.size() - off);
    if (w <= 0) break;
    off += std::size_t(w);
  }
  ::close(fd);
  std::rename(tmp.c_str(), path.c_str());
}
inline void write_state_file() { write_state_file(all_state_lines()); }

// A failed call's line (options::hang_report): stderr, and the state file (every
// board of the process, so that the file keeps the other communicators too).
inline void report_failure(const state_board& b) {
  write_lines(b.line() + "\n");
  write_state_file();
}

// MDRING_STATE_SIGNAL: "USR1", "SIGUSR1", "10", ...; 0 when unset or empty.
// Anything else is an error naming the variable.
inline int state_signal_from_env() {
  const char* v = std::getenv("MDRING_STATE_SIGNAL");
  if (!v || !*v) return 0;
  std::string s = v;
  if (s.rfind("SIG", 0) == 0) s = s.substr(3);
  static const struct {
    const char* name;
    int sig;
  } names[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2},   {"HUP", SIGHUP}, {"QUIT", SIGQUIT},
               {"PWR", SIGPWR},   {"WINCH", SIGWINCH}, {"URG", SIGURG}};
  for (const auto& n : names)
    if (s == n.name) return n.sig;
  char* end = nullptr;
  const long k = std::strtol(s.c_str(), &end, 10);
  if (end && *end == 0 && k > 0 && k < NSIG && k != SIGKILL && k != SIGSTOP && k != SIGSEGV && k != SIGBUS &&
      k != SIGFPE && k != SIGILL)
    return int(k);
  std::fprintf(stderr,
               "mdring: MDRING_STATE_SIGNAL=\"%s\" is not a signal mdring can use (expected USR1, USR2, HUP, QUIT, "
               "PWR, WINCH, URG or a number); no state signal installed\n",
               v);
  return 0;
}

// The signal's handler writes a byte to a pipe; a thread of mdring's reads it and
// writes every board's line (formatting is not async-signal-safe).
inline int& state_pipe_write_end() {
  static int fd = -1;
  return fd;
}
extern "C" inline void mdring_state_signal_handler(int) {
  const int saved = errno;
  const int fd = state_pipe_write_end();
  if (fd >= 0) {
    const char b = 's';
    [[maybe_unused]] const ssize_t w = ::write(fd, &b, 1);
  }
  errno = saved;
}
// Installs the handler for MDRING_STATE_SIGNAL once it names a signal: at the
// program's start, else at the next communicator (a variable set later, as a test
// does, is seen then).
inline void install_state_signal() {
  static std::mutex m;
  static bool installed = false;
  std::lock_guard<std::mutex> g(m);
  static std::string seen = "\x01";  // the value last looked at: a bad one is named once
  if (installed) return;
  const char* v = std::getenv("MDRING_STATE_SIGNAL");
  if (seen == (v ? v : "")) return;
  seen = v ? v : "";
  const int sig = state_signal_from_env();
  if (!sig) return;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);  // a burst of signals never blocks the handler
  state_pipe_write_end() = fds[1];
  std::thread([rd = fds[0]] {
    char buf[64];
    for (;;) {
      const ssize_t n = ::read(rd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      std::string (*all)() = nullptr;
      {
        auto& r = board_registry::get();
        std::lock_guard<std::mutex> lock(r.m);
        all = r.lines;
      }
      const std::string lines = all ? all() : std::string();
      write_lines(lines);
      write_state_file(lines);
    }
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = mdring_state_signal_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
  installed = true;
}

}  // namespace detail

MDRING_NAMESPACE_END
