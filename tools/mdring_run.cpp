// mdring-run: start N processes of a program on this machine, as
// `torchrun --standalone --nproc-per-node N` would, or across hosts through an
// agent (ssh, or any command), for programs on mdring's UCX transport (no MPI
// needed).
//
//   mdring-run -n 4 ./app args...
//   mdring-run --hosts a:2,b:2 ./app args...     (see the cluster section below)
//
// Each process gets the launcher's environment plus torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
// ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT), the MDRING_*
// equivalents of the first four, and MDRING_SECRET: a fresh random secret that
// mdring's store demands of every connection (a non-empty MDRING_SECRET already
// in the launcher's environment is passed on unchanged).
//
// Failures: mdring-run exits 0 when every process did, else with the status of
// the first process that failed (its exit code, or 128 + the signal that killed
// it), after the others have had --grace seconds to finish on their own (a
// collective library uses that time to tell the survivors which rank failed);
// those still running then get SIGTERM, and 2 s later SIGKILL. With --on-failure
// shrink, a process (or host) that fails does not start that: the others go on
// (mdring::shrink), and mdring-run exits 0 when those not killed by a signal exit
// 0, else with the first one's status; --replace starts a process in a killed
// rank's place (MDRING_JOIN=1).
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to mdring-run are forwarded
// to every process and start the same grace period; a second SIGINT or SIGTERM
// kills them (SIGKILL). The processes stay in mdring-run's process group, and each
// asks the kernel for SIGKILL when mdring-run dies (PR_SET_PDEATHSIG), so not even
// a SIGKILL of mdring-run leaves them running.
//
// The job's store: mdring-run hosts it (on MASTER_ADDR, port MDRING_STORE_PORT: a
// second free port, so that MASTER_PORT stays free for the program's own store, as
// PyTorch's; with the secret) in a process of its own, forked before the ranks (on
// the host of rank 0, across hosts), and tells rank 0 so (MDRING_STORE_HOSTED=1), so
// that the store outlives every rank: a job that loses rank 0 can still grow back
// (mdring::grow, --replace). MDRING_RUN_STORE=rank0 leaves it to rank 0, as
// torchrun's processes do. A MDRING_STORE_PORT set here is kept.
//
// Hang report: the processes get MDRING_STATE_DIR (a fresh directory, unless the
// environment names one), where mdring writes each process's state lines
// (mdring/executor/state.hpp). When the job fails, and when mdring-run gets the
// signal MDRING_STATE_SIGNAL names (forwarded to every process, which then write
// their lines), mdring-run prints one table of the lines it finds there, by rank,
// and says which rank is behind: one that wrote nothing (stopped, or busy outside
// mdring), one at an earlier call than the others, or the one the others wait on.
// Across hosts, each host's mdring-run --node prints the table of its own ranks
// (the launcher forwards the signal to every host).
//
// The command line is parsed by tools/run_args.cpp (run_args.hpp), a library of
// its own that tests/fuzz/fuzz_run_args.cpp links too.
//
// Plain C++20 and POSIX (plus Linux's prctl, getrandom and sched_setaffinity), and
// three headers of mdring's: no other dependency.
#include <mdring/executor/state.hpp>        // the hang report's signal (no other part of mdring)
#include <mdring/executor/state_line.hpp>   // the hang report's lines, read back
#include <mdring/rendezvous/tcp_store.hpp>  // the job's store, hosted here

#include "run_args.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace mdring_run;  // the command line: options, parse, usage_error (run_args.hpp)
using clk = std::chrono::steady_clock;

constexpr std::chrono::seconds kill_after_term{2};
constexpr std::array forwarded_signals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// ---- what each process gets --------------------------------------------------

// A port that nothing listens on now: bind port 0 on addr, read it, close.
long free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(addr.c_str(), "0", &hints, &res); rc != 0)
    bad_usage("--master-addr expects an address of this machine, got " + quoted(addr) + ": " + gai_strerror(rc));
  int err = 0;
  long port = 0;
  for (addrinfo* a = res; a && port == 0; a = a->ai_next) {
    const int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && getsockname(s, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      char serv[NI_MAXSERV] = {};
      if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, nullptr, 0, serv, sizeof serv, NI_NUMERICSERV) == 0)
        port = std::strtol(serv, nullptr, 10);
    } else {
      err = errno;
    }
    close(s);
  }
  freeaddrinfo(res);
  if (port == 0) {
    if (err == EADDRNOTAVAIL)
      bad_usage("--master-addr expects an address of this machine, got " + quoted(addr) + ": " + std::strerror(err));
    std::fprintf(stderr, "mdring-run: cannot find a free TCP port on %s: %s (give one with --master-port)\n",
                 addr.c_str(), std::strerror(err));
    std::exit(1);
  }
  return port;
}

// 32 hex characters from the kernel's random source (getrandom, else /dev/urandom).
std::string random_secret() {
  unsigned char b[16] = {};
  std::size_t got = 0;
  int urandom = -1;
  while (got < sizeof b) {
    const ssize_t k = urandom >= 0 ? read(urandom, b + got, sizeof b - got) : getrandom(b + got, sizeof b - got, 0);
    if (k > 0) {
      got += std::size_t(k);
    } else if (k < 0 && errno == ENOSYS && urandom < 0) {
      urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
      if (urandom < 0) break;
    } else if (k == 0 || errno != EINTR) {
      break;
    }
  }
  if (urandom >= 0) close(urandom);
  if (got < sizeof b) {
    std::fprintf(stderr, "mdring-run: cannot read random bytes for MDRING_SECRET: %s\n", std::strerror(errno));
    std::exit(1);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string s;
  for (const unsigned char c : b) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

// ---- signals: a self-pipe that poll() watches ------------------------------------

int signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const auto b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t k = write(signal_pipe[1], &b, 1);  // full pipe: a SIGCHLD is redundant anyway
  errno = saved;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The self-pipe, and on_signal for the forwarded signals and SIGCHLD; returns the
// forwarded signals it handles (one mdring-run was started with ignored, as under
// nohup, stays ignored, in the processes too).
std::vector<int> watch_signals() {
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("mdring-run: pipe");
    std::exit(1);
  }
  std::vector<int> handled;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : forwarded_signals) {
    struct sigaction cur {};
    sigaction(sig, nullptr, &cur);
    if (cur.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
    handled.push_back(sig);
  }
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
  return handled;
}

// In a child, before exec: the handled signals and SIGCHLD back to their defaults,
// the signal mask mdring-run started with.
void restore_signals(const std::vector<int>& handled, const sigset_t& mask) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (const int sig : handled) sigaction(sig, &dfl, nullptr);
  sigaction(SIGCHLD, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
}

// The hang report's signal (MDRING_STATE_SIGNAL; 0: none), watched through the
// self-pipe like the forwarded ones (and restored in the processes).
void watch_state_signal(int sig, std::vector<int>& handled) {
  if (!sig || std::find(handled.begin(), handled.end(), sig) != handled.end()) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
  handled.push_back(sig);
}

// How far a launcher is in ending the job: the first failure or signal starts the
// grace period, then SIGTERM, then SIGKILL.
enum class phase { running, grace, terminating, killed };

void start_grace(phase& p, clk::time_point& deadline, clk::time_point now, double grace_s) {
  if (p != phase::running) return;
  p = phase::grace;
  deadline = now + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(grace_s));
}

// poll()'s timeout until deadline when one runs (at most a minute), else forever.
int poll_timeout_ms(bool timed, clk::time_point deadline) {
  if (!timed) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clk::now()).count();
  return int(std::max<long long>(0, std::min<long long>(left, 60'000)));
}

// The signals the self-pipe holds, each but SIGCHLD passed to on(sig).
template <class F>
void read_signals(F&& on) {
  unsigned char sigs[64];
  ssize_t k;
  while ((k = read(signal_pipe[0], sigs, sizeof sigs)) > 0)
    for (ssize_t j = 0; j < k; ++j)
      if (sigs[j] != SIGCHLD) on(int(sigs[j]));
}

// Blocks the forwarded signals and SIGCHLD while processes start (a signal then is
// handled once all exist); returns the mask to restore.
sigset_t block_signals() {
  sigset_t block, old;
  sigemptyset(&block);
  for (const int sig : forwarded_signals) sigaddset(&block, sig);
  sigaddset(&block, SIGCHLD);
  sigprocmask(SIG_BLOCK, &block, &old);
  return old;
}

// ---- the processes -----------------------------------------------------------------

// One of a process's output streams (--tag-output): lines are written whole.
struct stream {
  int fd = -1;  // read end of the pipe, -1 once closed
  int out = 1;  // mdring-run's fd it goes to
  std::string partial;
};

struct process {
  pid_t pid = -1;
  bool alive = false;
  std::array<stream, 2> streams;
};

bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t k = write(fd, s.data(), s.size());
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {  // an fd we were given non-blocking
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (k <= 0) return false;
    s.remove_prefix(std::size_t(k));
  }
  return true;
}

// Where this launcher's processes sit in the job: all of it on one machine, or one
// host's share of a job across hosts (mdring-run --node, started by the agent).
struct placement {
  long first = 0;                                        // the global rank of local rank 0
  long world = 0;                                        // processes in the job
  long group = 0, groups = 1;                            // this host's index, and the number of hosts
  std::string host;                                      // its name, for messages ("" on one machine)
  std::vector<std::pair<std::string, std::string>> env;  // set in every process
  int control = -1;                                      // --node: commands from the launcher (see node_command)
};

// ---- the hang report's table --------------------------------------------------------

using mdring::detail::state_fields;

// The lines in dir's state.* files, read back (executor/state_line.hpp).
std::vector<state_fields> read_state_lines(const std::string& dir) {
  std::vector<state_fields> lines;
  DIR* d = opendir(dir.c_str());
  if (!d) return lines;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("state.", 0) != 0 || (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)) continue;
    FILE* f = std::fopen((dir + "/" + name).c_str(), "r");
    if (!f) continue;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, f)) {
      std::string l = buf;
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      if (auto fields = mdring::detail::parse_state_line(l)) lines.push_back(std::move(*fields));
    }
    std::fclose(f);
  }
  closedir(d);
  return lines;
}

bool stuck(const state_fields& f) { return f.state == "waiting" || f.state == "failed"; }

// One table of the job's state lines, by rank (the rank mdring-run gave each pid;
// first_rank + local index), and which rank is behind. ranks: pid of each local
// process, -1 for one not started.
// asked: on the signal (a table even when no rank answered); else after a failure
// (nothing when no rank wrote a line: a program without mdring).
void print_state_table(const std::string& dir, const std::vector<pid_t>& pids, long first_rank, const char* when,
                       bool asked) {
  const std::vector<state_fields> lines = read_state_lines(dir);
  if (lines.empty() && !asked) return;
  // Per process, the line of its first communicator that waits or failed, else its first.
  std::vector<const state_fields*> chosen(pids.size(), nullptr);
  for (const auto& l : lines)
    for (std::size_t r = 0; r < pids.size(); ++r)
      if (pids[r] == l.pid && (!chosen[r] || (stuck(l) && !stuck(*chosen[r])))) chosen[r] = &l;
  std::string out = std::string("mdring-run: hang report (") + when + "): one line per rank, its first " +
                    "communicator that waits or failed (" + std::to_string(lines.size()) + " lines in " + dir + ")\n";
  char row[512];
  std::snprintf(row, sizeof row, "  %-5s %-8s %-5s %-6s %-8s %-15s %-10s %-7s %-22s %-14s %s\n", "rank", "pid", "comm",
                "call", "state", "collective", "count", "step", "dimension", "waits on", "for");
  out += row;
  long min_call = -1, max_call = -1;
  std::vector<long> silent, waited(pids.size(), 0);
  for (std::size_t r = 0; r < pids.size(); ++r) {
    const long rank = first_rank + long(r);
    if (!chosen[r]) {
      std::snprintf(row, sizeof row,
                    "  %-5ld %-8d (no line: the process did not answer; stopped, or busy outside mdring)\n", rank,
                    int(pids[r]));
      out += row;
      silent.push_back(rank);
      continue;
    }
    const state_fields& l = *chosen[r];
    const long call = long(l.call);
    min_call = min_call < 0 || call < min_call ? call : min_call;
    max_call = call > max_call ? call : max_call;
    const auto* c = l.call_fields ? &*l.call_fields : nullptr;  // the call's fields, the step's
    const auto* s = c && c->step ? &*c->step : nullptr;
    const std::string dim = s ? std::to_string(s->dim) : "";
    const std::string where = s ? dim + " (" + s->link + ")" : "-";
    std::string on = "-";
    if (stuck(l) && s) {
      on = s->peer >= 0 ? "rank " + std::to_string(s->peer) + " " + s->dir : "all of dim " + dim;
      if (s->peer >= 0 && l.state == "waiting" && std::size_t(s->peer - first_rank) < pids.size())
        ++waited[std::size_t(s->peer - first_rank)];
    }
    const std::string collective = c && !c->collective.empty() ? c->collective : "-";
    const std::string count = c ? std::to_string(c->count) : "-";
    const std::string step = c ? std::to_string(c->steps_done) + "/" + std::to_string(c->steps_total) : "-";
    const std::string secs = c && c->seconds ? mdring::detail::state_seconds_text(*c->seconds) + " s" : "";
    std::snprintf(row, sizeof row, "  %-5ld %-8d %-5s %-6s %-8s %-15s %-10s %-7s %-22s %-14s %s\n", rank, int(pids[r]),
                  std::to_string(l.comm).c_str(), std::to_string(l.call).c_str(), l.state.c_str(), collective.c_str(),
                  count.c_str(), step.c_str(), where.c_str(), on.c_str(), secs.c_str());
    out += row;
  }
  // Which rank is behind.
  auto list = [](const std::vector<long>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  if (!silent.empty()) {
    out += "mdring-run: behind: rank" + std::string(silent.size() > 1 ? "s " : " ") + list(silent) +
           " wrote no line (stopped, dead, or not in an mdring call)\n";
  } else if (min_call >= 0 && min_call < max_call) {
    std::vector<long> late;
    for (std::size_t r = 0; r < pids.size(); ++r)
      if (chosen[r] && long(chosen[r]->call) == min_call) late.push_back(first_rank + long(r));
    out += "mdring-run: behind: rank" + std::string(late.size() > 1 ? "s " : " ") + list(late) + " at call " +
           std::to_string(min_call) + " while others reached call " + std::to_string(max_call) + "\n";
  } else {
    std::size_t most = 0;
    for (std::size_t r = 1; r < pids.size(); ++r)
      if (waited[r] > waited[most]) most = r;
    if (!waited.empty() && waited[most] > 0)
      out += "mdring-run: behind: rank " + std::to_string(first_rank + long(most)) + ", which " +
             std::to_string(waited[most]) + " rank" + (waited[most] > 1 ? "s wait" : " waits") + " on\n";
  }
  write_all(2, out);
}

class launcher {
public:
  launcher(const options& o, std::vector<char*> program, long port, std::string secret, placement where)
      : o_(o),
        program_(std::move(program)),
        procs_(std::size_t(o.n)),
        port_(std::to_string(port)),
        secret_(std::move(secret)),
        where_(std::move(where)) {
    if (where_.world == 0) where_.world = o.n;
    program_.push_back(nullptr);
    replaced_.assign(std::size_t(o.n), 0);
  }

  int run() {
    start_store();  // (first: its process is forked before any signal handling or thread)
    const int rc = run_ranks();
    stop_store();
    return rc;
  }

private:
  int run_ranks() {
    if (o_.bind_core) find_cpus();
    setup_state();
    setup_signals();
    original_mask_ = block_signals();
    for (long r = 0; r < o_.n; ++r)
      if (!spawn(r)) {
        const int e = errno;
        std::fprintf(stderr, "mdring-run: cannot start rank %ld%s: %s\n", where_.first + r, on_host().c_str(),
                     std::strerror(e));
        kill_all(SIGKILL);
        for (auto& p : procs_)
          if (p.alive) waitpid(p.pid, nullptr, 0);
        return 1;
      }
    sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    loop();
    if (failed_) print_table("the job failed", false);
    if (own_state_dir_) {
      for (const auto& f : state_files()) unlink(f.c_str());
      rmdir(state_dir_.c_str());
    }
    if (!failed_ && lost_ && !finished_) failed_ = true, first_status_ = first_lost_;  // nobody went on
    if (!failed_) return 0;
    return WIFEXITED(first_status_) ? WEXITSTATUS(first_status_) : 128 + WTERMSIG(first_status_);
  }

  // The job's store (see the top), where this launcher starts rank 0 of a job of
  // several: a process that serves it until mdring-run ends. When it cannot listen,
  // rank 0 hosts the store as without it (said on stderr).
  void start_store() {
    if (where_.first != 0 || where_.world < 2) return;
    if (const char* v = std::getenv("MDRING_RUN_STORE"); v && std::string_view(v) == "rank0") return;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // it ends with mdring-run, whatever ends it
      if (getppid() != parent) _exit(1);
      setpgid(0, 0);  // no signal sent to the job's process group reaches it
      for (int sig = 1; sig < 32; ++sig)
        if (sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD) signal(sig, SIG_IGN);
      close(ready[0]);
      char ok = 0;
      try {
        mdring::rendezvous::tcp_store_options so;
        so.host = o_.addr;
        so.port = std::uint16_t(std::strtol(store_port().c_str(), nullptr, 10));
        so.secret = secret_;
        mdring::rendezvous::detail::store_server server(so);
        ok = 1;
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        for (;;) pause();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mdring-run: cannot host the job's store on %s:%s%s (%s); rank 0 hosts it\n",
                     o_.addr.c_str(), store_port().c_str(), on_host().c_str(), e.what());
      }
      if (write(ready[1], &ok, 1) != 1) _exit(1);
      _exit(1);
    }
    close(ready[1]);
    char got = 0;
    ssize_t n = -1;
    while (pid > 0 && (n = read(ready[0], &got, 1)) < 0 && errno == EINTR) {}
    close(ready[0]);
    if (pid > 0 && n == 1 && got == 1) store_ = pid;
    else if (pid > 0) waitpid(pid, nullptr, 0);
  }
  // The store's port: MDRING_STORE_PORT as the processes get it, else MASTER_PORT.
  std::string store_port() const {
    for (const auto& [name, value] : where_.env)
      if (name == "MDRING_STORE_PORT") return value;
    if (const char* given = std::getenv("MDRING_STORE_PORT"); given && *given) return given;
    return port_;
  }
  void stop_store() {
    if (store_ <= 0) return;
    kill(store_, SIGKILL);
    while (waitpid(store_, nullptr, 0) < 0 && errno == EINTR) {}
    store_ = 0;
  }

  // --bind-to core: the CPUs this process may run on, in order.
  void find_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
      std::perror("mdring-run: sched_getaffinity");
      std::exit(1);
    }
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus_.push_back(c);
  }

  // The hang report: the directory the processes write their state lines to, and
  // the signal that asks them for their lines (MDRING_STATE_SIGNAL, off by default).
  void setup_state() {
    const char* given = std::getenv("MDRING_STATE_DIR");
    if (given && *given) {
      state_dir_ = given;
    } else {
      char tmpl[] = "/tmp/mdring-run-state-XXXXXX";
      if (mkdtemp(tmpl)) state_dir_ = tmpl, own_state_dir_ = true;
    }
    state_signal_ = mdring::detail::state_signal_from_env();
  }
  std::vector<std::string> state_files() const {
    std::vector<std::string> files;
    if (DIR* d = opendir(state_dir_.c_str())) {
      while (const dirent* e = readdir(d))
        if (std::string_view(e->d_name).rfind("state.", 0) == 0) files.push_back(state_dir_ + "/" + e->d_name);
      closedir(d);
    }
    return files;
  }
  void print_table(const char* when, bool asked) {
    if (state_dir_.empty()) return;
    std::vector<pid_t> pids;
    for (const auto& p : procs_) pids.push_back(p.pid);
    print_state_table(state_dir_, pids, where_.first, when, asked);
  }

  void setup_signals() {
    handled_ = watch_signals();
    watch_state_signal(state_signal_, handled_);
    if (o_.tag_output) {
      // A closed stdout is passed on to the processes (see emit), not fatal here.
      struct sigaction cur {};
      sigaction(SIGPIPE, nullptr, &cur);
      sigpipe_ignored_ = cur.sa_handler == SIG_IGN;
      signal(SIGPIPE, SIG_IGN);
    }
  }

  bool spawn(long r) {
    process& p = procs_[std::size_t(r)];
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    if (o_.tag_output)
      for (auto& pp : pipes)
        if (pipe2(pp, O_CLOEXEC) != 0) return false;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) child(r, parent, pipes);
    p.pid = pid;
    p.alive = true;
    ++live_;
    if (o_.tag_output)
      for (int k = 0; k < 2; ++k) {
        close(pipes[k][1]);
        set_nonblocking(pipes[k][0]);
        p.streams[std::size_t(k)] = stream{pipes[k][0], k + 1, {}};
      }
    return true;
  }

  // " on host NAME" when this is one host's share of a job.
  std::string on_host() const { return where_.host.empty() ? "" : " on host " + where_.host; }

  [[noreturn]] void child(long r, pid_t parent, int pipes[2][2]) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);   // never outlive mdring-run, even a SIGKILLed one
    if (getppid() != parent) _exit(1);  // it died before prctl
    if (where_.control >= 0) {          // the launcher's commands are not the program's input
      const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (null < 0 || dup2(null, 0) < 0) _exit(127);
    }
    restore_signals(handled_, original_mask_);
    if (o_.tag_output && !sigpipe_ignored_) signal(SIGPIPE, SIG_DFL);
    if (o_.tag_output && (dup2(pipes[0][1], 1) < 0 || dup2(pipes[1][1], 2) < 0)) _exit(127);
    if (!cpus_.empty()) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus_[std::size_t(r) % cpus_.size()], &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0) {
        std::fprintf(stderr, "mdring-run: cannot bind rank %ld%s to CPU %d: %s\n", where_.first + r, on_host().c_str(),
                     cpus_[std::size_t(r) % cpus_.size()], std::strerror(errno));
        _exit(127);
      }
    }

    for (const auto& [name, value] : where_.env) setenv(name.c_str(), value.c_str(), 1);
    const std::string rank = std::to_string(where_.first + r), size = std::to_string(where_.world),
                      local = std::to_string(r), local_size = std::to_string(o_.n),
                      group = std::to_string(where_.group), groups = std::to_string(where_.groups);
    const std::pair<const char*, const std::string*> vars[] = {
        {"RANK", &rank},
        {"WORLD_SIZE", &size},
        {"LOCAL_RANK", &local},
        {"LOCAL_WORLD_SIZE", &local_size},
        {"ROLE_RANK", &rank},
        {"ROLE_WORLD_SIZE", &size},
        {"MDRING_RANK", &rank},
        {"MDRING_WORLD_SIZE", &size},
        {"MDRING_LOCAL_RANK", &local},
        {"MDRING_LOCAL_WORLD_SIZE", &local_size},
        {"GROUP_RANK", &group},
        {"GROUP_WORLD_SIZE", &groups},
        {"ROLE_NAME", &role_},
        {"MASTER_ADDR", &o_.addr},
        {"MASTER_PORT", &port_},
        {"MDRING_SECRET", &secret_},
    };
    for (const auto& [name, value] : vars) setenv(name, value->c_str(), 1);
    if (!state_dir_.empty()) setenv("MDRING_STATE_DIR", state_dir_.c_str(), 1);
    if (store_ > 0) setenv("MDRING_STORE_HOSTED", "1", 1);  // rank 0 is a client of it, like the others
    if (joining_) setenv("MDRING_JOIN", "1", 1), setenv("MDRING_REPLACES", rank.c_str(), 1);  // --replace
    execvp(program_[0], program_.data());
    const int e = errno;
    std::fprintf(stderr, "mdring-run: cannot run \"%s\"%s: %s\n", program_[0], on_host().c_str(), std::strerror(e));
    _exit(127);
  }

  void kill_all(int sig) {
    for (const auto& p : procs_)
      if (p.alive) kill(p.pid, sig);
  }

  static const char* plural(long k) { return k == 1 ? "" : "s"; }

  // The first failure or signal: the processes get grace_s to finish.
  void start_grace(clk::time_point now) { ::start_grace(phase_, deadline_, now, o_.grace_s); }

  void on_received(int sig) {
    if (sig == state_signal_) {  // the hang report: every process writes its lines, then the table
      for (const auto& f : state_files()) unlink(f.c_str());  // a process that does not answer leaves none
      kill_all(sig);
      table_at_ = clk::now() + std::chrono::seconds(1);
      table_pending_ = true;
      return;
    }
    const bool stop = sig == SIGINT || sig == SIGTERM;
    if (stop && first_stop_ != 0 && phase_ != phase::killed) {
      std::fprintf(stderr, "mdring-run: %s after %s: sending SIGKILL to %ld rank%s%s\n", sigabbrev(sig).c_str(),
                   sigabbrev(first_stop_).c_str(), live_, plural(live_), on_host().c_str());
      kill_all(SIGKILL);
      phase_ = phase::killed;
      return;
    }
    if (stop && first_stop_ == 0) first_stop_ = sig;
    kill_all(sig);
    start_grace(clk::now());
  }

  static std::string sigabbrev(int sig) {
    switch (sig) {
      case SIGINT:
        return "SIGINT";
      case SIGTERM:
        return "SIGTERM";
      case SIGHUP:
        return "SIGHUP";
      case SIGQUIT:
        return "SIGQUIT";
      case SIGUSR1:
        return "SIGUSR1";
      case SIGUSR2:
        return "SIGUSR2";
      default:
        return "signal " + std::to_string(sig);
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (std::size_t r = 0; r < procs_.size(); ++r) {
        process& p = procs_[r];
        if (p.pid != pid || !p.alive) continue;
        p.alive = false;
        --live_;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (ok) ++finished_;
        if (!ok && o_.shrink) {  // --on-failure shrink: the others go on
          const bool killed = WIFSIGNALED(status);
          if (killed && !lost_++) first_lost_ = status;
          if (!killed && !failed_) failed_ = true, first_status_ = status;  // the exit status, not a stop
          const std::string what = killed ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                          : "exited with code " + std::to_string(WEXITSTATUS(status));
          std::fprintf(stderr, "mdring-run: rank %ld (pid %d)%s %s; the others go on (--on-failure shrink)\n",
                       where_.first + long(r), int(pid), on_host().c_str(), what.c_str());
          if (o_.replace && !replaced_[r] && phase_ == phase::running) replace(r);
          continue;
        }
        if (!ok && !failed_) {
          failed_ = true;
          first_status_ = status;
          std::string what;
          if (WIFEXITED(status)) {
            what = "exited with code " + std::to_string(WEXITSTATUS(status));
          } else {
            const int sig = WTERMSIG(status);
            const char* desc = strsignal(sig);
            what = "was killed by signal " + std::to_string(sig) + " (" + (desc ? desc : "?") + ")";
          }
          std::fprintf(stderr, "mdring-run: rank %ld (pid %d)%s %s\n", where_.first + long(r), int(pid),
                       on_host().c_str(), what.c_str());
          start_grace(clk::now());
        }
      }
    }
  }

  void on_deadline(clk::time_point now) {
    if (phase_ == phase::grace) {
      if (live_ > 0) {
        std::fprintf(stderr, "mdring-run: sending SIGTERM to %ld rank%s%s still running after the %g s grace period\n",
                     live_, plural(live_), on_host().c_str(), o_.grace_s);
        kill_all(SIGTERM);
      }
      phase_ = phase::terminating;
      deadline_ = now + kill_after_term;
    } else if (phase_ == phase::terminating) {
      if (live_ > 0) {
        std::fprintf(stderr, "mdring-run: sending SIGKILL to %ld rank%s%s still running 2 s after SIGTERM\n", live_,
                     plural(live_), on_host().c_str());
        kill_all(SIGKILL);
      }
      phase_ = phase::killed;
    }
  }

  // --replace: a process in killed rank r's place (its slot), with MDRING_JOIN=1.
  void replace(std::size_t r) {
    replaced_[r] = 1;
    finish_streams(r);  // what the dead one wrote first
    joining_ = true;
    const bool started = spawn(long(r));
    joining_ = false;
    if (started)
      std::fprintf(stderr, "mdring-run: started pid %d%s in rank %ld's place (MDRING_JOIN=1, --replace)\n",
                   int(procs_[r].pid), on_host().c_str(), where_.first + long(r));
    else
      std::fprintf(stderr, "mdring-run: cannot start a process in rank %ld's place%s: %s\n", where_.first + long(r),
                   on_host().c_str(), std::strerror(errno));
  }

  // --tag-output: write the complete lines of s (all of it at the end) to its fd.
  void emit(std::size_t rank, stream& s, bool all) {
    constexpr std::size_t max_line = 64 * 1024;  // longer lines are cut, not buffered without bound
    std::string out;
    const std::string prefix = "[" + std::to_string(where_.first + long(rank)) + "] ";
    std::size_t start = 0;
    for (;;) {
      const std::size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      out += prefix;
      out.append(s.partial, start, nl + 1 - start);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (!s.partial.empty() && (all || s.partial.size() >= max_line)) {
      out += prefix;
      out += s.partial;
      out += '\n';
      s.partial.clear();
    }
    if (out.empty() || broken_[std::size_t(s.out)]) return;
    if (!write_all(s.out, out)) {
      // mdring-run's stdout (or stderr) is closed: close that pipe of every process, so
      // that they see it as they would have without --tag-output (SIGPIPE, EPIPE).
      broken_[std::size_t(s.out)] = true;
      for (auto& p : procs_)
        for (auto& t : p.streams)
          if (t.out == s.out && t.fd >= 0) {
            close(t.fd);
            t.fd = -1;
            t.partial.clear();
          }
    }
  }

  // Reads what s's pipe holds now, and closes it at its end. At most 16 reads of
  // 16 KiB (a process that writes without pause must not keep mdring-run from its
  // signals): true when it stopped there.
  bool drain(std::size_t rank, stream& s) {
    char buf[16384];
    for (int reads = 0; s.fd >= 0; ++reads) {
      if (reads == 16) return true;
      const ssize_t k = read(s.fd, buf, sizeof buf);
      if (k > 0) {
        s.partial.append(buf, std::size_t(k));
        emit(rank, s, false);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && errno == EAGAIN) return false;
      emit(rank, s, true);  // end of file (or an error): the last line too
      if (s.fd >= 0) close(s.fd);
      s.fd = -1;
    }
    return false;
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, stream*>> owners;
    while (live_ > 0) {
      fds.clear();
      owners.clear();
      fds.push_back({signal_pipe[0], POLLIN, 0});
      fds.push_back({where_.control, POLLIN, 0});  // ignored by poll while -1
      for (std::size_t r = 0; r < procs_.size(); ++r)
        for (auto& s : procs_[r].streams)
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            owners.emplace_back(r, &s);
          }
      int timeout = poll_timeout_ms(phase_ == phase::grace || phase_ == phase::terminating, deadline_);
      if (table_pending_) {
        const int t = poll_timeout_ms(true, table_at_);
        timeout = timeout < 0 || t < timeout ? t : timeout;
      }
      const int rc = poll(fds.data(), nfds_t(fds.size()), timeout);
      if (rc < 0 && errno != EINTR) {
        std::perror("mdring-run: poll");
        kill_all(SIGKILL);
        phase_ = phase::killed;
      }
      if (rc > 0) {
        read_signals([this](int sig) { on_received(sig); });
        if (fds[1].revents) node_command();
        for (std::size_t j = 2; j < fds.size(); ++j)
          if (fds[j].revents) drain(owners[j - 2].first, *owners[j - 2].second);
      }
      reap();
      const auto now = clk::now();
      if ((phase_ == phase::grace || phase_ == phase::terminating) && now >= deadline_) on_deadline(now);
      if (table_pending_ && now >= table_at_) {
        table_pending_ = false;
        print_table(("on " + sigabbrev(state_signal_)).c_str(), true);
      }
    }
    // Every process is gone: what they wrote is in the pipes now (a process they left
    // behind may still hold one open: only what is there now is read).
    for (std::size_t r = 0; r < procs_.size(); ++r) finish_streams(r);
  }

  // Rank r's process is gone: what is in its pipes now is read and written out, and
  // the pipes are closed.
  void finish_streams(std::size_t r) {
    for (auto& s : procs_[r].streams) {
      for (int k = 0; k < 64 && drain(r, s); ++k) {}
      if (s.fd >= 0) {
        emit(r, s, true);
        close(s.fd);
        s.fd = -1;
      }
    }
  }

  // --node: what the launcher across hosts asks of this host's share. A signal's
  // letter (I, T, H, Q: forward it as mdring-run does its own), K (SIGKILL them
  // all now); the end of the stream (the launcher, or the agent's connection, is
  // gone) kills them all too.
  void node_command() {
    char cmds[64];
    const ssize_t k = read(where_.control, cmds, sizeof cmds);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (k <= 0) {
      close(where_.control);
      where_.control = -1;
      if (live_ > 0) kill_all(SIGKILL);
      phase_ = phase::killed;
      return;
    }
    for (ssize_t j = 0; j < k; ++j) switch (cmds[j]) {
        case 'I':
          on_received(SIGINT);
          break;
        case 'T':
          on_received(SIGTERM);
          break;
        case 'H':
          on_received(SIGHUP);
          break;
        case 'Q':
          on_received(SIGQUIT);
          break;
        case 'U':  // the hang report's signal (MDRING_STATE_SIGNAL)
          if (state_signal_) on_received(state_signal_);
          break;
        case 'S':  // the job's grace period is over: SIGTERM now, SIGKILL 2 s later
          if (phase_ == phase::running || phase_ == phase::grace) {
            kill_all(SIGTERM);
            phase_ = phase::terminating;
            deadline_ = clk::now() + kill_after_term;
          }
          break;
        case 'K':
          kill_all(SIGKILL);
          phase_ = phase::killed;
          break;
        default:
          break;
      }
  }

  const options& o_;
  std::vector<char*> program_;
  std::vector<process> procs_;
  long live_ = 0;
  std::vector<int> handled_;
  sigset_t original_mask_{};
  bool sigpipe_ignored_ = false;
  int first_stop_ = 0;  // the first SIGINT or SIGTERM received
  bool failed_ = false;
  int first_status_ = 0;
  long finished_ = 0, lost_ = 0;  // exited 0; killed by a signal under --on-failure shrink
  int first_lost_ = 0;
  std::vector<char> replaced_;  // --replace: rank r's place was given to a new process
  bool joining_ = false;        // the process spawn() starts replaces one (child())
  phase phase_ = phase::running;
  clk::time_point deadline_{};
  std::array<bool, 3> broken_{};
  const std::string port_, secret_;
  pid_t store_ = 0;        // the process that hosts the job's store (start_store), or 0
  std::vector<int> cpus_;  // --bind-to core: the CPUs to bind to, in order
  placement where_;
  const std::string role_ = "default";
  std::string state_dir_;       // MDRING_STATE_DIR of the processes
  bool own_state_dir_ = false;  // made here, removed at the end
  int state_signal_ = 0;        // MDRING_STATE_SIGNAL, 0: none
  bool table_pending_ = false;  // the table is due at table_at_
  clk::time_point table_at_{};
};

// ---- across hosts --------------------------------------------------------------
//
// mdring-run --hosts a:2,b:2 starts, through the agent (ssh by default), one
// `mdring-run --node` on each host, and writes it its share of the job on its
// standard input: NUL-terminated "key=value" records, the secret among them (never
// on a command line), ended by an empty record. The stream then stays open as
// the job's control channel (node_command): signals forwarded, the grace period's
// end, and its end of file when this launcher dies, which kills that host's ranks.

constexpr const char* shell_special = " \t\n'\"\\$`;&|<>(){}*?[]#~!";

// The agent's words for host i: {host} and {index} replaced; the host's name
// appended when neither appears (as ssh takes it).
std::vector<std::string> agent_words(const options& o, std::size_t i) {
  std::vector<std::string> out;
  bool placed = false;
  std::string_view a = o.agent;
  for (;;) {
    const auto b = a.find_first_not_of(" \t");
    if (b == std::string_view::npos) break;
    a.remove_prefix(b);
    const auto e = std::min(a.find_first_of(" \t"), a.size());
    std::string w(a.substr(0, e));
    a.remove_prefix(e);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"{host}", o.hosts[i].name},
                                     std::pair<std::string, std::string>{"{index}", std::to_string(i)}})
      for (std::size_t at; (at = w.find(key)) != std::string::npos; placed = true) w.replace(at, key.size(), value);
    out.push_back(std::move(w));
  }
  if (!placed) out.push_back(o.hosts[i].name);
  return out;
}

std::string agent_text(const std::vector<std::string>& words) {
  std::string t;
  for (const auto& w : words) t += (t.empty() ? "" : " ") + w;
  return t;
}

// This mdring-run's absolute path: the default for the hosts' (same install).
std::string self_path() {
  char buf[4096];
  const ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (k <= 0) {
    std::fprintf(stderr, "mdring-run: cannot find its own path (/proc/self/exe): give --launcher-path\n");
    std::exit(1);
  }
  return std::string(buf, std::size_t(k));
}

// Runs `words` with the standard input closed and returns what it printed (its
// exit status in *status).
std::string capture(const std::vector<std::string>& words, int* status) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return *status = -1, "";
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out[1], 1) < 0) _exit(127);
    std::vector<char*> argv;
    for (const auto& w : words) argv.push_back(const_cast<char*>(w.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "mdring-run: cannot run the agent \"%s\": %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t k; pid > 0 && ((k = read(out[0], buf, sizeof buf)) > 0 || (k < 0 && errno == EINTR));)
    if (k > 0) text.append(buf, std::size_t(k));
  close(out[0]);
  *status = -1;
  if (pid > 0)
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {}
  return text;
}

// The variables every process gets on every host: those set here for the runtimes
// the job uses (MDRING_*, UCX_*, GLOO_*, NCCL_*, TORCH_*), and -x's.
std::vector<std::pair<std::string, std::string>> exported_env(const options& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; *e; ++e) {
    const std::string_view kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = kv.substr(0, eq);
    if (name == "MDRING_SECRET") continue;  // sent once, as the secret
    for (const char* prefix : {"MDRING_", "UCX_", "GLOO_", "NCCL_", "TORCH_"})
      if (name.starts_with(prefix)) {
        out.emplace_back(name, kv.substr(eq + 1));
        break;
      }
  }
  for (const auto& x : o.exported) {
    const auto eq = x.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(x.substr(0, eq), x.substr(eq + 1));
    } else if (const char* v = std::getenv(x.c_str())) {
      out.emplace_back(x, v);
    } else {
      std::fprintf(stderr, "mdring-run: -x %s: not set here, not passed on\n", x.c_str());
    }
  }
  return out;
}

class cluster {
public:
  cluster(const options& o, char** argv, long port, long store_port, std::string secret)
      : o_(o), argv_(argv), port_(port), store_port_(store_port), secret_(std::move(secret)) {}

  int run() {
    const std::string remote = o_.remote_self.empty() ? self_path() : o_.remote_self;
    if (remote.find_first_of(shell_special) != std::string::npos) {
      std::fprintf(stderr,
                   "mdring-run: its path \"%s\" has characters a remote shell would split or expand: "
                   "give --launcher-path\n",
                   remote.c_str());
      return 2;
    }
    handled_ = watch_signals();
    state_signal_ = mdring::detail::state_signal_from_env();
    watch_state_signal(state_signal_, handled_);
    signal(SIGPIPE, SIG_IGN);  // a host's agent that is gone: its write fails, it is reaped
    original_mask_ = block_signals();
    long first = 0;
    char cwd[4096] = {};
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    auto env = exported_env(o_);
    if (store_port_ > 0 && !std::getenv("MDRING_STORE_PORT"))
      env.emplace_back("MDRING_STORE_PORT", std::to_string(store_port_));
    for (std::size_t i = 0; i < o_.hosts.size() && first < o_.n; ++i) {
      node n;
      n.host = i;
      n.first = first;
      n.count = std::min(o_.hosts[i].slots, o_.n - first);
      first += n.count;
      auto words = agent_words(o_, i);
      words.push_back(remote);
      words.push_back("--node");
      if (!spawn(n, words)) {
        std::fprintf(stderr, "mdring-run: cannot start the agent for host %s (%s): %s\n", o_.hosts[i].name.c_str(),
                     agent_text(words).c_str(), std::strerror(errno));
        stop_all(true);
        return 1;
      }
      send(n, config(n, cwd, env));
      nodes_.push_back(std::move(n));
    }
    sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    loop();
    if (!failed_ && lost_ && !finished_) failed_ = true, first_status_ = first_lost_;  // no host went on
    if (!failed_) return 0;
    return WIFEXITED(first_status_) ? WEXITSTATUS(first_status_) : 128 + WTERMSIG(first_status_);
  }

private:
  struct node {
    std::size_t host = 0;
    long first = 0, count = 0;
    pid_t pid = -1;
    bool alive = false;
    int control = -1;  // the write end of its standard input
  };

  std::string config(const node& n, const char* cwd, const std::vector<std::pair<std::string, std::string>>& env) {
    std::string c;
    auto put = [&](const std::string& key, const std::string& value) {
      c += key;
      c += '=';
      c += value;
      c += '\0';
    };
    put("first", std::to_string(n.first));
    put("count", std::to_string(n.count));
    put("world", std::to_string(o_.n));
    put("group", std::to_string(n.host));
    put("groups", std::to_string(groups()));
    put("host", o_.hosts[n.host].name);
    put("addr", o_.addr);
    put("port", std::to_string(port_));
    char grace[64];
    std::snprintf(grace, sizeof grace, "%.17g", o_.grace_s);
    put("grace", grace);
    put("onfail", o_.shrink ? (o_.replace ? "replace" : "shrink") : "stop");
    put("tag", o_.tag_output ? "1" : "0");
    put("bind", o_.bind_core ? "core" : "none");
    if (*cwd) put("cwd", cwd);
    put("secret", secret_);
    for (const auto& [k, v] : env) put("env", k + "=" + v);
    for (char** a = argv_ + o_.program; *a; ++a) put("arg", *a);
    c += '\0';
    return c;
  }

  long groups() const {
    long g = 0, placed = 0;
    for (const host& h : o_.hosts)
      if (placed < o_.n) placed += h.slots, ++g;
    return g;
  }

  bool spawn(node& n, const std::vector<std::string>& words) {
    int ctl[2];
    if (pipe2(ctl, O_CLOEXEC) != 0) return false;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      // Its own process group: a terminal's ^C reaches this launcher only, which
      // forwards it once (a host's mdring-run that got it too would count two).
      setpgid(0, 0);
      restore_signals(handled_, original_mask_);
      signal(SIGPIPE, SIG_DFL);
      if (dup2(ctl[0], 0) < 0) _exit(127);
      std::vector<char*> argv;
      for (const auto& w : words) argv.push_back(const_cast<char*>(w.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "mdring-run: cannot run the agent \"%s\" for host %s: %s\n", argv[0],
                   o_.hosts[n.host].name.c_str(), std::strerror(errno));
      _exit(127);
    }
    close(ctl[0]);
    n.pid = pid;
    n.alive = true;
    n.control = ctl[1];
    ++live_;
    return true;
  }

  static void send(node& n, std::string_view what) {
    if (n.control < 0) return;
    if (!write_all(n.control, what)) {  // the agent is gone (it is reaped as failed)
      close(n.control);
      n.control = -1;
    }
  }
  void send_all(std::string_view what) {
    for (auto& n : nodes_)
      if (n.alive) send(n, what);
  }
  // Every host's ranks SIGKILLed (K, then the end of the stream), and the agents too.
  void stop_all(bool kill_agents) {
    send_all("K");
    for (auto& n : nodes_)
      if (n.control >= 0) close(n.control), n.control = -1;
    if (kill_agents)
      for (auto& n : nodes_)
        if (n.alive) kill(n.pid, SIGKILL);
  }

  std::string ranks_of(const node& n) const {
    return n.count == 1 ? "rank " + std::to_string(n.first)
                        : "ranks " + std::to_string(n.first) + "-" + std::to_string(n.first + n.count - 1);
  }

  void start_grace(clk::time_point now) { ::start_grace(phase_, deadline_, now, o_.grace_s); }

  void on_received(int sig) {
    if (sig == state_signal_) {  // every host's mdring-run --node asks its ranks, prints its table
      send_all("U");
      return;
    }
    const bool stop = sig == SIGINT || sig == SIGTERM;
    if (stop && first_stop_ != 0 && phase_ != phase::killed) {
      std::fprintf(stderr, "mdring-run: %s after %s: killing the ranks on every host\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", first_stop_ == SIGINT ? "SIGINT" : "SIGTERM");
      stop_all(false);
      phase_ = phase::killed;
      deadline_ = clk::now() + std::chrono::seconds(5);
      return;
    }
    if (stop && first_stop_ == 0) first_stop_ = sig;
    send_all(sig == SIGINT ? "I" : sig == SIGTERM ? "T" : sig == SIGHUP ? "H" : "Q");
    start_grace(clk::now());
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
      for (auto& n : nodes_) {
        if (n.pid != pid || !n.alive) continue;
        n.alive = false;
        --live_;
        if (n.control >= 0) close(n.control), n.control = -1;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (ok) ++finished_;
        // --on-failure shrink: a host whose ranks failed, or whose agent was killed, does not
        // stop the others (ranks killed by a signal, or its agent: lost; else its status).
        if (!ok && o_.shrink) {
          const bool killed = WIFSIGNALED(status) || WEXITSTATUS(status) > 128;
          if (killed && !lost_++) first_lost_ = status;
          if (!killed && !failed_) failed_ = true, first_status_ = status;
          std::fprintf(stderr, "mdring-run: host %s (%s) is lost; the other hosts go on (--on-failure shrink)\n",
                       o_.hosts[n.host].name.c_str(), ranks_of(n).c_str());
          continue;
        }
        if (ok || failed_) continue;
        failed_ = true;
        first_status_ = status;
        const std::string what = WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                                   : "was killed by signal " + std::to_string(WTERMSIG(status));
        std::fprintf(stderr,
                     "mdring-run: host %s (%s) failed: its mdring-run (through \"%s\") %s; the other hosts' ranks "
                     "have %g s to finish\n",
                     o_.hosts[n.host].name.c_str(), ranks_of(n).c_str(), o_.agent.c_str(), what.c_str(), o_.grace_s);
        start_grace(clk::now());
      }
  }

  void on_deadline(clk::time_point now) {
    if (phase_ == phase::grace) {
      if (live_ > 0)
        std::fprintf(stderr, "mdring-run: the grace period is over: stopping the ranks on %ld host%s\n", live_,
                     live_ == 1 ? "" : "s");
      send_all("S");  // SIGTERM, and SIGKILL 2 s later, on each host
      phase_ = phase::terminating;
      deadline_ = now + kill_after_term + std::chrono::seconds(3);
    } else if (phase_ == phase::terminating) {
      stop_all(false);
      phase_ = phase::killed;
      deadline_ = now + std::chrono::seconds(5);
    } else if (phase_ == phase::killed) {
      if (live_ > 0)
        std::fprintf(stderr, "mdring-run: %ld agent%s still running 5 s after the ranks were killed: SIGKILL\n", live_,
                     live_ == 1 ? "" : "s");
      stop_all(true);
      deadline_ = clk::time_point::max();
    }
  }

  void loop() {
    while (live_ > 0) {
      pollfd p{signal_pipe[0], POLLIN, 0};
      if (poll(&p, 1, poll_timeout_ms(phase_ != phase::running && deadline_ != clk::time_point::max(), deadline_)) > 0)
        read_signals([this](int sig) { on_received(sig); });
      reap();
      const auto now = clk::now();
      if (phase_ != phase::running && now >= deadline_) on_deadline(now);
    }
  }

  const options& o_;
  char** argv_;
  const long port_, store_port_;
  const std::string secret_;
  std::vector<node> nodes_;
  long live_ = 0;
  std::vector<int> handled_;
  sigset_t original_mask_{};
  int first_stop_ = 0;
  int state_signal_ = 0;  // MDRING_STATE_SIGNAL, 0: none
  bool failed_ = false;
  int first_status_ = 0;
  long finished_ = 0, lost_ = 0;  // exited 0; killed by a signal under --on-failure shrink
  int first_lost_ = 0;
  phase phase_ = phase::running;
  clk::time_point deadline_{};
};

// mdring-run --node: one host's share, from the launcher's records on stdin.
int node_main() {
  std::vector<std::string> records;
  std::string cur;
  for (;;) {
    char ch;
    const ssize_t k = read(0, &ch, 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      std::fprintf(stderr,
                   "mdring-run --node: the launcher's description of the job ended early (this mode is "
                   "for mdring-run --hosts, through its agent)\n");
      return 2;
    }
    if (ch != '\0') {
      cur += ch;
      continue;
    }
    if (cur.empty()) break;
    records.push_back(std::move(cur));
    cur.clear();
  }
  options o;
  placement where;
  std::vector<std::string> args;
  std::string secret, cwd;
  long port = 0;
  auto number = [](const std::string& v) { return std::strtol(v.c_str(), nullptr, 10); };
  for (const auto& r : records) {
    const auto eq = r.find('=');
    const std::string key = r.substr(0, eq), value = eq == std::string::npos ? "" : r.substr(eq + 1);
    if (key == "first") where.first = number(value);
    else if (key == "count") o.n = number(value);
    else if (key == "world") where.world = number(value);
    else if (key == "group") where.group = number(value);
    else if (key == "groups") where.groups = number(value);
    else if (key == "host") where.host = value;
    else if (key == "addr") o.addr = value;
    else if (key == "port") port = number(value);
    else if (key == "grace") o.grace_s = std::strtod(value.c_str(), nullptr);
    else if (key == "onfail") o.shrink = value == "shrink" || value == "replace", o.replace = value == "replace";
    else if (key == "tag") o.tag_output = value == "1";
    else if (key == "bind") o.bind_core = value == "core";
    else if (key == "cwd") cwd = value;
    else if (key == "secret") secret = value;
    else if (key == "env") {
      const auto e = value.find('=');
      where.env.emplace_back(value.substr(0, e), e == std::string::npos ? "" : value.substr(e + 1));
      // The hang report's signal is this host's mdring-run's business too.
      if (where.env.back().first == "MDRING_STATE_SIGNAL")
        setenv("MDRING_STATE_SIGNAL", where.env.back().second.c_str(), 1);
    } else if (key == "arg") args.push_back(value);
  }
  if (o.n < 1 || where.world < o.n || args.empty() || port < 1 || secret.empty()) {
    std::fprintf(stderr, "mdring-run --node: the launcher's description of the job is incomplete\n");
    return 2;
  }
  if (!cwd.empty() && chdir(cwd.c_str()) != 0)
    std::fprintf(stderr, "mdring-run: host %s has no directory %s (%s): the ranks start in %s\n", where.host.c_str(),
                 cwd.c_str(), std::strerror(errno), std::getenv("HOME") ? std::getenv("HOME") : "/");
  where.control = 0;
  std::vector<char*> program;
  for (auto& a : args) program.push_back(a.data());
  launcher l(o, std::move(program), port, secret, std::move(where));
  return l.run();
}

}  // namespace

int run_main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--node") return node_main();
  if (argc == 3 && std::string_view(argv[1]) == "--free-port") {  // asked by a launcher across hosts
    std::printf("%ld\n", free_port(argv[2]));
    return 0;
  }
  const options o = parse(argc, argv);
  if (o.help) {
    print_help();
    return 0;
  }
  const char* given = std::getenv("MDRING_SECRET");
  std::string secret = given && *given ? std::string(given) : random_secret();
  if (!o.hosts.empty()) {
    // Free ports on the first host, where the job's store and rank 0 run: MASTER_PORT
    // (unless given) and the store's (a different one).
    auto free_on_first_host = [&](long& port) {
      auto words = agent_words(o, 0);
      words.push_back(o.remote_self.empty() ? self_path() : o.remote_self);
      words.push_back("--free-port");
      words.push_back(o.addr);
      int status = 0;
      const std::string text = capture(words, &status);
      port = std::strtol(text.c_str(), nullptr, 10);
      if (status == 0 && port >= 1 && port <= 65535) return true;
      std::fprintf(stderr,
                   "mdring-run: cannot find a free port on host %s through the agent (\"%s\" exited with %d, "
                   "printed \"%s\"): check --agent and --master-addr, or give --master-port\n",
                   o.hosts.front().name.c_str(), agent_text(words).c_str(),
                   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text.c_str());
      return false;
    };
    long port = o.port, store_port = 0;
    if (port == 0 && !free_on_first_host(port)) return 1;
    for (int tries = 0; o.n > 1 && tries < 8 && (store_port == 0 || store_port == port); ++tries)
      if (!free_on_first_host(store_port)) return 1;  // (a job of one needs no store)
    cluster c(o, argv, port, store_port, std::move(secret));
    return c.run();
  }
  const long port = o.port != 0 ? o.port : free_port(o.addr);
  std::vector<char*> program(argv + o.program, argv + argc);
  placement where;
  if (!std::getenv("MDRING_STORE_PORT")) {  // the store's own port (see the top)
    long store_port = 0;
    for (int tries = 0; tries < 8 && (store_port <= 0 || store_port == port); ++tries) store_port = free_port(o.addr);
    where.env.emplace_back("MDRING_STORE_PORT", std::to_string(store_port));
  }
  launcher l(o, std::move(program), port, std::move(secret), std::move(where));
  return l.run();
}

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "mdring-run: %s\n%s (mdring-run --help for more)\n", e.what(), usage_line);
    return 2;
  }
}
