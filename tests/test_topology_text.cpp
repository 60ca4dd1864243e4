// Tests of mdring/topology at run time: user link tags in ring<> and, registered,
// in the parser; link traits' optional members; parse_link, register_link,
// parse_topology; runtime_topology's construction rules and resolve().
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
using topology_test::contains;

TEST_CASE("a user-defined link tag works in ring<> and, once registered, in the parser") {
  constexpr auto t = m::ring<user::upi, 3> * m::ring<m::infiniband, 2>;
  static_assert(decltype(t)::size() == 6);
  const auto rt = m::describe(t);
  CHECK(rt.dim(0).link.name == "upi");
  CHECK(rt.dim(0).link.bandwidth == 64e9);
  CHECK(rt.dim(0).link.latency == 3e-7);
  CHECK(rt.dim(0).link.fully_connected);
  CHECK(rt.dim(0).link == m::link_info_of<user::upi>());

  // Not known to the parser before registration (this is the only test that registers it).
  CHECK_FALSE(m::find_link("upi").has_value());
  CHECK_THROWS_AS((void)m::parse_topology("upi:3 x infiniband:2"), m::topology_error);

  m::register_link<user::upi>();
  REQUIRE(m::find_link("upi").has_value());
  CHECK(*m::find_link("upi") == m::link_info_of<user::upi>());
  const auto known = m::known_links();
  CHECK(std::find(known.begin(), known.end(), "upi") != known.end());
  CHECK(std::find(known.begin(), known.end(), "nvlink") != known.end());

  const auto parsed = m::parse_topology("upi:3 x infiniband:2");
  CHECK(parsed == rt);
  CHECK(m::parse_topology("upi:*").resolve(9).extent(0) == 9);

  // registering again with other figures overrides them (run-time override of traits)
  m::link_info faster = m::link_info_of<user::upi>();
  faster.bandwidth = 128e9;
  m::register_link(faster);
  CHECK(m::parse_topology("upi:2").dim(0).link.bandwidth == 128e9);
  m::register_link<user::upi>();  // back to the traits
  CHECK(m::parse_topology("upi:2").dim(0).link.bandwidth == 64e9);

  // names the parser could not read back, and nonsense figures, are refused
  for (const char* bad : {"", "my link", "a:b", "star*", "tab\t"}) {
    m::link_info li = m::link_info_of<user::upi>();
    li.name = bad;
    INFO("name \"", bad, "\"");
    try {
      m::register_link(li);
      FAIL("register_link accepted the name");
    } catch (const m::invalid_argument& e) {
      CHECK(e.argument() == "info");
      CHECK(contains(e.what(), "mdring::register_link: "));
    }
  }
  m::link_info zero_bw = m::link_info_of<user::upi>();
  zero_bw.name = "slow";
  zero_bw.bandwidth = 0;
  CHECK_THROWS_AS(m::register_link(zero_bw), m::invalid_argument);
  CHECK_FALSE(m::find_link("slow").has_value());
}

TEST_CASE("link traits: ports and overhead are optional members, 0 when left out") {
  const auto r = m::link_info_of<user::roce>();
  CHECK(r.ports == 2);
  CHECK(r.overhead == 1.5e-6);
  CHECK(r.bandwidth == 25e9);
  const auto u = m::link_info_of<user::upi>();
  CHECK(u.ports == 0);
  CHECK(u.overhead == 0);
  // the built-in links between nodes have one port per node
  CHECK(m::link_info_of<m::ethernet>().ports == 1);
  CHECK(m::link_info_of<m::ethernet>().overhead > 0);
  CHECK(m::link_info_of<m::shm>().ports == 0);
  CHECK(m::link_info_of<m::shm>().overhead == 0);
  // in a topology: 8 GPUs of a node share its two RoCE ports, a quarter port each
  constexpr auto t = m::ring<m::nvlink, 8> * m::ring<user::roce, 16>;
  CHECK(m::describe(t).rank_link(1).bandwidth == 25e9 * 2 / 8);
}

TEST_CASE("parse_link reads a link's figures from text") {
  // a new name: ring, host, no ports, no overhead unless told
  auto a = m::parse_link("sim-a=40e9,2.5e-6");
  CHECK(a.name == "sim-a");
  CHECK(a.bandwidth == 40e9);
  CHECK(a.latency == 2.5e-6);
  CHECK_FALSE(a.fully_connected);
  CHECK(a.space == m::memory_space::host);
  CHECK(a.ports == 0);
  CHECK(a.overhead == 0);
  auto b = m::parse_link("sim-b=1e9,0,full,device,ports=4,overhead=3e-6");
  CHECK(b.fully_connected);
  CHECK(b.space == m::memory_space::device);
  CHECK(b.ports == 4);
  CHECK(b.overhead == 3e-6);
  CHECK(b.latency == 0);
  // a known name keeps what the text leaves out: InfiniBand's port and overhead
  const auto ib = m::link_info_of<m::infiniband>();
  auto c = m::parse_link("infiniband=25e9,1.5e-6");
  CHECK(c.bandwidth == 25e9);
  CHECK(c.latency == 1.5e-6);
  CHECK(c.ports == ib.ports);
  CHECK(c.overhead == ib.overhead);
  CHECK(m::parse_link("infiniband=25e9,1.5e-6,ports=0").ports == 0);
  CHECK(m::parse_link("nvlink=1e11,1e-6").space == m::memory_space::device);
  // what parse_link returns, register_link takes: the parser then uses the figures
  m::register_link(m::parse_link("sim-c=5e9,1e-5,ports=1,overhead=2e-6"));
  const auto t = m::parse_topology("shm:4 x sim-c:8");
  CHECK(t.dim(1).link.overhead == 2e-6);
  CHECK(t.rank_link(1).bandwidth == 5e9 / 4);

  for (const char* bad : {"", "=1e9,1e-6", "no-figures", "x=1e9", "x=1e9,", "x=0,1e-6", "x=-1e9,1e-6", "x=1e9,-1",
                          "x=abc,1e-6", "x=1e9,1e-6,fast", "x=1e9,1e-6,ports=1.5", "x=1e9,1e-6,ports=-1",
                          "x=1e9,1e-6,overhead=", "x=1e9,1e-6,overhead=nan", "x y=1e9,1e-6", "x=inf,1e-6"}) {
    INFO("text \"", bad, "\"");
    try {
      (void)m::parse_link(bad);
      FAIL("parse_link accepted it");
    } catch (const m::invalid_argument& e) {
      CHECK(e.argument() == "link");
      CHECK(contains(e.what(), "mdring::parse_link: \"" + std::string(bad) + "\""));
      CHECK(contains(e.what(), "expected NAME=BANDWIDTH,LATENCY"));
    }
  }
  // MDRING_LINKS (read when the registry is first used): texts separated by ';'
  m::detail::link_registry r;
  r.add_from("infiniband=25e9,1e-6,ports=2; sim-env=1e9,5e-6 ;;");
  CHECK(r.links.at("infiniband").bandwidth == 25e9);
  CHECK(r.links.at("infiniband").ports == 2);
  CHECK(r.links.at("infiniband").overhead == ib.overhead);  // kept
  CHECK(r.links.at("sim-env").latency == 5e-6);
  r.add_from("sim-env=2e9,5e-6,full");  // later texts build on earlier ones
  CHECK(r.links.at("sim-env").bandwidth == 2e9);
  CHECK(r.links.at("sim-env").fully_connected);
  try {
    r.add_from("ethernet=1e9,1e-6;infiniband=fast,1e-6");
    FAIL("add_from accepted it");
  } catch (const m::invalid_argument& e) {
    CHECK(e.argument() == "MDRING_LINKS");
    CHECK(contains(e.what(), "MDRING_LINKS: mdring::parse_link: \"infiniband=fast,1e-6\""));
  }

  m::link_info neg{"neg", 1e9, 1e-6, false, m::memory_space::host};
  neg.overhead = -1;
  CHECK_THROWS_AS(m::register_link(neg), m::invalid_argument);
}

// register_link's name check should be the parser's grammar (letters, digits, '_',
// '-', '.'). It refuses every name with an 'x' or 'X' although the parser reads them
// (a separator 'x' only ever follows an extent), so AMD's "xgmi" or "cxl" cannot be
// registered; and it accepts names the parser can never read back.
TEST_CASE("register_link accepts every name the parser can read, and only those") {
  m::link_info xgmi{"xgmi", 50e9, 1e-6, true, m::memory_space::device};
  CHECK_NOTHROW(m::register_link(xgmi));
  if (m::find_link("xgmi")) {
    const auto t = m::parse_topology("xgmi:8 x infiniband:*");
    CHECK(t.dim(0).link == xgmi);
    CHECK(m::parse_topology("shm:2xxgmi:4").extents() == std::vector<std::size_t>{2, 4});
  }
  m::link_info cxl{"cxl", 64e9, 3e-7, true, m::memory_space::host};
  CHECK_NOTHROW(m::register_link(cxl));
  m::link_info at{"a@b", 1e9, 1e-6, false, m::memory_space::host};
  CHECK_THROWS_AS(m::register_link(at), m::invalid_argument);
  CHECK_THROWS_AS((void)m::parse_topology("a@b:2"), m::topology_error);  // never parseable
}

TEST_CASE("parse_topology accepts the documented forms") {
  SUBCASE("two dimensions") {
    const auto t = m::parse_topology("nvlink:4 x infiniband:64");
    REQUIRE(t.ndims() == 2);
    CHECK(t.dim(0).link == m::link_info_of<m::nvlink>());
    CHECK(t.dim(1).link == m::link_info_of<m::infiniband>());
    CHECK(t.extents() == std::vector<std::size_t>{4, 64});
    CHECK(t.size() == 256);
    CHECK(t.to_string() == "nvlink:4 x infiniband:64");
  }
  SUBCASE("a dynamic extent") {
    const auto t = m::parse_topology("shm:2 x shm:*");
    REQUIRE(t.ndims() == 2);
    CHECK(t.extent(0) == 2);
    CHECK(t.extent(1) == m::dynamic_extent);
    CHECK_FALSE(t.is_static());
    CHECK(t.size() == m::dynamic_extent);
    CHECK(t.static_size() == 2);
    CHECK(t.to_string() == "shm:2 x shm:*");
    CHECK(t == m::describe(m::ring<m::shm, 2> * m::ring<m::shm>));
  }
  SUBCASE("'*' as the separator") {
    CHECK(m::parse_topology("shm:2*shm:3").extents() == std::vector<std::size_t>{2, 3});
    CHECK(m::parse_topology("shm:2 * shm:*").extent(1) == m::dynamic_extent);
    CHECK(m::parse_topology("shm:*  *shm:3").extents() == std::vector<std::size_t>{m::dynamic_extent, 3});
  }
  SUBCASE("extra blanks and 'X'") {
    const auto expect = m::parse_topology("nvlink:4 x infiniband:64");
    CHECK(m::parse_topology("  nvlink : 4   x   infiniband :  64  ") == expect);
    CHECK(m::parse_topology("\tnvlink:4\tX\tinfiniband:64\n") == expect);
    CHECK(m::parse_topology("nvlink:4X infiniband:64") == expect);
    CHECK(m::parse_topology("nvlink:4xinfiniband:64") == expect);
  }
  SUBCASE("one dimension, three dimensions, every built-in link") {
    CHECK(m::parse_topology("pcie:1").size() == 1);
    const auto t = m::parse_topology("shm:2 x pcie:3 x ethernet:5");
    CHECK(t == m::describe(m::ring<m::shm, 2> * m::ring<m::pcie, 3> * m::ring<m::ethernet, 5>));
    const auto all = m::parse_topology("nvlink:2 x pcie:2 x infiniband:2 x ethernet:2 x shm:2");
    CHECK(all.size() == 32);
    CHECK(all == m::describe(m::ring<m::nvlink, 2> * m::ring<m::pcie, 2> * m::ring<m::infiniband, 2> *
                             m::ring<m::ethernet, 2> * m::ring<m::shm, 2>));
  }
}

namespace {
// parse_topology(text) throws topology_error for "topology" whose what() quotes the
// text and names the problem.
void check_rejected(std::string_view text, std::string_view problem) {
  INFO("text: \"", std::string(text), "\"");
  try {
    (void)m::parse_topology(text);
    FAIL("parse_topology accepted it");
  } catch (const m::topology_error& e) {
    const std::string w = e.what();
    INFO("what(): ", w);
    CHECK(e.argument() == "topology");
    CHECK(w.rfind("mdring::parse_topology: ", 0) == 0);
    CHECK(contains(w, "\"" + std::string(text) + "\""));
    CHECK(contains(w, problem));
  }
}
}  // namespace

TEST_CASE("parse_topology rejects malformed strings with topology_error") {
  check_rejected("", "empty");
  check_rejected("   ", "empty");
  check_rejected("nvlink", "expected ':'");
  check_rejected("nvlink:", "expected an extent");
  check_rejected("nvlink:0", "extent 0");
  check_rejected("foo:2", "unknown link \"foo\"");
  check_rejected("shm:2 x", "expected a dimension after the separator");
  check_rejected("shm:* x shm:*", "second dynamic extent");
  check_rejected("shm:2 x x shm:2", "unknown link \"x\"");
  check_rejected("shm:2 y shm:3", "unexpected character 'y'");
  check_rejected("shm:-1", "expected an extent");
  check_rejected("shm:2 shm:3", "unexpected character 's'");
  check_rejected("shm:99999999999999999999", "extent too large");
  check_rejected(":2", "expected a link name");
  // the unknown-link message lists the known ones
  check_rejected("foo:2", "nvlink");
  // a topology_error is an invalid_argument and an mdring::error
  CHECK_THROWS_AS((void)m::parse_topology("nvlink"), m::invalid_argument);
  CHECK_THROWS_AS((void)m::parse_topology("nvlink"), m::error);
}

TEST_CASE("runtime_topology: construction rules") {
  using dim = m::runtime_topology::dimension;
  const auto s = m::link_info_of<m::shm>();
  CHECK_THROWS_AS(m::runtime_topology(std::vector<dim>{}), m::topology_error);
  CHECK_THROWS_AS(m::runtime_topology(std::vector<dim>{{s, 2}, {s, 0}}), m::topology_error);
  CHECK_THROWS_AS(m::runtime_topology(std::vector<dim>{{s, m::dynamic_extent}, {s, m::dynamic_extent}}),
                  m::topology_error);
  const m::runtime_topology ok(std::vector<dim>{{s, 2}, {s, m::dynamic_extent}});
  CHECK(ok.to_string() == "shm:2 x shm:*");
  // a mutable dimension: overriding the link's figures at run time
  m::runtime_topology t = m::parse_topology("infiniband:4");
  t.dim(0).link.bandwidth = 25e9;
  CHECK(t.dim(0).link.bandwidth == 25e9);
  CHECK(t != m::parse_topology("infiniband:4"));
}

TEST_CASE("resolve() fixes the dynamic extent or checks the size") {
  const auto dynt = m::parse_topology("shm:2 x shm:*");
  const auto r = dynt.resolve(8);
  CHECK(r.is_static());
  CHECK(r.extents() == std::vector<std::size_t>{2, 4});
  CHECK(r.size() == 8);
  CHECK(r.coordinates(5) == std::vector<std::size_t>{1, 2});
  CHECK(dynt.resolve(2).extents() == std::vector<std::size_t>{2, 1});
  // resolve() does not change the original
  CHECK_FALSE(dynt.is_static());

  // a static topology resolves to itself when the sizes match
  const auto st = m::parse_topology("shm:2 x shm:3");
  CHECK(st.resolve(6) == st);

  auto rejects = [](const m::runtime_topology& t, std::size_t world, std::vector<std::string> words) {
    INFO("topology ", t.to_string(), " world ", world);
    try {
      (void)t.resolve(world);
      FAIL("resolve accepted it");
    } catch (const m::topology_error& e) {
      const std::string w = e.what();
      INFO("what(): ", w);
      CHECK(e.argument() == "topology");
      CHECK(w.rfind("mdring::resolve: ", 0) == 0);
      CHECK(contains(w, "\"" + t.to_string() + "\""));
      for (auto& word : words) CHECK(contains(w, word));
    }
  };
  // a size mismatch names both sizes
  rejects(st, 8, {"has 6 ranks", "has 8"});
  rejects(st, 5, {"6", "5"});
  rejects(st, 0, {"6", "0"});
  // the dynamic extent must divide evenly
  rejects(dynt, 7, {"7", "not a multiple of 2"});
  rejects(dynt, 0, {"0", "not a multiple of 2"});
  rejects(m::parse_topology("shm:3 x nvlink:* x shm:2"), 8, {"8", "6"});
  CHECK(m::parse_topology("shm:3 x nvlink:* x shm:2").resolve(24).extent(1) == 4);
}

TEST_CASE("coordinates() of an unresolved runtime topology throws") {
  const auto t = m::parse_topology("shm:2 x shm:*");
  auto check_msg = [&](auto&& f, std::string_view fn) {
    INFO(fn);
    try {
      f();
      FAIL("did not throw");
    } catch (const m::topology_error& e) {
      const std::string w = e.what();
      CHECK(e.argument() == "topology");
      CHECK(contains(w, fn));
      CHECK(contains(w, "has a dynamic extent"));
      CHECK(contains(w, "\"shm:2 x shm:*\""));
    }
  };
  check_msg([&] { (void)t.coordinates(0); }, "coordinates");
  check_msg([&] { (void)t.rank_of({0, 0}); }, "rank_of");
  check_msg([&] { (void)t.peer(0, 0, 1); }, "peer");
  check_msg([&] { (void)t.peers(0, 0); }, "peer");
  // after resolve() it works
  CHECK(t.resolve(4).coordinates(3) == std::vector<std::size_t>{1, 1});
}
