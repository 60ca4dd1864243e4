// tools/run_args.cpp: mdring-run's command line (tools/run_args.hpp).
#include "run_args.hpp"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>

namespace mdring_run {

// ---- usage -----------------------------------------------------------------

void print_help() {
  std::printf(
      "%s\n"
      "\n"
      "Starts N processes of `program args...` on this machine (the program is found on PATH like\n"
      "a shell does), as `torchrun --standalone --nproc-per-node N` would, or across machines with\n"
      "--hosts (below). Each process gets this environment plus:\n"
      "  RANK, LOCAL_RANK, ROLE_RANK                      0 .. N-1\n"
      "  WORLD_SIZE, LOCAL_WORLD_SIZE, ROLE_WORLD_SIZE    N\n"
      "  GROUP_RANK 0, GROUP_WORLD_SIZE 1, ROLE_NAME default\n"
      "  MDRING_RANK, MDRING_WORLD_SIZE, MDRING_LOCAL_RANK, MDRING_LOCAL_WORLD_SIZE   the same\n"
      "  MASTER_ADDR, MASTER_PORT   rank 0's address and a free port there (for the program's own\n"
      "                             store, as PyTorch's)\n"
      "  MDRING_STORE_PORT          where on MASTER_ADDR mdring's store listens: mdring-run hosts it in a\n"
      "                             process of its own, which outlives every rank (MDRING_STORE_HOSTED=1\n"
      "                             tells rank 0; MDRING_RUN_STORE=rank0 leaves it to rank 0)\n"
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
      "  --on-failure stop|shrink\n"
      "                         stop (default): the first process to fail starts the grace period.\n"
      "                         shrink: a process (or host) that fails does not; the others go on\n"
      "                         (mdring::shrink), and the job ends when they do\n"
      "  --replace              with --on-failure shrink: start a process in a killed rank's place\n"
      "                         (once per rank), with MDRING_JOIN=1 and MDRING_REPLACES=RANK, which\n"
      "                         joins the survivors (mdring::ucx::join_from_env, mdring::grow)\n"
      "  --tag-output           prefix each line the processes write to stdout and stderr with\n"
      "                         \"[RANK] \" (default: they write to mdring-run's stdout and stderr)\n"
      "  --bind-to core|none    core: process r runs only on the r-th CPU that mdring-run may use\n"
      "                         (round robin when the processes outnumber them), as mpirun binds\n"
      "                         2 processes; give a multithreaded program more with taskset.\n"
      "                         none (default): the processes may run on all of them\n"
      "  -h, --help             this text\n"
      "\n"
      "Exit status: 0 when every process exits 0 (--on-failure shrink: every process not killed\n"
      "by a signal, at least one); otherwise that of the first process to fail (--on-failure\n"
      "shrink: to exit non-zero): its exit code, or 128 + the number of the signal that killed\n"
      "it, as a shell reports it.\n"
      "mdring-run names that process on stderr. A program that cannot be started exits 127.\n"
      "2: bad arguments.\n"
      "\n"
      "Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to mdring-run are forwarded to every\n"
      "process and start the grace period; a second SIGINT or SIGTERM sends SIGKILL. The\n"
      "processes die with mdring-run even if it is killed with SIGKILL.\n"
      "\n"
      "Hang report: the processes get MDRING_STATE_DIR, where mdring writes what each communicator\n"
      "is doing. When the job fails, and when mdring-run gets the signal MDRING_STATE_SIGNAL names\n"
      "(e.g. MDRING_STATE_SIGNAL=USR1; off by default; forwarded to every process), it prints one\n"
      "table: per rank its call, collective, step, dimension, the peer it waits on and for how\n"
      "long, and which rank is behind. Across machines each host prints its own ranks' table.\n"
      "\n"
      "Across machines:\n"
      "  --hosts A:2,B:2        the hosts and their slots (processes); NAME alone is one slot.\n"
      "                         -n is then optional (default: every slot; fewer fills hosts in order)\n"
      "  --hostfile FILE        the same, a host per line: NAME, NAME:SLOTS or NAME slots=SLOTS (# comments)\n"
      "  --agent CMD            runs a command on a host (default ssh): CMD's words, with {host} and\n"
      "                         {index} replaced, else followed by the host's name, then the command.\n"
      "                         E.g. --agent \"ip netns exec ns{index}\" for network namespaces\n"
      "  --launcher-path PATH   mdring-run's path on the hosts (default: this one's)\n"
      "  -x NAME[=VALUE]        pass a variable to every process (repeatable). MDRING_*, UCX_*, GLOO_*,\n"
      "                         NCCL_* and TORCH_* variables set here are always passed on\n"
      "On each host the agent starts `mdring-run --node`, which reads its share of the job (the\n"
      "secret among it, never on a command line) on its standard input and starts that host's\n"
      "processes in the launcher's working directory. Ranks are placed in host order; LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, GROUP_RANK and GROUP_WORLD_SIZE say which host and where on it. MASTER_ADDR\n"
      "defaults to the first host's name (give --master-addr where the others know it by another);\n"
      "the free port is found there. When a host's process fails, the others get the grace period,\n"
      "then SIGTERM, then SIGKILL; a host whose agent or connection is lost kills its processes.\n"
      "\n"
      "Other launchers: mdring reads torchrun's variables, so\n"
      "`torchrun --nnodes M --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT\n"
      "program args...` works too, or any launcher that sets RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every process; give every process the same\n"
      "MDRING_SECRET (e.g. `export MDRING_SECRET=$(openssl rand -hex 16)` before launching). Rank 0\n"
      "hosts mdring's store on MASTER_ADDR:MASTER_PORT; where the launcher's own store already holds\n"
      "that port, give every process MDRING_STORE_PORT, a free port, instead.\n",
      usage_line, max_processes);
}

[[noreturn]] void bad_usage(const std::string& msg) { throw usage_error(msg); }

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

namespace {

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
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v) || v < 0 || v > max_grace_s)
    bad_usage(std::string(opt) + " expects a number of seconds >= 0, got " + quoted(s));
  return v;
}

// ---- --hosts and --hostfile --------------------------------------------------

// "NAME" or "NAME:SLOTS" (one entry of --hosts, or a line of a host file).
host parse_host(std::string_view opt, std::string_view entry) {
  host h;
  const auto colon = entry.rfind(':');
  h.name = std::string(entry.substr(0, colon));
  if (colon != std::string_view::npos)
    h.slots = parse_count(opt, entry.substr(colon + 1), 1, max_processes, "NAME:SLOTS with a positive SLOTS");
  if (h.name.empty() || h.name.find_first_of(" \t'\"\\$`;&|<>(){}") != std::string::npos)
    bad_usage(std::string(opt) + " expects host names (NAME or NAME:SLOTS), got " + quoted(entry));
  return h;
}

std::vector<host> parse_hosts(std::string_view opt, std::string_view list) {
  std::vector<host> out;
  while (true) {
    const auto comma = list.find(',');
    out.push_back(parse_host(opt, list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

// A host file: a host per line, "NAME", "NAME:SLOTS" or "NAME slots=SLOTS" (Open MPI's
// form); '#' starts a comment.
std::vector<host> read_hostfile(std::string_view opt, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f)
    bad_usage(std::string(opt) + " expects a readable host file, got " + quoted(path) + ": " + std::strerror(errno));
  std::vector<host> out;
  char line[4096];
  int number = 0;
  while (std::fgets(line, sizeof line, f)) {
    ++number;
    std::string_view l = line;
    l = l.substr(0, l.find('#'));
    while (!l.empty() && std::isspace(static_cast<unsigned char>(l.back()))) l.remove_suffix(1);
    while (!l.empty() && std::isspace(static_cast<unsigned char>(l.front()))) l.remove_prefix(1);
    if (l.empty()) continue;
    const std::string where = std::string(opt) + " " + path + ":" + std::to_string(number);
    const auto space = l.find_first_of(" \t");
    if (space == std::string_view::npos) {
      out.push_back(parse_host(where, l));
      continue;
    }
    std::string_view rest = l.substr(space);
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
    if (!rest.starts_with("slots=")) bad_usage(where + " expects NAME slots=SLOTS, got " + quoted(l));
    host h = parse_host(where, l.substr(0, space));
    h.slots = parse_count(where, rest.substr(6), 1, max_processes, "slots=SLOTS with a positive SLOTS");
    out.push_back(h);
  }
  std::fclose(f);
  if (out.empty()) bad_usage(std::string(opt) + " " + path + " names no host");
  return out;
}

}  // namespace

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
      o.help = true;
      return o;
    } else if (name == "-n" || name == "--nproc" || name == "--nproc-per-node" || name == "--nproc_per_node") {
      o.n = parse_count(name, value(), 1, max_processes, "a positive process count");
      have_n = true;
    } else if (name == "--master-addr" || name == "--master_addr") {
      const std::string_view v = value();
      if (v.empty()) bad_usage(std::string(name) + " expects an address of this machine, got \"\"");
      o.addr = v;
      o.addr_given = true;
    } else if (name == "--master-port" || name == "--master_port") {
      o.port = parse_count(name, value(), 1, 65535, "a TCP port number");
    } else if (name == "--grace") {
      o.grace_s = parse_seconds(name, value());
    } else if (name == "--on-failure" || name == "--on_failure") {
      const std::string_view v = value();
      if (v != "stop" && v != "shrink") bad_usage(std::string(name) + " expects stop or shrink, got " + quoted(v));
      o.shrink = v == "shrink";
    } else if (name == "--replace") {
      no_value();
      o.replace = true;
    } else if (name == "--tag-output") {
      no_value();
      o.tag_output = true;
    } else if (name == "--hosts" || name == "-H" || name == "--host") {
      const std::string_view v = value();
      if (v.empty())
        bad_usage(std::string(name) + " expects host names (NAME or NAME:SLOTS, comma-separated), got \"\"");
      auto more = parse_hosts(name, v);
      o.hosts.insert(o.hosts.end(), more.begin(), more.end());
    } else if (name == "--hostfile" || name == "--host-file") {
      auto more = read_hostfile(name, std::string(value()));
      o.hosts.insert(o.hosts.end(), more.begin(), more.end());
    } else if (name == "--agent") {
      const std::string_view v = value();
      if (v.find_first_not_of(" \t") == std::string_view::npos)
        bad_usage(std::string(name) + " expects a command that runs a command on a host, got " + quoted(v));
      o.agent = v;
    } else if (name == "--launcher-path") {
      const std::string_view v = value();
      if (v.empty() || v[0] != '/') bad_usage(std::string(name) + " expects an absolute path, got " + quoted(v));
      o.remote_self = v;
    } else if (name == "-x" || name == "--export") {
      const std::string_view v = value();
      const std::string_view var = v.substr(0, v.find('='));
      if (var.empty() ||
          var.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
              std::string_view::npos ||
          (var[0] >= '0' && var[0] <= '9'))
        bad_usage(std::string(name) + " expects NAME or NAME=VALUE (a variable's name), got " + quoted(v));
      o.exported.emplace_back(v);
    } else if (name == "--bind-to" || name == "--bind_to") {
      const std::string_view v = value();
      if (v != "core" && v != "none") bad_usage(std::string(name) + " expects core or none, got " + quoted(v));
      o.bind_core = v == "core";
    } else {
      bad_usage("unknown option " + quoted(a));
    }
  }
  if (!o.hosts.empty()) {
    long slots = 0;
    for (const host& h : o.hosts) slots += h.slots;
    if (slots > max_processes)
      bad_usage("the hosts offer " + std::to_string(slots) + " slots, more than " + std::to_string(max_processes) +
                " processes");
    if (have_n && o.n > slots)
      bad_usage("-n " + std::to_string(o.n) + " is more than the " + std::to_string(slots) +
                " slots of the hosts given (NAME:SLOTS sets a host's)");
    if (!have_n) o.n = slots;
    have_n = true;
    if (!o.addr_given) o.addr = o.hosts.front().name;
  } else if (!o.exported.empty()) {
    bad_usage("-x: the environment is passed on as it is on this machine; -x is for --hosts or --hostfile");
  }
  if (!have_n) bad_usage("missing -n N (the number of processes), or --hosts / --hostfile");
  if (o.replace && !o.shrink)
    bad_usage("--replace expects --on-failure shrink too (the others must go on to be joined)");
  if (i >= argc) bad_usage("no program to run: give it after the options (and an optional --)");
  o.program = i;
  return o;
}

}  // namespace mdring_run
