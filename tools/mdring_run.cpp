// mdring-run: start N processes of a program on this machine, as
// `torchrun --standalone --nproc-per-node N` would, for programs on mdring's UCX
// transport (no MPI needed).
//
//   mdring-run -n 4 ./app args...
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
// those still running then get SIGTERM, and 2 s later SIGKILL.
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to mdring-run are forwarded
// to every process and start the same grace period; a second SIGINT or SIGTERM
// kills them (SIGKILL). The processes stay in mdring-run's process group, and each
// asks the kernel for SIGKILL when mdring-run dies (PR_SET_PDEATHSIG), so not even
// a SIGKILL of mdring-run leaves them running.
//
// Plain C++20 and POSIX (plus Linux's prctl, getrandom and sched_setaffinity): no other
// dependency.
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

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

constexpr long max_processes = 4096;
constexpr double max_grace_s = 1e6;
constexpr std::chrono::seconds kill_after_term{2};
constexpr std::array forwarded_signals{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// ---- usage -----------------------------------------------------------------

constexpr const char* usage_line = "usage: mdring-run -n N [options] [--] program [args...]";

void print_help() {
  std::printf(
      "%s\n"
      "\n"
      "Starts N processes of `program args...` on this machine (the program is found on PATH like\n"
      "a shell does), as `torchrun --standalone --nproc-per-node N` would. Each process gets this\n"
      "environment plus:\n"
      "  RANK, LOCAL_RANK, ROLE_RANK                      0 .. N-1\n"
      "  WORLD_SIZE, LOCAL_WORLD_SIZE, ROLE_WORLD_SIZE    N\n"
      "  GROUP_RANK 0, GROUP_WORLD_SIZE 1, ROLE_NAME default\n"
      "  MDRING_RANK, MDRING_WORLD_SIZE, MDRING_LOCAL_RANK, MDRING_LOCAL_WORLD_SIZE   the same\n"
      "  MASTER_ADDR, MASTER_PORT   where rank 0 hosts the job's store\n"
      "  MDRING_SECRET              32 random hex characters, fresh for each run; an MDRING_SECRET\n"
      "                             already set (non-empty) here is passed on unchanged\n"
      "\n"
      "options:\n"
      "  -n, --nproc N          the number of processes (required, 1 to %ld)\n"
      "  --master-addr ADDR     MASTER_ADDR, an address of this machine (default 127.0.0.1)\n"
      "  --master-port PORT     MASTER_PORT (default: a free port, found by binding port 0 on ADDR)\n"
      "  --grace SECONDS        after the first failure, how long the other processes may take to\n"
      "                         finish on their own before they get SIGTERM, and 2 s later SIGKILL\n"
      "                         (default 5; fractions allowed)\n"
      "  --tag-output           prefix each line the processes write to stdout and stderr with\n"
      "                         \"[RANK] \" (default: they write to mdring-run's stdout and stderr)\n"
      "  --bind-to core|none    core: process r runs only on the r-th CPU that mdring-run may use\n"
      "                         (round robin when the processes outnumber them), as mpirun binds\n"
      "                         2 processes; give a multithreaded program more with taskset.\n"
      "                         none (default): the processes may run on all of them\n"
      "  -h, --help             this text\n"
      "\n"
      "Exit status: 0 when every process exits 0; otherwise that of the first process to fail:\n"
      "its exit code, or 128 + the number of the signal that killed it, as a shell reports it.\n"
      "mdring-run names that process on stderr. A program that cannot be started exits 127.\n"
      "2: bad arguments.\n"
      "\n"
      "Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to mdring-run are forwarded to every\n"
      "process and start the grace period; a second SIGINT or SIGTERM sends SIGKILL. The\n"
      "processes die with mdring-run even if it is killed with SIGKILL.\n"
      "\n"
      "Across machines: mdring reads torchrun's variables. On several machines, run\n"
      "`torchrun --nnodes M --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT\n"
      "program args...`, or any launcher that sets RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every process, and give every process the\n"
      "same MDRING_SECRET (e.g. `export MDRING_SECRET=$(openssl rand -hex 16)` before launching).\n"
      "Rank 0 hosts mdring's store on MASTER_ADDR:MASTER_PORT; where the launcher's own store\n"
      "already holds that port, give every process MDRING_STORE_PORT, a free port, instead.\n"
      "mdring-run itself starts processes on this machine only.\n",
      usage_line, max_processes);
}

[[noreturn]] void bad_usage(const std::string& msg) {
  std::fprintf(stderr, "mdring-run: %s\n%s (mdring-run --help for more)\n", msg.c_str(), usage_line);
  std::exit(2);
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

long parse_count(std::string_view opt, std::string_view s, long lo, long hi, const char* what) {
  long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const bool number = !s.empty() && end == s.data() + s.size() && ec != std::errc::invalid_argument;
  if (number && (ec == std::errc::result_out_of_range || v > hi))
    bad_usage(std::string(opt) + " expects " + what + " of at most " + std::to_string(hi) + ", got " + quoted(s));
  if (!number || v < lo) bad_usage(std::string(opt) + " expects " + what + ", got " + quoted(s));
  return v;
}

double parse_seconds(std::string_view opt, std::string_view s) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v) || v < 0 ||
      v > max_grace_s)
    bad_usage(std::string(opt) + " expects a number of seconds >= 0, got " + quoted(s));
  return v;
}

struct options {
  long n = 0;
  std::string addr = "127.0.0.1";
  long port = 0;  // 0: pick a free one
  double grace_s = 5;
  bool tag_output = false;
  bool bind_core = false;  // --bind-to core
  int program = 0;  // argv index of the program
};

options parse(int argc, char** argv) {
  options o;
  bool have_n = false;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the program ("-" alone too)
    // An option's name, and its value: `--opt value`, `--opt=value`, or `-nVALUE`.
    std::string_view name = a;
    std::optional<std::string_view> inline_value;
    if (a.starts_with("--")) {
      if (const auto eq = a.find('='); eq != std::string_view::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
    } else if (a.size() > 2) {
      name = a.substr(0, 2);
      inline_value = a.substr(2);
    }
    auto value = [&]() -> std::string_view {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) bad_usage(std::string(name) + " expects a value");
      return argv[++i];
    };
    auto no_value = [&] {
      if (inline_value) bad_usage(std::string(name) + " takes no value, got " + quoted(*inline_value));
    };
    if (name == "-h" || name == "--help") {
      no_value();
      print_help();
      std::exit(0);
    } else if (name == "-n" || name == "--nproc" || name == "--nproc-per-node" || name == "--nproc_per_node") {
      o.n = parse_count(name, value(), 1, max_processes, "a positive process count");
      have_n = true;
    } else if (name == "--master-addr" || name == "--master_addr") {
      const std::string_view v = value();
      if (v.empty()) bad_usage(std::string(name) + " expects an address of this machine, got \"\"");
      o.addr = v;
    } else if (name == "--master-port" || name == "--master_port") {
      o.port = parse_count(name, value(), 1, 65535, "a TCP port number");
    } else if (name == "--grace") {
      o.grace_s = parse_seconds(name, value());
    } else if (name == "--tag-output") {
      no_value();
      o.tag_output = true;
    } else if (name == "--bind-to" || name == "--bind_to") {
      const std::string_view v = value();
      if (v != "core" && v != "none") bad_usage(std::string(name) + " expects core or none, got " + quoted(v));
      o.bind_core = v == "core";
    } else {
      bad_usage("unknown option " + quoted(a));
    }
  }
  if (!have_n) bad_usage("missing -n N, the number of processes to start");
  if (i >= argc) bad_usage("no program to run: give it after the options (and an optional --)");
  o.program = i;
  return o;
}

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
      bad_usage("--master-addr expects an address of this machine, got " + quoted(addr) + ": " +
                std::strerror(err));
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

class launcher {
public:
  launcher(const options& o, char** argv, long port, std::string secret)
      : o_(o), argv_(argv), procs_(std::size_t(o.n)), port_(std::to_string(port)), secret_(std::move(secret)) {}

  int run() {
    if (o_.bind_core) find_cpus();
    setup_signals();
    // Blocked while the processes start: a signal then is handled once all exist.
    sigset_t block, old;
    sigemptyset(&block);
    for (const int sig : forwarded_signals) sigaddset(&block, sig);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &old);
    original_mask_ = old;
    for (long r = 0; r < o_.n; ++r)
      if (!spawn(r)) {
        const int e = errno;
        std::fprintf(stderr, "mdring-run: cannot start rank %ld: %s\n", r, std::strerror(e));
        kill_all(SIGKILL);
        for (auto& p : procs_)
          if (p.alive) waitpid(p.pid, nullptr, 0);
        return 1;
      }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    loop();
    if (!failed_) return 0;
    return WIFEXITED(first_status_) ? WEXITSTATUS(first_status_) : 128 + WTERMSIG(first_status_);
  }

private:
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

  void setup_signals() {
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::perror("mdring-run: pipe");
      std::exit(1);
    }
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (const int sig : forwarded_signals) {
      // A signal mdring-run was started with ignored (nohup) stays ignored, in the processes too.
      struct sigaction cur{};
      sigaction(sig, nullptr, &cur);
      if (cur.sa_handler == SIG_IGN) continue;
      sigaction(sig, &sa, nullptr);
      handled_.push_back(sig);
    }
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, nullptr);
    if (o_.tag_output) {
      // A closed stdout is passed on to the processes (see emit), not fatal here.
      struct sigaction cur{};
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

  [[noreturn]] void child(long r, pid_t parent, int pipes[2][2]) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive mdring-run, even a SIGKILLed one
    if (getppid() != parent) _exit(1);  // it died before prctl
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (const int sig : handled_) sigaction(sig, &dfl, nullptr);
    sigaction(SIGCHLD, &dfl, nullptr);
    if (o_.tag_output && !sigpipe_ignored_) sigaction(SIGPIPE, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    if (o_.tag_output && (dup2(pipes[0][1], 1) < 0 || dup2(pipes[1][1], 2) < 0)) _exit(127);
    if (!cpus_.empty()) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus_[std::size_t(r) % cpus_.size()], &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0) {
        std::fprintf(stderr, "mdring-run: cannot bind rank %ld to CPU %d: %s\n", r,
                     cpus_[std::size_t(r) % cpus_.size()], std::strerror(errno));
        _exit(127);
      }
    }

    const std::string rank = std::to_string(r), size = std::to_string(o_.n);
    const std::pair<const char*, const std::string*> vars[] = {
        {"RANK", &rank},
        {"WORLD_SIZE", &size},
        {"LOCAL_RANK", &rank},
        {"LOCAL_WORLD_SIZE", &size},
        {"ROLE_RANK", &rank},
        {"ROLE_WORLD_SIZE", &size},
        {"MDRING_RANK", &rank},
        {"MDRING_WORLD_SIZE", &size},
        {"MDRING_LOCAL_RANK", &rank},
        {"MDRING_LOCAL_WORLD_SIZE", &size},
        {"GROUP_RANK", &zero_},
        {"GROUP_WORLD_SIZE", &one_},
        {"ROLE_NAME", &role_},
        {"MASTER_ADDR", &o_.addr},
        {"MASTER_PORT", &port_},
        {"MDRING_SECRET", &secret_},
    };
    for (const auto& [name, value] : vars) setenv(name, value->c_str(), 1);
    execvp(argv_[o_.program], argv_ + o_.program);
    const int e = errno;
    std::fprintf(stderr, "mdring-run: cannot run \"%s\": %s\n", argv_[o_.program], std::strerror(e));
    _exit(127);
  }

  void kill_all(int sig) {
    for (const auto& p : procs_)
      if (p.alive) kill(p.pid, sig);
  }

  static const char* plural(long k) { return k == 1 ? "" : "s"; }

  // The first failure or signal: the processes get grace_s to finish.
  void start_grace(clk::time_point now) {
    if (phase_ != phase::running) return;
    phase_ = phase::grace;
    deadline_ = now + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(o_.grace_s));
  }

  void on_received(int sig) {
    const bool stop = sig == SIGINT || sig == SIGTERM;
    if (stop && first_stop_ != 0 && phase_ != phase::killed) {
      std::fprintf(stderr, "mdring-run: %s after %s: sending SIGKILL to %ld rank%s\n", sigabbrev(sig).c_str(),
                   sigabbrev(first_stop_).c_str(), live_, plural(live_));
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
      case SIGINT: return "SIGINT";
      case SIGTERM: return "SIGTERM";
      case SIGHUP: return "SIGHUP";
      case SIGQUIT: return "SIGQUIT";
      default: return "signal " + std::to_string(sig);
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
          std::fprintf(stderr, "mdring-run: rank %zu (pid %d) %s\n", r, int(pid), what.c_str());
          start_grace(clk::now());
        }
      }
    }
  }

  void on_deadline(clk::time_point now) {
    if (phase_ == phase::grace) {
      if (live_ > 0) {
        std::fprintf(stderr, "mdring-run: sending SIGTERM to %ld rank%s still running after the %g s grace period\n",
                     live_, plural(live_), o_.grace_s);
        kill_all(SIGTERM);
      }
      phase_ = phase::terminating;
      deadline_ = now + kill_after_term;
    } else if (phase_ == phase::terminating) {
      if (live_ > 0) {
        std::fprintf(stderr, "mdring-run: sending SIGKILL to %ld rank%s still running 2 s after SIGTERM\n", live_,
                     plural(live_));
        kill_all(SIGKILL);
      }
      phase_ = phase::killed;
    }
  }

  // --tag-output: write the complete lines of s (all of it at the end) to its fd.
  void emit(std::size_t rank, stream& s, bool all) {
    constexpr std::size_t max_line = 64 * 1024;  // longer lines are cut, not buffered without bound
    std::string out;
    const std::string prefix = "[" + std::to_string(rank) + "] ";
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
      for (std::size_t r = 0; r < procs_.size(); ++r)
        for (auto& s : procs_[r].streams)
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            owners.emplace_back(r, &s);
          }
      int timeout_ms = -1;
      if (phase_ == phase::grace || phase_ == phase::terminating) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - clk::now()).count();
        timeout_ms = int(std::max<long long>(0, std::min<long long>(left, 60'000)));
      }
      const int rc = poll(fds.data(), nfds_t(fds.size()), timeout_ms);
      if (rc < 0 && errno != EINTR) {
        std::perror("mdring-run: poll");
        kill_all(SIGKILL);
        phase_ = phase::killed;
      }
      if (rc > 0) {
        unsigned char sigs[64];
        ssize_t k;
        while ((k = read(signal_pipe[0], sigs, sizeof sigs)) > 0)
          for (ssize_t j = 0; j < k; ++j)
            if (sigs[j] != SIGCHLD) on_received(sigs[j]);
        for (std::size_t j = 1; j < fds.size(); ++j)
          if (fds[j].revents) drain(owners[j - 1].first, *owners[j - 1].second);
      }
      reap();
      const auto now = clk::now();
      if ((phase_ == phase::grace || phase_ == phase::terminating) && now >= deadline_) on_deadline(now);
    }
    // Every process is gone: what they wrote is in the pipes now (a process they left
    // behind may still hold one open: only what is there now is read).
    for (std::size_t r = 0; r < procs_.size(); ++r)
      for (auto& s : procs_[r].streams) {
        for (int k = 0; k < 64 && drain(r, s); ++k) {
        }
        if (s.fd >= 0) {
          emit(r, s, true);
          close(s.fd);
          s.fd = -1;
        }
      }
  }

  enum class phase { running, grace, terminating, killed };

  const options& o_;
  char** argv_;
  std::vector<process> procs_;
  long live_ = 0;
  std::vector<int> handled_;
  sigset_t original_mask_{};
  bool sigpipe_ignored_ = false;
  int first_stop_ = 0;  // the first SIGINT or SIGTERM received
  bool failed_ = false;
  int first_status_ = 0;
  phase phase_ = phase::running;
  clk::time_point deadline_{};
  std::array<bool, 3> broken_{};
  const std::string port_, secret_;
  std::vector<int> cpus_;  // --bind-to core: the CPUs to bind to, in order
  const std::string zero_ = "0", one_ = "1", role_ = "default";
};

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const long port = o.port != 0 ? o.port : free_port(o.addr);
  const char* given = std::getenv("MDRING_SECRET");
  launcher l(o, argv, port, given && *given ? std::string(given) : random_secret());
  return l.run();
}
