// mdring/topology/link_registry.hpp: the links the parser knows, and their figures
// as text.
//
//   mdring::register_link<my_link>();                        // a tag's traits
//   mdring::register_link(mdring::parse_link("infiniband=25e9,2e-6,ports=2"));
//   MDRING_LINKS="infiniband=25e9,2e-6,ports=2;ethernet=3.125e9,20e-6" ./app
//
// parse_topology (runtime.hpp) looks names up here.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "link.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {
// The characters of a link name, for the parser and register_link alike.
inline bool is_link_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

// parse_link (below) with `known(name)` giving the figures of a known link.
template <class Lookup>
MDRING_COLD link_info parse_link_with(std::string_view text, Lookup&& known) {
  auto fail = [&](const std::string& why) {
    return invalid_argument("link", "mdring::parse_link: \"" + std::string(text) + "\": " + why +
                                        " (expected NAME=BANDWIDTH,LATENCY[,full|ring][,host|device]"
                                        "[,ports=N][,overhead=SECONDS])");
  };
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) throw fail("no NAME= in front");
  const std::string name(text.substr(0, eq));
  if (!std::all_of(name.begin(), name.end(), is_link_name_char))
    throw fail("the name may hold only letters, digits, '_', '-' and '.'");
  link_info l;
  l.name = name;
  if (std::optional<link_info> k = known(name)) l = *k;
  std::vector<std::string> f;
  for (std::size_t pos = eq + 1; pos <= text.size();) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    f.emplace_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  auto number = [&](const std::string& v, const char* what) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x >= 0) || x == HUGE_VAL)
      throw fail(std::string(what) + " \"" + v + "\" is not a number >= 0");
    return x;
  };
  if (f.size() < 2) throw fail("needs a bandwidth and a latency");
  l.bandwidth = number(f[0], "the bandwidth");
  if (!(l.bandwidth > 0)) throw fail("the bandwidth must be above 0");
  l.latency = number(f[1], "the latency");
  for (std::size_t i = 2; i < f.size(); ++i) {
    const std::string& a = f[i];
    if (a == "full") l.fully_connected = true;
    else if (a == "ring") l.fully_connected = false;
    else if (a == "device") l.space = memory_space::device;
    else if (a == "host") l.space = memory_space::host;
    else if (a.rfind("ports=", 0) == 0) {
      const double n = number(a.substr(6), "ports");
      if (n > 1e6 || n != std::floor(n)) throw fail("ports \"" + a.substr(6) + "\" is not a whole number up to 10^6");
      l.ports = std::size_t(n);
    } else if (a.rfind("overhead=", 0) == 0) l.overhead = number(a.substr(9), "the overhead");
    else throw fail("unknown field \"" + a + "\"");
  }
  return l;
}

struct link_registry {
  std::mutex mutex;
  std::map<std::string, link_info, std::less<>> links;
  link_registry() {
    for (auto& l : builtin_links()) links.emplace(l.name, l);
    if (const char* env = std::getenv("MDRING_LINKS")) add_from(env);
  }
  // MDRING_LINKS: parse_link texts separated by ';', applied in order.
  MDRING_COLD void add_from(std::string_view list) {
    auto known = [this](std::string_view n) -> std::optional<link_info> {
      auto it = links.find(n);
      return it == links.end() ? std::nullopt : std::optional<link_info>(it->second);
    };
    for (std::size_t pos = 0; pos <= list.size();) {
      const std::size_t end = std::min(list.find(';', pos), list.size());
      std::string_view one = list.substr(pos, end - pos);
      pos = end + 1;
      const std::size_t first = one.find_first_not_of(" \t");
      if (first == std::string_view::npos) continue;
      one = one.substr(first, one.find_last_not_of(" \t") - first + 1);  // texts may be spaced out
      try {
        link_info l = parse_link_with(one, known);
        links.insert_or_assign(l.name, l);
      } catch (const invalid_argument& e) {
        throw invalid_argument("MDRING_LINKS", std::string("MDRING_LINKS: ") + e.what());
      }
    }
  }
  static link_registry& instance() {
    static link_registry r;
    return r;
  }
};
}  // namespace detail

/// Makes `info.name` known to parse_topology (or replaces its traits).
inline void register_link(const link_info& info) {
  if (info.name.empty() || !std::all_of(info.name.begin(), info.name.end(), detail::is_link_name_char))
    throw invalid_argument("info", "mdring::register_link: link name \"" + info.name +
                                       "\" must be non-empty and made of letters, digits, '_', '-' and '.' "
                                       "(what parse_topology reads as a name)");
  if (!(info.bandwidth > 0) || !(info.latency >= 0) || !(info.overhead >= 0))
    throw invalid_argument("info", "mdring::register_link: link \"" + info.name +
                                       "\" needs bandwidth > 0, latency >= 0 and overhead >= 0");
  auto& r = detail::link_registry::instance();
  std::lock_guard lock(r.mutex);
  r.links.insert_or_assign(info.name, info);
}

/// Registers link tag L's figures under its name.
template <link L>
void register_link() {
  register_link(link_info_of<L>());
}

/// The figures registered under `name` (built in or registered), or std::nullopt.
inline std::optional<link_info> find_link(std::string_view name) {
  auto& r = detail::link_registry::instance();
  std::lock_guard lock(r.mutex);
  auto it = r.links.find(name);
  if (it == r.links.end()) return std::nullopt;
  return it->second;
}

/// Reads a link's figures from text, for flags and environment variables:
///   NAME=BANDWIDTH,LATENCY[,full|ring][,host|device][,ports=N][,overhead=SECONDS]
/// bytes per second (per rank, or per port with ports=N) and seconds per message,
/// e.g. "infiniband=25e9,1.5e-6,ports=2" (two 25 GB/s ports per node). What the text
/// leaves out comes from the link of that name when it is known (built in or
/// registered), else: ring, host memory, no ports, no overhead. The result is for
/// register_link. Throws invalid_argument("link") naming what is wrong.
/// The environment variable MDRING_LINKS holds such texts separated by ';'; they are
/// registered before the first parse_topology, so a launcher can change the figures
/// of a program it does not build (MDRING_LINKS="infiniband=25e9,2e-6,ports=2").
inline link_info parse_link(std::string_view text) {
  return detail::parse_link_with(text, [](std::string_view n) { return find_link(n); });
}

/// The names of every link known (built in or registered).
inline std::vector<std::string> known_links() {
  auto& r = detail::link_registry::instance();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (auto& [name, info] : r.links) names.push_back(name);
  return names;
}

MDRING_NAMESPACE_END
