// tests/test_plan_blocks.cpp: the plan room's block arithmetic (plan/blocks.hpp):
// block_of, stage ranges, the nested order, the ring schedules.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "plan_support.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m = mdring;
using namespace plan_test;

namespace {

// ---- block_of: the header's example, n = 10, p = 4 ------------------------------

// counts 3, 3, 2, 2 at offsets 0, 3, 6, 8
static_assert(m::block_of(10, 4, 0) == m::block_range{0, 3});
static_assert(m::block_of(10, 4, 1) == m::block_range{3, 3});
static_assert(m::block_of(10, 4, 2) == m::block_range{6, 2});
static_assert(m::block_of(10, 4, 3) == m::block_range{8, 2});
// n < p: the last p - n blocks are empty, placed at the end
static_assert(m::block_of(2, 4, 1) == m::block_range{1, 1});
static_assert(m::block_of(2, 4, 2) == m::block_range{2, 0});
static_assert(m::block_of(2, 4, 3) == m::block_range{2, 0});
// n = 0: every block is empty at offset 0
static_assert(m::block_of(0, 3, 2) == m::block_range{0, 0});
// p = 1: one block, the whole range
static_assert(m::block_of(7, 1, 0) == m::block_range{0, 7});
// divisible: equal blocks
static_assert(m::block_of(12, 4, 3) == m::block_range{9, 3});

// max_block is ceil(n / p)
static_assert(m::max_block(10, 4) == 3);
static_assert(m::max_block(8, 4) == 2);
static_assert(m::max_block(3, 4) == 1);
static_assert(m::max_block(0, 4) == 0);
static_assert(m::max_block(1009, 1) == 1009);

// ---- the ring schedules (reduce-scatter and all-gather) -------------------------

// ring of 4, rank 0: reduce-scatter sends 3, 2, 1 and receives 2, 1, 0
static_assert(m::ring_rs_send_block(0, 0, 4) == 3);
static_assert(m::ring_rs_send_block(0, 2, 4) == 1);
static_assert(m::ring_rs_recv_block(0, 0, 4) == 2);
static_assert(m::ring_rs_recv_block(0, 2, 4) == 0);
// all-gather sends its own block first, then what just arrived
static_assert(m::ring_ag_send_block(2, 0, 4) == 2);
static_assert(m::ring_ag_recv_block(2, 0, 4) == 1);
static_assert(m::ring_ag_send_block(2, 1, 4) == 1);
// ring of 2: the single step exchanges the two blocks
static_assert(m::ring_rs_send_block(0, 0, 2) == 1 && m::ring_rs_recv_block(0, 0, 2) == 0);

// ---- nested order: the header's example, extents (2, 3) ---------------------------

constexpr std::array<std::size_t, 2> e23{2, 3};
// rank 1 = (1,0) owns nested block 3
static_assert(m::nested_index(e23, std::array<std::size_t, 2>{1, 0}) == 3);
// rank 2 = (0,1) owns nested block 1
static_assert(m::nested_index(e23, std::array<std::size_t, 2>{0, 1}) == 1);
// and rank_of_nested inverts it
static_assert(m::rank_of_nested(3, e23) == 1);
static_assert(m::rank_of_nested(1, e23) == 2);
// coordinate 0 is the most significant digit
static_assert(m::nested_index(e23, std::array<std::size_t, 2>{1, 2}) == 5);
static_assert(m::rank_of_nested(5, e23) == 5);

// ---- stage ranges of extents (2, 3), n = 10 ----------------------------------------

consteval bool stage_ranges_example() {
  // rank 3 = (1,1): stage 0 works on [0,10), keeps block 1 = [5,10);
  // stage 1 works on [5,10) split 2,2,1 and keeps block 1 = [7,9).
  std::array<std::size_t, 2> c{1, 1};
  std::array<m::block_range, 2> r{};
  m::stage_ranges(10, e23, c, r);
  return r[0] == m::block_range{0, 10} && r[1] == m::block_range{5, 5} &&
         m::owned_range(10, e23, c) == m::block_range{7, 2};
}
// the worked example above
static_assert(stage_ranges_example());

}  // namespace

TEST_CASE("block_of tiles [0, n) exactly for every (n, p)") {
  std::vector<std::size_t> ns;
  for (std::size_t n = 0; n <= 130; ++n) ns.push_back(n);
  for (std::size_t n : {1009u, 4096u, 65537u, 1000003u}) ns.push_back(n);
  for (std::size_t n : ns)
    for (std::size_t p = 1; p <= 40; ++p) {
      INFO("n=", n, " p=", p);
      std::size_t next = 0, biggest = 0, smallest = n;
      for (std::size_t j = 0; j < p; ++j) {
        const auto blk = m::block_of(n, p, j);
        REQUIRE(blk.offset == next);  // contiguous, in order
        next += blk.count;
        biggest = std::max(biggest, blk.count);
        smallest = std::min(smallest, blk.count);
        // the first n % p blocks hold one more
        CHECK(blk.count == n / p + (j < n % p ? 1 : 0));
      }
      CHECK(next == n);                // covers exactly [0, n)
      CHECK(biggest - smallest <= 1);  // balanced
      CHECK(m::max_block(n, p) == biggest);
      if (n < p) CHECK(m::block_of(n, p, p - 1).count == 0);
    }
}

TEST_CASE("stage_ranges and owned_range: owned ranges tile [0, N) in nested order") {
  for (const auto& e : shapes) {
    const std::size_t P = product(e), k = e.size();
    const auto t = shm_topology(e);
    for (std::size_t N :
         {std::size_t(0), std::size_t(1), std::size_t(5), P - 1, P, P + 1, std::size_t(1009), 3 * P + 2}) {
      INFO("shape ", t.to_string(), " N=", N);
      std::vector<m::block_range> owned(P);
      for (std::size_t r = 0; r < P; ++r) {
        const auto c = t.coordinates(r);
        std::vector<m::block_range> ranges(k);
        m::stage_ranges(N, e, c, ranges);
        // postconditions of stage_ranges
        CHECK(ranges[0] == m::block_range{0, N});
        for (std::size_t d = 0; d + 1 < k; ++d) {
          const auto blk = m::block_of(ranges[d].count, e[d], c[d]);
          CHECK(ranges[d + 1] == m::block_range{ranges[d].offset + blk.offset, blk.count});
        }
        const auto last = m::block_of(ranges[k - 1].count, e[k - 1], c[k - 1]);
        owned[r] = m::owned_range(N, e, c);
        CHECK(owned[r] == m::block_range{ranges[k - 1].offset + last.offset, last.count});
        // every rank of the ring of dimension d works on the same range at stage d
        for (std::size_t d = 0; d < k; ++d)
          for (auto q : t.peers(r, d)) {
            std::vector<m::block_range> rq(k);
            m::stage_ranges(N, e, t.coordinates(q), rq);
            CHECK(rq[d] == ranges[d]);
          }
      }
      // sorted by offset (count as tie break), the owned ranges tile [0, N)
      auto sorted = owned;
      std::sort(sorted.begin(), sorted.end(),
                [](auto x, auto y) { return x.offset != y.offset ? x.offset < y.offset : x.count < y.count; });
      std::size_t next = 0;
      for (auto& rg : sorted) {
        CHECK(rg.offset == next);
        next += rg.count;
      }
      CHECK(next == N);
      // and in nested order: rank_of_nested(0), rank_of_nested(1), ... own consecutive ranges
      next = 0;
      for (std::size_t q = 0; q < P; ++q) {
        const auto rg = owned[m::rank_of_nested(q, e)];
        CHECK(rg.offset == next);
        next += rg.count;
      }
      CHECK(next == N);
    }
    // N = count * P (reduce_scatter's buffer): every rank owns exactly count elements,
    // at nested position nested_index * count
    for (std::size_t count : {1u, 3u, 10u}) {
      for (std::size_t r = 0; r < P; ++r) {
        const auto c = t.coordinates(r);
        CHECK(m::owned_range(count * P, e, c) == m::block_range{m::nested_index(e, c) * count, count});
      }
    }
  }
}

TEST_CASE("nested_index and rank_of_nested are inverse bijections") {
  for (const auto& e : shapes) {
    const std::size_t P = product(e);
    const auto t = shm_topology(e);
    std::set<std::size_t> seen;
    for (std::size_t r = 0; r < P; ++r) {
      const auto c = t.coordinates(r);
      const std::size_t q = m::nested_index(e, c);
      CHECK(q < P);
      CHECK(m::rank_of_nested(q, e) == r);
      seen.insert(q);
    }
    CHECK(seen.size() == P);
    for (std::size_t q = 0; q < P; ++q) CHECK(m::nested_index(e, t.coordinates(m::rank_of_nested(q, e))) == q);
  }
  // coordinate 0 most significant: in (2, 3) the nested order of ranks is 0, 2, 4, 1, 3, 5
  std::vector<std::size_t> order;
  for (std::size_t q = 0; q < 6; ++q) order.push_back(m::rank_of_nested(q, std::vector<std::size_t>{2, 3}));
  CHECK(order == std::vector<std::size_t>{0, 2, 4, 1, 3, 5});
}

TEST_CASE("ring schedules, simulated on paper") {
  for (std::size_t p = 2; p <= 13; ++p) {
    INFO("p=", p);
    // Each rank c starts with its own contribution in every block: have[c][j] = {c}.
    std::vector<std::vector<std::set<std::size_t>>> have(p, std::vector<std::set<std::size_t>>(p));
    for (std::size_t c = 0; c < p; ++c)
      for (std::size_t j = 0; j < p; ++j) have[c][j] = {c};
    for (std::size_t c = 0; c < p; ++c) {
      // the sequence of received blocks covers every block but c-1 once, and ends with c
      std::vector<std::size_t> got;
      for (std::size_t s = 0; s + 1 < p; ++s) got.push_back(m::ring_rs_recv_block(c, s, p));
      std::set<std::size_t> uniq(got.begin(), got.end());
      CHECK(uniq.size() == p - 1);
      CHECK(uniq.count((c + p - 1) % p) == 0);
      CHECK(got.back() == c);
      // all-gather: receives every block but its own, once
      std::vector<std::size_t> ag;
      for (std::size_t s = 0; s + 1 < p; ++s) ag.push_back(m::ring_ag_recv_block(c, s, p));
      std::set<std::size_t> ag_uniq(ag.begin(), ag.end());
      CHECK(ag_uniq.size() == p - 1);
      CHECK(ag_uniq.count(c) == 0);
      CHECK(m::ring_ag_send_block(c, 0, p) == c);  // own block first
      for (std::size_t s = 0; s + 1 < p; ++s) {
        // both ends agree: what c-1 sends at step s is what c receives
        CHECK(m::ring_rs_send_block((c + p - 1) % p, s, p) == m::ring_rs_recv_block(c, s, p));
        CHECK(m::ring_ag_send_block((c + p - 1) % p, s, p) == m::ring_ag_recv_block(c, s, p));
        // after step 0, each rank forwards what it received the step before
        if (s > 0) {
          CHECK(m::ring_rs_send_block(c, s, p) == m::ring_rs_recv_block(c, s - 1, p));
          CHECK(m::ring_ag_send_block(c, s, p) == m::ring_ag_recv_block(c, s - 1, p));
        }
      }
    }
    // Reduce-scatter: at step s every rank sends its partial block, the next one folds it in.
    for (std::size_t s = 0; s + 1 < p; ++s) {
      auto before = have;
      for (std::size_t c = 0; c < p; ++c) {
        const std::size_t to = (c + 1) % p, blk = m::ring_rs_send_block(c, s, p);
        REQUIRE(m::ring_rs_recv_block(to, s, p) == blk);
        for (auto x : before[c][blk]) {
          CHECK(have[to][blk].count(x) == 0);  // nothing is folded twice
          have[to][blk].insert(x);
        }
      }
    }
    std::set<std::size_t> everyone;
    for (std::size_t c = 0; c < p; ++c) everyone.insert(c);
    for (std::size_t c = 0; c < p; ++c) CHECK(have[c][c] == everyone);  // block c fully reduced on c
    // All-gather: copy the reduced blocks around.
    std::vector<std::vector<bool>> full(p, std::vector<bool>(p, false));
    for (std::size_t c = 0; c < p; ++c) full[c][c] = true;
    for (std::size_t s = 0; s + 1 < p; ++s) {
      auto before = full;
      for (std::size_t c = 0; c < p; ++c) {
        const std::size_t blk = m::ring_ag_send_block(c, s, p);
        CHECK(before[c][blk]);  // only complete blocks are sent
        full[(c + 1) % p][blk] = true;
      }
    }
    for (std::size_t c = 0; c < p; ++c)
      for (std::size_t j = 0; j < p; ++j) CHECK(full[c][j]);
  }
}
