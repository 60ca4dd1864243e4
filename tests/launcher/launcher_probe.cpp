// launcher_probe: the program that test_launcher starts under mdring-run. It does
// the actions on its command line in order, then exits 0:
//
//   env DIR               write the launcher's variables to DIR/env.PID (KEY=VALUE lines)
//   cwd DIR               write its working directory to DIR/cwd.RANK
//   secret-seen DIR       write to DIR/seen.RANK whether any process's command line holds MDRING_SECRET
//   print                 "out RANK=r\n" then "tail r" (no newline) on stdout, "err RANK=r\n" on stderr
//   pid DIR               write its pid to DIR/pid.RANK
//   affinity DIR          write the CPUs it may run on to DIR/affinity.RANK ("0 1 3")
//   trap DIR              on SIGINT, SIGTERM, SIGHUP or SIGQUIT: write the signal's number
//                         to DIR/signal.RANK, then die of that signal
//   ignore SIG            ignore signal SIG
//   ignored DIR           write to DIR/ignored.RANK which of SIGINT, SIGTERM, SIGHUP, SIGQUIT,
//                         SIGPIPE it starts with ignored (their numbers, a line each)
//   wait-files DIR PREFIX COUNT   wait until DIR holds COUNT files PREFIX.* (at most 60 s)
//   wait-gone DIR RANK    wait until the process in DIR/pid.RANK is gone: reaped by mdring-run
//                         (at most 60 s)
//   exit-if RANK CODE     exit CODE if this is rank RANK
//   raise-if RANK SIG     raise(SIG) if this is rank RANK
//   raise-first-if RANK SIG   the same, but not in a process started in its place (MDRING_JOIN)
//   joined DIR            in a process started in a killed rank's place (mdring-run --replace):
//                         write "MDRING_JOIN MDRING_REPLACES" to DIR/joined.RANK
//   sleep SECONDS         sleep (through signals that do not kill it); at most 60 s in all
//   done DIR              write DIR/done.RANK
//
// Files are written whole (written under another name, then renamed).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

namespace {

std::string rank_s() {
  const char* r = std::getenv("RANK");
  return r ? r : "?";
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::perror(("launcher_probe: " + path).c_str());
    std::exit(90);
  }
}

char signal_path[4096];

extern "C" void on_signal(int sig) {
  // Async-signal-safe: open, write, close, signal, raise.
  const int fd = open(signal_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    char digits[4] = {char('0' + sig / 10), char('0' + sig % 10), '\n', 0};
    [[maybe_unused]] const ssize_t k = write(fd, digits[0] == '0' ? digits + 1 : digits, digits[0] == '0' ? 2 : 3);
    close(fd);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

int to_int(const char* s) { return std::atoi(s); }

[[noreturn]] void usage(const char* what) {
  std::fprintf(stderr, "launcher_probe: bad arguments near \"%s\"\n", what);
  std::exit(91);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono;
  const auto started = steady_clock::now();
  const std::string rank = rank_s();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto arg = [&]() -> const char* {
      if (i + 1 >= argc) usage(a.c_str());
      return argv[++i];
    };
    if (a == "env") {
      const std::string dir = arg();
      std::string text;
      for (const char* k : {"RANK",
                            "WORLD_SIZE",
                            "LOCAL_RANK",
                            "LOCAL_WORLD_SIZE",
                            "GROUP_RANK",
                            "GROUP_WORLD_SIZE",
                            "ROLE_RANK",
                            "ROLE_WORLD_SIZE",
                            "ROLE_NAME",
                            "MASTER_ADDR",
                            "MASTER_PORT",
                            "MDRING_SECRET",
                            "MDRING_RANK",
                            "MDRING_WORLD_SIZE",
                            "MDRING_LOCAL_RANK",
                            "MDRING_LOCAL_WORLD_SIZE",
                            "MDRING_STORE_HOSTED",
                            "MDRING_STORE_PORT",
                            "LAUNCHER_TEST_INHERITED",
                            "LAUNCHER_TEST_HOST",
                            "LAUNCHER_TEST_X",
                            "MDRING_TEST_FORWARDED"})
        if (const char* v = std::getenv(k)) text += std::string(k) + "=" + v + "\n";
      write_file(dir + "/env." + std::to_string(getpid()), text);
    } else if (a == "cwd") {
      const std::string dir = arg();
      write_file(dir + "/cwd." + rank, std::filesystem::current_path().string() + "\n");
    } else if (a == "secret-seen") {
      // Whether MDRING_SECRET appears on any process's command line (ps shows them).
      const std::string dir = arg();
      const char* secret = std::getenv("MDRING_SECRET");
      std::string seen = "no\n";
      for (const auto& e : std::filesystem::directory_iterator("/proc")) {
        FILE* f = std::fopen((e.path() / "cmdline").c_str(), "r");
        if (!f) continue;
        std::string cmd;
        for (int c; (c = std::fgetc(f)) != EOF;) cmd += char(c == 0 ? ' ' : c);
        std::fclose(f);
        if (secret && *secret && cmd.find(secret) != std::string::npos) seen = "yes: " + cmd + "\n";
      }
      write_file(dir + "/seen." + rank, seen);
    } else if (a == "print") {
      std::printf("out RANK=%s\n", rank.c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "err RANK=%s\n", rank.c_str());
      std::printf("tail %s", rank.c_str());
      std::fflush(stdout);
    } else if (a == "affinity") {
      const std::string dir = arg();
      cpu_set_t set;
      CPU_ZERO(&set);
      if (sched_getaffinity(0, sizeof set, &set) != 0) std::exit(91);
      std::string text;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) text += (text.empty() ? "" : " ") + std::to_string(c);
      write_file(dir + "/affinity." + rank, text);
    } else if (a == "pid") {
      const std::string dir = arg();
      write_file(dir + "/pid." + rank, std::to_string(getpid()) + "\n");
    } else if (a == "trap") {
      const std::string path = std::string(arg()) + "/signal." + rank;
      if (path.size() >= sizeof signal_path) usage("trap");
      std::strcpy(signal_path, path.c_str());
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
    } else if (a == "ignore") {
      signal(to_int(arg()), SIG_IGN);
    } else if (a == "ignored") {
      const std::string dir = arg();
      std::string text;
      for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
        struct sigaction cur {};
        sigaction(sig, nullptr, &cur);
        if (cur.sa_handler == SIG_IGN) text += std::to_string(sig) + "\n";
      }
      write_file(dir + "/ignored." + rank, text);
    } else if (a == "wait-files") {
      const std::string dir = arg();
      const std::string prefix = std::string(arg()) + ".";
      const int count = to_int(arg());
      for (;;) {
        int have = 0;
        for (const auto& e : std::filesystem::directory_iterator(dir)) {
          const std::string name = e.path().filename().string();
          if (name.starts_with(prefix) && name.find(".tmp") == std::string::npos) ++have;
        }
        if (have >= count) break;
        if (steady_clock::now() - started > seconds(60)) {
          std::fprintf(stderr, "launcher_probe: rank %s: only %d of %d %s* files\n", rank.c_str(), have, count,
                       prefix.c_str());
          return 92;
        }
        std::this_thread::sleep_for(milliseconds(5));
      }
    } else if (a == "wait-gone") {
      const std::string dir = arg();
      const std::string path = dir + "/pid." + arg();
      FILE* f = std::fopen(path.c_str(), "r");
      long pid = 0;
      if (!f || std::fscanf(f, "%ld", &pid) != 1) usage(path.c_str());
      std::fclose(f);
      while (kill(pid_t(pid), 0) == 0) {  // a zombie is still there: gone is reaped
        if (steady_clock::now() - started > seconds(60)) return 93;
        std::this_thread::sleep_for(milliseconds(5));
      }
    } else if (a == "exit-if") {
      const std::string r = arg();
      const int code = to_int(arg());
      if (r == rank) return code;
    } else if (a == "raise-if" || a == "raise-first-if") {
      const std::string r = arg();
      const int sig = to_int(arg());
      if (r == rank && (a == "raise-if" || !std::getenv("MDRING_JOIN"))) raise(sig);
    } else if (a == "joined") {
      const std::string dir = arg();
      const char* join = std::getenv("MDRING_JOIN");
      const char* replaces = std::getenv("MDRING_REPLACES");
      if (join) write_file(dir + "/joined." + rank, std::string(join) + " " + (replaces ? replaces : "-") + "\n");
    } else if (a == "sleep") {
      const auto until =
          steady_clock::now() + duration_cast<steady_clock::duration>(duration<double>(std::atof(arg())));
      std::this_thread::sleep_until(std::min(until, started + seconds(60)));  // restarts after EINTR
    } else if (a == "done") {
      write_file(std::string(arg()) + "/done." + rank, "done\n");
    } else {
      usage(a.c_str());
    }
  }
  return 0;
}
