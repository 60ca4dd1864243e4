// mdring/topology/coordinates.hpp: ranks <-> coordinates in mixed radix.
//
// Ranks are numbered with dimension 0 varying fastest. For extents (p0, p1, ...):
//
//   rank = c0 + p0 * (c1 + p1 * (c2 + ...))
//
// so the ranks 0 .. p0-1 share the innermost ring. Example, extents (2, 3):
//   rank 0 = (0,0)  rank 1 = (1,0)  rank 2 = (0,1)  rank 3 = (1,1)  rank 4 = (0,2) ...
//
// The peers of a rank in dimension d are the p_d ranks whose coordinates differ
// only in c_d; they form that dimension's ring, ordered by c_d.
#pragma once

#include "../config.hpp"

#include <cstddef>
#include <span>

MDRING_NAMESPACE_BEGIN

/// Writes the coordinates of `rank` into `coords` (same length as `extents`).
/// Precondition: rank < product(extents).
constexpr void to_coordinates(std::size_t rank, std::span<const std::size_t> extents,
                              std::span<std::size_t> coords) noexcept {
  for (std::size_t d = 0; d < extents.size(); ++d) {
    coords[d] = rank % extents[d];
    rank /= extents[d];
  }
}

/// The inverse of to_coordinates. Postcondition: to_coordinates(to_rank(c)) == c.
constexpr std::size_t to_rank(std::span<const std::size_t> coords, std::span<const std::size_t> extents) noexcept {
  std::size_t rank = 0;
  for (std::size_t d = extents.size(); d-- > 0;) rank = rank * extents[d] + coords[d];
  return rank;
}

/// The stride of dimension d: how far apart in rank two neighbours of that ring are.
constexpr std::size_t stride_of(std::size_t d, std::span<const std::size_t> extents) noexcept {
  std::size_t s = 1;
  for (std::size_t i = 0; i < d; ++i) s *= extents[i];
  return s;
}

/// The rank whose coordinates equal rank's except c_d = j.
/// Example, extents (2, 3): peer_of(3, 1, 2) == 5, since 3 = (1,1) and 5 = (1,2).
constexpr std::size_t peer_of(std::size_t rank, std::size_t d, std::size_t j,
                              std::span<const std::size_t> extents) noexcept {
  const std::size_t s = stride_of(d, extents);
  const std::size_t c = (rank / s) % extents[d];
  return rank - c * s + j * s;
}

MDRING_NAMESPACE_END
