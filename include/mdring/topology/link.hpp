// mdring/topology/link.hpp: link tags and their traits.
//
// A link tag is an empty type naming the kind of wire between the ranks of one
// dimension. Its link_traits specialization says what the cost model and the
// transport selection need to know:
//
//   template <> struct mdring::link_traits<my_link> {
//     static constexpr std::string_view name = "my_link";   // used by the parser
//     static constexpr double bandwidth = 25e9;   // bytes per second, per rank and direction
//     static constexpr double latency = 2e-6;     // seconds per message
//     static constexpr bool fully_connected = true;  // every pair has its own path
//     static constexpr mdring::memory_space space = mdring::memory_space::host;
//     // Optional (0 when left out):
//     static constexpr unsigned ports = 1;        // bandwidth is per port, a node has this many
//     static constexpr double overhead = 1e-6;    // seconds per message the link is busy
//   };
//
// ports: links between nodes (a NIC) are shared by the node's ranks. With ports = N
// > 0, `bandwidth` is what one port carries, and the ranks of the node that use the
// link at once (the ranks of the dimensions inside it whose links have no ports:
// NVLink, PCIe, shm) share its N ports: each gets bandwidth * min(1, N / sharers).
// ports = 0: `bandwidth` is each rank's own (links inside a node).
//
// overhead (LogGP's o, or gap): the time a message keeps the sender and its link
// busy besides its bytes. Unlike the latency it does not overlap with the messages
// of other segments in flight, so it is what makes many small messages cost more
// than a few large ones: a message of m bytes moves at the efficiency
// m / (m + overhead * bandwidth) of the link's bandwidth (half at overhead *
// bandwidth bytes). The plan picks segment sizes with it (plan/pipeline.hpp).
//
// The values of the built-in tags are typical figures, not measurements of your
// machine: override them at run time through runtime_topology::dimension::link
// (or with register_link for the parser) when you know better.
#pragma once

#include "../config.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

MDRING_NAMESPACE_BEGIN

/// Where the buffers of a dimension live: the transport is chosen from this.
enum class memory_space { host, device };

/// "host" or "device".
constexpr std::string_view to_string(memory_space s) noexcept { return s == memory_space::host ? "host" : "device"; }

// Primary template: deliberately undefined. A link tag is usable once it has a
// specialization with the five members shown above.
template <class Link>
struct link_traits;

/// GPU-to-GPU inside a node, through NVLink/NVSwitch (all pairs connected).
struct nvlink {};
/// GPU-to-GPU through the PCIe tree (shared upstream links, so a ring fits best).
struct pcie {};
/// Node-to-node over InfiniBand (one uplink per node, shared by its ranks).
struct infiniband {};
/// Node-to-node over Ethernet (one uplink per node, shared by its ranks).
struct ethernet {};
/// Ranks on one node sharing host memory.
struct shm {};

/// nvlink's figures.
template <>
struct link_traits<nvlink> {
  /// The link's figures: its name in topology strings, bandwidth (bytes per second), latency (seconds per message),
  /// whether all pairs are connected, where its buffers live.
  ///@{
  static constexpr std::string_view name = "nvlink";
  static constexpr double bandwidth = 150e9;
  static constexpr double latency = 2e-6;
  static constexpr bool fully_connected = true;
  static constexpr memory_space space = memory_space::device;
  ///@}
};

/// pcie's figures.
template <>
struct link_traits<pcie> {
  /// The link's figures: its name in topology strings, bandwidth (bytes per second), latency (seconds per message),
  /// whether all pairs are connected, where its buffers live.
  ///@{
  static constexpr std::string_view name = "pcie";
  static constexpr double bandwidth = 24e9;
  static constexpr double latency = 5e-6;
  static constexpr bool fully_connected = false;
  static constexpr memory_space space = memory_space::device;
  ///@}
};

/// infiniband's figures.
template <>
struct link_traits<infiniband> {
  /// The link's figures: its name in topology strings, bandwidth, latency (seconds per message), whether all pairs are
  /// connected, where its buffers live, ports per node, seconds per message that the link is busy.
  ///@{
  static constexpr std::string_view name = "infiniband";
  static constexpr double bandwidth = 12.5e9;  ///< HDR100, 100 Gb/s per port
  static constexpr double latency = 2e-6;
  static constexpr bool fully_connected = false;
  static constexpr memory_space space = memory_space::host;
  static constexpr unsigned ports = 1;
  static constexpr double overhead = 2e-6;
  ///@}
};

/// ethernet's figures.
template <>
struct link_traits<ethernet> {
  /// The link's figures: its name in topology strings, bandwidth, latency (seconds per message), whether all pairs are
  /// connected, where its buffers live, ports per node, seconds per message that the link is busy.
  ///@{
  static constexpr std::string_view name = "ethernet";
  static constexpr double bandwidth = 1.25e9;  ///< 10 Gb/s per port
  static constexpr double latency = 25e-6;
  static constexpr bool fully_connected = false;
  static constexpr memory_space space = memory_space::host;
  static constexpr unsigned ports = 1;
  static constexpr double overhead = 20e-6;
  ///@}
};

/// shm's figures.
template <>
struct link_traits<shm> {
  /// The link's figures: its name in topology strings, bandwidth (bytes per second), latency (seconds per message),
  /// whether all pairs are connected, where its buffers live.
  ///@{
  static constexpr std::string_view name = "shm";
  static constexpr double bandwidth = 8e9;
  static constexpr double latency = 1e-6;
  static constexpr bool fully_connected = true;
  static constexpr memory_space space = memory_space::host;
  ///@}
};

/// A type is a link tag when link_traits<L> is complete and has the five members
/// with the right types.
template <class L>
concept link = requires {
  { link_traits<L>::name } -> std::convertible_to<std::string_view>;
  { link_traits<L>::bandwidth } -> std::convertible_to<double>;
  { link_traits<L>::latency } -> std::convertible_to<double>;
  { link_traits<L>::fully_connected } -> std::convertible_to<bool>;
  { link_traits<L>::space } -> std::convertible_to<memory_space>;
};

static_assert(link<nvlink> && link<pcie> && link<infiniband> && link<ethernet> && link<shm>);

/// A link's measured message times (mdring::calibrate, plan/profile.hpp), measured
/// with every rank of the plan sending at once (so port sharing is in them): at
/// each size, the seconds one rank's message keeps the link busy (`seconds`: what
/// other messages in flight wait for) and its latency (`latency`: what they overlap
/// with). Busy time is piecewise linear between the points and extrapolated with
/// the last segment's slope; latency is piecewise linear between the points and
/// flat beyond them. Where it has points the cost model uses them instead of
/// overhead + b / bandwidth and the link's one latency: real networks are not
/// linear in the message size (protocol switches, SimGrid's size-dependent
/// factors), and a fit of two figures to them is off by several times at some sizes.
struct link_curve {
  static constexpr std::size_t max_points = 8;  ///< the most points a curve holds
  /// Per point: message bytes (ascending), busy seconds, latency.
  ///@{
  std::array<double, max_points> bytes{}, seconds{}, latency{};  ///< bytes ascending
  ///@}
  std::size_t points = 0;  ///< points in use (0: no curve)

  /// The busy seconds of a message of `b` bytes, interpolated (0 without points).
  double at(double b) const noexcept {
    if (points == 0) return 0;
    if (points == 1 || b <= bytes[0]) return points == 1 ? seconds[0] * (bytes[0] > 0 ? b / bytes[0] : 1) : seconds[0];
    std::size_t i = 1;
    while (i + 1 < points && b > bytes[i]) ++i;
    const double slope = (seconds[i] - seconds[i - 1]) / (bytes[i] - bytes[i - 1]);
    const double t = seconds[i - 1] + (b - bytes[i - 1]) * slope;
    return t > 0 ? t : 0;
  }
  /// The latency of a message of `b` bytes, interpolated (0 without points).
  double latency_at(double b) const noexcept {
    if (points == 0) return 0;
    if (b <= bytes[0]) return latency[0];
    if (b >= bytes[points - 1]) return latency[points - 1];
    std::size_t i = 1;
    while (b > bytes[i]) ++i;
    return latency[i - 1] + (b - bytes[i - 1]) * (latency[i] - latency[i - 1]) / (bytes[i] - bytes[i - 1]);
  }
  friend bool operator==(const link_curve&, const link_curve&) = default;
};

/// The run-time copy of a link's traits. The plan and the cost model read only
/// this, so a user can override the figures without new types (parse_link reads
/// them from text: topology/runtime.hpp).
struct link_info {
  std::string name;                         ///< as topology strings write it
  double bandwidth = 0;                     ///< bytes per second (per rank, or per port when ports > 0)
  double latency = 0;                       ///< seconds per message
  bool fully_connected = false;             ///< every rank reaches every other directly
  memory_space space = memory_space::host;  ///< where the dimension's buffers live
  std::size_t ports = 0;                    ///< 0: bandwidth is per rank; N: per port, N ports per node
  double overhead = 0;                      ///< seconds per message that the link is busy
  link_curve curve{};                       ///< measured (calibrate): replaces overhead and bandwidth in the cost model

  /// Seconds a message of `bytes` keeps the link busy besides its latency.
  double busy_seconds(double bytes) const noexcept {
    if (curve.points) return curve.at(bytes);
    return overhead + (bandwidth > 0 ? bytes / bandwidth : 0.0);
  }
  /// The latency of a message of `bytes` (the link's one latency without a curve).
  double latency_seconds(double bytes) const noexcept { return curve.points ? curve.latency_at(bytes) : latency; }
  /// The same link without latencies: the time it is busy (plan/pipeline.hpp).
  link_info busy_only() const {
    link_info l = *this;
    l.latency = 0;
    l.curve.latency.fill(0);
    return l;
  }

  friend bool operator==(const link_info&, const link_info&) = default;
};

/// The link_info of a link tag, from its link_traits.
template <link L>
link_info link_info_of() {
  using t = link_traits<L>;
  link_info l{std::string(t::name), double(t::bandwidth), double(t::latency), bool(t::fully_connected),
              memory_space(t::space)};
  if constexpr (requires {
                  { t::ports } -> std::convertible_to<std::size_t>;
                })
    l.ports = std::size_t(t::ports);
  if constexpr (requires {
                  { t::overhead } -> std::convertible_to<double>;
                })
    l.overhead = double(t::overhead);
  return l;
}

/// The built-in tags' figures (the link registry starts from them).
inline std::array<link_info, 5> builtin_links() {
  return {link_info_of<nvlink>(), link_info_of<pcie>(), link_info_of<infiniband>(), link_info_of<ethernet>(),
          link_info_of<shm>()};
}

/// Whether l has the figures of one of the built-in tags: typical values, not
/// measurements of the machine (explain() says so).
inline bool builtin_figures(const link_info& l) {
  for (const link_info& b : builtin_links())
    if (l == b) return true;
  return false;
}

MDRING_NAMESPACE_END
