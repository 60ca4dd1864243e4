// libmdring-pmpi.so: its settings, read from the environment (see the top of
// mdring_pmpi.cpp for what each means). Without MPI, so that tests/fuzz can feed
// it any text. A value the interposer cannot use is named in `problems`, with
// what was expected, and the setting keeps its default: a drop-in never stops a
// job over a tuning variable.
#pragma once

#include <mdring/options.hpp>
#include <mdring/topology/runtime.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace mdring_pmpi {

// Timed calls per side while measuring a size class (MDRING_PMPI_TRIALS).
constexpr std::size_t kDefaultTrials = 5, kMaxTrials = 50;

struct config {
  bool enabled = true;
  // By default the interposer measures, per communicator, collective and size
  // class, MPI's own collective against mdring's at the first calls of the class
  // and keeps the faster (mdring only when faster by more than the noise).
  // MDRING_PMPI_MIN_BYTES=n instead takes every call of n bytes or more, without
  // measuring; MDRING_REPRODUCIBLE=1 takes every call.
  bool measure = true;
  std::size_t trials = kDefaultTrials;
  std::string wisdom;         // MDRING_WISDOM: the measured choices kept across runs
  std::string test_bias;      // MDRING_PMPI_TEST_BIAS (tests only, see mdring_pmpi.cpp)
  std::size_t min_bytes = 0;  // with measure = false
  std::string topology;       // MDRING_TOPOLOGY, or empty
  bool report = false;
  // Not by default: MPI_THREAD_MULTIPLE makes each small Open MPI 4.1 collective
  // about 0.4 us slower (1.27 x at 4 KiB on 2 processes, docs/PERFORMANCE.md).
  bool raise_thread = false;
  bool reproducible = false;  // MDRING_REPRODUCIBLE, as options reads it
  // mdring's deadline: MDRING_TIMEOUT as options reads it, else none (as MPI).
  std::chrono::milliseconds timeout = std::chrono::hours(24 * 365);
};

// "65536", "64K", "1M", "2G" (powers of 1024): false when it is none of these.
inline bool parse_bytes(std::string_view s, std::size_t& out) {
  std::size_t shift = 0;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) shift = 10;
  else if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) shift = 20;
  else if (!s.empty() && (s.back() == 'G' || s.back() == 'g')) shift = 30;
  if (shift) s.remove_suffix(1);
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + std::uint64_t(c - '0');
  }
  if (shift && v > (std::uint64_t(1) << (63 - shift))) return false;
  out = std::size_t(v << shift);
  return true;
}

inline config read_config(std::vector<std::string>& problems) {
  config c;
  auto env = [](const char* n) -> const char* {
    const char* v = std::getenv(n);
    return v && *v ? v : nullptr;
  };
  auto flag = [&](const char* name, bool& out) {
    if (const char* v = env(name)) {
      const std::string_view s = v;
      if (s == "0" || s == "1") out = s == "1";
      else problems.push_back(std::string(name) + "=\"" + v + "\": expected 0 or 1");
    }
  };
  flag("MDRING_PMPI", c.enabled);
  c.reproducible = mdring::detail::default_reproducible();
  if (c.reproducible) c.measure = false, c.min_bytes = 0, c.raise_thread = true;
  if (std::getenv("MDRING_TIMEOUT")) c.timeout = mdring::detail::default_timeout();
  if (const char* v = env("MDRING_PMPI_MIN_BYTES")) {
    std::size_t b = 0;
    if (parse_bytes(v, b)) c.min_bytes = b, c.measure = false;
    else
      problems.push_back(std::string("MDRING_PMPI_MIN_BYTES=\"") + v +
                         "\": expected a number of bytes (65536, 64K, 1M); keeping " +
                         (c.measure ? std::string("the measured choice") : std::to_string(c.min_bytes)));
  }
  if (const char* v = env("MDRING_PMPI_TRIALS")) {
    std::size_t n = 0;
    if (parse_bytes(v, n) && n >= 1 && n <= kMaxTrials &&
        std::string_view(v).find_first_not_of("0123456789") == std::string_view::npos)
      c.trials = n;
    else
      problems.push_back(std::string("MDRING_PMPI_TRIALS=\"") + v + "\": expected a number of calls from 1 to " +
                         std::to_string(kMaxTrials) + "; keeping " + std::to_string(c.trials));
  }
  if (const char* v = env("MDRING_WISDOM")) c.wisdom = v;
  if (const char* v = env("MDRING_PMPI_TEST_BIAS")) c.test_bias = v;
  if (const char* v = env("MDRING_TOPOLOGY")) {
    try {
      (void)mdring::parse_topology(v);
      c.topology = v;
    } catch (const mdring::invalid_argument& e) {
      problems.push_back(std::string("MDRING_TOPOLOGY: ") + e.what() + "; detecting the topology instead");
    }
  }
  flag("MDRING_REPORT", c.report);
  if (const char* v = env("MDRING_PMPI_THREAD")) {
    const std::string_view s = v;
    if (s == "multiple" || s == "keep") c.raise_thread = s == "multiple";
    else problems.push_back(std::string("MDRING_PMPI_THREAD=\"") + v + "\": expected multiple or keep");
  }
  return c;
}

}  // namespace mdring_pmpi
