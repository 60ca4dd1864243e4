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
//   # anything after '#' is a comment
//
// A `link` line is parse_link's text (topology/link_registry.hpp), numbers written
// with 17 significant digits, so save and load give back the same doubles. bind
// replaces the figures of every dimension whose link has that name.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "../topology/link_registry.hpp"
#include "../topology/runtime.hpp"

#include <cstdio>
#include <fstream>
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

MDRING_NAMESPACE_BEGIN

struct profile_point {
  std::string link;
  std::size_t dim = 0;
  std::size_t bytes = 0;
  double seconds = 0;  // one ring step: a message of `bytes` to the next rank, one from the previous
  friend bool operator==(const profile_point&, const profile_point&) = default;
};

struct profile {
  std::string topology;  // the executed topology it was measured on
  std::size_t ranks = 0;
  std::vector<link_info> links;       // what the cost model plans with, by name
  std::vector<profile_point> points;  // what was measured

  const link_info* find(std::string_view name) const {
    for (auto& l : links)
      if (l.name == name) return &l;
    return nullptr;
  }

  // Gives every dimension whose link is named here the profile's figures: its
  // measured points as the link's curve (link_curve: the smallest message's time
  // is the latency, the rest what each message keeps the link busy), else the
  // fitted bandwidth, latency and overhead.
  void apply(runtime_topology& t) const {
    for (std::size_t d = 0; d < t.ndims(); ++d)
      if (const link_info* l = find(t.dim(d).link.name)) t.dim(d).link = with_curve(*l);
  }
  // Dimensions of one link (a ring split in two) each have their points: at the
  // same size they are averaged.
  link_info with_curve(link_info l) const {
    std::vector<std::pair<double, double>> pts;  // (bytes, seconds), one per size
    std::vector<std::size_t> n;
    for (auto& p : points) {
      if (p.link != l.name) continue;
      std::size_t i = 0;
      while (i < pts.size() && pts[i].first != double(p.bytes)) ++i;
      if (i == pts.size()) pts.push_back({double(p.bytes), 0.0}), n.push_back(0);
      pts[i].second += p.seconds, ++n[i];
    }
    for (std::size_t i = 0; i < pts.size(); ++i) pts[i].second /= double(n[i]);
    std::sort(pts.begin(), pts.end());
    if (pts.size() < 2 || pts.size() > link_curve::max_points) return l;
    l.latency = pts[0].second;
    l.overhead = 0;
    l.curve.points = pts.size();
    for (std::size_t i = 0; i < pts.size(); ++i) {
      l.curve.bytes[i] = pts[i].first;
      l.curve.seconds[i] = pts[i].second - l.latency > 0 ? pts[i].second - l.latency : 0;
    }
    return l;
  }

  std::string to_string() const {
    std::string s = "mdring-profile 1\n";
    if (!topology.empty()) s += "topology " + topology + "\n";
    if (ranks) s += "ranks " + std::to_string(ranks) + "\n";
    char buf[256];
    for (auto& l : links) {
      std::snprintf(buf, sizeof buf, "link %s=%.17g,%.17g,%s,%s,ports=%zu,overhead=%.17g\n", l.name.c_str(),
                    l.bandwidth, l.latency, l.fully_connected ? "full" : "ring",
                    l.space == memory_space::device ? "device" : "host", l.ports, l.overhead);
      s += buf;
    }
    for (auto& p : points) {
      std::snprintf(buf, sizeof buf, "point %s %zu %zu %.17g\n", p.link.c_str(), p.dim, p.bytes, p.seconds);
      s += buf;
    }
    return s;
  }

  // Reads a profile's text; `source` names it in errors (a file name).
  // Throws invalid_argument("profile") naming the line and what is wrong.
  static profile parse(std::string_view text, const std::string& source = "profile") {
    profile pr;
    std::istringstream in{std::string(text)};
    std::string line;
    std::size_t no = 0;
    bool header = false;
    auto fail = [&](const std::string& why) {
      return invalid_argument("profile", "mdring::profile: " + source + ", line " + std::to_string(no) + ": " + why);
    };
    while (std::getline(in, line)) {
      ++no;
      if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
      std::istringstream ls(line);
      std::string key;
      if (!(ls >> key)) continue;
      if (!header) {
        std::string version;
        if (key != "mdring-profile" || !(ls >> version) || version != "1")
          throw fail("expected \"mdring-profile 1\" first (is this a profile written by mdring::calibrate?)");
        header = true;
      } else if (key == "topology") {
        std::getline(ls >> std::ws, pr.topology);
      } else if (key == "ranks") {
        if (!(ls >> pr.ranks)) throw fail("ranks takes a number");
      } else if (key == "link") {
        std::string t;
        ls >> t;
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
        if (!(ls >> p.link >> p.dim >> p.bytes >> p.seconds)) throw fail("point takes LINK DIM BYTES SECONDS");
        pr.points.push_back(p);
      } else {
        throw fail("unknown line \"" + key + "\"");
      }
    }
    if (!header) throw fail("empty: expected \"mdring-profile 1\"");
    return pr;
  }

  void save(const std::string& path) const {
    std::ofstream f(path);
    f << to_string();
    if (!f.good()) throw invalid_argument("path", "mdring::profile::save: cannot write \"" + path + "\"");
  }

  static profile load(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw invalid_argument("profile", "mdring::profile::load: cannot read \"" + path + "\"");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse(ss.str(), "\"" + path + "\"");
  }

  friend bool operator==(const profile&, const profile&) = default;
};

MDRING_NAMESPACE_END
