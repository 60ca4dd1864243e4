// fuzz_run_args.cpp: libFuzzer target for mdring-run's command line (its parse()
// in tools/run_args.cpp: the mdring_run_args library that mdring-run links,
// compiled into this target with the fuzz flags). The input is split at NUL
// bytes and newlines into arguments after "mdring-run". What must hold: parse
// returns options that make sense (a process count from 1 to the maximum, or
// hosts whose slots cover it; the program's index inside argv), or throws
// usage_error with a message that says what was expected; nothing else, and no
// crash, sanitizer report or hang. Inputs naming /dev, /proc or /sys are skipped
// (a host file there could be a terminal or endless).
#include "run_args.hpp"  // tools/run_args.hpp

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace mdring_run;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find("/dev") != std::string::npos || text.find("/proc") != std::string::npos ||
      text.find("/sys") != std::string::npos)
    return 0;
  std::vector<std::string> words{"mdring-run"};
  std::string cur;
  for (const char c : text) {
    if (c == '\0' || c == '\n') {
      words.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  words.push_back(cur);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int argc = int(words.size());
  try {
    const options o = parse(argc, argv.data());
    if (o.help) return 0;
    if (o.program <= 0 || o.program >= argc) {
      std::fprintf(stderr, "fuzz_run_args: the program's index %d is outside argv (%d words)\n", o.program, argc);
      std::abort();
    }
    long slots = 0;
    for (const auto& h : o.hosts) {
      if (h.slots < 1 || h.name.empty()) std::abort();
      slots += h.slots;
    }
    if (o.n < 1 || o.n > max_processes || (!o.hosts.empty() && o.n > slots)) {
      std::fprintf(stderr, "fuzz_run_args: -n %ld accepted (hosts' slots %ld)\n", o.n, slots);
      std::abort();
    }
  } catch (const usage_error& e) {
    // A clear message says which argument and what was expected.
    const std::string w = e.what();
    static const char* const clear[] = {"expects",    "takes no value", "unknown option", "missing -n",
                                        "no program", "more than",      "names no host",  "-x:"};
    bool ok = false;
    for (const char* c : clear) ok = ok || w.find(c) != std::string::npos;
    if (!ok) {
      std::fprintf(stderr, "fuzz_run_args: an unclear message: \"%s\"\n", w.c_str());
      std::abort();
    }
  }
  return 0;
}
