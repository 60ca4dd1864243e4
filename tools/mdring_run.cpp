// mdring-run: start N processes of a program on this machine, as torchrun
// --standalone would, for mdring's UCX transport (no MPI needed).
//
//   mdring-run -n 4 ./app args...
//
// Each process gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), their MDRING_*
// equivalents, and MDRING_SECRET, a fresh random secret that mdring's store
// demands of every connection (an MDRING_SECRET already in the environment is
// passed on). Signals sent to mdring-run (INT, TERM, HUP, QUIT) go to every
// process; a second INT or TERM kills them. mdring-run exits 0 when every process
// did, else with the first failure's status (its exit code, or 128 + the signal
// that killed it), after the others have had --grace seconds to finish on their
// own (a collective library tells the survivors which rank failed) and were then
// terminated.
#include <mdring/rendezvous/socket.hpp>  // random_secret()

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t pending_signal = 0;
volatile sig_atomic_t signals_seen = 0;

void on_signal(int sig) {
  pending_signal = sig;
  signals_seen = signals_seen + 1;
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "mdring-run: %s (mdring-run --help)\n", msg.c_str());
  std::exit(2);
}

void usage() {
  std::printf(
      "usage: mdring-run -n N [--master-addr ADDR] [--master-port PORT] [--grace SECONDS] [--] program [args...]\n"
      "\n"
      "Starts N processes of program on this machine, each with RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR (default 127.0.0.1), MASTER_PORT (a free port by\n"
      "default), the MDRING_* equivalents, and MDRING_SECRET (fresh and random, unless already set).\n"
      "Exits with the first failing process's status (128 + signal if one was killed), after the\n"
      "others have had --grace seconds (default 5) to finish; then they get SIGTERM, then SIGKILL.\n"
      "\n"
      "Across machines: mdring reads torchrun's variables. Run `torchrun --nnodes M --nproc-per-node K\n"
      "--rdzv-backend c10d --rdzv-endpoint HOST:PORT program`, or any launcher that sets RANK, WORLD_SIZE,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every process, and give every\n"
      "process the same secret: export MDRING_SECRET=$(openssl rand -hex 16) before launching.\n");
}

double parse_seconds(const char* arg, const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (!*s || *end || v < 0) usage_error(std::string(arg) + " expects seconds (a number >= 0), got \"" + s + "\"");
  return v;
}

long parse_count(const char* arg, const char* s, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi)
    usage_error(std::string(arg) + " expects " + (lo == 1 ? "a positive process count" : "a TCP port (1-65535)") +
                ", got \"" + s + "\"");
  return v;
}

// A port nobody listens on now: bind port 0 on addr, read it, close.
int free_port(const std::string& addr) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::fprintf(stderr, "mdring-run: cannot find a free port on %s: %s\n", addr.c_str(), std::strerror(errno));
    std::exit(1);
  }
  close(s);
  return ntohs(a.sin_port);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}
int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

int main(int argc, char** argv) {
  long n = 0;
  std::string addr = "127.0.0.1";
  long port = 0;
  double grace = 5;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " expects a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a == "-n" || a == "--nproc") n = parse_count("-n", value(), 1, 4096);
    else if (a == "--master-addr") addr = value();
    else if (a == "--master-port") port = parse_count("--master-port", value(), 1, 65535);
    else if (a == "--grace") grace = parse_seconds("--grace", value());
    else if (a == "--") {
      ++i;
      break;
    } else if (!a.empty() && a[0] == '-') usage_error("unknown option \"" + a + "\"");
    else break;
  }
  if (n == 0) usage_error("-n expects a positive process count (-n N is required)");
  if (i >= argc) usage_error("no program to run: mdring-run -n N program [args...]");
  if (port == 0) port = free_port(addr);
  const char* given = std::getenv("MDRING_SECRET");
  const std::string secret = given && *given ? given : mdring::rendezvous::random_secret();

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);

  std::vector<pid_t> pids(std::size_t(n), -1);
  std::vector<bool> alive(std::size_t(n), false);
  const pid_t parent = getpid();
  for (long r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("mdring-run: fork");
      for (long k = 0; k < r; ++k) kill(pids[std::size_t(k)], SIGKILL);
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a killed launcher
      if (getppid() != parent) _exit(1);
      struct sigaction dfl{};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &dfl, nullptr);
      const std::string rs = std::to_string(r), ns = std::to_string(n), ps = std::to_string(port);
      for (const char* prefix : {"", "MDRING_"}) {
        const std::string p = prefix;
        setenv((p + "RANK").c_str(), rs.c_str(), 1);
        setenv((p + "WORLD_SIZE").c_str(), ns.c_str(), 1);
        setenv((p + "LOCAL_RANK").c_str(), rs.c_str(), 1);
        setenv((p + "LOCAL_WORLD_SIZE").c_str(), ns.c_str(), 1);
      }
      setenv("GROUP_RANK", "0", 1);
      setenv("MASTER_ADDR", addr.c_str(), 1);
      setenv("MASTER_PORT", ps.c_str(), 1);
      setenv("MDRING_SECRET", secret.c_str(), 1);
      execvp(argv[i], argv + i);
      std::fprintf(stderr, "mdring-run: cannot run \"%s\": %s\n", argv[i], std::strerror(errno));
      _exit(127);
    }
    pids[std::size_t(r)] = pid;
    alive[std::size_t(r)] = true;
  }

  using clk = std::chrono::steady_clock;
  int first_status = 0;
  bool failed = false;
  clk::time_point term_at{}, kill_at{};
  bool termed = false, killed = false;
  long left = n;
  int forwarded = 0;
  while (left > 0) {
    if (pending_signal) {
      const int sig = pending_signal;
      pending_signal = 0;
      const bool escalate = signals_seen > 1 && (sig == SIGINT || sig == SIGTERM);
      for (long r = 0; r < n; ++r)
        if (alive[std::size_t(r)]) kill(pids[std::size_t(r)], escalate ? SIGKILL : sig);
      if (!forwarded++) kill_at = clk::now() + std::chrono::milliseconds(long(grace * 1000) + 2000);
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (long r = 0; r < n; ++r)
        if (pids[std::size_t(r)] == pid && alive[std::size_t(r)]) {
          alive[std::size_t(r)] = false;
          --left;
          const bool bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
          if (bad && !failed) {
            failed = true;
            first_status = status;
            std::fprintf(stderr, "mdring-run: rank %ld (pid %d) %s\n", r, int(pid), describe(status).c_str());
            term_at = clk::now() + std::chrono::milliseconds(long(grace * 1000));
          }
        }
      continue;
    }
    const auto now = clk::now();
    if (failed && !termed && now >= term_at) {
      termed = true;
      kill_at = now + std::chrono::seconds(2);
      for (long r = 0; r < n; ++r)
        if (alive[std::size_t(r)]) kill(pids[std::size_t(r)], SIGTERM);
    }
    if ((termed || forwarded) && !killed && kill_at != clk::time_point{} && now >= kill_at) {
      killed = true;
      for (long r = 0; r < n; ++r)
        if (alive[std::size_t(r)]) kill(pids[std::size_t(r)], SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return failed ? exit_code(first_status) : 0;
}
