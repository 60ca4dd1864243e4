// tests/test_plan.cpp: make_plan and explain() (plan/plan.hpp), and the
// dimensions as they run (plan/merge.hpp). The rest of the plan room's tests:
// test_plan_blocks.cpp, test_plan_cost.cpp, test_plan_algorithms.cpp,
// test_plan_profile.cpp (shared helpers: plan_support.hpp).
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
    CHECK(st.seconds ==
          m::stage_seconds(st.ph, st.algo, st.extent, st.range.count, 4, st.link, m::tuning{}.gamma(st.link.space)));
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
  CHECK(r1.stages[2].bytes_sent == 8);     // block 0 of [5,10)
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
  CHECK(m::explain<float>(m::parse_topology("nvlink:4 x infiniband:*").resolve(256), 1 << 20, m::collective::all_reduce,
                          5) == s);

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
  CHECK(m::split_factor(24, 16) == 4);  // 4 x 6
  CHECK(m::split_factor(18, 16) == 3);  // 3 x 6
  CHECK(m::split_factor(17, 16) == 0);  // prime: one ring
  CHECK(m::split_factor(15, 16) == 0);  // below the threshold
  CHECK(m::split_factor(15, 4) == 3);
  CHECK(m::split_factor(4, 4) == 2);
  CHECK(m::split_factor(64, 0) == 0);  // 0: never
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
  CHECK(contains(both,
                 "merged and split: written as shm:2 x shm:2 x shm:2 x infiniband:16, run as shm:8 x "
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
    return m::make_plan(m::collective::all_reduce, md.topology, 0, n, 4, al(md.topology.ndims()), m::tuning{})
        .seconds();
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
  CHECK_FALSE(
      contains(m::explain<float>(m::parse_topology("shm:2 x shm:2"), 1 << 20, m::collective::all_reduce, 0, m::sum, o),
               "merged"));
}
