// Tests of mdring/plan: block arithmetic, stage ranges, the nested order, the ring
// schedules, the cost model, algorithm choice, make_plan and explain().
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace m = mdring;

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

bool contains(const std::string& s, std::string_view sub) { return s.find(sub) != std::string::npos; }

std::size_t product(const std::vector<std::size_t>& e) {
  return std::accumulate(e.begin(), e.end(), std::size_t(1), [](std::size_t x, std::size_t y) { return x * y; });
}

m::runtime_topology shm_topology(const std::vector<std::size_t>& e) {
  std::vector<m::runtime_topology::dimension> dims;
  for (auto x : e) dims.push_back({m::link_info_of<m::shm>(), x});
  return m::runtime_topology(dims);
}

std::vector<m::algorithm> all(std::size_t k, m::algorithm a) { return std::vector<m::algorithm>(k, a); }

m::plan plan_of(m::collective kind, const m::runtime_topology& t, std::size_t rank, std::size_t count,
                const std::vector<m::algorithm>& algos, std::size_t root = 0, std::size_t elem = 4) {
  return m::make_plan(kind, t, rank, count, elem, algos, m::tuning{}, root);
}

std::vector<std::pair<m::phase, std::size_t>> phases(const m::plan& p) {
  std::vector<std::pair<m::phase, std::size_t>> v;
  for (auto& s : p.stages) v.emplace_back(s.ph, s.dim);
  return v;
}

std::size_t total_steps(const m::plan& p) {
  std::size_t s = 0;
  for (auto& st : p.stages) s += st.steps;
  return s;
}

const std::vector<std::vector<std::size_t>> shapes = {{1}, {2}, {5}, {2, 3}, {3, 2}, {4, 4}, {2, 1, 3},
                                                      {3, 5, 2}, {2, 2, 2, 2}, {7, 3}, {4, 64}};

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
      CHECK(next == n);                     // covers exactly [0, n)
      CHECK(biggest - smallest <= 1);       // balanced
      CHECK(m::max_block(n, p) == biggest);
      if (n < p) CHECK(m::block_of(n, p, p - 1).count == 0);
    }
}

TEST_CASE("stage_ranges and owned_range: owned ranges tile [0, N) in nested order") {
  for (const auto& e : shapes) {
    const std::size_t P = product(e), k = e.size();
    const auto t = shm_topology(e);
    for (std::size_t N : {std::size_t(0), std::size_t(1), std::size_t(5), P - 1, P, P + 1, std::size_t(1009),
                          3 * P + 2}) {
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
      std::sort(sorted.begin(), sorted.end(), [](auto x, auto y) {
        return x.offset != y.offset ? x.offset < y.offset : x.count < y.count;
      });
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

TEST_CASE("stage_seconds: the table of cost.hpp with hand-computed numbers") {
  // latency 1 s, 0.25 bytes/s (beta = 4 s/byte), gamma 0.5 s/byte; p = 4, n = 10 floats:
  // m = 3 elements = 12 bytes, so one block moves in 48 s and folds in 6 s.
  const m::link_info l{"test", 0.25, 1.0, false, m::memory_space::host};
  using m::algorithm, m::phase;
  CHECK(m::stage_seconds(phase::reduce_scatter, algorithm::ring, 4, 10, 4, l, 0.5) == 3 * (1 + 48 + 6));
  CHECK(m::stage_seconds(phase::all_gather, algorithm::ring, 4, 10, 4, l, 0.5) == 3 * (1 + 48));
  CHECK(m::stage_seconds(phase::reduce_scatter, algorithm::direct, 4, 10, 4, l, 0.5) == 1 + 3 * (48 + 6));
  CHECK(m::stage_seconds(phase::all_gather, algorithm::direct, 4, 10, 4, l, 0.5) == 1 + 3 * 48);
  // scatter and gather cost the same whatever the algorithm: the root's link carries p-1 blocks
  CHECK(m::stage_seconds(phase::scatter, algorithm::ring, 4, 10, 4, l, 0.5) == 1 + 3 * 48);
  CHECK(m::stage_seconds(phase::gather, algorithm::direct, 4, 10, 4, l, 0.5) == 1 + 3 * 48);
  // one element: the block is one element
  CHECK(m::stage_seconds(phase::all_gather, algorithm::ring, 4, 1, 4, l, 0.5) == 3 * (1 + 16));
  // nothing to do: one rank, or no element
  CHECK(m::stage_seconds(phase::reduce_scatter, algorithm::ring, 1, 10, 4, l, 0.5) == 0);
  CHECK(m::stage_seconds(phase::reduce_scatter, algorithm::ring, 4, 0, 4, l, 0.5) == 0);
  // a divisible case: p = 2, n = 8 doubles: 32 bytes per block
  CHECK(m::stage_seconds(phase::reduce_scatter, algorithm::ring, 2, 8, 8, l, 0.5) == 1 * (1 + 128 + 16));
  // realistic figures, against the formula
  const auto ib = m::link_info_of<m::infiniband>();
  CHECK(m::stage_seconds(phase::all_gather, algorithm::ring, 64, 1 << 20, 4, ib, 0) ==
        doctest::Approx(63 * (2e-6 + ib.overhead + 65536.0 / 12.5e9)).epsilon(1e-12));
}

TEST_CASE("stage_seconds: a per-message overhead, and the efficiency curve it makes (hand-computed)") {
  // 100 bytes/s, latency 1 s, overhead 2 s: a message of b bytes takes 1 + 2 + b / 100 s,
  // of which b / 100 moves bytes: efficiency b / (b + 200), one half at 200 bytes.
  m::link_info l{"ov", 100.0, 1.0, false, m::memory_space::host};
  l.overhead = 2.0;
  using m::algorithm, m::phase;
  // p = 2, 400 one-byte elements: one message of 200 bytes per stage
  CHECK(m::stage_seconds(phase::all_gather, algorithm::ring, 2, 400, 1, l, 0) == 1 + 2 + 2);
  // p = 5, 1000 elements: blocks of 200; ring: 4 steps of (1 + 2 + 2); direct: 1 + 4 (2 + 2)
  CHECK(m::stage_seconds(phase::all_gather, algorithm::ring, 5, 1000, 1, l, 0) == 4 * 5);
  CHECK(m::stage_seconds(phase::all_gather, algorithm::direct, 5, 1000, 1, l, 0) == 1 + 4 * 4);
  CHECK(m::stage_seconds(phase::reduce_scatter, algorithm::direct, 5, 1000, 1, l, 0.01) == 1 + 4 * (4 + 2));
  CHECK(m::stage_seconds(phase::scatter, algorithm::ring, 5, 1000, 1, l, 0) == 1 + 4 * 4);
  // the efficiency of one ring step without its latency: b / 100 over (2 + b / 100)
  for (const double b : {20.0, 200.0, 2000.0}) {
    const double step = m::stage_seconds(phase::all_gather, algorithm::ring, 2, std::size_t(2 * b), 1, l, 0) - 1;
    CHECK((b / 100) / step == doctest::Approx(b / (b + 200)));
  }
}

TEST_CASE("NIC sharing: the ranks of a node share the ports of a link between nodes (hand-computed)") {
  // InfiniBand: one port of 12.5 GB/s per node; the 4 GPUs of a node share it.
  const auto two = m::parse_topology("nvlink:4 x infiniband:64");
  CHECK(m::link_info_of<m::infiniband>().ports == 1);
  CHECK(m::link_info_of<m::nvlink>().ports == 0);
  CHECK(two.port_sharers(0) == 1);  // NVLink: per GPU
  CHECK(two.port_sharers(1) == 4);
  CHECK(two.rank_link(0).bandwidth == 150e9);
  CHECK(two.rank_link(1).bandwidth == 12.5e9 / 4);
  CHECK(two.rank_link(1).latency == 2e-6);
  // every dimension inside the node counts, wherever it is written
  CHECK(m::parse_topology("shm:2 x nvlink:4 x infiniband:8").port_sharers(2) == 8);
  CHECK(m::parse_topology("infiniband:16 x shm:4").port_sharers(0) == 4);
  CHECK(m::parse_topology("infiniband:256").rank_link(0).bandwidth == 12.5e9);  // one rank per node
  // a dynamic extent inside the node is not known yet: counts as 1 until resolved
  CHECK(m::parse_topology("shm:* x infiniband:4").port_sharers(1) == 1);
  CHECK(m::parse_topology("shm:* x infiniband:4").resolve(32).port_sharers(1) == 8);
  // a split ring: both halves are the same NIC, shared by the same 4 ranks
  CHECK(m::parse_topology("nvlink:4 x infiniband:8 x infiniband:8").port_sharers(2) == 4);
  // two ports for four ranks: half a port each; eight ports: one each, no more
  auto t = two;
  t.dim(1).link.ports = 2;
  CHECK(t.rank_link(1).bandwidth == 12.5e9 / 2);
  t.dim(1).link.ports = 8;
  CHECK(t.rank_link(1).bandwidth == 12.5e9);

  // The plan predicts the InfiniBand stages at the rank's share: rank 0's ring
  // all-gather in dimension 1 of 4 x 4 x 64 floats moves 63 blocks of 4 elements ...
  const auto pl = plan_of(m::collective::all_reduce, two, 0, 4 * 4 * 64, {m::algorithm::direct, m::algorithm::ring});
  REQUIRE(pl.stages.size() == 4);
  const auto& ag = pl.stages[2];
  CHECK(ag.dim == 1);
  CHECK(ag.port_sharers == 4);
  CHECK(ag.rank_bandwidth == 12.5e9 / 4);
  CHECK(ag.link.bandwidth == 12.5e9);  // as written
  const double ib_o = m::link_info_of<m::infiniband>().overhead;
  CHECK(ag.seconds == doctest::Approx(63 * (2e-6 + ib_o + 16 / (12.5e9 / 4))).epsilon(1e-12));
  // ... and explain() says so
  const std::string s = m::explain<float>(two.resolve(256), 1 << 20);
  INFO(s);
  CHECK(contains(s, "link infiniband: 2.91 GiB/s per rank, latency 2.00 us"));
  CHECK(contains(s, "; 1 port of 11.64 GiB/s per node, shared by 4 ranks"));
  CHECK(contains(s, "link nvlink: 139.70 GiB/s per rank"));
}

TEST_CASE("pipeline model: the pace of c segments in flight by mean value analysis (hand-computed)") {
  // One link busy 1 s per segment, 1 s of latency. One in flight: pace 2 (nothing
  // overlaps). Two: X(1) = 1/2, Q(1) = 1/2; R(2) = 1 x 1.5, X(2) = 2 / 2.5: pace 1.25,
  // above both bounds max(1, 2/2) = 1. Many: the link's 1 s.
  const double one[] = {1.0};
  CHECK(m::closed_pace(one, 1.0, 1) == 2.0);
  CHECK(m::closed_pace(one, 1.0, 2) == 1.25);
  CHECK(m::closed_pace(one, 1.0, 64) == doctest::Approx(1.0).epsilon(1e-9));
  // No latency: the link alone, however many are in flight. Only latency: they all overlap.
  CHECK(m::closed_pace(one, 0.0, 4) == 1.0);
  const double none[] = {0.0};
  CHECK(m::closed_pace(none, 2.0, 4) == 0.5);
  // Two links busy 2 s and 1 s, no latency, two in flight: X(1) = 1/3, Q = (2/3, 1/3);
  // R(2) = (2 x 5/3, 1 x 4/3) = (10/3, 4/3), X(2) = 2 / (14/3) = 3/7: pace 7/3.
  const double two[] = {2.0, 1.0};
  CHECK(m::closed_pace(two, 0.0, 2) == doctest::Approx(7.0 / 3).epsilon(1e-12));
  CHECK(m::closed_pace({}, 0.0, 4) == 0.0);
}

TEST_CASE("pipeline model: segments in flight overlap their latencies (hand-computed)") {
  // Two rings of 2 ranks, 64 bytes/s, latency 1 s and 2 s, no folding cost; 512
  // one-byte elements. One segment: dim 0 moves 256-byte blocks (4 s), so
  // t_0 = 2 x (1 + 4) = 10, dim 1 moves 128-byte blocks: t_1 = 2 x (2 + 2) = 8.
  m::register_link({"pm-a", 64.0, 1.0, false, m::memory_space::device});
  m::register_link({"pm-b", 64.0, 2.0, false, m::memory_space::device});
  const auto topo = m::parse_topology("pm-a:2 x pm-b:2");
  const std::vector<m::algorithm> ring2{m::algorithm::ring, m::algorithm::ring};
  m::tuning t;
  t.device_gamma = 0;
  t.min_segment_bytes = 1;
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 512) == 18.0);
  // K = 2 segments of 256: t_0 = 2 x (1 + 2) = 6 (busy D_0 = 4), t_1 = 2 x (2 + 1) = 6
  // (busy D_1 = 2); the latencies Z = 2 + 4 = 6.
  // Depth 1: one segment in flight, nothing overlaps: pace 12, T = 12 + 1 x 12 = 24.
  t.pipeline_depth = 1;
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 256) == 24.0);
  // Depth 4, two in flight: X(1) = 1/12, Q = (1/3, 1/6); R(2) = (16/3, 7/3),
  // X(2) = 2 / (6 + 23/3) = 6/41: pace 41/6, T = 12 + 41/6 = 113/6.
  t.pipeline_depth = 4;
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 256) == doctest::Approx(113.0 / 6).epsilon(1e-12));
  // K = 4 segments of 128, four in flight: t_0 = 2 x (1 + 1) = 4 (busy 2), t_1 = 2 x
  // (2 + 0.5) = 5 (busy 1), Z = 6. X(1) = 1/9, X(2) = 9/43, X(3) = 43/147,
  // X(4) = 4 / (6 + 754/147) = 147/409: T = 9 + 3 x 409/147 = 850/49.
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 128) == doctest::Approx(850.0 / 49).epsilon(1e-12));
  // K = 8: t = 3 and 4.5 (busy 1 and 0.5), Z = 6; X(4) = 1206/2443:
  // T = 7.5 + 7 x 2443/1206 = 13073/603.
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 64) == doctest::Approx(13073.0 / 603).epsilon(1e-12));
  // So the model picks four segments of 128 (17.35 < 18); with depth 1 (T(2) = 24,
  // T(4) = 9 + 3 x 9 = 36) none is better than T(1) = 18: no pipelining.
  CHECK(m::segment_elements(topo, ring2, 512, 1, t) == 128);
  t.pipeline_depth = 1;
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 128) == 36.0);
  CHECK(m::segment_elements(topo, ring2, 512, 1, t) == 512);
}

TEST_CASE("pipeline model: a per-message overhead is busy time that no depth hides (hand-computed)") {
  // The figures of the test above, but dimension 0's 1 s per message is half latency
  // and half overhead: one segment costs the same (t_0 = 2 x (0.5 + 0.5 + 4) = 10,
  // t_1 = 8), but the overhead stays in the busy time b_0.
  m::link_info ov{"pm-ov", 64.0, 0.5, false, m::memory_space::device};
  ov.overhead = 0.5;
  m::register_link(ov);
  m::register_link({"pm-b", 64.0, 2.0, false, m::memory_space::device});
  const auto topo = m::parse_topology("pm-ov:2 x pm-b:2");
  const std::vector<m::algorithm> ring2{m::algorithm::ring, m::algorithm::ring};
  m::tuning t;
  t.device_gamma = 0;
  t.min_segment_bytes = 1;
  t.pipeline_depth = 4;
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 512) == 18.0);
  // K = 2: t_0 = 2 x (1 + 2) = 6, busy 2 x (0.5 + 2) = 5; t_1 = 6, busy 2; Z = 1 + 4 = 5.
  // X(1) = 1/12, Q = (5/12, 1/6); R(2) = (85/12, 7/3), X(2) = 2 / (5 + 113/12) = 24/173:
  // T = 12 + 173/24 = 461/24.
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 256) == doctest::Approx(461.0 / 24).epsilon(1e-12));
  // K = 4: t_0 = 4, busy 3 (was 2); t_1 = 5, busy 1; Z = 5: T = 9 + 3 / X(4) = 80667/4220.
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 128) == doctest::Approx(80667.0 / 4220).epsilon(1e-12));
  // K = 8: t_0 = 3, busy 2; t_1 = 4.5, busy 0.5; Z = 5: T = 7.5 + 7 / X(4) = 7524/305.
  CHECK(m::pipelined_seconds(topo, ring2, 512, 1, t, 64) == doctest::Approx(7524.0 / 305).epsilon(1e-12));
  // So no count beats one segment (19.12 at best against 18), where without the
  // overhead four segments did (17.35).
  CHECK(m::segment_elements(topo, ring2, 512, 1, t) == 512);
}

TEST_CASE("pipeline model: dimensions on the same link share it (hand-computed)") {
  // Two dimensions of one link (the nodes of one uplink cut into a 2 x 2 grid):
  // segments in flight in both go through the same port, so the dimensions' busy
  // times add up in one queue. 64 bytes/s, latency 1 s, 512 one-byte elements,
  // K = 2 segments of 256: dim 0 moves 128-byte blocks: t_0 = 2 x (1 + 2) = 6 (busy
  // 4); dim 1 moves 64-byte blocks: t_1 = 2 x (1 + 1) = 4 (busy 2); Z = 4. Two in
  // flight through one queue of D = 6: X(1) = 1/10, Q = 3/5, R(2) = 48/5, X(2) =
  // 2 / (4 + 48/5) = 5/34: T = 10 + 34/5 = 84/5.
  m::register_link({"pm-shared", 64.0, 1.0, false, m::memory_space::device});
  m::register_link({"pm-other", 64.0, 1.0, false, m::memory_space::device});
  const std::vector<m::algorithm> ring2{m::algorithm::ring, m::algorithm::ring};
  m::tuning t;
  t.device_gamma = 0;
  t.min_segment_bytes = 1;
  t.pipeline_depth = 4;
  const auto shared = m::parse_topology("pm-shared:2 x pm-shared:2");
  CHECK(m::pipelined_seconds(shared, ring2, 512, 1, t, 256) == doctest::Approx(84.0 / 5).epsilon(1e-12));
  // The same figures on two links of their own, queues of 4 and 2: X(1) = 1/10,
  // Q = (2/5, 1/5); R(2) = (28/5, 12/5), X(2) = 2 / (4 + 8) = 1/6: T = 10 + 6 = 16.
  const auto separate = m::parse_topology("pm-shared:2 x pm-other:2");
  CHECK(m::pipelined_seconds(separate, ring2, 512, 1, t, 256) == doctest::Approx(16.0).epsilon(1e-12));
  // One segment: the stages run one after the other, t_0 = 2 x (1 + 4), t_1 = 2 x (1 + 2).
  CHECK(m::pipelined_seconds(shared, ring2, 512, 1, t, 512) == 10.0 + 6.0);
  CHECK(m::pipelined_seconds(separate, ring2, 512, 1, t, 512) == 10.0 + 6.0);
}

TEST_CASE("choose_algorithm rules") {
  const m::tuning t{};
  const auto nv = m::link_info_of<m::nvlink>(), ib = m::link_info_of<m::infiniband>(),
             sh = m::link_info_of<m::shm>(), pc = m::link_info_of<m::pcie>();
  using m::algorithm;
  // a non-commutative op gets direct, whatever was asked and whatever the link
  CHECK(m::choose_algorithm(algorithm::automatic, ib, 64, t, false) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::ring, nv, 4, t, false) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::automatic, sh, 2, t, false) == algorithm::direct);
  // an explicit request wins over the automatic rules
  CHECK(m::choose_algorithm(algorithm::ring, nv, 4, t, true) == algorithm::ring);
  CHECK(m::choose_algorithm(algorithm::direct, ib, 64, t, true) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::direct, nv, 2, t, true) == algorithm::direct);
  // Two ranks on a fully connected link: direct (what shared access runs); ring-only links: ring.
  CHECK(m::choose_algorithm(algorithm::automatic, nv, 2, t, true) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::automatic, ib, 2, t, true) == algorithm::ring);
  // one rank: no stage (reported as ring)
  CHECK(m::choose_algorithm(algorithm::automatic, sh, 1, t, true) == algorithm::ring);
  // fully connected and p <= direct_max_extent (8): direct
  CHECK(m::choose_algorithm(algorithm::automatic, nv, 3, t, true) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::automatic, nv, 8, t, true) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::automatic, sh, 4, t, true) == algorithm::direct);
  // beyond direct_max_extent: ring
  CHECK(m::choose_algorithm(algorithm::automatic, nv, 9, t, true) == algorithm::ring);
  // not fully connected: ring
  CHECK(m::choose_algorithm(algorithm::automatic, ib, 4, t, true) == algorithm::ring);
  CHECK(m::choose_algorithm(algorithm::automatic, pc, 4, t, true) == algorithm::ring);
  // the threshold is a tuning knob
  m::tuning wide{};
  wide.direct_max_extent = 16;
  CHECK(m::choose_algorithm(algorithm::automatic, nv, 16, wide, true) == algorithm::direct);
  CHECK(m::choose_algorithm(algorithm::automatic, nv, 17, wide, true) == algorithm::ring);
}

TEST_CASE("halving-doubling: the schedule, replayed on every extent 1..40, reduces each element once") {
  // Each coordinate c contributes 2^c to every element; a step's sends are taken
  // from the state before it, so the replay is what the messages would carry. After
  // the reduce-scatter, block c of coordinate c must hold exactly 2^p - 1 (a
  // contribution counted twice or lost changes the sum); after the all-gather every
  // coordinate holds every block.
  for (std::size_t p = 1; p <= 40; ++p) {
    const m::hd_shape h = m::hd_shape_of(p);
    CHECK(h.p2 * 2 > p);
    CHECK(h.p2 + h.rem == p);
    for (std::size_t n : {std::size_t(0), std::size_t(1), p - 1 + (p == 1), p, 3 * p + 1, std::size_t(97)}) {
      INFO("p = " << p << ", n = " << n);
      std::vector<std::vector<std::uint64_t>> acc(p, std::vector<std::uint64_t>(n));
      for (std::size_t c = 0; c < p; ++c) std::fill(acc[c].begin(), acc[c].end(), std::uint64_t(1) << c);
      for (std::size_t s = 0; s < h.steps(); ++s) {
        auto before = acc;
        for (std::size_t c = 0; c < p; ++c) {
          const m::hd_step st = m::hd_rs_step(h, n, c, s);
          if (!st.receives) continue;
          const m::hd_step from = m::hd_rs_step(h, n, st.partner, s);
          REQUIRE(from.sends);
          REQUIRE(from.partner == c);
          REQUIRE(from.send == st.recv);
          for (std::size_t i = st.recv.offset; i < st.recv.offset + st.recv.count; ++i)
            acc[c][i] = st.kind == m::hd_step::hand_out ? before[st.partner][i] : acc[c][i] + before[st.partner][i];
        }
      }
      std::size_t wrong = 0;
      for (std::size_t c = 0; c < p; ++c) {
        const m::block_range b = m::block_of(n, p, c);
        for (std::size_t i = b.offset; i < b.offset + b.count; ++i) wrong += acc[c][i] != (std::uint64_t(1) << p) - 1;
      }
      CHECK(wrong == 0);
      // all-gather: block j starts on coordinate j only
      std::vector<std::vector<std::uint64_t>> buf(p, std::vector<std::uint64_t>(n, 0));
      for (std::size_t c = 0; c < p; ++c) {
        const m::block_range b = m::block_of(n, p, c);
        for (std::size_t i = b.offset; i < b.offset + b.count; ++i) buf[c][i] = i + 1;
      }
      for (std::size_t s = 0; s < h.steps(); ++s) {
        auto before = buf;
        for (std::size_t c = 0; c < p; ++c) {
          const m::hd_step st = m::hd_ag_step(h, n, c, s);
          if (!st.receives) continue;
          const m::hd_step from = m::hd_ag_step(h, n, st.partner, s);
          REQUIRE(from.sends);
          REQUIRE(from.send == st.recv);
          for (std::size_t i = st.recv.offset; i < st.recv.offset + st.recv.count; ++i) {
            REQUIRE(before[st.partner][i] == i + 1);  // only what the sender has
            buf[c][i] = before[st.partner][i];
          }
        }
      }
      for (std::size_t c = 0; c < p; ++c)
        for (std::size_t i = 0; i < n; ++i) wrong += buf[c][i] != i + 1;
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("halving-doubling: steps, peers, bytes and cost by hand") {
  // p = 6, 600 floats, coordinate 1 (v = 0 of the pair 0-1): fold in 2400 B from 0,
  // exchange 800 B with 4 (m = 2: keeps blocks 0-3, sends 4-5), 800 B with 3 (keeps
  // 0-1, sends 2-3), hand 400 B (block 0) to 0.
  using m::algorithm;
  const algorithm hd[] = {algorithm::halving_doubling};
  const m::tuning t{};
  const auto pl = m::make_plan(m::collective::reduce_scatter, m::parse_topology("ethernet:6"), 1, 100, 4, hd, t);
  REQUIRE(pl.stages.size() == 1);
  const auto& st = pl.stages[0];
  CHECK(st.algo == algorithm::halving_doubling);
  CHECK(st.steps == 4);
  CHECK(st.send_to == std::vector<std::size_t>{4, 3, 0});
  CHECK(st.recv_from == std::vector<std::size_t>{0, 4, 3});
  CHECK(st.bytes_sent == 800 + 800 + 400);
  CHECK(st.bytes_received == 2400 + 1600 + 800);
  // cost: 2 exchanges of 1200 and 600 bytes (halves of the range), plus the fold in
  // of 2400 and the hand-out of 400: 4 messages
  m::link_info l{"l", 1e9, 1e-6, false, m::memory_space::host};
  l.overhead = 1e-7;
  const double g = 1e-10, a = 1e-6 + 1e-7;
  CHECK(m::stage_seconds(m::phase::reduce_scatter, algorithm::halving_doubling, 6, 600, 4, l, g) ==
        doctest::Approx(4 * a + (1200 + 600 + 2400) * (1e-9 + g) + 400 * 1e-9).epsilon(1e-12));
  CHECK(m::stage_seconds(m::phase::all_gather, algorithm::halving_doubling, 6, 600, 4, l, g) ==
        doctest::Approx(4 * a + (1200 + 600 + 2400 + 400) * 1e-9).epsilon(1e-12));
  // a power of two: log2 p messages, (1 - 1/p) of the range
  CHECK(m::stage_seconds(m::phase::all_gather, algorithm::halving_doubling, 8, 800, 4, l, g) ==
        doctest::Approx(3 * a + 2800 * 1e-9).epsilon(1e-12));
}

TEST_CASE("halving-doubling: what automatic picks for a call") {
  using m::algorithm;
  const m::tuning t{};
  const auto ib = m::link_info_of<m::infiniband>();
  auto pick = [&](algorithm chosen, algorithm requested, std::size_t p, std::size_t n, const m::tuning& u) {
    return m::algorithm_for_call(chosen, requested, ib, p, n, 4, u);
  };
  // latency-bound: halving-doubling, powers of two and not
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, 1024, t) == algorithm::halving_doubling);
  CHECK(pick(algorithm::ring, algorithm::automatic, 48, 1024, t) == algorithm::halving_doubling);
  // a power of two never loses in the model; p = 48 sends the range twice more: ring
  // when large
  m::tuning uncapped{};
  uncapped.halving_doubling_max_bytes = SIZE_MAX;
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, 1 << 24, uncapped) == algorithm::halving_doubling);
  CHECK(pick(algorithm::ring, algorithm::automatic, 48, 1 << 24, uncapped) == algorithm::ring);
  // by default, ranges above 64 MiB keep the ring (the scratch is half the range)
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, (64 << 20) / 4, t) == algorithm::halving_doubling);
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, (64 << 20) / 4 + 1, t) == algorithm::ring);
  // what the user asked for, direct, and rings of fewer than 4 stay
  CHECK(pick(algorithm::ring, algorithm::ring, 64, 1024, t) == algorithm::ring);
  CHECK(pick(algorithm::direct, algorithm::automatic, 64, 1024, t) == algorithm::direct);
  CHECK(pick(algorithm::ring, algorithm::automatic, 3, 1, t) == algorithm::ring);
  // the cap, in bytes of the range
  m::tuning capped{};
  capped.halving_doubling_max_bytes = 4096;
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, 1024, capped) == algorithm::halving_doubling);
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, 1025, capped) == algorithm::ring);
  capped.halving_doubling_max_bytes = 0;
  CHECK(pick(algorithm::ring, algorithm::automatic, 64, 1, capped) == algorithm::ring);
  // call_algorithms: the nominal range shrinks by each extent (shm:4 direct first)
  const auto topo = m::parse_topology("shm:4 x infiniband:16");
  std::vector<algorithm> al = {algorithm::direct, algorithm::ring};
  const algorithm req[] = {algorithm::automatic, algorithm::automatic};
  m::tuning c2{};
  c2.halving_doubling_max_bytes = 1000;  // 4000 elements / 4 = 1000 floats = 4000 bytes: over
  m::call_algorithms(topo, req, al, 4000, 4, c2);
  CHECK(al[1] == algorithm::ring);
  m::call_algorithms(topo, req, al, 1000, 4, c2);  // 250 floats = 1000 bytes
  CHECK(al == std::vector<algorithm>{algorithm::direct, algorithm::halving_doubling});
}

TEST_CASE("recursive doubling and trees: steps, peers, bytes and cost by hand") {
  using m::algorithm;
  const m::tuning t{};
  // all_reduce of 100 floats on ethernet:6 by recursive doubling, coordinate 1 (v = 0
  // of the pair 0-1): receives 400 B from 0 (fold in), exchanges 400 B with 3 (m = 1)
  // and with 4 (m = 2), hands 400 B to 0: one stage, no all-gather.
  const algorithm rd[] = {algorithm::recursive_doubling};
  const auto pl = m::make_plan(m::collective::all_reduce, m::parse_topology("ethernet:6"), 1, 100, 4, rd, t);
  REQUIRE(pl.stages.size() == 1);
  const auto& st = pl.stages[0];
  CHECK(st.ph == m::phase::all_reduce);
  CHECK(st.steps == 4);
  CHECK(st.recv_from == std::vector<std::size_t>{0, 3, 4});
  CHECK(st.send_to == std::vector<std::size_t>{3, 4, 0});
  CHECK(st.bytes_sent == 1200);
  CHECK(st.bytes_received == 1200);
  CHECK(st.range == m::block_range{0, 100});
  // With a dimension before it, it works on that dimension's block, whole: shm:2 x
  // ethernet:4 (direct, then recursive doubling), rank 5 = (1, 2): block 1 of 100 is
  // [50, 100); 2 exchanges of 200 B; then the all-gather of dimension 0 only.
  const algorithm mixed[] = {algorithm::direct, algorithm::recursive_doubling};
  const auto p2 = m::make_plan(m::collective::all_reduce, m::parse_topology("shm:2 x ethernet:4"), 5, 100, 4, mixed, t);
  REQUIRE(p2.stages.size() == 3);
  CHECK(p2.stages[1].ph == m::phase::all_reduce);
  CHECK(p2.stages[1].range == m::block_range{50, 50});
  CHECK(p2.stages[1].bytes_sent == 400);
  CHECK(p2.stages[2].ph == m::phase::all_gather);
  CHECK(p2.stages[2].dim == 0);
  // cost: L exchanges of the whole range with a fold, plus the fold in and hand out
  m::link_info l{"l", 1e9, 1e-6, false, m::memory_space::host};
  l.overhead = 1e-7;
  const double g = 1e-10, a = 1e-6 + 1e-7;
  CHECK(m::stage_seconds(m::phase::all_reduce, algorithm::recursive_doubling, 6, 100, 4, l, g) ==
        doctest::Approx(4 * a + 3 * 400 * (1e-9 + g) + 400 * 1e-9).epsilon(1e-12));
  CHECK(m::stage_seconds(m::phase::all_reduce, algorithm::recursive_doubling, 8, 100, 4, l, g) ==
        doctest::Approx(3 * (a + 400 * (1e-9 + g))).epsilon(1e-12));
  // trees: ceil(log2 p) messages of the whole buffer, folds on the way for reduce
  CHECK(m::tree_steps(1) == 0);
  CHECK(m::tree_steps(2) == 1);
  CHECK(m::tree_steps(5) == 3);
  CHECK(m::tree_steps(8) == 3);
  CHECK(m::stage_seconds(m::phase::broadcast, algorithm::ring, 5, 100, 4, l, g) ==
        doctest::Approx(3 * (a + 400 * 1e-9)).epsilon(1e-12));
  CHECK(m::stage_seconds(m::phase::reduce, algorithm::ring, 5, 100, 4, l, g) ==
        doctest::Approx(3 * (a + 400 * (1e-9 + g))).epsilon(1e-12));
  // A broadcast tree from root 2 over 5 ranks (v = c - 2 mod 5): step 0 v0 -> v1
  // (2 -> 3), step 1 v0 -> v2 (2 -> 4) and v1 -> v3 (3 -> 0), step 2 v0 -> v4 (2 -> 1).
  // Rank 3 receives from 2 and sends to 0; the root sends to 3, 4 and 1.
  const algorithm ring1[] = {algorithm::ring};
  const auto bt = m::make_plan(m::collective::broadcast, m::parse_topology("ethernet:5"), 3, 100, 4, ring1, t, 2,
                               "float", "-", 0, true);
  REQUIRE(bt.stages.size() == 1);
  CHECK(bt.stages[0].ph == m::phase::broadcast);
  CHECK(bt.stages[0].recv_from == std::vector<std::size_t>{2});
  CHECK(bt.stages[0].send_to == std::vector<std::size_t>{0});
  const auto br = m::make_plan(m::collective::broadcast, m::parse_topology("ethernet:5"), 2, 100, 4, ring1, t, 2,
                               "float", "-", 0, true);
  CHECK(br.stages[0].send_to == std::vector<std::size_t>{3, 4, 1});
}

TEST_CASE("recursive doubling and trees: what automatic picks for a call") {
  using m::algorithm;
  const m::tuning t{};
  const auto topo = m::parse_topology("nvlink:4 x infiniband:8 x infiniband:8");
  const algorithm req[] = {algorithm::automatic, algorithm::automatic, algorithm::automatic};
  auto pick = [&](std::size_t n, const m::tuning& u, const algorithm* asked = nullptr) {
    std::vector<algorithm> al = {algorithm::direct, algorithm::ring, algorithm::ring};
    m::algorithms_for_call(m::collective::all_reduce, topo, std::span<const algorithm>(asked ? asked : req, 3), al,
                           n, 4, u);
    return al;
  };
  const algorithm D = algorithm::direct, HD = algorithm::halving_doubling, RD = algorithm::recursive_doubling;
  // 16 bytes: every latency counts; both inter-node dimensions double whole ranges
  CHECK(pick(4, t) == std::vector<algorithm>{D, RD, RD});
  // 4 MiB: over the cap; halving-doubling (the range is under its 4 MiB cap)
  CHECK(pick(1 << 20, t) == std::vector<algorithm>{D, HD, HD});
  // the cap, and what the user asked for
  m::tuning off{};
  off.recursive_doubling_max_bytes = 0;
  CHECK(pick(4, off) == std::vector<algorithm>{D, HD, HD});
  const algorithm ring_last[] = {algorithm::automatic, algorithm::automatic, algorithm::ring};
  CHECK(pick(4, t, ring_last)[2] == algorithm::ring);  // and so nothing before it either
  CHECK(pick(4, t, ring_last)[1] != RD);
  // the other collectives run halving-doubling where recursive doubling was asked for
  std::vector<algorithm> al = {D, RD, RD};
  m::algorithms_for_call(m::collective::reduce_scatter, topo, req, al, 4 * 256, 4, off);
  CHECK(al == std::vector<algorithm>{D, HD, HD});
  // trees for small broadcast and reduce, not large ones, not non-commutative reduce
  const std::vector<algorithm> b = {D, HD, HD};
  CHECK(m::trees_for_call(m::collective::broadcast, topo, req, b, 16, 4, t, true));
  CHECK(m::trees_for_call(m::collective::reduce, topo, req, b, 16, 4, t, true));
  CHECK_FALSE(m::trees_for_call(m::collective::reduce, topo, req, b, 16, 4, t, false));
  CHECK_FALSE(m::trees_for_call(m::collective::broadcast, topo, req, b, 1 << 20, 4, t, true));
  CHECK_FALSE(m::trees_for_call(m::collective::broadcast, topo, req, b, 16, 4, off, true));
  CHECK_FALSE(m::trees_for_call(m::collective::all_reduce, topo, req, b, 16, 4, t, true));
  CHECK_FALSE(m::trees_for_call(m::collective::broadcast, topo, ring_last, b, 16, 4, t, true));
}

// What File::parse(text, source) throws (its message), checking the argument it names.
template <class File>
std::string parse_error(const std::string& text, const std::string& source, const std::string& argument) {
  try {
    File::parse(text, source);
  } catch (const m::invalid_argument& e) {
    CHECK(e.argument() == argument);
    return e.what();
  }
  return "no error";
}

TEST_CASE("profile: measured points become the link's curve, which the cost model reads") {
  // ethernet measured at 8 B (10 us), 64 KiB (30 us), 1 MiB (200 us): latency 10 us,
  // busy 0 / 20 / 190 us at those sizes, linear between, the last slope beyond.
  m::profile p;
  m::link_info eth = m::link_info_of<m::ethernet>();
  p.links = {eth};
  p.points = {{"ethernet", 0, 1048576, 200e-6}, {"ethernet", 0, 8, 10e-6}, {"ethernet", 0, 65536, 30e-6}};
  auto t = m::parse_topology("ethernet:4");
  p.apply(t);
  const m::link_info& l = t.dim(0).link;
  REQUIRE(l.curve.points == 3);
  CHECK(l.latency == 10e-6);
  CHECK(l.overhead == 0);
  CHECK(l.busy_seconds(8) == doctest::Approx(0.0));
  CHECK(l.busy_seconds(65536) == doctest::Approx(20e-6));
  CHECK(l.busy_seconds((8 + 65536) / 2.0) == doctest::Approx(10e-6));
  CHECK(l.busy_seconds(1048576) == doctest::Approx(190e-6));
  const double slope = 170e-6 / (1048576.0 - 65536.0);
  CHECK(l.busy_seconds(2097152) == doctest::Approx(190e-6 + 1048576.0 * slope));
  // a ring stage: (p-1) messages of a block, each latency + busy; per-rank already
  // (ports are not applied to a measured curve)
  CHECK(t.rank_link(0).curve == l.curve);
  CHECK(m::stage_seconds(m::phase::all_gather, m::algorithm::ring, 4, 4 * 16384, 4, t.rank_link(0), 0) ==
        doctest::Approx(3 * (10e-6 + 20e-6)));
  // two dimensions of one link (a split ring) measured at the same sizes: averaged
  p.points = {{"ethernet", 0, 8, 10e-6}, {"ethernet", 1, 8, 12e-6}, {"ethernet", 0, 65536, 30e-6},
              {"ethernet", 1, 65536, 34e-6}};
  auto w = m::parse_topology("ethernet:4");
  p.apply(w);
  REQUIRE(w.dim(0).link.curve.points == 2);
  CHECK(w.dim(0).link.latency == doctest::Approx(11e-6));
  CHECK(w.dim(0).link.busy_seconds(65536) == doctest::Approx(21e-6));
  CHECK(w.dim(0).link.busy_seconds(2 * 65536.0) == doctest::Approx(21e-6 * (2 * 65536.0 - 8) / (65536.0 - 8)));
  // without points (or one), the fitted figures
  p.points.resize(1);
  auto u = m::parse_topology("ethernet:4");
  p.apply(u);
  CHECK(u.dim(0).link.curve.points == 0);
  CHECK(u.dim(0).link == eth);
}

TEST_CASE("profile: trains split a message's time into latency and busy time (LogGP's gap)") {
  // ethernet at 8 B: 10 us alone, 12 us for a train of 3 (busy 1 us, latency 9 us);
  // 64 KiB: 30 us alone, 50 us for 3 (busy 10, latency 20); 1 MiB: 200 us, no
  // train: the latency stays 20 us, busy 180 us.
  m::profile p;
  p.links = {m::link_info_of<m::ethernet>()};
  p.points = {{"ethernet", 0, 8, 10e-6}, {"ethernet", 0, 65536, 30e-6}, {"ethernet", 0, 1048576, 200e-6}};
  p.trains = {{"ethernet", 0, 65536, 3, 50e-6}, {"ethernet", 0, 8, 3, 12e-6}};
  const m::link_info l = p.with_curve(*p.find("ethernet"));
  REQUIRE(l.curve.points == 3);
  CHECK(l.latency == doctest::Approx(9e-6));
  CHECK(l.latency_seconds(8) == doctest::Approx(9e-6));
  CHECK(l.busy_seconds(8) == doctest::Approx(1e-6));
  CHECK(l.latency_seconds(65536) == doctest::Approx(20e-6));
  CHECK(l.busy_seconds(65536) == doctest::Approx(10e-6));
  CHECK(l.latency_seconds((8 + 65536) / 2.0) == doctest::Approx(14.5e-6));  // linear between points
  CHECK(l.busy_seconds((8 + 65536) / 2.0) == doctest::Approx(5.5e-6));
  CHECK(l.latency_seconds(1048576) == doctest::Approx(20e-6));
  CHECK(l.busy_seconds(1048576) == doctest::Approx(180e-6));
  CHECK(l.latency_seconds(1e9) == doctest::Approx(20e-6));  // flat beyond the last point
  // a ring stage pays latency + busy per message; the pipeline's busy-only link
  // keeps the busy time alone
  CHECK(m::stage_seconds(m::phase::all_gather, m::algorithm::ring, 4, 4 * 16384, 4, l, 0) ==
        doctest::Approx(3 * (20e-6 + 10e-6)));
  CHECK(m::stage_seconds(m::phase::all_gather, m::algorithm::ring, 4, 4 * 16384, 4, l.busy_only(), 0) ==
        doctest::Approx(3 * 10e-6));
  // a train faster than its message alone (noise) counts as all latency; one slower
  // than its messages one after the other, as all busy
  p.trains = {{"ethernet", 0, 65536, 3, 25e-6}, {"ethernet", 0, 8, 3, 40e-6}};
  const m::link_info c = p.with_curve(*p.find("ethernet"));
  CHECK(c.curve.latency[0] == 0);
  CHECK(c.curve.seconds[0] == doctest::Approx(10e-6));
  CHECK(c.curve.latency[1] == doctest::Approx(30e-6));
  CHECK(c.curve.seconds[1] == 0);
  // two dimensions of the link with trains of different lengths: busy is their mean
  p.points = {{"ethernet", 0, 8, 10e-6}, {"ethernet", 1, 8, 10e-6}, {"ethernet", 0, 65536, 30e-6},
              {"ethernet", 1, 65536, 30e-6}};
  p.trains = {{"ethernet", 0, 65536, 3, 50e-6}, {"ethernet", 1, 65536, 5, 78e-6}};  // busy 10 and 12 us
  const m::link_info two = p.with_curve(*p.find("ethernet"));
  CHECK(two.busy_seconds(65536) == doctest::Approx(11e-6));
  CHECK(two.latency_seconds(65536) == doctest::Approx(19e-6));
}

TEST_CASE("profile: text round trip, exact doubles, errors naming the line, applied by link name") {
  m::profile p;
  p.topology = "shm:2 x ethernet:3";
  p.ranks = 6;
  m::link_info eth{"ethernet", 1.0 / 3.0 * 1e10, 2.5e-5 / 3.0, false, m::memory_space::host};
  eth.ports = 1;
  eth.overhead = 1e-6 / 7.0;
  m::link_info sh{"shm", 5e9, 1e-6, true, m::memory_space::host};
  p.links = {sh, eth};
  p.points = {{"shm", 0, 8, 1.25e-6}, {"ethernet", 1, 65536, 1.0 / 3.0 * 1e-4}};
  p.trains = {{"ethernet", 1, 65536, 4, 1.0 / 7.0 * 1e-3}};
  const std::string text = p.to_string();
  CHECK(contains(text, "\ntrain ethernet 1 65536 4 "));
  CHECK(text.rfind("mdring-profile 1\ntopology shm:2 x ethernet:3\nranks 6\nlink shm=", 0) == 0);
  const m::profile q = m::profile::parse(text);
  CHECK(q == p);  // every double back bit for bit
  CHECK(q.find("ethernet")->overhead == eth.overhead);
  CHECK(q.find("nvlink") == nullptr);
  // comments and blank lines are skipped
  CHECK(m::profile::parse("# a comment\n\nmdring-profile 1  # trailing\nlink x=1e9,0\n").links.at(0).bandwidth == 1e9);
  auto error_of = [](const std::string& t) { return parse_error<m::profile>(t, "test.profile", "profile"); };
  CHECK(error_of("link x=1e9,0\n") ==
        "mdring::profile: test.profile, line 1: expected \"mdring-profile 1\" first (is this a profile written by "
        "mdring::calibrate?)");
  CHECK(error_of("") == "mdring::profile: test.profile, line 0: empty: expected \"mdring-profile 1\"");
  CHECK(error_of("mdring-profile 1\nlinks x\n") == "mdring::profile: test.profile, line 2: unknown line \"links\"");
  CHECK(contains(error_of("mdring-profile 1\n\nlink x=fast,0\n"), "line 3: mdring::parse_link: \"x=fast,0\": the bandwidth"));
  CHECK(contains(error_of("mdring-profile 1\nlink x=1,0\nlink x=2,0\n"), "line 3: link x appears twice"));
  CHECK(contains(error_of("mdring-profile 1\npoint x 1 2\n"), "line 2: point takes LINK DIM BYTES SECONDS"));
  CHECK(contains(error_of("mdring-profile 1\ntrain x 1 2 1e-5\n"),
                 "line 2: train takes LINK DIM BYTES MESSAGES SECONDS, with at least 2 messages"));
  CHECK(contains(error_of("mdring-profile 1\ntrain x 1 2 1 1e-5\n"), "line 2: train takes"));
  // Found by tests/fuzz (fuzz_text): each field is checked, nothing is left over,
  // and a rejection names the line. Before, these were accepted and did not round-trip.
  CHECK(contains(error_of("mdring-profile 1\npoint x -1 2 1e-5\n"), "line 2: point takes"));  // not 2^64 - 1
  CHECK(contains(error_of(std::string("mdring-profile 1\npoint \0 1 2 1e-5\n", 28)), "line 2: point takes"));
  CHECK(contains(error_of("mdring-profile 1\npoint x 1 2 nan\n"), "line 2: point takes"));
  CHECK(contains(error_of("mdring-profile 1\npoint x 1 2 1e-5 9\n"), "line 2: unexpected text after point"));
  CHECK(contains(error_of("mdring-profile 1\nlink x=1e9,2.0\t0e-05,ring\n"), "line 2: unexpected text after link"));
  CHECK(contains(error_of("mdring-profile 1\nranks 6 x\n"), "line 2: unexpected text after ranks"));
  CHECK(contains(error_of("mdring-profile 1\ntopology sh\x8f:2 x ethernet:3\n"), "line 2: topology: mdring::parse_topology"));
  CHECK(contains(error_of("mdring-profile 1\nlink x=1e9,0,ports=1e30\n"), "not a whole number up to 10^6"));
  CHECK(contains(error_of("mdring-profile 2\n"), "line 1: expected \"mdring-profile 1\""));
  {  // a long link name: its line whole, its figures with it (a fixed buffer cut them)
    m::profile longp;
    const std::string name(300, 'x');
    m::link_info l{name, 5e9, 1e-6, true, m::memory_space::host};
    longp.links = {l};
    longp.points = {{name, 0, 8, 1.0 / 3.0}};
    longp.trains = {{name, 1, 65536, 4, 1.0 / 7.0}};
    CHECK(m::profile::parse(longp.to_string()) == longp);
  }
  // applied by name: ethernet and shm take the profile's figures, nvlink keeps its own
  auto t = m::parse_topology("nvlink:2 x shm:2 x ethernet:3");
  p.apply(t);
  CHECK(t.dim(0).link == m::link_info_of<m::nvlink>());
  CHECK(t.dim(1).link == sh);
  CHECK(t.dim(2).link == eth);
  // save and load through a file
  const std::string path = "test_plan_profile.txt";
  p.save(path);
  CHECK(m::profile::load(path) == p);
  std::remove(path.c_str());
  CHECK_THROWS_AS(m::profile::load(path), m::invalid_argument);
  // explain() plans with a profile named in the options
  m::options o;
  o.profile = "test_plan_profile2.txt";
  m::profile slow;
  slow.links = {m::link_info{"ethernet", 1e6, 1e-3, false, m::memory_space::host}};
  slow.save(o.profile);
  const std::string with = m::explain(m::parse_topology("ethernet:2"), 1000, m::collective::all_reduce, 0, m::sum, o);
  CHECK(contains(with, "latency 1.000 ms"));
  // the built-in figures are called typical, measured ones are not
  CHECK_FALSE(contains(with, "built-in"));
  const std::string plain = m::explain(m::parse_topology("nvlink:4 x infiniband:64"), 1000);
  CHECK(contains(plain, "figures of nvlink, infiniband: the built-in typical ones, not this machine's; "
                        "mdring-calibrate measures them"));
  std::remove(o.profile.c_str());
  try {
    m::explain(m::parse_topology("ethernet:2"), 1000, m::collective::all_reduce, 0, m::sum, o);
    FAIL("a missing profile was accepted");
  } catch (const m::invalid_argument& e) {
    CHECK(e.argument() == "options.profile");
    CHECK(contains(e.what(), "mdring::explain: options.profile (or MDRING_PROFILE): mdring::profile::load: cannot read"));
  }
}

TEST_CASE("measured planning keeps a plan only when it beats the estimate's by more than the runs' spread") {
  // medians: the estimate's plan first
  const std::vector<double> t = {10.0, 9.85, 9.7, 9.2, 10.4};
  // spread 0 (a quiet or simulated machine): the margin is 1 %: 9.7, 9.2 qualify; the fastest, 9.2
  CHECK(m::pick_measured(t, 0.0) == 3);
  // spread 3 %: the margin is 3 %: only 9.2 (8 % faster)
  CHECK(m::pick_measured(t, 0.03) == 3);
  CHECK(m::pick_measured({10.0, 9.85, 9.75}, 0.03) == 0);  // 1.5 % and 2.5 %: neither
  CHECK(m::pick_measured({10.0, 9.85, 9.75}, 0.0) == 2);   // both beat 1 %: the faster
  // spread 20 % (a noisy machine): the margin stays at most 5 %: 9.4 qualifies, 9.6 does not
  CHECK(m::pick_measured({10.0, 9.6}, 0.2) == 0);
  CHECK(m::pick_measured({10.0, 9.4}, 0.2) == 1);
  // 0.5 % faster is not enough, even on a quiet machine
  CHECK(m::pick_measured({10.0, 9.95}, 0.0) == 0);
  CHECK(m::measured_margin(0.0) == 0.01);
  CHECK(m::measured_margin(0.025) == 0.025);
  CHECK(m::measured_margin(1.0) == 0.05);
  CHECK(m::pick_measured({10.0}, 0.0) == 0);
}

TEST_CASE("wisdom: text round trip, size classes, errors naming the line") {
  using m::algorithm;
  m::wisdom w;
  w.key = "0123456789abcdef";
  w.all_reduce[{4, 20}] = {{algorithm::direct, algorithm::halving_doubling}, 8, 2, 1.5e-3, 2.5e-3, 6};
  w.all_reduce[{8, 3}] = {{algorithm::ring}, 1, 4, 1e-6, 1e-6, 3};
  const std::string text = w.to_string();
  CHECK(text == "mdring-wisdom 1\nkey 0123456789abcdef\n"
                "all_reduce 4 20 direct,halving_doubling 8 2 0.0015 0.0025 6\n"
                "all_reduce 8 3 ring 1 4 1e-06 1e-06 3\n");
  CHECK(m::wisdom::parse(text) == w);
  // calls within a factor 2 share a class: 1 MiB .. 2 MiB - 1 of floats is class 20
  CHECK(w.find(4, 1 << 20) == &w.all_reduce.at({4, 20}));
  CHECK(w.find(4, (2 << 20) - 1) == &w.all_reduce.at({4, 20}));
  CHECK(w.find(4, 2 << 20) == nullptr);
  CHECK(w.find(8, 8) == &w.all_reduce.at({8, 3}));
  auto error_of = [](const std::string& t) { return parse_error<m::wisdom>(t, "w", "wisdom"); };
  CHECK(error_of("key x\n") == "mdring::wisdom: w, line 1: expected \"mdring-wisdom 1\" first");
  CHECK(contains(error_of("mdring-wisdom 1\nall_reduce 4 20 ring 1\n"), "line 2: all_reduce takes ELEMENT_SIZE"));
  CHECK(contains(error_of("mdring-wisdom 1\nall_reduce 4 20 tree 1 1 0 0 1\n"), "unknown algorithm \"tree\""));
  CHECK(contains(error_of("mdring-wisdom 1\nall_reduce 4 20 ring 1 9 0 0 1\n"), "depth (1 to 8)"));
  // Found by tests/fuzz: no sign, no trailing text, a hexadecimal key.
  CHECK(contains(error_of("mdring-wisdom 1\nall_reduce -4 20 ring 1 1 0 0 1\n"), "line 2: all_reduce takes"));
  CHECK(contains(error_of("mdring-wisdom 1\nall_reduce 4 20 ring 1 1 0 0 1 7\n"), "line 2: all_reduce takes"));
  CHECK(contains(error_of("mdring-wisdom 1\nall_reduce 4 20 ring 1 1 inf 0 1\n"), "line 2: all_reduce takes"));
  CHECK(contains(error_of("mdring-wisdom 1\nkey xyz\n"), "line 2: key takes the fingerprint's hexadecimal digits"));
  // a missing file is no wisdom yet
  CHECK(m::wisdom::load("no-such-wisdom-file").all_reduce.empty());
}

TEST_CASE("wisdom: the drop-in's native lines, sections per key, a save that keeps the rest of the file") {
  using m::algorithm;
  m::wisdom a;
  a.key = "00000000000000aa";
  a.native[{"all_reduce", 20}] = {true, 1.5e-3, 7.5e-4, 5};
  a.native[{"broadcast", 3}] = {false, 2e-6, 3e-6, 5};
  const std::string text = a.to_string();
  CHECK(text == "mdring-wisdom 1\nkey 00000000000000aa\n"
                "native all_reduce 20 mdring 0.0015 0.00075 5\n"
                "native broadcast 3 mpi 2e-06 3e-06 5\n");
  CHECK(m::wisdom::parse(text) == a);
  auto error_of = [](const std::string& t) { return parse_error<m::wisdom>(t, "w", "wisdom"); };
  CHECK(contains(error_of("mdring-wisdom 1\nnative all_reduce 20 both 0 0 5\n"), "line 2: native takes COLLECTIVE"));
  CHECK(contains(error_of("mdring-wisdom 1\nnative all_reduce 64 mpi 0 0 5\n"), "line 2: native takes"));
  CHECK(contains(error_of("mdring-wisdom 1\nnative All-reduce 3 mpi 0 0 5\n"), "line 2: native takes"));
  CHECK(contains(error_of("mdring-wisdom 1\nkey 0a\nkey 0a\n"), "line 3: key 0a appears twice"));

  // Two sections in one file: each save replaces its own lines only.
  const std::string path = "test_plan_sections.wisdom";
  std::remove(path.c_str());
  m::wisdom b;
  b.key = "00000000000000bb";
  b.all_reduce[{4, 20}] = {{algorithm::ring}, 4, 2, 1e-3, 1.1e-3, 3};
  a.save(path);
  b.save(path, 1);
  CHECK(m::wisdom::load(path, a.key) == a);
  CHECK(m::wisdom::load(path, b.key) == b);
  CHECK(m::wisdom::load(path) == a);  // no key: the first section
  // A second writer of section a (measured planning beside the drop-in) adds its
  // lines; a's native lines stay, and a line both have takes the newer value.
  m::wisdom a2;
  a2.key = a.key;
  a2.all_reduce[{8, 10}] = {{algorithm::halving_doubling}, 1, 1, 2e-6, 3e-6, 2};
  a2.native[{"broadcast", 3}] = {true, 2e-6, 1e-6, 5};
  a2.save(path, 2);
  const m::wisdom merged = m::wisdom::load(path, a.key);
  CHECK(merged.all_reduce.size() == 1);
  CHECK(merged.native.size() == 2);
  CHECK(merged.native.at({"broadcast", 3}).mdring);
  CHECK(merged.native.at({"all_reduce", 20}) == a.native.at({"all_reduce", 20}));
  CHECK(m::wisdom::load(path, b.key) == b);
  // A key the file does not hold: empty, with the key.
  const m::wisdom none = m::wisdom::load(path, "00000000000000cc");
  CHECK(none.empty());
  CHECK(none.key == "00000000000000cc");
  std::remove(path.c_str());
}

TEST_CASE("DESIGN.md: a flat 256-rank ring pays 510 latencies; 4 x 64 pays 132") {
  const auto flat = m::parse_topology("infiniband:256");
  const auto two = m::parse_topology("nvlink:4 x infiniband:64");
  const std::size_t N = 256 * 1024;  // divisible by every extent
  const auto pf = plan_of(m::collective::all_reduce, flat, 5, N, all(1, m::algorithm::ring));
  const auto p2 = plan_of(m::collective::all_reduce, two, 5, N, all(2, m::algorithm::ring));
  CHECK(total_steps(pf) == 510);  // 2 (256 - 1)
  CHECK(total_steps(p2) == 132);  // 2 (4 - 1) + 2 (64 - 1)
  // with the automatic choice, the NVLink dimension runs direct: 1 + 63 + 63 + 1 steps
  const auto pa = plan_of(m::collective::all_reduce, two, 5, N, {m::algorithm::direct, m::algorithm::ring});
  CHECK(total_steps(pa) == 128);

  // "sends only a quarter of the data over the slow dimension per GPU"
  std::size_t slow = 0;
  for (auto& st : p2.stages)
    if (st.dim == 1) slow += st.bytes_sent;
  CHECK(slow == 2 * (N / 4) / 64 * 63 * 4);  // 2 (p-1)/p N_1 bytes, N_1 = N / 4
  CHECK(pf.bytes_sent() == 2 * N / 256 * 255 * 4);
  CHECK(4 * slow <= pf.bytes_sent());

  // The predicted time is DESIGN.md's T = sum_i [2 (p_i-1) alpha_i + 2 (p_i-1)/p_i N_i beta_i
  // + (p_i-1)/p_i N_i gamma_i] (bytes), when every N_i is divisible by p_i.
  // B_i is the rank's bandwidth (its share of the node's InfiniBand port), and every
  // message also costs the link's overhead o_i next to its latency alpha_i.
  const m::tuning tune{};
  double T = 0, Ni = double(N) * 4;
  for (std::size_t d = 0; d < two.ndims(); ++d) {
    const auto l = two.rank_link(d);
    const double p = double(two.extent(d));
    T += 2 * (p - 1) * (l.latency + l.overhead) + 2 * (p - 1) / p * Ni / l.bandwidth +
         (p - 1) / p * Ni * tune.gamma(l.space);
    Ni /= p;
  }
  CHECK(p2.seconds() == doctest::Approx(T).epsilon(1e-12));
}

TEST_CASE("make_plan: stage order of the five collectives") {
  using m::phase;
  const auto t = shm_topology({2, 3});
  const auto ring2 = all(2, m::algorithm::ring);
  using V = std::vector<std::pair<phase, std::size_t>>;
  CHECK(phases(plan_of(m::collective::all_reduce, t, 0, 10, ring2)) ==
        V{{phase::reduce_scatter, 0}, {phase::reduce_scatter, 1}, {phase::all_gather, 1}, {phase::all_gather, 0}});
  CHECK(phases(plan_of(m::collective::reduce_scatter, t, 0, 10, ring2)) ==
        V{{phase::reduce_scatter, 0}, {phase::reduce_scatter, 1}});
  CHECK(phases(plan_of(m::collective::all_gather, t, 0, 10, ring2)) ==
        V{{phase::all_gather, 1}, {phase::all_gather, 0}});
  CHECK(phases(plan_of(m::collective::broadcast, t, 0, 10, ring2)) ==
        V{{phase::scatter, 0}, {phase::scatter, 1}, {phase::all_gather, 1}, {phase::all_gather, 0}});
  CHECK(phases(plan_of(m::collective::reduce, t, 0, 10, ring2)) ==
        V{{phase::reduce_scatter, 0}, {phase::reduce_scatter, 1}, {phase::gather, 1}, {phase::gather, 0}});

  // dimensions of extent 1 have no stage
  const auto t13 = shm_topology({1, 3, 1});
  CHECK(phases(plan_of(m::collective::all_reduce, t13, 1, 10, all(3, m::algorithm::ring))) ==
        V{{phase::reduce_scatter, 1}, {phase::all_gather, 1}});
  // one rank: no stage at all
  const auto one = plan_of(m::collective::all_reduce, shm_topology({1}), 0, 10, all(1, m::algorithm::ring));
  CHECK(one.stages.empty());
  CHECK(contains(one.to_string(), "no stage"));

  // the plan's header fields
  const auto rs = plan_of(m::collective::reduce_scatter, t, 4, 10, ring2);
  CHECK(rs.count == 10);
  CHECK(rs.elements == 60);  // per-rank count times the number of ranks
  CHECK(rs.coords == std::vector<std::size_t>{0, 2});
  CHECK(plan_of(m::collective::all_gather, t, 0, 10, ring2).elements == 60);
  CHECK(plan_of(m::collective::all_gather, t, 0, 10, ring2).op == "-");
  CHECK(plan_of(m::collective::broadcast, t, 0, 10, ring2).elements == 10);
  CHECK(plan_of(m::collective::broadcast, t, 0, 10, ring2).op == "-");
  CHECK(plan_of(m::collective::all_reduce, t, 0, 10, ring2).op == "sum");

  CHECK(m::to_string(m::collective::all_reduce) == "all_reduce");
  CHECK(m::to_string(m::collective::reduce_scatter) == "reduce_scatter");
  CHECK(m::to_string(m::collective::all_gather) == "all_gather");
  CHECK(m::to_string(m::collective::broadcast) == "broadcast");
  CHECK(m::to_string(m::collective::reduce) == "reduce");
  CHECK(m::to_string(m::phase::reduce_scatter) == "reduce-scatter");
  CHECK(m::to_string(m::phase::all_gather) == "all-gather");
  CHECK(m::to_string(m::phase::scatter) == "scatter");
  CHECK(m::to_string(m::phase::gather) == "gather");
  CHECK(m::to_string(m::algorithm::ring) == "ring");
  CHECK(m::to_string(m::algorithm::direct) == "direct");
  CHECK(m::to_string(m::algorithm::automatic) == "automatic");
}

TEST_CASE("make_plan: ranges, peers and bytes of a hand-computed all_reduce") {
  // shm:2 x shm:3, 10 floats, rank 0 = (0,0).
  //   rs dim 0: range [0,10) in blocks 5,5; sends block 1 (20 bytes) to rank 1
  //   rs dim 1: range [0,5) in blocks 2,2,1; ring sends blocks 2 then 1 (3 elements) to rank 2
  //   ag dim 1: ring sends blocks 0 then 2 (3 elements); direct sends block 0 to both peers (4)
  //   ag dim 0: sends block 0 (20 bytes)
  const auto t = shm_topology({2, 3});
  const auto pr = plan_of(m::collective::all_reduce, t, 0, 10, all(2, m::algorithm::ring));
  REQUIRE(pr.stages.size() == 4);
  const auto& s0 = pr.stages[0];
  CHECK(s0.range == m::block_range{0, 10});
  CHECK(s0.extent == 2);
  CHECK(s0.coordinate == 0);
  CHECK(s0.steps == 1);
  CHECK(s0.send_to == std::vector<std::size_t>{1});
  CHECK(s0.recv_from == std::vector<std::size_t>{1});
  CHECK(s0.bytes_sent == 20);
  CHECK(s0.link == m::link_info_of<m::shm>());
  const auto& s1 = pr.stages[1];
  CHECK(s1.range == m::block_range{0, 5});
  CHECK(s1.steps == 2);
  CHECK(s1.send_to == std::vector<std::size_t>{2});
  CHECK(s1.recv_from == std::vector<std::size_t>{4});
  CHECK(s1.bytes_sent == 12);
  CHECK(s1.bytes_received == 16);  // blocks 1 then 0: 2 + 2 elements
  CHECK(pr.stages[2].bytes_sent == 12);
  CHECK(pr.stages[2].bytes_received == 12);
  CHECK(pr.stages[3].bytes_sent == 20);
  CHECK(pr.bytes_sent() == 64);

  // automatic on shm: dimension 0 (two ranks) ring, dimension 1 (three) direct
  const auto pa = plan_of(m::collective::all_reduce, t, 0, 10, {m::algorithm::ring, m::algorithm::direct});
  CHECK(pa.stages[1].algo == m::algorithm::direct);
  CHECK(pa.stages[1].steps == 1);
  CHECK(pa.stages[1].send_to == std::vector<std::size_t>{2, 4});
  CHECK(pa.stages[1].recv_from == std::vector<std::size_t>{2, 4});
  CHECK(pa.stages[1].bytes_sent == 12);
  CHECK(pa.stages[2].bytes_sent == 16);
  CHECK(pa.bytes_sent() == 68);

  // each stage's prediction is stage_seconds of its parameters, and they add up
  double sum = 0;
  for (auto& st : pa.stages) {
    CHECK(st.seconds == m::stage_seconds(st.ph, st.algo, st.extent, st.range.count, 4, st.link,
                                         m::tuning{}.gamma(st.link.space)));
    CHECK(st.seconds > 0);
    sum += st.seconds;
  }
  CHECK(pa.seconds() == doctest::Approx(sum));
}

TEST_CASE("make_plan: broadcast and reduce involve only the root's lines") {
  const auto t = shm_topology({2, 3});
  const auto ring2 = all(2, m::algorithm::ring);
  // broadcast from root 0, 10 floats. Scatter in dim 0 involves ranks 0 and 1 only.
  const auto b0 = plan_of(m::collective::broadcast, t, 0, 10, ring2, 0);
  CHECK(b0.stages[0].participates);
  CHECK(b0.stages[0].algo == m::algorithm::direct);
  CHECK(b0.stages[0].send_to == std::vector<std::size_t>{1});
  CHECK(b0.stages[0].bytes_sent == 20);
  CHECK(b0.stages[1].send_to == std::vector<std::size_t>{2, 4});
  CHECK(b0.stages[1].bytes_sent == 12);  // blocks 1 and 2 of [0,5): 2 + 1 elements
  const auto b1 = plan_of(m::collective::broadcast, t, 1, 10, ring2, 0);
  CHECK(b1.stages[0].participates);
  CHECK(b1.stages[0].recv_from == std::vector<std::size_t>{0});
  CHECK(b1.stages[0].bytes_received == 20);
  CHECK(b1.stages[0].bytes_sent == 0);
  CHECK(b1.stages[1].send_to == std::vector<std::size_t>{3, 5});
  const auto b3 = plan_of(m::collective::broadcast, t, 3, 10, ring2, 0);
  CHECK_FALSE(b3.stages[0].participates);  // (1,1): not on the root's dim-0 line
  CHECK(b3.stages[0].seconds == 0);
  CHECK(b3.stages[0].send_to.empty());
  CHECK(b3.stages[0].recv_from.empty());
  CHECK(b3.stages[1].participates);
  CHECK(b3.stages[1].recv_from == std::vector<std::size_t>{1});
  CHECK(b3.stages[1].bytes_received == 8);  // block 1 of [5,10): 2 elements
  CHECK(b3.stages[2].participates);         // all-gathers involve everybody
  CHECK(b3.stages[3].participates);
  CHECK(contains(b3.to_string(), "(idle)"));
  CHECK(contains(b3.to_string(), "root 0"));

  // reduce to root 4 = (0,2), 10 floats.
  const auto r1 = plan_of(m::collective::reduce, t, 1, 10, ring2, 4);
  REQUIRE(r1.stages.size() == 4);
  CHECK(r1.stages[2].ph == m::phase::gather);
  CHECK(r1.stages[2].participates);
  CHECK(r1.stages[2].send_to == std::vector<std::size_t>{5});
  CHECK(r1.stages[2].bytes_sent == 8);      // block 0 of [5,10)
  CHECK_FALSE(r1.stages[3].participates);  // (1,0): not on the root's dim-0 line (c1 = 2)
  const auto r5 = plan_of(m::collective::reduce, t, 5, 10, ring2, 4);
  CHECK(r5.stages[2].recv_from == std::vector<std::size_t>{1, 3});
  CHECK(r5.stages[3].participates);
  CHECK(r5.stages[3].send_to == std::vector<std::size_t>{4});
  CHECK(r5.stages[3].bytes_sent == 20);
  const auto r4 = plan_of(m::collective::reduce, t, 4, 10, ring2, 4);
  CHECK(r4.stages[3].recv_from == std::vector<std::size_t>{5});
  CHECK(r4.stages[3].bytes_received == 20);
  CHECK(r4.stages[3].bytes_sent == 0);
  // the root and participating counts of every stage
  for (std::size_t st = 0; st < 4; ++st) {
    std::size_t n = 0;
    for (std::size_t r = 0; r < 6; ++r) n += plan_of(m::collective::reduce, t, r, 10, ring2, 4).stages[st].participates;
    CHECK(n == (st == 3 ? 2u : 6u));
  }
}

TEST_CASE("make_plan: bytes sent equal bytes received over all ranks, per stage") {
  for (const auto& e : shapes) {
    if (product(e) > 64) continue;
    const auto t = shm_topology(e);
    const std::size_t P = t.size(), k = e.size();
    for (auto algo : {m::algorithm::ring, m::algorithm::direct})
      for (auto kind : {m::collective::all_reduce, m::collective::reduce_scatter, m::collective::all_gather,
                        m::collective::broadcast, m::collective::reduce})
        for (std::size_t count : {std::size_t(0), std::size_t(1), P + 1, std::size_t(1009)}) {
          const std::size_t root = P / 2;
          INFO("shape ", t.to_string(), " kind ", m::to_string(kind), " algo ", m::to_string(algo), " count ", count);
          // Per stage (dimension and phase): a rank whose line has an empty range
          // has no such stage (as its program has none).
          std::map<std::pair<std::size_t, int>, std::pair<std::size_t, std::size_t>> bytes;  // out, in
          for (std::size_t r = 0; r < P; ++r)
            for (const auto& st : plan_of(kind, t, r, count, all(k, algo), root, 8).stages) {
              auto& b = bytes[{st.dim, int(st.ph)}];
              b.first += st.bytes_sent, b.second += st.bytes_received;
            }
          for (const auto& [key, b] : bytes) CHECK(b.first == b.second);
        }
  }
}

TEST_CASE("explain() prints the plan") {
  constexpr auto topo = m::ring<m::nvlink, 4> * m::ring<m::infiniband, 64>;
  const std::string s = m::explain<float>(topo, 1 << 20, m::collective::all_reduce, 5);
  INFO(s);
  CHECK(contains(s, "all_reduce"));
  CHECK(contains(s, "float"));
  CHECK(contains(s, "reduce-scatter"));
  CHECK(contains(s, "all-gather"));
  CHECK(contains(s, "nvlink"));
  CHECK(contains(s, "infiniband"));
  CHECK(contains(s, "predicted"));
  CHECK(contains(s, "nvlink:4 x infiniband:64"));
  CHECK(contains(s, "rank 5 at (1,1,0)"));
  CHECK(contains(s, "direct"));  // nvlink, 4 ranks: automatic picks direct
  CHECK(contains(s, "ring"));    // infiniband: ring

  m::options blocks;  // scatter/all-gather and reduce-scatter/gather, not trees
  blocks.tune.recursive_doubling_max_bytes = 0;
  const std::string bc = m::explain<double>(topo, 1000, m::collective::broadcast, 0, m::sum, blocks, 3);
  CHECK(contains(bc, "scatter"));
  CHECK(contains(bc, "broadcast"));
  CHECK(contains(bc, "double"));
  CHECK(contains(bc, "root 3"));
  const std::string rd = m::explain<int>(topo, 1000, m::collective::reduce, 0, m::max, blocks, 3);
  CHECK(contains(rd, "gather"));
  CHECK(contains(rd, "max"));
  CHECK(contains(rd, "int32"));
  // The same small calls by default: binomial trees of the whole buffer (8000 and
  // 4000 bytes, under tune.recursive_doubling_max_bytes), 2 + 3 + 3 steps.
  const std::string bt = m::explain<double>(topo, 1000, m::collective::broadcast, 0, m::sum, {}, 3);
  INFO(bt);
  CHECK_FALSE(contains(bt, "scatter"));
  CHECK(contains(bt, "  broadcast  "));
  const std::string rt = m::explain<int>(topo, 1000, m::collective::reduce, 0, m::max, {}, 3);
  CHECK_FALSE(contains(rt, "gather"));
  CHECK(contains(rt, "  reduce  "));

  // the same through a resolved runtime topology
  CHECK(m::explain<float>(m::parse_topology("nvlink:4 x infiniband:*").resolve(256), 1 << 20,
                          m::collective::all_reduce, 5) == s);

  // forcing ring through options
  m::options o;
  o.algorithms = {m::algorithm::ring, m::algorithm::ring};
  const std::string forced = m::explain<float>(topo, 1 << 20, m::collective::all_reduce, 5, m::sum, o);
  CHECK_FALSE(contains(forced, "direct"));
}

TEST_CASE("explain() refuses a dynamic extent and a rank out of range") {
  constexpr auto dyn = m::ring<m::nvlink, 4> * m::ring<m::infiniband>;
  try {
    (void)m::explain<float>(dyn, 100);
    FAIL("explain accepted a dynamic extent");
  } catch (const m::topology_error& e) {
    CHECK(e.argument() == "topology");
    CHECK(contains(e.what(), "mdring::explain: "));
    CHECK(contains(e.what(), "has a dynamic extent"));
    CHECK(contains(e.what(), "nvlink:4 x infiniband:*"));
  }
  CHECK_THROWS_AS((void)m::explain<float>(m::parse_topology("shm:*"), 100), m::topology_error);
  try {
    (void)m::explain<float>(m::ring<m::shm, 4>, 100, m::collective::all_reduce, 4);
    FAIL("explain accepted rank 4 of 4");
  } catch (const m::invalid_argument& e) {
    CHECK(e.argument() == "rank");
  }
}

TEST_CASE("merge_dimensions: adjacent same-link fully connected automatic dimensions run as one") {
  auto merged = [](const std::string& text, std::size_t P, std::vector<m::algorithm> req = {}, m::tuning t = {}) {
    return m::merge_dimensions(m::parse_topology(text).resolve(P), req, t);
  };
  {
    const auto r = merged("shm:2 x shm:*", 4);
    CHECK(r.topology.to_string() == "shm:4");
    CHECK(r.of_user == std::vector<std::size_t>{0, 0});
    CHECK(r.requested == std::vector<m::algorithm>{m::algorithm::automatic});
    // ranks keep their numbers: coordinate c0 + 2 c1 of the written grid
    const auto written = m::parse_topology("shm:2 x shm:2").resolve(4);
    for (std::size_t rank = 0; rank < 4; ++rank) {
      const auto c = written.coordinates(rank);
      CHECK(r.topology.coordinates(rank)[0] == c[0] + 2 * c[1]);
    }
  }
  // three levels merge up to direct_max_extent (8), then a new dimension starts
  CHECK(merged("shm:2 x shm:2 x shm:2 x shm:2", 16).topology.to_string() == "shm:8 x shm:2");
  CHECK(merged("shm:2 x shm:2 x shm:2 x shm:2", 16).of_user == std::vector<std::size_t>{0, 0, 0, 1});
  // a larger direct_max_extent merges all four
  m::tuning wide;
  wide.direct_max_extent = 16;
  CHECK(merged("shm:2 x shm:2 x shm:2 x shm:2", 16, {}, wide).topology.to_string() == "shm:16");
  // different links, rings (not fully connected), explicit algorithms and the switch stop it
  CHECK(merged("nvlink:4 x shm:2", 8).topology.to_string() == "nvlink:4 x shm:2");
  CHECK(merged("infiniband:2 x infiniband:2", 4).topology.to_string() == "infiniband:2 x infiniband:2");
  CHECK(merged("shm:2 x shm:2", 4, {m::algorithm::direct}).topology.to_string() == "shm:2 x shm:2");
  CHECK(merged("shm:2 x shm:2", 4, {m::algorithm::automatic, m::algorithm::ring}).topology.to_string() ==
        "shm:2 x shm:2");
  m::tuning off;
  off.merge_same_link = false;
  CHECK(merged("shm:2 x shm:2", 4, {}, off).topology.to_string() == "shm:2 x shm:2");
  // 3 x 3 = 9 > 8: two dimensions
  CHECK(merged("shm:3 x shm:3", 9).topology.to_string() == "shm:3 x shm:3");
  // nvlink:2 x nvlink:2 x infiniband:* -> nvlink:4 x infiniband:*
  const auto g = merged("nvlink:2 x nvlink:2 x infiniband:*", 16);
  CHECK(g.topology.to_string() == "nvlink:4 x infiniband:4");
  CHECK(g.of_user == std::vector<std::size_t>{0, 0, 1});
}

TEST_CASE("merge_dimensions: a long ring on a switched link runs as a grid of two") {
  auto merged = [](const std::string& text, std::size_t P, std::vector<m::algorithm> req = {}, m::tuning t = {}) {
    return m::merge_dimensions(m::parse_topology(text).resolve(P), req, t);
  };
  // split_factor: the largest divisor up to sqrt(p), from tuning::split_ring_extent (16) on
  CHECK(m::split_factor(16, 16) == 4);
  CHECK(m::split_factor(64, 16) == 8);
  CHECK(m::split_factor(256, 16) == 16);
  CHECK(m::split_factor(24, 16) == 4);   // 4 x 6
  CHECK(m::split_factor(18, 16) == 3);   // 3 x 6
  CHECK(m::split_factor(17, 16) == 0);   // prime: one ring
  CHECK(m::split_factor(15, 16) == 0);   // below the threshold
  CHECK(m::split_factor(15, 4) == 3);
  CHECK(m::split_factor(4, 4) == 2);
  CHECK(m::split_factor(64, 0) == 0);    // 0: never
  {
    const auto r = merged("nvlink:4 x infiniband:*", 4 * 64);
    CHECK(r.topology.to_string() == "nvlink:4 x infiniband:8 x infiniband:8");
    CHECK(r.of_user == std::vector<std::size_t>{0, 1});
    CHECK(r.user_of == std::vector<std::size_t>{0, 1, 1});
    CHECK(r.requested.size() == 3);
    // ranks keep their numbers: the ring coordinate c is c_1 + 8 c_2
    const auto written = m::parse_topology("nvlink:4 x infiniband:64").resolve(256);
    for (std::size_t rank = 0; rank < 256; ++rank) {
      const auto w = written.coordinates(rank), e = r.topology.coordinates(rank);
      REQUIRE(e.size() == 3);
      CHECK(e[0] == w[0]);
      CHECK(e[1] + 8 * e[2] == w[1]);
    }
  }
  CHECK(merged("ethernet:24", 24).topology.to_string() == "ethernet:4 x ethernet:6");
  // not split: below 16 ranks, a prime, a fully connected link, an explicit algorithm, the switch off
  CHECK(merged("infiniband:8", 8).topology.to_string() == "infiniband:8");
  CHECK(merged("infiniband:17", 17).topology.to_string() == "infiniband:17");
  CHECK(merged("shm:16", 16).topology.to_string() == "shm:16");
  CHECK(merged("nvlink:2 x infiniband:16", 32, {m::algorithm::automatic, m::algorithm::ring}).topology.to_string() ==
        "nvlink:2 x infiniband:16");
  m::tuning off;
  off.split_ring_extent = 0;
  CHECK(merged("infiniband:64", 64, {}, off).topology.to_string() == "infiniband:64");
  m::tuning early;
  early.split_ring_extent = 4;
  CHECK(merged("infiniband:8", 8, {}, early).topology.to_string() == "infiniband:2 x infiniband:4");
  // merged and split in one topology
  const auto both = merged("shm:2 x shm:2 x infiniband:*", 4 * 16);
  CHECK(both.topology.to_string() == "shm:4 x infiniband:4 x infiniband:4");
  CHECK(both.of_user == std::vector<std::size_t>{0, 0, 1});
  CHECK(both.user_of == std::vector<std::size_t>{0, 2, 2});
}

TEST_CASE("explain() shows a split ring, and the cost model prefers it") {
  const auto topo = m::parse_topology("nvlink:4 x infiniband:64");
  const std::size_t n = 25'600'000;
  m::options rings;  // (halving-doubling would take 6 steps either way: 64 is a power of two)
  rings.tune.halving_doubling_max_bytes = 0;
  const std::string s = m::explain<float>(topo, n, m::collective::all_reduce, 0, m::sum, rings);
  INFO(s);
  CHECK(contains(s, "split: written as nvlink:4 x infiniband:64, run as nvlink:4 x infiniband:8 x infiniband:8"));
  // merged and split in one: four dimensions written, three run
  const std::string both = m::explain<float>(m::parse_topology("shm:2 x shm:2 x shm:2 x infiniband:16"), n);
  CHECK(contains(both, "merged and split: written as shm:2 x shm:2 x shm:2 x infiniband:16, run as shm:8 x "
                       "infiniband:4 x infiniband:4"));
  m::options ring = rings;
  ring.tune.split_ring_extent = 0;
  const std::string r = m::explain<float>(topo, n, m::collective::all_reduce, 0, m::sum, ring);
  CHECK_FALSE(contains(r, "split"));
  // the same bytes through each port, 2 x (7 + 7) latencies instead of 2 x 63: faster
  const auto total = [](const std::string& text) {
    const auto at = text.find("predicted total: ");
    REQUIRE(at != std::string::npos);
    return text.substr(at);
  };
  const auto al = [](std::size_t k) { return std::vector<m::algorithm>(k, m::algorithm::ring); };
  const auto split = m::merge_dimensions(topo.resolve(256), {}, m::tuning{});
  const auto one = m::merge_dimensions(topo.resolve(256), {}, ring.tune);
  const auto seconds = [&](const m::merged_dimensions& md) {
    return m::make_plan(m::collective::all_reduce, md.topology, 0, n, 4, al(md.topology.ndims()), m::tuning{}).seconds();
  };
  CHECK(seconds(split) < seconds(one));
  CHECK(total(s) != total(r));
}

TEST_CASE("tune.split_ring_extent must be 0 or at least 4") {
  m::options o;
  o.tune.split_ring_extent = 3;
  try {
    m::detail::validate(o);
    FAIL("split_ring_extent 3 accepted");
  } catch (const m::invalid_argument& e) {
    CHECK(e.argument() == "options.tune.split_ring_extent");
    CHECK(contains(e.what(), "at least 4"));
  }
  o.tune.split_ring_extent = 0;
  CHECK_NOTHROW(m::detail::validate(o));
  o.tune.split_ring_extent = 4;
  CHECK_NOTHROW(m::detail::validate(o));
}

TEST_CASE("explain() shows merged dimensions") {
  const std::string s = m::explain<float>(m::parse_topology("shm:2 x shm:2"), 1 << 20);
  INFO(s);
  CHECK(contains(s, "merged: written as shm:2 x shm:2, run as shm:4"));
  CHECK(contains(s, "direct"));
  m::options o;
  o.tune.merge_same_link = false;
  CHECK_FALSE(contains(m::explain<float>(m::parse_topology("shm:2 x shm:2"), 1 << 20, m::collective::all_reduce, 0,
                                         m::sum, o),
                       "merged"));
}
