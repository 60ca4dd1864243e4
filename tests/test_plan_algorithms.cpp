// tests/test_plan_algorithms.cpp: halving-doubling, recursive doubling and trees
// (plan/halving_doubling.hpp, plan/pipeline.hpp): schedules, costs, and what
// automatic picks for a call.
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
    m::algorithms_for_call(m::collective::all_reduce, topo, std::span<const algorithm>(asked ? asked : req, 3), al, n,
                           4, u);
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
