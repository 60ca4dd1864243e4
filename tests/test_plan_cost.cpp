// tests/test_plan_cost.cpp: the cost model (plan/cost.hpp, plan/pipeline.hpp):
// stage times, NIC sharing, the pipeline model, and choose_algorithm, by hand.
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
  const auto nv = m::link_info_of<m::nvlink>(), ib = m::link_info_of<m::infiniband>(), sh = m::link_info_of<m::shm>(),
             pc = m::link_info_of<m::pcie>();
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
