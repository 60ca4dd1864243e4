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
//
// The drop-in for MPI programs (libmdring-pmpi.so) keeps its measured choice
// between MPI's own collective and mdring's in the same file:
//
//   native all_reduce 20 mdring 0.00157 0.00089 5
//     (collective, size class, the side taken, MPI's and mdring's measured
//      seconds: the slowest rank's medians, timed calls per side)
//
// A file holds one section per key (communicators of other topologies, or
// other options, in one program); a save replaces the lines it has of its own
// section and keeps the rest of the file.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "text_line.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// A plan that was measured for one size class: what it runs, and what the measurement found.
struct measured_choice {
  std::vector<algorithm> algos;  ///< per executed dimension
  std::size_t segments = 1;      ///< all_reduce cut into this many (plan/pipeline.hpp segment_length)
  std::size_t depth = 1;         ///< segments in flight
  double seconds = 0;            ///< measured: the slowest rank's median
  double estimate_seconds = 0;   ///< the estimate plan, measured in the same run
  std::size_t candidates = 0;    ///< how many plans were timed
  friend bool operator==(const measured_choice&, const measured_choice&) = default;
};

///@{
/// Which measured candidate a measurement keeps: the fastest (smallest median) of
/// those faster than candidate 0 (the estimate's plan) by more than the margin,
/// else 0. The margin is the noise the measurement itself showed, `spread`: the
/// largest (slowest - fastest) / median of any candidate's runs on any rank,
/// bounded to [1 %, 5 %]. On a quiet machine (or a simulated one) a plan 2 %
/// faster is kept; where runs of one plan differ by 5 % or more, only a plan more
/// than 5 % faster, since a pick made by noise would cost every later call.
inline constexpr double measured_margin_min = 0.01, measured_margin_max = 0.05;
inline double measured_margin(double spread) noexcept {
  return spread > measured_margin_max   ? measured_margin_max
         : spread > measured_margin_min ? spread
                                        : measured_margin_min;
}
inline std::size_t pick_measured(const std::vector<double>& medians, double spread) noexcept {
  std::size_t best = 0;
  const double margin = measured_margin(spread);
  for (std::size_t i = 1; i < medians.size(); ++i)
    if (medians[i] < (1 - margin) * medians[0] && medians[i] < medians[best]) best = i;
  return best;
}
///@}

/// The size class of a call of `bytes`: floor(log2(bytes)) (0 for 0).
constexpr std::size_t size_class(std::size_t bytes) noexcept {
  return bytes ? std::size_t(std::bit_width(bytes)) - 1 : 0;
}
static_assert(size_class(0) == 0 && size_class(1) == 0 && size_class(4096) == 12 && size_class(8191) == 12);

/// The algorithm of this name; throws invalid_argument naming `what` when there is none.
inline algorithm algorithm_from_string(std::string_view s, const char* what) {
  for (algorithm a : {algorithm::automatic, algorithm::ring, algorithm::direct, algorithm::halving_doubling,
                      algorithm::recursive_doubling})
    if (to_string(a) == s) return a;
  throw invalid_argument(what, std::string("mdring: unknown algorithm \"") + std::string(s) +
                                   "\" (expected automatic, ring, direct, halving_doubling or recursive_doubling)");
}

/// The drop-in's choice for one collective and size class (see above).
struct native_choice {
  bool mdring = false;        ///< the side taken: mdring's collective, else MPI's own
  double native_seconds = 0;  ///< MPI's: the slowest rank's median
  double mdring_seconds = 0;  ///< mdring's, likewise
  std::size_t trials = 0;     ///< timed calls per side
  friend bool operator==(const native_choice&, const native_choice&) = default;
};

/// A communicator's measured plans (its wisdom), and the drop-in's choices, as held in a file (the format above).
struct wisdom {
  std::string key;  ///< hex of the fingerprint it was measured under
  std::map<std::pair<std::size_t, std::size_t>, measured_choice> all_reduce;  ///< (element size, size class)
  std::map<std::pair<std::string, std::size_t>, native_choice> native;        ///< (collective, size class)

  /// The measured plan for calls of `bytes` bytes of elements of `elem_size`, or nullptr.
  const measured_choice* find(std::size_t elem_size, std::size_t bytes) const {
    auto it = all_reduce.find({elem_size, size_class(bytes)});
    return it == all_reduce.end() ? nullptr : &it->second;
  }
  bool empty() const noexcept { return all_reduce.empty() && native.empty(); }  ///< no plans

  std::string to_string() const { return "mdring-wisdom 1\n" + section(); }  ///< the file's text: this section alone

  /// The key line and this section's lines.
  MDRING_COLD std::string section() const {
    std::string s = "key " + key + "\n";
    char buf[160];
    for (auto& [k, m] : all_reduce) {
      std::string al;
      for (auto a : m.algos) al += (al.empty() ? "" : ",") + std::string(mdring::to_string(a));
      if (al.empty()) al = "-";
      std::snprintf(buf, sizeof buf, " %zu %zu %.9g %.9g %zu\n", m.segments, m.depth, m.seconds, m.estimate_seconds,
                    m.candidates);
      s += "all_reduce " + std::to_string(k.first) + " " + std::to_string(k.second) + " " + al + buf;
    }
    for (auto& [k, c] : native) {
      std::snprintf(buf, sizeof buf, " %zu %s %.9g %.9g %zu\n", k.second, c.mdring ? "mdring" : "mpi", c.native_seconds,
                    c.mdring_seconds, c.trials);
      s += "native " + k.first + buf;
    }
    return s;
  }

  /// The first section (a file written by one communicator has one).
  static wisdom parse(std::string_view text, const std::string& source = "wisdom") {
    std::vector<wisdom> all = parse_all(text, source);
    return all.empty() ? wisdom{} : std::move(all.front());
  }

  /// Every section, in the file's order; lines before any key line make a section
  /// with an empty key.
  MDRING_COLD static std::vector<wisdom> parse_all(std::string_view text, const std::string& source = "wisdom") {
    std::vector<wisdom> all;
    std::size_t no = 0;
    auto fail = [&](const std::string& why) {
      return invalid_argument("wisdom", "mdring::wisdom: " + source + ", line " + std::to_string(no) + ": " + why);
    };
    auto current = [&]() -> wisdom& {
      if (all.empty()) all.emplace_back();
      return all.back();
    };
    bool header = false;
    detail::for_each_line(text, [&](std::string_view line) {
      ++no;
      detail::text_line ls(line);
      const std::string k(ls.word());
      if (k.empty()) return;
      if (!header) {
        if (k != "mdring-wisdom" || ls.word() != "1" || !ls.end()) throw fail("expected \"mdring-wisdom 1\" first");
        header = true;
      } else if (k == "key") {
        std::string section_key(ls.word());
        if (section_key.empty() ||
            !std::all_of(section_key.begin(), section_key.end(),
                         [](char c) { return std::isxdigit((unsigned char)c); }) ||
            !ls.end())
          throw fail("key takes the fingerprint's hexadecimal digits");
        for (const auto& w : all)
          if (w.key == section_key) throw fail("key " + section_key + " appears twice");
        if (!all.empty() && all.back().key.empty() && all.back().empty()) all.back().key = section_key;
        else all.emplace_back().key = section_key;
      } else if (k == "native") {
        std::string coll(ls.word()), side;
        std::size_t cls = 0;
        native_choice c;
        if (!(!coll.empty() &&
              std::all_of(coll.begin(), coll.end(), [](char ch) { return (ch >= 'a' && ch <= 'z') || ch == '_'; }) &&
              ls.count(cls) && !(side = std::string(ls.word())).empty() && ls.real(c.native_seconds) &&
              ls.real(c.mdring_seconds) && ls.count(c.trials) && ls.end()) ||
            (side != "mdring" && side != "mpi") || cls >= 64)
          throw fail("native takes COLLECTIVE CLASS (below 64) mdring|mpi NATIVE_SECONDS MDRING_SECONDS TRIALS");
        c.mdring = side == "mdring";
        current().native[{coll, cls}] = c;
      } else if (k == "all_reduce") {
        wisdom& w = current();
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
    });
    if (!header) throw fail("empty: expected \"mdring-wisdom 1\"");
    return all;
  }

  /// A missing file is no wisdom yet (empty); one that cannot be parsed throws.
  ///@{
  /// Without a key: the file's first section; with one: that key's (empty, with
  /// the key, when the file has none).
  MDRING_COLD static wisdom load(const std::string& path) { return parse(read_file(path), "\"" + path + "\""); }
  static wisdom load(const std::string& path, const std::string& key) {
    for (auto& w : parse_all(read_file(path), "\"" + path + "\""))
      if (w.key == key) return w;
    wisdom w;
    w.key = key;
    return w;
  }
  ///@}

  /// This section's lines replace the file's lines of the same section (a line
  /// this section lacks is kept: two writers of one section, such as measured
  /// planning and the drop-in, keep each other's); other sections are kept. The
  /// text goes to a file of its own, then is renamed over `path`, so that ranks
  /// writing at once (one file system, or one per node) leave a whole file.
  /// `rank` names that file: writers at once must pass different ones.
  MDRING_COLD void save(const std::string& path, std::size_t rank = 0) const {
    std::vector<wisdom> all;
    try {
      all = parse_all(read_file(path), "\"" + path + "\"");
    } catch (const invalid_argument&) {
      all.clear();  // an unreadable file is replaced
    }
    bool placed = false;
    for (auto& w : all)
      if (w.key == key) {
        for (auto& [k, m] : all_reduce) w.all_reduce[k] = m;
        for (auto& [k, c] : native) w.native[k] = c;
        placed = true;
      }
    if (!placed) all.push_back(*this);
    std::string text = "mdring-wisdom 1\n";
    for (auto& w : all) text += w.section();
    const std::string tmp = path + ".tmp" + std::to_string(rank);
    if (!detail::write_text_file(tmp, text))
      throw invalid_argument("options.wisdom", "mdring: cannot write the wisdom file \"" + tmp + "\"");
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw invalid_argument("options.wisdom", "mdring: cannot replace the wisdom file \"" + path + "\"");
  }

private:
  static std::string read_file(const std::string& path) {
    std::string text;
    return detail::read_text_file(path, text) ? text : "mdring-wisdom 1\n";
  }

public:
  friend bool operator==(const wisdom&, const wisdom&) = default;
};

MDRING_NAMESPACE_END
