// mdring/plan/halving_doubling.hpp: recursive halving and doubling in one dimension.
//
// The latency-bound algorithm of a dimension (Rabenseifner's reduce-scatter and
// all-gather, as MPICH and Open MPI run them), cut into the same blocks as the ring
// (blocks.hpp), so that a stage of either algorithm leaves block c at coordinate c
// and the other stages do not care which one ran.
//
// p ranks, p2 = the largest power of two <= p, rem = p - p2, L = log2(p2). The
// first 2 rem coordinates pair up, (0,1), (2,3), ...: the odd one of each pair is
// active, the even one sits the exchanges out. Active ranks are numbered
// v = 0 .. p2-1 ("virtual" ranks): pair i is v = i, coordinate c >= 2 rem is v = c - rem.
// Virtual rank v answers for the blocks [first(v), first(v+1)): two blocks for a pair,
// one otherwise, so every virtual range is contiguous.
//
//   reduce-scatter (steps: L, plus 2 when rem > 0)
//     fold in   (rem > 0) each even coordinate of a pair sends its whole range to
//               the odd one, which folds it into its own;
//     halving   for m = p2/2, p2/4, .., 1: v and v^m split their current window of 2m
//               virtual ranks; v keeps the half that holds v, sends the other half
//               and folds the half it keeps with what v^m sent;
//     hand out  (rem > 0) the odd coordinate of a pair sends block c-1 to c-1.
//   all-gather (the reverse, without folds)
//     fold in   (rem > 0) the even coordinate of a pair sends its block to the odd one;
//     doubling  for m = 1, 2, .., p2/2: v sends the window of m virtual ranks it holds
//               to v^m and receives that one's;
//     hand out  (rem > 0) the odd coordinate sends the whole range to the even one.
//
// Per rank that is L + 2 messages (L without pairs) instead of the ring's p-1, for
// about the same bytes (plus the whole range twice on the paired ranks). Every
// element is still folded once by the rank that owns it and copied from there, so
// results stay bitwise identical on every rank. It needs a commutative op.
//
// Example, p = 6 (p2 = 4, rem = 2, L = 2): pairs (0,1) and (2,3) are v = 0 and 1,
// coordinates 4 and 5 are v = 2 and 3; v = 0 answers for blocks 0 and 1, v = 3 for
// block 5. Reduce-scatter: step 0 folds 0 into 1 and 2 into 3; step 1 (m = 2) pairs
// coordinates 1-4 and 3-5, step 2 (m = 1) pairs 1-3 and 4-5; step 3 sends block 0 from
// 1 to 0 and block 2 from 3 to 2. Recursive doubling (rd_step_of, below) pairs the
// same ranks with the whole range: m = 1 first (1-3, 4-5), then m = 2 (1-4, 3-5).
// Tests: tests/test_plan_algorithms.cpp.
#pragma once

#include "../config.hpp"
#include "blocks.hpp"

#include <bit>
#include <cstddef>

MDRING_NAMESPACE_BEGIN

/// The shape of halving-doubling over p ranks: p2, the largest power of two <= p, virtual ranks, and rem = p - p2 pairs
/// folded in before and handed out after.
struct hd_shape {
  /// p ranks, p2 the largest power of two <= p, rem = p - p2 pairs, levels = log2(p2) exchange steps.
  ///@{
  std::size_t p = 1, p2 = 1, rem = 0, levels = 0;
  ///@}
  /// Steps of a stage: the levels, plus the fold-in and the hand-out when rem > 0.
  constexpr std::size_t steps() const noexcept { return levels + (rem ? 2 : 0); }
  /// Coordinate c takes part in the exchanges (the odd one of a pair, or unpaired).
  constexpr bool active(std::size_t c) const noexcept { return c >= 2 * rem || c % 2 == 1; }
  /// The virtual rank of coordinate c.
  constexpr std::size_t virtual_of(std::size_t c) const noexcept { return c < 2 * rem ? c / 2 : c - rem; }
  /// The coordinate of virtual rank v (of a pair, the odd one).
  constexpr std::size_t coordinate_of(std::size_t v) const noexcept { return v < rem ? 2 * v + 1 : v + rem; }
  /// The first block virtual rank v answers for (v == p2: p, the end).
  constexpr std::size_t first_block(std::size_t v) const noexcept { return v < rem ? 2 * v : v + rem; }
  /// Elements [a, b) of virtual ranks a .. b-1 in a range of n elements.
  constexpr block_range window(std::size_t n, std::size_t a, std::size_t b) const noexcept {
    const std::size_t lo = block_of(n, p, first_block(a)).offset;
    const std::size_t hi = first_block(b) >= p ? n : block_of(n, p, first_block(b)).offset;
    return {lo, hi - lo};
  }
};

/// The halving-doubling shape of p ranks (p = 0 counts as 1).
constexpr hd_shape hd_shape_of(std::size_t p) noexcept {
  hd_shape h;
  h.p = p ? p : 1;
  h.p2 = std::bit_floor(h.p);
  h.rem = h.p - h.p2;
  h.levels = std::size_t(std::countr_zero(h.p2));
  return h;
}

/// What step s of a stage does on coordinate c.
struct hd_step {
  /// What the step does: fold in (of a pair), exchange, or hand out (to a pair).
  enum kind_t { fold_in, exchange, hand_out } kind = exchange;  ///< what the step does
  std::size_t partner = 0;  ///< the coordinate messages go to and come from (exchange)
  ///@{
  block_range send{}, recv{};  ///< element ranges, relative to the stage's range
  ///@}
  /// This rank sends, receives in the step.
  ///@{
  bool sends = false, receives = false;
  ///@}
};

/// The steps of a pair (coordinates c and c^1 below 2 rem): at the fold-in the even
/// one sends `moved` to the odd one, at the hand-out the odd one to the even one.
constexpr hd_step hd_pair_step(const hd_shape& h, std::size_t c, hd_step::kind_t kind, block_range moved) noexcept {
  hd_step st;
  st.kind = kind;
  if (c < 2 * h.rem) {
    st.partner = c ^ 1;
    ((c % 2 == 1) == (kind == hd_step::hand_out) ? st.sends : st.receives) = true;
    st.send = st.recv = moved;
  }
  return st;
}

/// Step s (0 <= s < steps()) of the reduce-scatter on a range of n elements.
/// Exchange steps: `recv` is what this rank keeps and folds, `send` the other half.
constexpr hd_step hd_rs_step(const hd_shape& h, std::size_t n, std::size_t c, std::size_t s) noexcept {
  hd_step st;
  const std::size_t lead = h.rem ? 1 : 0;
  if (h.rem && s == 0) return hd_pair_step(h, c, hd_step::fold_in, {0, n});
  if (h.rem && s == h.levels + 1) return hd_pair_step(h, c, hd_step::hand_out, block_of(n, h.p, c & ~std::size_t(1)));
  if (!h.active(c)) return st;
  const std::size_t m = h.p2 >> (s - lead + 1), v = h.virtual_of(c);
  const std::size_t lo = v & ~(2 * m - 1), keep = v & m ? lo + m : lo, give = v & m ? lo : lo + m;
  st.partner = h.coordinate_of(v ^ m);
  st.recv = h.window(n, keep, keep + m);
  st.send = h.window(n, give, give + m);
  st.sends = st.receives = true;
  return st;
}

/// Step s of the all-gather on a range of n elements, block c present.
constexpr hd_step hd_ag_step(const hd_shape& h, std::size_t n, std::size_t c, std::size_t s) noexcept {
  hd_step st;
  const std::size_t lead = h.rem ? 1 : 0;
  if (h.rem && s == 0) return hd_pair_step(h, c, hd_step::fold_in, block_of(n, h.p, c & ~std::size_t(1)));
  if (h.rem && s == h.levels + 1) return hd_pair_step(h, c, hd_step::hand_out, {0, n});
  if (!h.active(c)) return st;
  const std::size_t m = std::size_t(1) << (s - lead), v = h.virtual_of(c);
  const std::size_t mine = v & ~(m - 1), theirs = (v ^ m) & ~(m - 1);
  st.partner = h.coordinate_of(v ^ m);
  st.send = h.window(n, mine, mine + m);
  st.recv = h.window(n, theirs, theirs + m);
  st.sends = st.receives = true;
  return st;
}

/// Recursive doubling (algorithm::recursive_doubling): step s (0 <= s < steps()) of
/// an all-reduce of a whole range over one dimension, on coordinate c. The same
/// pairing as above, but every message is the whole range and nothing is cut:
///   fold in   (rem > 0) the even coordinate of a pair sends its range to the odd one,
///             which folds the two (the even one's first);
///   doubling  for m = 1, 2, .., p2/2: v and v^m exchange their partials and each
///             folds the lower v's first, so both compute the same bits, and every
///             fold joins two contiguous runs of coordinates in order;
///   hand out  (rem > 0) the odd coordinate of a pair sends the result to the even one.
/// L + 2 messages per rank (L without pairs), each the whole range: the fewest
/// latencies of any algorithm, for calls where they are what costs.
struct rd_step {
  hd_step::kind_t kind = hd_step::exchange;  ///< fold in, exchange or hand out
  std::size_t partner = 0;                   ///< the coordinate messages go to and come from
  /// This rank sends, receives in the step.
  ///@{
  bool sends = false, receives = false;
  ///@}
  bool mine_first = false;  ///< a fold puts this rank's partial first (its v is the lower one)
};
/// Step s of recursive doubling on coordinate c.
constexpr rd_step rd_step_of(const hd_shape& h, std::size_t c, std::size_t s) noexcept {
  rd_step st;
  const std::size_t lead = h.rem ? 1 : 0;
  if (h.rem && (s == 0 || s == h.levels + 1)) {
    st.kind = s == 0 ? hd_step::fold_in : hd_step::hand_out;
    if (c < 2 * h.rem) {
      st.partner = c ^ 1;
      ((c % 2 == 1) == (st.kind == hd_step::hand_out) ? st.sends : st.receives) = true;
    }
    return st;
  }
  if (!h.active(c)) return st;
  const std::size_t m = std::size_t(1) << (s - lead), v = h.virtual_of(c);
  st.partner = h.coordinate_of(v ^ m);
  st.sends = st.receives = true;
  st.mine_first = (v & m) == 0;
  return st;
}

// The worked example above, checked.
static_assert(hd_shape_of(6).p2 == 4 && hd_shape_of(6).rem == 2 && hd_shape_of(6).steps() == 4);
static_assert(hd_shape_of(8).steps() == 3 && hd_shape_of(2).steps() == 1 && hd_shape_of(3).steps() == 3);
static_assert(hd_rs_step(hd_shape_of(6), 60, 1, 1).partner == 4 && hd_rs_step(hd_shape_of(6), 60, 3, 1).partner == 5);
static_assert(hd_rs_step(hd_shape_of(6), 60, 1, 2).partner == 3 && hd_rs_step(hd_shape_of(6), 60, 4, 2).partner == 5);
// p = 6, n = 60: blocks of 10; coordinate 1 (v = 0) keeps blocks 0-3 at m = 2 and
// sends 4-5, then keeps 0-1 and sends 2-3; coordinate 5 (v = 3) ends with block 5.
static_assert(hd_rs_step(hd_shape_of(6), 60, 1, 1).recv == block_range{0, 40});
static_assert(hd_rs_step(hd_shape_of(6), 60, 1, 1).send == block_range{40, 20});
static_assert(hd_rs_step(hd_shape_of(6), 60, 1, 2).recv == block_range{0, 20});
static_assert(hd_rs_step(hd_shape_of(6), 60, 5, 2).recv == block_range{50, 10});
static_assert(hd_rs_step(hd_shape_of(6), 60, 0, 3).receives &&
              hd_rs_step(hd_shape_of(6), 60, 0, 3).recv == block_range{0, 10});
static_assert(!hd_rs_step(hd_shape_of(6), 60, 0, 1).sends && !hd_rs_step(hd_shape_of(6), 60, 0, 1).receives);

// Recursive doubling, p = 6: coordinate 1 (v = 0) exchanges with 3 (v = 1) first, its
// partial first, then with 4 (v = 2); coordinate 0 only sends (fold in) and receives
// (hand out).
static_assert(rd_step_of(hd_shape_of(6), 1, 1).partner == 3 && rd_step_of(hd_shape_of(6), 1, 1).mine_first);
static_assert(rd_step_of(hd_shape_of(6), 1, 2).partner == 4 && rd_step_of(hd_shape_of(6), 1, 2).mine_first);
static_assert(rd_step_of(hd_shape_of(6), 4, 2).partner == 1 && !rd_step_of(hd_shape_of(6), 4, 2).mine_first);
static_assert(rd_step_of(hd_shape_of(6), 0, 0).sends && rd_step_of(hd_shape_of(6), 1, 0).receives);
static_assert(rd_step_of(hd_shape_of(6), 0, 3).receives && !rd_step_of(hd_shape_of(6), 0, 1).sends);

MDRING_NAMESPACE_END
