// mdring/plan/wisdom.hpp: plans that were measured rather than estimated.
//
// With options.planning = measure (MDRING_PLANNING=measure), the first all_reduce
// of each size class on a communicator times a few candidate plans on the real
// ranks and keeps the fastest for every later call of that class, as FFTW's
// planner does (executor/host/engine.hpp, measure). What it keeps is a measured_choice;
// the choices of a communicator are its wisdom, which options.wisdom (or
// MDRING_WISDOM) saves to a file and reloads at the next bind, so that a program
// measures once per machine:
//
//   mdring-wisdom 1
//   key 8c1d4f0e2a9b7731               (the topology and options it holds for)
//   all_reduce 4 20 ring,halving_doubling 8 4 0.00123 0.00151 6
//     (element size, size class, algorithms per executed dimension, segments,
//      segments in flight, measured seconds, the estimate plan's seconds, candidates)
//
// A size class is floor(log2(bytes)): calls within a factor 2 share a choice.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "text_line.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

struct measured_choice {
  std::vector<algorithm> algos;  // per executed dimension
  std::size_t segments = 1;      // all_reduce cut into this many (plan/pipeline.hpp segment_length)
  std::size_t depth = 1;         // segments in flight
  double seconds = 0;            // measured: the slowest rank's median
  double estimate_seconds = 0;   // the estimate plan, measured in the same run
  std::size_t candidates = 0;    // how many plans were timed
  friend bool operator==(const measured_choice&, const measured_choice&) = default;
};

// Which measured candidate a measurement keeps: the fastest (smallest median) of
// those faster than candidate 0 (the estimate's plan) by more than the margin,
// else 0. The margin is the noise the measurement itself showed, `spread`: the
// largest (slowest - fastest) / median of any candidate's runs on any rank,
// bounded to [1 %, 5 %]. On a quiet machine (or a simulated one) a plan 2 %
// faster is kept; where runs of one plan differ by 5 % or more, only a plan more
// than 5 % faster, since a pick made by noise would cost every later call.
inline constexpr double measured_margin_min = 0.01, measured_margin_max = 0.05;
inline double measured_margin(double spread) noexcept {
  return spread > measured_margin_max ? measured_margin_max : spread > measured_margin_min ? spread : measured_margin_min;
}
inline std::size_t pick_measured(const std::vector<double>& medians, double spread) noexcept {
  std::size_t best = 0;
  const double margin = measured_margin(spread);
  for (std::size_t i = 1; i < medians.size(); ++i)
    if (medians[i] < (1 - margin) * medians[0] && medians[i] < medians[best]) best = i;
  return best;
}

constexpr std::size_t size_class(std::size_t bytes) noexcept {
  return bytes ? std::size_t(std::bit_width(bytes)) - 1 : 0;
}
static_assert(size_class(0) == 0 && size_class(1) == 0 && size_class(4096) == 12 && size_class(8191) == 12);

inline algorithm algorithm_from_string(std::string_view s, const char* what) {
  for (algorithm a : {algorithm::automatic, algorithm::ring, algorithm::direct, algorithm::halving_doubling,
                      algorithm::recursive_doubling})
    if (to_string(a) == s) return a;
  throw invalid_argument(what, std::string("mdring: unknown algorithm \"") + std::string(s) +
                                   "\" (expected automatic, ring, direct, halving_doubling or recursive_doubling)");
}

struct wisdom {
  std::string key;  // hex of the fingerprint it was measured under
  std::map<std::pair<std::size_t, std::size_t>, measured_choice> all_reduce;  // (element size, size class)

  const measured_choice* find(std::size_t elem_size, std::size_t bytes) const {
    auto it = all_reduce.find({elem_size, size_class(bytes)});
    return it == all_reduce.end() ? nullptr : &it->second;
  }

  std::string to_string() const {
    std::string s = "mdring-wisdom 1\nkey " + key + "\n";
    char buf[160];
    for (auto& [k, m] : all_reduce) {
      std::string al;
      for (auto a : m.algos) al += (al.empty() ? "" : ",") + std::string(mdring::to_string(a));
      if (al.empty()) al = "-";
      std::snprintf(buf, sizeof buf, " %zu %zu %.9g %.9g %zu\n", m.segments, m.depth, m.seconds, m.estimate_seconds,
                    m.candidates);
      s += "all_reduce " + std::to_string(k.first) + " " + std::to_string(k.second) + " " + al + buf;
    }
    return s;
  }

  static wisdom parse(std::string_view text, const std::string& source = "wisdom") {
    wisdom w;
    std::istringstream in{std::string(text)};
    std::string line;
    std::size_t no = 0;
    auto fail = [&](const std::string& why) {
      return invalid_argument("wisdom", "mdring::wisdom: " + source + ", line " + std::to_string(no) + ": " + why);
    };
    bool header = false;
    while (std::getline(in, line)) {
      ++no;
      detail::text_line ls(line);
      const std::string k(ls.word());
      if (k.empty()) continue;
      if (!header) {
        if (k != "mdring-wisdom" || ls.word() != "1" || !ls.end()) throw fail("expected \"mdring-wisdom 1\" first");
        header = true;
      } else if (k == "key") {
        w.key = std::string(ls.word());
        if (w.key.empty() || !std::all_of(w.key.begin(), w.key.end(), [](char c) { return std::isxdigit((unsigned char)c); }) ||
            !ls.end())
          throw fail("key takes the fingerprint's hexadecimal digits");
      } else if (k == "all_reduce") {
        std::size_t elem = 0, cls = 0;
        measured_choice m;
        std::string al;
        if (!(ls.count(elem) && ls.count(cls) && !(al = std::string(ls.word())).empty() && ls.count(m.segments) &&
              ls.count(m.depth) && ls.real(m.seconds) && ls.real(m.estimate_seconds) && ls.count(m.candidates) &&
              ls.end()))
          throw fail("all_reduce takes ELEMENT_SIZE CLASS ALGORITHMS SEGMENTS DEPTH SECONDS ESTIMATE CANDIDATES");
        for (std::size_t pos = 0; al != "-" && pos <= al.size();) {
          const std::size_t c = std::min(al.find(',', pos), al.size());
          try {
            m.algos.push_back(algorithm_from_string(al.substr(pos, c - pos), "wisdom"));
          } catch (const invalid_argument& e) {
            throw fail(e.what());
          }
          pos = c + 1;
        }
        if (m.segments == 0 || m.depth == 0 || m.depth > 8) throw fail("segments and depth (1 to 8) must be positive");
        w.all_reduce[{elem, cls}] = m;
      } else {
        throw fail("unknown line \"" + k + "\"");
      }
    }
    if (!header) throw fail("empty: expected \"mdring-wisdom 1\"");
    return w;
  }

  // A missing file is no wisdom yet (empty); one that cannot be parsed throws.
  static wisdom load(const std::string& path) {
    std::ifstream f(path);
    if (!f) return {};
    std::stringstream ss;
    ss << f.rdbuf();
    return parse(ss.str(), "\"" + path + "\"");
  }

  // Written to a file of its own, then renamed over `path`, so that ranks writing
  // the same wisdom at once (one file system, or one per node) leave a whole file.
  void save(const std::string& path, std::size_t rank = 0) const {
    const std::string tmp = path + ".tmp" + std::to_string(rank);
    {
      std::ofstream f(tmp);
      f << to_string();
      if (!f.good()) throw invalid_argument("options.wisdom", "mdring: cannot write the wisdom file \"" + tmp + "\"");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw invalid_argument("options.wisdom", "mdring: cannot replace the wisdom file \"" + path + "\"");
  }

  friend bool operator==(const wisdom&, const wisdom&) = default;
};

MDRING_NAMESPACE_END
