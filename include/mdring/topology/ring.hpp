// mdring/topology/ring.hpp: compile-time topologies.
//
//   constexpr auto topo = mdring::ring<mdring::nvlink, 4> * mdring::ring<mdring::infiniband, 64>;
//   static_assert(decltype(topo)::size() == 256);
//   static_assert(decltype(topo)::ndims() == 2 && decltype(topo)::extent(1) == 64);
//
// ring_t<Link, N> is one dimension: N ranks joined by Link. It is also a
// one-dimensional topology. operator* builds topology<ring_t...>, flattening
// products, so (a * b) * c and a * (b * c) are both topology<a, b, c>. Dimension 0
// is the innermost (the fastest-varying coordinate, the first stage of the plan).
//
// One extent per topology may be dynamic_extent (written `ring<shm>` or
// `ring<shm, mdring::dynamic_extent>`): it is the communicator's size divided by
// the product of the others, taken when the topology is bound.
#pragma once

#include "../config.hpp"
#include "coordinates.hpp"
#include "link.hpp"

#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>

MDRING_NAMESPACE_BEGIN

/// The extent of a dimension whose size comes from the communicator (at most one per topology).
inline constexpr std::size_t dynamic_extent = std::numeric_limits<std::size_t>::max();

template <class... Rings>
struct topology;

namespace detail {

template <class Link, std::size_t N>
struct dim_spec {
  using link_type = Link;
  static constexpr std::size_t extent = N;
};

// The static interface shared by ring_t and topology. Specs are dim_spec<L, N>.
template <class... Specs>
struct topology_base {
  static constexpr std::size_t ndims() noexcept { return sizeof...(Specs); }

  static constexpr std::array<std::size_t, sizeof...(Specs)> extents() noexcept { return {Specs::extent...}; }

  // The extent of dimension d (dynamic_extent for the dynamic one).
  static constexpr std::size_t extent(std::size_t d) noexcept { return extents()[d]; }

  static constexpr std::size_t dynamic_count() noexcept { return ((Specs::extent == dynamic_extent ? 1u : 0u) + ...); }

  static constexpr bool is_static() noexcept { return dynamic_count() == 0; }

  // The index of the dynamic dimension, or ndims() when there is none.
  static constexpr std::size_t dynamic_index() noexcept {
    std::size_t d = 0;
    for (auto e : extents()) {
      if (e == dynamic_extent) return d;
      ++d;
    }
    return ndims();
  }

  // The product of the static extents.
  static constexpr std::size_t static_size() noexcept {
    std::size_t s = 1;
    for (auto e : extents())
      if (e != dynamic_extent) s *= e;
    return s;
  }

  // The number of ranks, or dynamic_extent when one extent is dynamic.
  static constexpr std::size_t size() noexcept { return is_static() ? static_size() : dynamic_extent; }

  // Coordinates of a rank; only for static topologies (bind or resolve() a
  // dynamic one first). Example, ring<shm,2> * ring<shm,3>: coordinates(3) == {1, 1}.
  static constexpr std::array<std::size_t, sizeof...(Specs)> coordinates(std::size_t rank) noexcept
    requires(sizeof...(Specs) > 0)
  {
    static_assert(is_static(),
                  "mdring::topology::coordinates: the topology has a dynamic extent; resolve() it "
                  "with the communicator's size first");
    constexpr auto ext = extents();
    std::array<std::size_t, sizeof...(Specs)> c{};
    to_coordinates(rank, ext, c);
    return c;
  }

  static constexpr std::size_t rank_of(const std::array<std::size_t, sizeof...(Specs)>& c) noexcept {
    static_assert(is_static(),
                  "mdring::topology::rank_of: the topology has a dynamic extent; resolve() it "
                  "with the communicator's size first");
    constexpr auto ext = extents();
    return to_rank(c, ext);
  }

  // The rank whose coordinates equal rank's except in dimension d, where it is j.
  static constexpr std::size_t peer(std::size_t rank, std::size_t d, std::size_t j) noexcept {
    static_assert(is_static(),
                  "mdring::topology::peer: the topology has a dynamic extent; resolve() it "
                  "with the communicator's size first");
    constexpr auto ext = extents();
    return peer_of(rank, d, j, ext);
  }
};

template <class T>
struct is_ring : std::false_type {};
template <class T>
struct is_topology_type : std::false_type {};

template <class... Ts>
struct type_list {};

}  // namespace detail

/// One dimension of N ranks joined by Link.
template <class Link, std::size_t N>
struct ring_t : detail::topology_base<detail::dim_spec<Link, N>> {
  static_assert(link<Link>,
                "mdring::ring: the link tag has no complete mdring::link_traits<Link> specialization "
                "(it needs name, bandwidth, latency, fully_connected and space)");
  static_assert(N >= 1, "mdring::ring: the extent must be at least 1, or mdring::dynamic_extent");
  using link_type = Link;                     ///< the link tag
  static constexpr std::size_t extent_v = N;  ///< the number of ranks (or dynamic_extent)
  using rings = detail::type_list<ring_t>;    ///< this ring, as a list of one
};

/// `ring<nvlink, 4>`: the value users multiply. `ring<shm>` has a dynamic extent.
template <class Link, std::size_t N = dynamic_extent>
inline constexpr ring_t<Link, N> ring{};

namespace detail {
template <class L, std::size_t N>
struct is_ring<ring_t<L, N>> : std::true_type {};
}  // namespace detail

/// The product of rings, dimension 0 first.
template <class... Rings>
struct topology : detail::topology_base<detail::dim_spec<typename Rings::link_type, Rings::extent_v>...> {
  static_assert(sizeof...(Rings) >= 1, "mdring::topology: a topology needs at least one ring");
  static_assert((detail::is_ring<Rings>::value && ...),
                "mdring::topology: every parameter must be a mdring::ring_t<Link, N>");
  static_assert(((Rings::extent_v == dynamic_extent ? 1 : 0) + ... + 0) <= 1,
                "mdring::topology: at most one dimension may have dynamic_extent (it is the "
                "communicator's size divided by the product of the others)");
  using rings = detail::type_list<Rings...>;  ///< the rings, dimension 0 first

  /// The ring of dimension D.
  template <std::size_t D>
  using ring_type = std::tuple_element_t<D, std::tuple<Rings...>>;
};

namespace detail {
template <class... R>
struct is_topology_type<topology<R...>> : std::true_type {};

template <class A, class B>
struct concat;
template <class... A, class... B>
struct concat<type_list<A...>, type_list<B...>> {
  using type = topology<A..., B...>;
};
}  // namespace detail

/// A compile-time topology: a ring_t or a topology<...>.
template <class T>
concept static_topology =
    detail::is_ring<std::remove_cv_t<T>>::value || detail::is_topology_type<std::remove_cv_t<T>>::value;

/// The product: flattens, so it is associative, and keeps dimension order.
///   ring<nvlink,4> * ring<infiniband,64>  ->  topology<ring_t<nvlink,4>, ring_t<infiniband,64>>
template <static_topology A, static_topology B>
constexpr auto operator*(const A&, const B&) noexcept {
  static_assert(A::dynamic_count() + B::dynamic_count() <= 1,
                "mdring::operator*: at most one dimension of a topology may have dynamic_extent");
  return typename detail::concat<typename A::rings, typename B::rings>::type{};
}

/// Every compile-time topology as a topology<...> (ring_t<L,N> becomes topology<ring_t<L,N>>).
template <static_topology T>
using as_topology_t = typename detail::concat<detail::type_list<>, typename T::rings>::type;

/// Two compile-time topologies are equal when they have the same rings in the same order.
template <static_topology A, static_topology B>
constexpr bool operator==(const A&, const B&) noexcept {
  return std::is_same_v<as_topology_t<A>, as_topology_t<B>>;
}

/// "nvlink:4 x infiniband:64"; a dynamic extent prints as "*".
template <static_topology T>
std::string to_string(const T&) {
  std::string s;
  auto add = [&]<class L, std::size_t N>(ring_t<L, N>) {
    if (!s.empty()) s += " x ";
    s += link_traits<L>::name;
    s += ':';
    s += N == dynamic_extent ? std::string("*") : std::to_string(N);
  };
  [&]<class... R>(detail::type_list<R...>) { (add(R{}), ...); }(typename T::rings{});
  return s;
}

MDRING_NAMESPACE_END
