// tools/run_args.hpp: mdring-run's command line, parsed (tools/run_args.cpp).
//
// A library of its own (mdring_run_args, tools/CMakeLists.txt) that mdring-run
// (tools/mdring_run.cpp) and its fuzz target (tests/fuzz/fuzz_run_args.cpp) both
// link: parse() reads `mdring-run [options] [--] program [args...]` into
// options, or throws usage_error with a message that names the argument and
// what was expected. It reads a --hostfile; it starts nothing.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mdring_run {

inline constexpr long max_processes = 4096;  // -n's largest, and the hosts' slots together
inline constexpr double max_grace_s = 1e6;   // --grace's largest

inline constexpr const char* usage_line = "usage: mdring-run -n N [options] [--] program [args...]";

// mdring-run --help's text, on stdout.
void print_help();

// A bad argument: main prints it with the usage line and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void bad_usage(const std::string& msg);

// s in double quotes, as the messages name an argument.
std::string quoted(std::string_view s);

// A machine of --hosts or --hostfile, and how many processes it runs.
struct host {
  std::string name;
  long slots = 1;
};

struct options {
  bool help = false;  // -h, --help: print the help, nothing else
  long n = 0;
  std::string addr = "127.0.0.1";
  bool addr_given = false;
  long port = 0;  // 0: pick a free one
  double grace_s = 5;
  bool shrink = false;   // --on-failure shrink: a rank or host killed does not stop the others
  bool replace = false;  // --replace: start a process with MDRING_JOIN=1 in a killed rank's place (once)
  bool tag_output = false;
  bool bind_core = false;  // --bind-to core
  int program = 0;         // argv index of the program
  // Across machines (--hosts / --hostfile): empty for a job on this machine.
  std::vector<host> hosts;
  std::string agent = "ssh";
  std::string remote_self;            // --launcher-path: mdring-run on the hosts
  std::vector<std::string> exported;  // -x NAME or NAME=VALUE
};

// argv[0 .. argc) as mdring-run got it: the options, and where the program starts
// (options::program, an index into argv); -h alone returns with help set.
// Throws usage_error.
options parse(int argc, char** argv);

}  // namespace mdring_run
