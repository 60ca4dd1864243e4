// fuzz_text.cpp: libFuzzer target for every text format mdring reads. The first
// byte of an input picks the reader, the rest is its text:
//   0 parse_topology (a topology string; MDRING_TOPOLOGY)
//   1 parse_link     (one link: "name=bandwidth,latency[,...]")
//   2 MDRING_LINKS   (link texts separated by ';', into a fresh registry)
//   3 profile::parse (a calibrated profile file, mdring-calibrate's output)
//   4 wisdom::parse  (a measured-planning wisdom file)
//   5 the interposer's settings (pmpi/config.hpp): lines NAME=VALUE put in the
//     environment (MDRING_PMPI, MDRING_PMPI_MIN_BYTES, MDRING_TOPOLOGY,
//     MDRING_REPORT, MDRING_PMPI_THREAD, MDRING_REPRODUCIBLE, MDRING_TIMEOUT), read
//     as the interposer does: every value it cannot use is named, none throws
//   6 parse_state_line (a hang-report line, executor/state_line.hpp, as
//     mdring-run reads it; the text with "mdring-state: " before it, and as it is)
// What must hold, else the fuzzer stops with a crash: every text is either
// accepted or rejected with mdring::invalid_argument (topology_error for
// topologies) whose what() starts with "mdring" or the variable's name and whose
// argument() names what was wrong; no other exception, no crash, no sanitizer
// report, no hang. Accepted texts round-trip: a topology's to_string() parses to
// the same topology; a profile's or wisdom's to_string() parses to the same text.
// A state line is read whatever it holds (never without its prefix), and the
// text format_state_line writes of what was read reads back to the same text.
#include <mdring/mdring.hpp>

#include "../../pmpi/config.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace md = mdring;

namespace {

[[noreturn]] void finding(const char* reader, std::string_view text, const char* what) {
  std::fprintf(stderr, "fuzz_text: %s: %s\ninput: \"%.*s\"\n", reader, what, int(text.size()), text.data());
  std::abort();
}

// A rejection must be mdring's, clear, and name the argument.
void check_rejection(const char* reader, std::string_view text, const md::invalid_argument& e) {
  const std::string w = e.what();
  if (w.empty()) finding(reader, text, "an empty error message");
  if (w.rfind("mdring", 0) != 0 && w.rfind("MDRING_", 0) != 0)
    finding(reader, text, ("unprefixed message: " + w).c_str());
  if (e.argument().empty()) finding(reader, text, "an error that names no argument");
}

// A hang-report line: parse_state_line takes any bytes after the prefix; what it
// read, written by format_state_line, reads back to the same text.
void state_line(std::string_view text) {
  namespace d = md::detail;
  if (d::parse_state_line(text) && !text.starts_with(d::state_line_prefix))
    finding("state line", text, "a line without \"mdring-state: \" read");
  const auto f = d::parse_state_line(std::string(d::state_line_prefix) + std::string(text));
  if (!f) finding("state line", text, "a line with \"mdring-state: \" not read");
  const std::string again = d::format_state_line(*f);
  const auto g = d::parse_state_line(again);
  if (!g || d::format_state_line(*g) != again)
    finding("state line", text, ("format_state_line's text does not read back the same: " + again).c_str());
}

template <class F>
void reader(const char* name, std::string_view text, F&& f) {
  try {
    f();
  } catch (const md::invalid_argument& e) {
    check_rejection(name, text, e);
  } catch (const std::exception& e) {
    finding(name, text, (std::string("an exception other than mdring::invalid_argument: ") + e.what()).c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 7) {
    case 0:
      reader("parse_topology", text, [&] {
        const md::runtime_topology t = md::parse_topology(text);
        const std::string again = t.to_string();
        const md::runtime_topology u = md::parse_topology(again);
        if (u.to_string() != again) finding("parse_topology", text, "to_string() does not round-trip");
      });
      break;
    case 1:
      reader("parse_link", text, [&] { (void)md::parse_link(text); });
      break;
    case 2:
      reader("MDRING_LINKS", text, [&] {
        md::detail::link_registry r;
        r.add_from(text);
      });
      break;
    case 3:
      reader("profile", text, [&] {
        const md::profile p = md::profile::parse(text, "fuzz");
        const std::string again = p.to_string();
        if (md::profile::parse(again, "fuzz").to_string() != again)
          finding("profile", text, "to_string() does not round-trip");
      });
      break;
    case 5: {
      static const char* const names[] = {"MDRING_PMPI",   "MDRING_PMPI_MIN_BYTES", "MDRING_TOPOLOGY",
                                          "MDRING_REPORT", "MDRING_PMPI_THREAD",    "MDRING_REPRODUCIBLE",
                                          "MDRING_TIMEOUT"};
      std::size_t pos = 0;
      while (pos <= text.size()) {
        const std::size_t end = std::min(text.find('\n', pos), text.size());
        const std::string line(text.substr(pos, end - pos));
        pos = end + 1;
        const auto eq = line.find('=');
        if (eq == std::string::npos || line.find('\0') != std::string::npos) continue;
        for (const char* n : names)
          if (line.compare(0, eq, n) == 0) setenv(n, line.c_str() + eq + 1, 1);
      }
      try {
        std::vector<std::string> problems;
        const mdring_pmpi::config c = mdring_pmpi::read_config(problems);
        for (const auto& p : problems)
          if (p.rfind("MDRING_", 0) != 0)
            finding("pmpi settings", text, ("a problem that names no variable: " + p).c_str());
        if (c.reproducible && std::getenv("MDRING_PMPI_MIN_BYTES") == nullptr && c.min_bytes != 0)
          finding("pmpi settings", text, "reproducible without a threshold of 0");
      } catch (const std::exception& e) {
        finding("pmpi settings", text, (std::string("read_config threw: ") + e.what()).c_str());
      }
      for (const char* n : names) unsetenv(n);
      break;
    }
    case 6:
      state_line(text);
      break;
    default:
      reader("wisdom", text, [&] {
        const md::wisdom w = md::wisdom::parse(text, "fuzz");
        const std::string again = w.to_string();
        if (md::wisdom::parse(again, "fuzz").to_string() != again)
          finding("wisdom", text, "to_string() does not round-trip");
      });
      break;
  }
  return 0;
}
