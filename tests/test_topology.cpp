// Tests of mdring/topology: ring<L, N>, the product, coordinates, describe().
//
// The algebra is checked at compile time (one law per static_assert, CuTe style);
// what needs strings or exceptions is checked at run time. User link tags, the link
// registry and the run-time parser: test_topology_text.cpp.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "topology_support.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace m = mdring;

namespace {

struct no_traits {};  // a tag without link_traits

// ---- link concept --------------------------------------------------------------

// every built-in tag models link
static_assert(m::link<m::nvlink>);
static_assert(m::link<m::pcie>);
static_assert(m::link<m::infiniband>);
static_assert(m::link<m::ethernet>);
static_assert(m::link<m::shm>);
// a user tag with a complete link_traits specialization models link
static_assert(m::link<user::upi>);
// a tag without traits does not (and ring<no_traits, N> is a compile error: compile_fail/)
static_assert(!m::link<no_traits>);
static_assert(!m::link<int>);

// ---- ring_t: one dimension -------------------------------------------------------

using shm3 = m::ring_t<m::shm, 3>;
using shm_dyn = m::ring_t<m::shm, m::dynamic_extent>;

// ring<L, N> is a value of type ring_t<L, N>
static_assert(std::is_same_v<std::remove_cv_t<decltype(m::ring<m::shm, 3>)>, shm3>);
// ring<L> defaults to a dynamic extent
static_assert(std::is_same_v<std::remove_cv_t<decltype(m::ring<m::shm>)>, shm_dyn>);
// a ring is a one-dimensional topology
static_assert(shm3::ndims() == 1);
// of size N
static_assert(shm3::size() == 3);
// whose only extent is N
static_assert(shm3::extent(0) == 3);
static_assert(shm3::extents() == std::array<std::size_t, 1>{3});
// and which is static
static_assert(shm3::is_static());
static_assert(shm3::dynamic_count() == 0);
// dynamic_index() is ndims() when no extent is dynamic
static_assert(shm3::dynamic_index() == 1);
// a ring of one rank is allowed
static_assert(m::ring_t<m::shm, 1>::size() == 1);
// the link type is kept
static_assert(std::is_same_v<m::ring_t<m::nvlink, 4>::link_type, m::nvlink>);
static_assert(m::ring_t<m::nvlink, 4>::extent_v == 4);

// a dynamic ring: size() is dynamic_extent until bound
static_assert(shm_dyn::size() == m::dynamic_extent);
static_assert(!shm_dyn::is_static());
static_assert(shm_dyn::dynamic_count() == 1);
static_assert(shm_dyn::dynamic_index() == 0);
// the product of the static extents of a fully dynamic ring is the empty product
static_assert(shm_dyn::static_size() == 1);
static_assert(shm_dyn::extent(0) == m::dynamic_extent);

// both spellings of the dynamic extent are the same type
static_assert(std::is_same_v<std::remove_cv_t<decltype(m::ring<m::shm>)>,
                             std::remove_cv_t<decltype(m::ring<m::shm, m::dynamic_extent>)>>);

// static_topology accepts rings and products, nothing else
static_assert(m::static_topology<shm3>);
static_assert(m::static_topology<const shm3>);
static_assert(m::static_topology<m::topology<shm3>>);
static_assert(!m::static_topology<int>);
static_assert(!m::static_topology<m::runtime_topology>);

// ---- the product -----------------------------------------------------------------

constexpr auto nv4 = m::ring<m::nvlink, 4>;
constexpr auto ib64 = m::ring<m::infiniband, 64>;
constexpr auto topo = nv4 * ib64;

// DESIGN.md's example: 4 GPUs per node times 64 nodes is 256 ranks
static_assert(decltype(topo)::size() == 256);
// two dimensions, innermost first
static_assert(decltype(topo)::ndims() == 2);
static_assert(decltype(topo)::extent(0) == 4);
static_assert(decltype(topo)::extent(1) == 64);
static_assert(decltype(topo)::is_static());
// the product is topology<ring_t...> in the order written
static_assert(std::is_same_v<std::remove_cv_t<decltype(topo)>,
                             m::topology<m::ring_t<m::nvlink, 4>, m::ring_t<m::infiniband, 64>>>);
// ring_type<D> names dimension D's ring
static_assert(std::is_same_v<std::remove_cv_t<decltype(topo)>::ring_type<1>, m::ring_t<m::infiniband, 64>>);

constexpr auto a = m::ring<m::shm, 2>;
constexpr auto b = m::ring<m::pcie, 3>;
constexpr auto c = m::ring<m::ethernet, 5>;
using abc = m::topology<m::ring_t<m::shm, 2>, m::ring_t<m::pcie, 3>, m::ring_t<m::ethernet, 5>>;

// the product flattens: (a * b) * c is topology<a, b, c>
static_assert(std::is_same_v<decltype((a * b) * c), abc>);
// and so is a * (b * c)
static_assert(std::is_same_v<decltype(a * (b * c)), abc>);
// associativity, as types
static_assert(std::is_same_v<decltype((a * b) * c), decltype(a * (b * c))>);
// associativity, through operator==
static_assert((a * b) * c == a * (b * c));
// product of two products flattens too
static_assert(
    std::is_same_v<decltype((a * b) * (c * a)), m::topology<m::ring_t<m::shm, 2>, m::ring_t<m::pcie, 3>,
                                                            m::ring_t<m::ethernet, 5>, m::ring_t<m::shm, 2>>>);
// the product is not commutative: dimension order is the plan's stage order
static_assert(!(a * b == b * a));
// size is multiplicative
static_assert(decltype(a * b * c)::size() == 2 * 3 * 5);
// extents concatenate
static_assert(decltype(a * b * c)::extents() == std::array<std::size_t, 3>{2, 3, 5});
// a ring equals the one-dimensional topology of itself
static_assert(a == m::topology<m::ring_t<m::shm, 2>>{});
static_assert(std::is_same_v<m::as_topology_t<m::ring_t<m::shm, 2>>, m::topology<m::ring_t<m::shm, 2>>>);
// equality sees the link, not only the extent
static_assert(!(m::ring<m::shm, 2> == m::ring<m::nvlink, 2>));
// and the extent, not only the link
static_assert(!(m::ring<m::shm, 2> == m::ring<m::shm, 3>));
// the same ring twice is fine
static_assert(decltype(a * a)::size() == 4);

// one dynamic extent in a product
constexpr auto dyn = m::ring<m::nvlink, 4> * m::ring<m::infiniband>;
static_assert(!decltype(dyn)::is_static());
static_assert(decltype(dyn)::size() == m::dynamic_extent);
static_assert(decltype(dyn)::dynamic_index() == 1);
static_assert(decltype(dyn)::static_size() == 4);
static_assert(decltype(m::ring<m::shm> * m::ring<m::shm, 2>)::dynamic_index() == 0);
static_assert(decltype(m::ring<m::shm, 2> * m::ring<m::shm, 3> * m::ring<m::shm>)::dynamic_index() == 2);

// ---- coordinates (compile time) ----------------------------------------------------

using s23 = m::topology<m::ring_t<m::shm, 2>, m::ring_t<m::shm, 3>>;
// the header's example: extents (2, 3), rank 3 = (1, 1)
static_assert(s23::coordinates(3) == std::array<std::size_t, 2>{1, 1});
// dimension 0 varies fastest
static_assert(s23::coordinates(1) == std::array<std::size_t, 2>{1, 0});
static_assert(s23::coordinates(2) == std::array<std::size_t, 2>{0, 1});
static_assert(s23::coordinates(5) == std::array<std::size_t, 2>{1, 2});
// rank_of is the inverse
static_assert(s23::rank_of({1, 2}) == 5);
static_assert(s23::rank_of({0, 0}) == 0);
// peer(3, 1, 2) == 5: 3 = (1,1) and 5 = (1,2)
static_assert(s23::peer(3, 1, 2) == 5);
// peer in dimension 0 changes the fastest coordinate
static_assert(s23::peer(3, 0, 0) == 2);
// a rank is its own peer at its own coordinate
static_assert(s23::peer(4, 1, 2) == 4);
// a ring: coordinates(r) == {r}
static_assert(shm3::coordinates(2) == std::array<std::size_t, 1>{2});
// DESIGN's example: in 4 x 64, rank 5 = GPU 1 of node 1
static_assert(decltype(topo)::coordinates(5) == std::array<std::size_t, 2>{1, 1});
static_assert(decltype(topo)::coordinates(255) == std::array<std::size_t, 2>{3, 63});

// The round trip over every rank, evaluated by the compiler. With Peers, also every
// peer of every rank (quadratic: kept to small topologies for clang's step limit).
template <class T, bool Peers = true>
consteval bool round_trips() {
  for (std::size_t r = 0; r < T::size(); ++r) {
    const auto cr = T::coordinates(r);
    if (T::rank_of(cr) != r) return false;
    for (std::size_t d = 0; d < T::ndims(); ++d) {
      if (cr[d] >= T::extent(d)) return false;
      // the peer at its own coordinate is itself; any other coordinate changes only dimension d
      if (T::peer(r, d, cr[d]) != r) return false;
      for (std::size_t j = 0; Peers && j < T::extent(d); ++j) {
        auto cp = T::coordinates(T::peer(r, d, j));
        for (std::size_t e = 0; e < T::ndims(); ++e)
          if (cp[e] != (e == d ? j : cr[e])) return false;
      }
    }
  }
  return true;
}
// coordinates and rank_of are inverse on every rank; peer changes only one coordinate
static_assert(round_trips<s23>());
static_assert(round_trips<shm3>());
static_assert(round_trips<abc>());
static_assert(round_trips<std::remove_cv_t<decltype(topo)>, false>());
static_assert(round_trips<m::topology<m::ring_t<m::shm, 1>, m::ring_t<m::shm, 7>, m::ring_t<m::shm, 1>>>());

// ---- free coordinate functions ------------------------------------------------------

constexpr std::array<std::size_t, 3> ext253{2, 5, 3};
// strides: 1, p0, p0 p1
static_assert(m::stride_of(0, ext253) == 1);
static_assert(m::stride_of(1, ext253) == 2);
static_assert(m::stride_of(2, ext253) == 10);
// rank = c0 + p0 (c1 + p1 c2)
static_assert(m::to_rank(std::array<std::size_t, 3>{1, 4, 2}, ext253) == 1 + 2 * (4 + 5 * 2));
static_assert(m::peer_of(3, 1, 2, std::array<std::size_t, 2>{2, 3}) == 5);

}  // namespace

// ---- run-time tests ----------------------------------------------------------------

TEST_CASE("coordinates round trip through the free functions and runtime_topology") {
  const std::vector<std::vector<std::size_t>> shapes = {{1}, {7}, {2, 3}, {3, 2}, {4, 64}, {2, 1, 3}, {2, 3, 5, 2}};
  for (const auto& e : shapes) {
    std::vector<m::runtime_topology::dimension> dims;
    for (auto x : e) dims.push_back({m::link_info_of<m::shm>(), x});
    const m::runtime_topology rt(dims);
    std::size_t P = 1;
    for (auto x : e) P *= x;
    REQUIRE(rt.size() == P);
    std::set<std::vector<std::size_t>> seen;
    for (std::size_t r = 0; r < P; ++r) {
      INFO("shape ", rt.to_string(), " rank ", r);
      const auto cr = rt.coordinates(r);
      REQUIRE(cr.size() == e.size());
      CHECK(rt.rank_of(cr) == r);
      CHECK(m::to_rank(cr, e) == r);
      std::vector<std::size_t> c2(e.size());
      m::to_coordinates(r, e, c2);
      CHECK(c2 == cr);
      // mixed radix: c_d = (r / stride_d) % p_d
      for (std::size_t d = 0; d < e.size(); ++d) CHECK(cr[d] == (r / m::stride_of(d, e)) % e[d]);
      seen.insert(cr);
    }
    CHECK(seen.size() == P);  // a bijection
  }
}

TEST_CASE("peers of a rank in each dimension") {
  const auto rt = m::describe(m::ring<m::shm, 2> * m::ring<m::shm, 3>);
  // rank 5 = (1, 2)
  CHECK(rt.peers(5, 0) == std::vector<std::size_t>{4, 5});
  CHECK(rt.peers(5, 1) == std::vector<std::size_t>{1, 3, 5});
  CHECK(rt.peers(0, 1) == std::vector<std::size_t>{0, 2, 4});
  CHECK(rt.peer(3, 1, 2) == 5);

  const auto big = m::describe(topo);
  // rank 5 = GPU 1 of node 1: its node's GPUs, and GPU 1 of every node
  CHECK(big.peers(5, 0) == std::vector<std::size_t>{4, 5, 6, 7});
  const auto ib = big.peers(5, 1);
  REQUIRE(ib.size() == 64);
  for (std::size_t j = 0; j < 64; ++j) CHECK(ib[j] == 1 + 4 * j);

  // property: the peers in dimension d are ordered by c_d, include the rank at c_d,
  // and every rank of a ring lists the same ring.
  const auto t3 = m::describe(m::ring<m::shm, 2> * m::ring<m::shm, 3> * m::ring<m::shm, 4>);
  for (std::size_t r = 0; r < t3.size(); ++r)
    for (std::size_t d = 0; d < t3.ndims(); ++d) {
      const auto p = t3.peers(r, d);
      REQUIRE(p.size() == t3.extent(d));
      const auto cr = t3.coordinates(r);
      CHECK(p[cr[d]] == r);
      for (std::size_t j = 0; j < p.size(); ++j) {
        CHECK(t3.coordinates(p[j])[d] == j);
        CHECK(t3.peers(p[j], d) == p);
      }
    }
}

TEST_CASE("to_string of compile-time topologies") {
  CHECK(m::to_string(topo) == "nvlink:4 x infiniband:64");
  CHECK(m::to_string(m::ring<m::pcie, 8>) == "pcie:8");
  CHECK(m::to_string(m::ring<m::shm, 2> * m::ring<m::shm>) == "shm:2 x shm:*");
  CHECK(m::to_string(m::ring<m::ethernet>) == "ethernet:*");
  CHECK(m::to_string(a * b * c) == "shm:2 x pcie:3 x ethernet:5");
  CHECK(m::to_string(m::ring<user::upi, 3>) == "upi:3");
  CHECK(m::to_string(m::memory_space::host) == "host");
  CHECK(m::to_string(m::memory_space::device) == "device");
}

TEST_CASE("describe() turns a compile-time topology into a runtime_topology") {
  const auto rt = m::describe(topo);
  REQUIRE(rt.ndims() == 2);
  CHECK(rt.size() == 256);
  CHECK(rt.is_static());
  CHECK(rt.extents() == std::vector<std::size_t>{4, 64});
  CHECK(rt.dim(0).link == m::link_info_of<m::nvlink>());
  CHECK(rt.dim(1).link == m::link_info_of<m::infiniband>());
  CHECK(rt.dim(0).link.name == "nvlink");
  CHECK(rt.dim(0).link.bandwidth == 150e9);
  CHECK(rt.dim(0).link.fully_connected);
  CHECK(rt.dim(0).link.space == m::memory_space::device);
  CHECK_FALSE(rt.dim(1).link.fully_connected);
  CHECK(rt.to_string() == m::to_string(topo));
  CHECK(rt == m::parse_topology("nvlink:4 x infiniband:64"));
  CHECK(rt.coordinates(5) == std::vector<std::size_t>{1, 1});
  // describe of a runtime topology is the identity
  CHECK(&m::describe(rt) == &rt);

  const auto rd = m::describe(dyn);
  CHECK_FALSE(rd.is_static());
  CHECK(rd.size() == m::dynamic_extent);
  CHECK(rd.static_size() == 4);
  CHECK(rd.extent(1) == m::dynamic_extent);
  CHECK(rd.to_string() == "nvlink:4 x infiniband:*");

  // a single ring
  const auto r1 = m::describe(m::ring<m::shm, 5>);
  CHECK(r1.ndims() == 1);
  CHECK(r1.size() == 5);
}
