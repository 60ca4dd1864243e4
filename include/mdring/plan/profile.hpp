// mdring/plan/profile.hpp: measured link figures, the output of mdring::calibrate.
//
// A profile holds, for each link of a machine, the figures the cost model plans
// with (bandwidth, latency, per-message overhead), fitted from what calibrate
// measured on that machine, plus the measurements themselves. bind() plans with
// them in place of the link traits when `options.profile` (or MDRING_PROFILE)
// names a profile file; explain() then predicts from them too.
//
// The file is text, one fact per line, so that people can read and diff it:
//
//   mdring-profile 1
//   topology shm:2 x ethernet:2          (the executed topology it was measured on)
//   ranks 4
//   link ethernet=1.2e+09,2.5e-05,ring,host,ports=1,overhead=1e-06
//   point ethernet 1 8 2.6e-05           (link, dimension, bytes, seconds of one ring step)
//   train ethernet 1 8 4 3.1e-05         (the same with 4 messages in flight each way)
//   # anything after '#' is a comment
//
// A `link` line is parse_link's text (topology/link_registry.hpp), numbers written
// with 17 significant digits, so save and load give back the same doubles. bind
// replaces the figures of every dimension whose link has that name.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../topology/link_registry.hpp"
#include "../topology/runtime.hpp"
#include "text_line.hpp"

#include <cstdio>
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// One measurement: a ring step's message of `bytes` on a link in a dimension, and its seconds.
struct profile_point {
  std::string link;       ///< the link's name
  std::size_t dim = 0;    ///< executed dimension
  std::size_t bytes = 0;  ///< message bytes
  double seconds = 0;     ///< one ring step: a message of `bytes` to the next rank, one from the previous
  friend bool operator==(const profile_point&, const profile_point&) = default;
};

/// A train: `messages` ring steps' messages of `bytes` in flight at once; `seconds`
/// until all have arrived.
struct profile_train {
  std::string link;          ///< the link's name
  std::size_t dim = 0;       ///< executed dimension
  std::size_t bytes = 0;     ///< message bytes
  std::size_t messages = 0;  ///< messages in flight each way
  double seconds = 0;        ///< until all have arrived
  friend bool operator==(const profile_train&, const profile_train&) = default;
};

/// Measured link figures (mdring::calibrate): the links the cost model plans with and the measurements behind them.
struct profile {
  std::string topology;               ///< the executed topology it was measured on
  std::size_t ranks = 0;              ///< ranks it was measured with
  std::vector<link_info> links;       ///< what the cost model plans with, by name
  std::vector<profile_point> points;  ///< what was measured
  std::vector<profile_train> trains;  ///< measured with several messages in flight

  /// The link of this name, or nullptr.
  const link_info* find(std::string_view name) const {
    for (auto& l : links)
      if (l.name == name) return &l;
    return nullptr;
  }

  /// Gives every dimension whose link is named here the profile's figures: its
  /// measured points as the link's curve, else the fitted bandwidth, latency and
  /// overhead.
  void apply(runtime_topology& t) const {
    for (std::size_t d = 0; d < t.ndims(); ++d)
      if (const link_info* l = find(t.dim(d).link.name)) t.dim(d).link = with_curve(*l);
  }
  /// The curve (topology/link.hpp) from the points of link l. At a size with a train
  /// of c messages (time t_c) beside the single message (t_1), LogGP's gap splits
  /// t_1: busy = (t_c - t_1) / (c - 1), latency = t_1 - busy (each within [0, t_1]).
  /// At a size without a train the latency is the previous size's (the smallest
  /// size's: its whole time) and the rest busy. Dimensions of one link (a ring split
  /// in two) each have their points: at the same size they are averaged.
  MDRING_COLD link_info with_curve(link_info l) const {
    struct size_row {
      double bytes = 0, one = 0, train = 0, messages = 0;
      std::size_t ones = 0, trains = 0;
    };
    std::vector<size_row> rows;
    auto row = [&](std::size_t bytes) -> size_row& {
      for (auto& r : rows)
        if (r.bytes == double(bytes)) return r;
      return rows.emplace_back(size_row{double(bytes)});
    };
    for (auto& p : points)
      if (p.link == l.name) {
        auto& r = row(p.bytes);
        r.one += p.seconds, ++r.ones;
      }
    for (auto& p : trains)
      if (p.link == l.name && p.messages >= 2) {
        auto& r = row(p.bytes);
        r.train += p.seconds / double(p.messages - 1), r.messages += 1.0 / double(p.messages - 1), ++r.trains;
      }
    std::erase_if(rows, [](const size_row& r) { return r.ones == 0; });
    std::sort(rows.begin(), rows.end(), [](const size_row& a, const size_row& b) { return a.bytes < b.bytes; });
    if (rows.size() < 2 || rows.size() > link_curve::max_points) return l;
    l.overhead = 0;
    l.curve.points = rows.size();
    double lat = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      const double one = r.one / double(r.ones);
      if (r.trains) {
        // the averages of t_c / (c - 1) and of 1 / (c - 1): busy = t_c/(c-1) - t_1/(c-1)
        const double busy = r.train / double(r.trains) - one * r.messages / double(r.trains);
        lat = one - std::clamp(busy, 0.0, one);
      } else if (i == 0) {
        lat = one;
      }
      lat = std::min(lat, one);
      l.curve.bytes[i] = r.bytes;
      l.curve.latency[i] = lat;
      l.curve.seconds[i] = one - lat;
    }
    l.latency = l.curve.latency[0];
    return l;
  }

  /// The profile as text (the file format above).
  MDRING_COLD std::string to_string() const {
    std::string s = "mdring-profile 1\n";
    if (!topology.empty()) s += "topology " + topology + "\n";
    if (ranks) s += "ranks " + std::to_string(ranks) + "\n";
    // Names are appended whole (a fixed buffer cut a long one's line, and its
    // figures with it: fuzz_text); numbers are formatted into a small buffer.
    char buf[160];
    for (auto& l : links) {
      std::snprintf(buf, sizeof buf, "=%.17g,%.17g,%s,%s,ports=%zu,overhead=%.17g\n", l.bandwidth, l.latency,
                    l.fully_connected ? "full" : "ring", l.space == memory_space::device ? "device" : "host", l.ports,
                    l.overhead);
      s += "link " + l.name + buf;
    }
    for (auto& p : points) {
      std::snprintf(buf, sizeof buf, " %zu %zu %.17g\n", p.dim, p.bytes, p.seconds);
      s += "point " + p.link + buf;
    }
    for (auto& p : trains) {
      std::snprintf(buf, sizeof buf, " %zu %zu %zu %.17g\n", p.dim, p.bytes, p.messages, p.seconds);
      s += "train " + p.link + buf;
    }
    return s;
  }

  /// Reads a profile's text; `source` names it in errors (a file name).
  /// Throws invalid_argument("profile") naming the line and what is wrong.
  MDRING_COLD static profile parse(std::string_view text, const std::string& source = "profile") {
    profile pr;
    std::size_t no = 0;
    bool header = false;
    auto fail = [&](const std::string& why) {
      return invalid_argument("profile", "mdring::profile: " + source + ", line " + std::to_string(no) + ": " + why);
    };
    detail::for_each_line(text, [&](std::string_view whole) {
      std::string line(whole);
      ++no;
      if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
      detail::text_line ls(line);
      const std::string key(ls.word());
      if (key.empty()) return;
      auto done = [&](const char* what) {
        if (!ls.end()) throw fail(std::string("unexpected text after ") + what);
      };
      if (!header) {
        if (key != "mdring-profile" || ls.word() != "1")
          throw fail("expected \"mdring-profile 1\" first (is this a profile written by mdring::calibrate?)");
        done("\"mdring-profile 1\"");
        header = true;
      } else if (key == "topology") {
        pr.topology = std::string(ls.rest());
        try {
          (void)parse_topology(pr.topology);
        } catch (const invalid_argument& e) {
          throw fail(std::string("topology: ") + e.what());
        }
      } else if (key == "ranks") {
        if (!ls.count(pr.ranks)) throw fail("ranks takes a number");
        done("ranks N");
      } else if (key == "link") {
        const std::string t(ls.word());
        done("link NAME=...");
        try {
          link_info l = detail::parse_link_with(t, [](std::string_view) { return std::optional<link_info>(); });
          for (auto& old : pr.links)
            if (old.name == l.name) throw fail("link " + l.name + " appears twice");
          pr.links.push_back(l);
        } catch (const invalid_argument& e) {
          if (e.argument() == "profile") throw;
          throw fail(e.what());
        }
      } else if (key == "point") {
        profile_point p;
        if (!(ls.name(p.link) && ls.count(p.dim) && ls.count(p.bytes) && ls.real(p.seconds)))
          throw fail("point takes LINK DIM BYTES SECONDS (a link name, two whole numbers, seconds >= 0)");
        done("point LINK DIM BYTES SECONDS");
        pr.points.push_back(p);
      } else if (key == "train") {
        profile_train p;
        if (!(ls.name(p.link) && ls.count(p.dim) && ls.count(p.bytes) && ls.count(p.messages) && ls.real(p.seconds)) ||
            p.messages < 2)
          throw fail("train takes LINK DIM BYTES MESSAGES SECONDS, with at least 2 messages");
        done("train LINK DIM BYTES MESSAGES SECONDS");
        pr.trains.push_back(p);
      } else {
        throw fail("unknown line \"" + key + "\"");
      }
    });
    if (!header) throw fail("empty: expected \"mdring-profile 1\"");
    return pr;
  }

  /// Writes the profile to `path`; throws invalid_argument when it cannot.
  MDRING_COLD void save(const std::string& path) const {
    if (!detail::write_text_file(path, to_string()))
      throw invalid_argument("path", "mdring::profile::save: cannot write \"" + path + "\"");
  }

  /// Reads a profile file; throws invalid_argument when it cannot read or parse it.
  MDRING_COLD static profile load(const std::string& path) {
    std::string text;
    if (!detail::read_text_file(path, text))
      throw invalid_argument("profile", "mdring::profile::load: cannot read \"" + path + "\"");
    return parse(text, "\"" + path + "\"");
  }

  friend bool operator==(const profile&, const profile&) = default;
};

namespace detail {
// Plans with options.profile's figures: topo's links of the
// names it holds take them. Throws invalid_argument("options.profile").
inline void apply_profile(const options& o, runtime_topology& topo, const char* fn) {
  if (o.profile.empty()) return;
  try {
    profile::load(o.profile).apply(topo);
  } catch (const invalid_argument& e) {
    throw invalid_argument("options.profile", std::string(fn) + ": options.profile (or MDRING_PROFILE): " + e.what());
  }
}

}  // namespace detail

MDRING_NAMESPACE_END
