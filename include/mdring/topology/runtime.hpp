// mdring/topology/runtime.hpp: topologies known only at run time.
//
//   auto t = mdring::parse_topology("nvlink:4 x infiniband:*");   // from a flag or env var
//   auto r = t.resolve(256);          // the dynamic extent becomes 64
//   r.size() == 256; r.extent(1) == 64; r.coordinates(5) == {1, 1}
//
// Grammar (white space anywhere between tokens):
//   topology  := dimension (separator dimension)*
//   separator := 'x' | 'X' | '*'
//   dimension := link-name ':' (positive integer | '*')
//
// Link names are the built-in tags (nvlink, pcie, infiniband, ethernet, shm) and
// any tag registered with register_link<L>(). A runtime_topology is also what every
// compile-time topology turns into when it is bound (describe()), and its per-
// dimension link_info is where bandwidth and latency can be overridden.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "coordinates.hpp"
#include "link.hpp"
#include "link_registry.hpp"
#include "ring.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// A topology known at run time: a list of dimensions, each a link and an extent (dynamic_extent until resolved).
class runtime_topology {
public:
  /// One dimension: its link and its extent.
  struct dimension {
    link_info link;          ///< the link's figures
    std::size_t extent = 1;  ///< dynamic_extent until resolved
    friend bool operator==(const dimension&, const dimension&) = default;
  };

  runtime_topology() = default;
  /// The topology of these dimensions (checked: throws topology_error).
  explicit runtime_topology(std::vector<dimension> dims) : dims_(std::move(dims)) { validate(); }

  std::size_t ndims() const noexcept { return dims_.size(); }  ///< the number of dimensions
  /// Dimension d (std::out_of_range past the last).
  ///@{
  const dimension& dim(std::size_t d) const { return dims_.at(d); }
  dimension& dim(std::size_t d) { return dims_.at(d); }
  ///@}
  const std::vector<dimension>& dims() const noexcept { return dims_; }  ///< every dimension
  /// Dimension d's extent (dynamic_extent until resolved).
  std::size_t extent(std::size_t d) const { return dims_.at(d).extent; }

  /// The extents of every dimension.
  std::vector<std::size_t> extents() const {
    std::vector<std::size_t> e;
    for (auto& d : dims_) e.push_back(d.extent);
    return e;
  }

  /// True when no extent is dynamic.
  bool is_static() const noexcept {
    return std::none_of(dims_.begin(), dims_.end(), [](const dimension& d) { return d.extent == dynamic_extent; });
  }

  /// The product of the extents that are not dynamic.
  std::size_t static_size() const noexcept {
    std::size_t s = 1;
    for (auto& d : dims_)
      if (d.extent != dynamic_extent) s *= d.extent;
    return s;
  }

  /// The number of ranks, or dynamic_extent while a dimension is dynamic.
  std::size_t size() const noexcept { return is_static() ? static_size() : dynamic_extent; }

  /// The same topology with the dynamic extent fixed so that size() == world_size.
  /// Throws topology_error when world_size does not fit.
  /// `caller` names the function in the message ("bind" when bind() resolves).
  MDRING_COLD runtime_topology resolve(std::size_t world_size, const char* caller = "resolve") const {
    const std::string fn = std::string("mdring::") + caller + ": ";
    runtime_topology r = *this;
    const std::size_t fixed = static_size();
    if (is_static()) {
      if (fixed != world_size)
        throw topology_error("topology", fn + "topology \"" + to_string() + "\" has " + std::to_string(fixed) +
                                             " ranks but the communicator has " + std::to_string(world_size));
      return r;
    }
    if (world_size == 0 || world_size % fixed != 0)
      throw topology_error("topology", fn + "the communicator's size " + std::to_string(world_size) +
                                           " is not a multiple of " + std::to_string(fixed) +
                                           ", the product of the static extents of \"" + to_string() + "\"");
    for (auto& d : r.dims_)
      if (d.extent == dynamic_extent) d.extent = world_size / fixed;
    return r;
  }

  /// Coordinates of a rank (dimension 0 fastest). Requires a resolved topology.
  std::vector<std::size_t> coordinates(std::size_t rank) const {
    require_static("coordinates");
    auto e = extents();
    std::vector<std::size_t> c(e.size());
    to_coordinates(rank, e, c);
    return c;
  }

  /// The rank at these coordinates (dimension 0 fastest). Requires a resolved topology.
  std::size_t rank_of(const std::vector<std::size_t>& coords) const {
    require_static("rank_of");
    auto e = extents();
    return to_rank(coords, e);
  }

  /// The rank at coordinate j of rank's ring in dimension d. Requires a resolved topology.
  std::size_t peer(std::size_t rank, std::size_t d, std::size_t j) const {
    require_static("peer");
    auto e = extents();
    return peer_of(rank, d, j, e);
  }

  /// The ranks of rank's ring in dimension d, ordered by coordinate d.
  std::vector<std::size_t> peers(std::size_t rank, std::size_t d) const {
    std::vector<std::size_t> p;
    for (std::size_t j = 0; j < extent(d); ++j) p.push_back(peer(rank, d, j));
    return p;
  }

  /// How many ranks use dimension d's ports at once: a link with ports is a node's
  /// NIC, and every rank of the node runs its own ring of dimension d through it. The
  /// ranks of a node are those that differ only in dimensions whose links have no
  /// ports (links inside a node), so this is the product of those extents (a dynamic
  /// one counts as 1). 1 for a dimension whose link has no ports.
  /// Example: "nvlink:4 x infiniband:64": 4 ranks share each node's InfiniBand port.
  std::size_t port_sharers(std::size_t d) const {
    if (dims_.at(d).link.ports == 0) return 1;
    std::size_t n = 1;
    for (auto& e : dims_)
      if (e.link.ports == 0 && e.extent != dynamic_extent) n *= e.extent;
    return n;
  }

  /// Dimension d's link as one rank sees it: the bandwidth is the rank's own, its
  /// share of the node's ports (bandwidth * min(1, ports / port_sharers(d))).
  link_info rank_link(std::size_t d) const {
    link_info l = dims_.at(d).link;
    const std::size_t n = port_sharers(d);
    // (A measured curve already is one rank's share: it was measured with all sending.)
    if (l.ports && n > l.ports) l.bandwidth = l.bandwidth * double(l.ports) / double(n);
    return l;
  }

  /// The topology as text: "nvlink:4 x infiniband:64" ("*" for a dynamic extent).
  MDRING_COLD std::string to_string() const {
    std::string s;
    for (auto& d : dims_) {
      if (!s.empty()) s += " x ";
      s += d.link.name + ":" + (d.extent == dynamic_extent ? std::string("*") : std::to_string(d.extent));
    }
    return s;
  }

  friend bool operator==(const runtime_topology&, const runtime_topology&) = default;

private:
  void validate() const {
    if (dims_.empty())
      throw topology_error("topology", "mdring::runtime_topology: a topology needs at least one dimension");
    std::size_t dyn = 0;
    for (auto& d : dims_) {
      if (d.extent == 0)
        throw topology_error("topology", "mdring::runtime_topology: extent 0 in \"" + to_string() +
                                             "\"; every extent must be at least 1");
      dyn += d.extent == dynamic_extent;
    }
    if (dyn > 1)
      throw topology_error("topology",
                           "mdring::runtime_topology: \"" + to_string() + "\" has more than one dynamic extent '*'");
  }

  void require_static(const char* fn) const {
    if (!is_static())
      throw topology_error("topology", std::string("mdring::runtime_topology::") + fn + ": \"" + to_string() +
                                           "\" has a dynamic extent; resolve() it first");
  }

  std::vector<dimension> dims_;
};

/// The run-time description of a compile-time topology.
template <static_topology T>
runtime_topology describe(const T&) {
  std::vector<runtime_topology::dimension> dims;
  [&]<class... R>(detail::type_list<R...>) {
    (dims.push_back({link_info_of<typename R::link_type>(), R::extent_v}), ...);
  }(typename T::rings{});
  return runtime_topology(std::move(dims));
}

/// A run-time topology describes itself.
inline const runtime_topology& describe(const runtime_topology& t) { return t; }

/// Parses "nvlink:4 x infiniband:64" or "shm:2 x shm:*". Throws topology_error
/// (argument "topology") that quotes the string and points at the bad position.
MDRING_COLD inline runtime_topology parse_topology(std::string_view text) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  auto fail = [&](std::size_t pos, const std::string& why) -> topology_error {
    return topology_error("topology", "mdring::parse_topology: " + quoted + " at position " + std::to_string(pos) +
                                          ": " + why + " (expected e.g. \"nvlink:4 x infiniband:*\")");
  };
  std::size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  std::vector<runtime_topology::dimension> dims;
  std::size_t dynamic_at = std::string_view::npos;
  skip();
  if (i == text.size()) throw fail(i, "the topology is empty");
  for (;;) {
    skip();
    const std::size_t name_pos = i;
    while (i < text.size() && detail::is_link_name_char(text[i])) ++i;
    std::string_view name = text.substr(name_pos, i - name_pos);
    if (name.empty()) throw fail(name_pos, "expected a link name");
    auto info = find_link(name);
    if (!info) {
      std::string known;
      for (auto& n : known_links()) known += (known.empty() ? "" : ", ") + n;
      throw fail(name_pos, "unknown link \"" + std::string(name) + "\" (known: " + known + ")");
    }
    skip();
    if (i == text.size() || text[i] != ':') throw fail(i, "expected ':' after link \"" + std::string(name) + "\"");
    ++i;
    skip();
    const std::size_t extent_pos = i;
    std::size_t extent = 0;
    if (i < text.size() && text[i] == '*') {
      if (dynamic_at != std::string_view::npos)
        throw fail(i, "a second dynamic extent '*' (the first is at position " + std::to_string(dynamic_at) +
                          "); at most one is allowed");
      dynamic_at = i;
      extent = dynamic_extent;
      ++i;
    } else {
      if (i == text.size() || !std::isdigit(static_cast<unsigned char>(text[i])))
        throw fail(i, "expected an extent (a positive integer or '*')");
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
        if (extent > (std::size_t(1) << 40)) throw fail(extent_pos, "extent too large");
        extent = extent * 10 + std::size_t(text[i] - '0');
        ++i;
      }
      if (extent == 0) throw fail(extent_pos, "extent 0; every extent must be at least 1");
    }
    dims.push_back({*info, extent});
    skip();
    if (i == text.size()) break;
    if (text[i] == 'x' || text[i] == 'X' || text[i] == '*') {
      ++i;
      skip();
      if (i == text.size()) throw fail(i, "expected a dimension after the separator");
      continue;
    }
    throw fail(i, std::string("unexpected character '") + text[i] + "'; expected 'x' between dimensions");
  }
  std::size_t product = 1;
  for (auto& d : dims)
    if (d.extent != dynamic_extent) {
      if (product > (std::size_t(1) << 40) / d.extent) throw fail(0, "too many ranks");
      product *= d.extent;
    }
  return runtime_topology(std::move(dims));
}

MDRING_NAMESPACE_END
