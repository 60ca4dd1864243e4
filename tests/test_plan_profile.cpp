// tests/test_plan_profile.cpp: calibrated profiles (plan/profile.hpp), measured
// planning and wisdom files (plan/wisdom.hpp), and DESIGN.md's latency count.
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
#include <tuple>
#include <utility>
#include <vector>

namespace m = mdring;
using namespace plan_test;

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
  p.points = {{"ethernet", 0, 8, 10e-6},
              {"ethernet", 1, 8, 12e-6},
              {"ethernet", 0, 65536, 30e-6},
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
  p.points = {{"ethernet", 0, 8, 10e-6},
              {"ethernet", 1, 8, 10e-6},
              {"ethernet", 0, 65536, 30e-6},
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
  CHECK(contains(error_of("mdring-profile 1\n\nlink x=fast,0\n"),
                 "line 3: mdring::parse_link: \"x=fast,0\": the bandwidth"));
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
  CHECK(contains(error_of("mdring-profile 1\ntopology sh\x8f:2 x ethernet:3\n"),
                 "line 2: topology: mdring::parse_topology"));
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
  CHECK(contains(plain,
                 "figures of nvlink, infiniband: the built-in typical ones, not this machine's; "
                 "mdring-calibrate measures them"));
  std::remove(o.profile.c_str());
  try {
    m::explain(m::parse_topology("ethernet:2"), 1000, m::collective::all_reduce, 0, m::sum, o);
    FAIL("a missing profile was accepted");
  } catch (const m::invalid_argument& e) {
    CHECK(e.argument() == "options.profile");
    CHECK(
        contains(e.what(), "mdring::explain: options.profile (or MDRING_PROFILE): mdring::profile::load: cannot read"));
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

TEST_CASE("measured planning times the estimate first, then each automatic dimension flipped, then segment counts") {
  using A = m::algorithm;
  const m::tuning tune;
  const std::size_t D = tune.pipeline_depth;
  auto topo = [](std::vector<std::pair<m::link_info, std::size_t>> dims) {
    std::vector<m::runtime_topology::dimension> d;
    for (auto& [l, e] : dims) d.push_back({l, e});
    return m::runtime_topology(d);
  };
  auto shape = [](const std::vector<m::measured_choice>& c) {
    std::vector<std::tuple<std::vector<A>, std::size_t, std::size_t>> r;
    for (auto& x : c) r.emplace_back(x.algos, x.segments, x.depth);
    return r;
  };
  using row = std::tuple<std::vector<A>, std::size_t, std::size_t>;
  const auto eth = m::link_info_of<m::ethernet>(), shm = m::link_info_of<m::shm>();
  {  // one ring dimension (no pipelining: one segment): the ring, then halving-doubling
    const auto t = topo({{eth, 8}});
    const std::vector<A> est{A::ring}, req{A::automatic}, bind{A::ring};
    CHECK(shape(m::measured_candidates(t, est, req, bind, 1000, 4, tune)) ==
          std::vector<row>{{{A::ring}, 1, D}, {{A::halving_doubling}, 1, D}});
    // the estimate chose halving-doubling for this size: flipped back to the ring
    const std::vector<A> hd{A::halving_doubling};
    CHECK(shape(m::measured_candidates(t, hd, req, bind, 1000, 4, tune)) ==
          std::vector<row>{{{A::halving_doubling}, 1, D}, {{A::ring}, 1, D}});
    // an algorithm the user asked for is never flipped
    const std::vector<A> asked{A::ring};
    CHECK(shape(m::measured_candidates(t, est, asked, bind, 1000, 4, tune)) == std::vector<row>{{{A::ring}, 1, D}});
  }
  {  // a fully connected dimension of 4 runs direct: also as a ring and as halving-doubling
    const auto t = topo({{shm, 4}});
    const std::vector<A> est{A::direct}, req{A::automatic}, bind{A::direct};
    CHECK(shape(m::measured_candidates(t, est, req, bind, 1000, 4, tune)) ==
          std::vector<row>{{{A::direct}, 1, D}, {{A::ring}, 1, D}, {{A::halving_doubling}, 1, D}});
    // two ranks: direct only (a ring of two is the same exchange)
    const auto two = topo({{shm, 2}});
    CHECK(shape(m::measured_candidates(two, est, req, bind, 1000, 4, tune)) == std::vector<row>{{{A::direct}, 1, D}});
  }
  {  // two dimensions that pipeline: the segment counts around the estimate's K
    const auto t = topo({{shm, 2}, {eth, 4}});
    const std::vector<A> est{A::direct, A::ring}, req{A::automatic, A::automatic}, bind{A::direct, A::ring};
    const std::size_t n = std::size_t(1) << 24;
    REQUIRE(m::pipelines(t, est));
    const std::size_t K = m::segment_count(n, m::segment_elements(t, est, n, 4, tune));
    REQUIRE(K > 4);
    REQUIRE(4 * K <= tune.max_segments);
    CHECK(shape(m::measured_candidates(t, est, req, bind, n, 4, tune)) ==
          std::vector<row>{{est, K, D},
                           {{A::direct, A::halving_doubling}, K, D},
                           {est, 1, D},
                           {est, 2 * K, D},
                           {est, K / 2, D},
                           {est, 4 * K, D},
                           {est, K / 4, D},
                           {est, K, 2}});
  }
}

TEST_CASE("wisdom: text round trip, size classes, errors naming the line") {
  using m::algorithm;
  m::wisdom w;
  w.key = "0123456789abcdef";
  w.all_reduce[{4, 20}] = {{algorithm::direct, algorithm::halving_doubling}, 8, 2, 1.5e-3, 2.5e-3, 6};
  w.all_reduce[{8, 3}] = {{algorithm::ring}, 1, 4, 1e-6, 1e-6, 3};
  const std::string text = w.to_string();
  CHECK(text ==
        "mdring-wisdom 1\nkey 0123456789abcdef\n"
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
  CHECK(text ==
        "mdring-wisdom 1\nkey 00000000000000aa\n"
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
