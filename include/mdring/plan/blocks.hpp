// mdring/plan/blocks.hpp: how a range of elements is cut into blocks.
//
// A range of n elements split among p ranks gives block j
//
//   offset(j) = j * (n / p) + min(j, n % p),   count(j) = n / p + (j < n % p ? 1 : 0)
//
// so the first n % p blocks hold one element more, the blocks tile the range
// exactly, and no padding is ever visible. Example: n = 10, p = 4 gives counts
// 3, 3, 2, 2 at offsets 0, 3, 6, 8. With n < p the last p - n blocks are empty.
//
// Stage d of the plan cuts the range the rank owns after stages 0 .. d-1 into
// p_d blocks and the rank keeps block c_d (its coordinate). stage_ranges() writes
// those ranges; every rank of one ring of dimension d gets the same range at stage d,
// which is what lets both ends of every message agree on its size.
#pragma once

#include "../config.hpp"

#include <cstddef>
#include <span>

MDRING_NAMESPACE_BEGIN

/// Elements [offset, offset + count).
struct block_range {
  std::size_t offset = 0;  ///< the first element
  std::size_t count = 0;   ///< elements
  friend constexpr bool operator==(const block_range&, const block_range&) = default;
};

/// Block j of a range of n elements split into p blocks (offset relative to the range).
constexpr block_range block_of(std::size_t n, std::size_t p, std::size_t j) noexcept {
  const std::size_t q = n / p, r = n % p;
  return {j * q + (j < r ? j : r), q + (j < r ? 1 : 0)};
}

/// The largest block: what one message of the stage carries at most.
constexpr std::size_t max_block(std::size_t n, std::size_t p) noexcept { return n / p + (n % p ? 1 : 0); }

/// ranges[d] = the range (absolute offset, count) that stage d works on, for a rank
/// with the given coordinates; the rank owns block coords[d] of it afterwards.
/// Postcondition: ranges[0] == {0, n}; ranges[d+1] is block coords[d] of ranges[d].
constexpr void stage_ranges(std::size_t n, std::span<const std::size_t> extents, std::span<const std::size_t> coords,
                            std::span<block_range> ranges) noexcept {
  block_range cur{0, n};
  for (std::size_t d = 0; d < extents.size(); ++d) {
    ranges[d] = cur;
    const block_range b = block_of(cur.count, extents[d], coords[d]);
    cur = {cur.offset + b.offset, b.count};
  }
}

/// The range a rank owns after all reduce-scatter stages.
constexpr block_range owned_range(std::size_t n, std::span<const std::size_t> extents,
                                  std::span<const std::size_t> coords) noexcept {
  block_range cur{0, n};
  for (std::size_t d = 0; d < extents.size(); ++d) {
    const block_range b = block_of(cur.count, extents[d], coords[d]);
    cur = {cur.offset + b.offset, b.count};
  }
  return cur;
}

///@{
/// The ring schedules, for the rank at coordinate c of a ring of p, at step s
/// (0 <= s < p-1). Each rank sends to c+1 and receives from c-1.
///   reduce-scatter: send block c-s-1, receive block c-s-2 and fold it into the local
///     one; after the last step, block c holds the reduction over all p ranks.
///   all-gather: send block c-s (own block first, then what just arrived), receive
///     block c-s-1; after the last step every block is present.
constexpr std::size_t ring_rs_send_block(std::size_t c, std::size_t s, std::size_t p) noexcept {
  return (c + 2 * p - s - 1) % p;
}
constexpr std::size_t ring_rs_recv_block(std::size_t c, std::size_t s, std::size_t p) noexcept {
  return (c + 2 * p - s - 2) % p;
}
constexpr std::size_t ring_ag_send_block(std::size_t c, std::size_t s, std::size_t p) noexcept {
  return (c + p - s) % p;
}
constexpr std::size_t ring_ag_recv_block(std::size_t c, std::size_t s, std::size_t p) noexcept {
  return (c + 2 * p - s - 1) % p;
}
///@}

/// The position of rank's final block in the nested (stage-order) layout: the mixed-
/// radix number with coordinate 0 most significant. reduce_scatter and all_gather
/// deliver block `rank` of the user's buffer, so they map between the two orders.
/// Example, extents (2, 3): rank 1 = (1,0) owns nested block 3; rank 2 = (0,1) owns 1.
constexpr std::size_t nested_index(std::span<const std::size_t> extents, std::span<const std::size_t> coords) noexcept {
  std::size_t q = 0;
  for (std::size_t d = 0; d < extents.size(); ++d) q = q * extents[d] + coords[d];
  return q;
}

/// The rank that owns nested block q (the inverse of nested_index).
constexpr std::size_t rank_of_nested(std::size_t q, std::span<const std::size_t> extents) noexcept {
  // Digits of q, least significant = last dimension; rank has dimension 0 fastest.
  std::size_t rank = 0, stride = 1;
  std::size_t total = 1;
  for (auto e : extents) total *= e;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    total /= extents[d];
    const std::size_t c = (q / total) % extents[d];
    rank += c * stride;
    stride *= extents[d];
  }
  return rank;
}

MDRING_NAMESPACE_END
