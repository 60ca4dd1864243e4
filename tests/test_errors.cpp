// test_errors.cpp: every run-time error path of the public API, on the threads
// transport. Each check names the exception TYPE, the argument() and words of
// what() that say what was wrong and what was expected.
//
// The properties under test (collective/checks.hpp, collective/launch.hpp, communicator.hpp):
//   - a local argument error throws invalid_argument before any message moves;
//   - with check_level::local a rank with a bad argument tells its peers, which
//     stop with remote_error long before their deadline (nobody hangs), and the
//     communicator is unusable afterwards (communicator_error);
//   - with check_level::collective every rank throws invalid_argument and the
//     communicator survives;
//   - a peer that never arrives gives timeout_error naming the collective,
//     dimension, step and peer; a count mismatch gives an error, never a wrong
//     result or a hang.
//
// Every rank of a test runs in its own thread; what a rank threw is recorded and
// checked on the test's thread afterwards.
//
// Three files: this one (bad arguments: null buffers, overlap, roots, spans, and
// the other error paths of the API), test_errors_bind.cpp (topologies, fingerprints,
// options, non-commutative ops: errors at bind) and test_errors_peers.cpp (no rank
// left hanging, collective checks, timeouts, count mismatches). Harness:
// errors_threads.hpp and error_support.hpp.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

#include "errors_threads.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>
// ---------------------------------------------------------------------------
TEST_CASE("null buffers with count > 0 are rejected on every rank, naming the buffer") {
  std::vector<int> a(64, 1), b(64, 0);
  SUBCASE("all_reduce") {
    all_ranks_reject([&](auto& c) { md::all_reduce(c, static_cast<const int*>(nullptr), b.data(), 5); }, "sendbuf",
                     {"mdring::all_reduce", "sendbuf is null", "count = 5"}, "all_reduce sendbuf");
    all_ranks_reject([&](auto& c) { md::all_reduce(c, a.data(), static_cast<int*>(nullptr), 5); }, "recvbuf",
                     {"mdring::all_reduce", "recvbuf is null", "count = 5"}, "all_reduce recvbuf");
    all_ranks_reject([&](auto& c) { md::all_reduce(c, static_cast<int*>(nullptr), 7); }, "sendbuf",
                     {"mdring::all_reduce", "null", "count = 7"}, "all_reduce in place");
    all_ranks_reject([&](auto& c) { md::all_reduce(c, std::span<int>(static_cast<int*>(nullptr), 3)); }, "sendbuf",
                     {"mdring::all_reduce", "null", "3"}, "all_reduce span");
  }
  SUBCASE("reduce_scatter") {
    all_ranks_reject([&](auto& c) { md::reduce_scatter(c, static_cast<const int*>(nullptr), b.data(), 3); }, "sendbuf",
                     {"mdring::reduce_scatter", "sendbuf is null", "size() * recvcount = 12"},
                     "reduce_scatter sendbuf");
    all_ranks_reject([&](auto& c) { md::reduce_scatter(c, a.data(), static_cast<int*>(nullptr), 3); }, "recvbuf",
                     {"mdring::reduce_scatter", "recvbuf is null", "3"}, "reduce_scatter recvbuf");
  }
  SUBCASE("all_gather") {
    all_ranks_reject([&](auto& c) { md::all_gather(c, static_cast<const int*>(nullptr), b.data(), 3); }, "sendbuf",
                     {"mdring::all_gather", "sendbuf is null", "3"}, "all_gather sendbuf");
    all_ranks_reject([&](auto& c) { md::all_gather(c, a.data(), static_cast<int*>(nullptr), 3); }, "recvbuf",
                     {"mdring::all_gather", "recvbuf is null"}, "all_gather recvbuf");
  }
  SUBCASE("broadcast") {
    all_ranks_reject([&](auto& c) { md::broadcast(c, static_cast<int*>(nullptr), 5, 0); }, "buf",
                     {"mdring::broadcast", "buf is null", "count = 5"}, "broadcast buf");
  }
  SUBCASE("reduce") {
    all_ranks_reject([&](auto& c) { md::reduce(c, static_cast<const int*>(nullptr), b.data(), 5, 1); }, "sendbuf",
                     {"mdring::reduce", "sendbuf is null", "count = 5"}, "reduce sendbuf");
  }
}

TEST_CASE("reduce: a null recvbuf at the root is rejected there, the others hear of it") {
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(t22, ep, local_opts());
    std::vector<int> b(16, 1), out(16, 0);
    const auto t0 = steady::now();
    r.first = thrown([&] { md::reduce(comm, b.data(), comm.rank() == 2 ? nullptr : out.data(), 16, 2); });
    r.seconds = seconds_since(t0);
  });
  expect_arg_error<md::invalid_argument>(rec[2].first, "recvbuf", {"mdring::reduce", "recvbuf is null", "count = 16"},
                                         "reduce root 2");
  for (std::size_t i = 0; i < 4; ++i) {
    if (i == 2) continue;
    INFO("rank " << i << ": " << describe(rec[i].first));
    CHECK(as<md::remote_error>(rec[i].first) != nullptr);
    CHECK(rec[i].seconds < 5.0);
  }
}

TEST_CASE("several bad arguments: the first in the call's order is named") {
  std::vector<int> a(64, 1);
  all_ranks_reject([&](auto& c) { md::all_reduce(c, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 5); },
                   "sendbuf", {"mdring::all_reduce", "sendbuf is null"}, "all_reduce both null");
  all_ranks_reject([&](auto& c) { md::broadcast(c, static_cast<int*>(nullptr), 5, 9); }, "root",
                   {"mdring::broadcast", "root 9"}, "broadcast root 9 and buf null");
  all_ranks_reject([&](auto& c) { md::reduce(c, static_cast<const int*>(nullptr), a.data(), 5, 8); }, "root",
                   {"mdring::reduce", "root 8"}, "reduce root 8 and sendbuf null");
}

TEST_CASE("null buffers with count 0 are fine, and reduce ignores recvbuf off the root") {
  std::atomic<int> ok{0};
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
    auto comm = md::bind(t22, ep, local_opts());
    md::all_reduce(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0);
    md::all_reduce(comm, static_cast<int*>(nullptr), 0);
    md::reduce_scatter(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0);
    md::all_gather(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0);
    md::broadcast(comm, static_cast<int*>(nullptr), 0, 3);
    md::reduce(comm, static_cast<const int*>(nullptr), static_cast<int*>(nullptr), 0, 2);
    // recvbuf may be null on the ranks that are not the root.
    std::vector<int> s(10, int(comm.rank()) + 1), out(10, -1);
    md::reduce(comm, s.data(), comm.rank() == 1 ? out.data() : nullptr, 10, 1);
    if (comm.rank() == 1)
      for (int v : out) CHECK(v == 10);
    // ... and may even overlap sendbuf partially there (it is not touched).
    md::reduce(comm, s.data(), comm.rank() == 1 ? out.data() : s.data() + 1, 10, 1);
    CHECK(comm.usable());
    std::vector<int> x(5, int(comm.rank()));
    md::all_reduce(comm, x.data(), x.size());
    for (int v : x) CHECK(v == 6);
    ++ok;
    (void)r;
  });
  for (auto& r : rec) CHECK_MESSAGE(!r.first, describe(r.first));
  CHECK(ok == 4);
}

TEST_CASE("partially overlapping send and receive buffers are rejected; exact in place is fine") {
  SUBCASE("all_reduce") {
    std::vector<std::vector<int>> bufs(4, std::vector<int>(16, 1));
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_reduce(c, b.data(), b.data() + 1, 8);
        },
        "recvbuf", {"mdring::all_reduce", "overlap", "sendbuf", "recvbuf", "same pointer"},
        "all_reduce recv = send + 1");
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_reduce(c, b.data() + 3, b.data(), 8);
        },
        "recvbuf", {"overlap"}, "all_reduce recv = send - 3");
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_reduce(c, std::span<const int>(b.data() + 7, 8), std::span<int>(b.data(), 8));
        },
        "recvbuf", {"overlap"}, "all_reduce spans overlapping by one element");
  }
  SUBCASE("reduce_scatter") {
    std::vector<std::vector<int>> bufs(4, std::vector<int>(64, 1));
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::reduce_scatter(c, b.data(), b.data() + c.rank() * 3 + 1, 3);
        },
        "recvbuf", {"mdring::reduce_scatter", "overlap", "sendbuf + rank() * recvcount"}, "reduce_scatter");
  }
  SUBCASE("all_gather") {
    std::vector<std::vector<int>> bufs(4, std::vector<int>(64, 1));
    all_ranks_reject(
        [&](auto& c) {
          auto& b = bufs[c.rank()];
          md::all_gather(c, b.data() + c.rank() * 3 + 1, b.data(), 3);
        },
        "recvbuf", {"mdring::all_gather", "overlap", "recvbuf + rank() * sendcount"}, "all_gather");
  }
  SUBCASE("reduce, on the root") {
    // Only the root checks its recvbuf; it throws, the others hear about it.
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      auto comm = md::bind(t22, ep, local_opts());
      std::vector<int> b(32, 1);
      const auto t0 = steady::now();
      r.first = thrown([&] { md::reduce(comm, b.data(), b.data() + 2, 16, 3); });
      r.seconds = seconds_since(t0);
    });
    expect_arg_error<md::invalid_argument>(rec[3].first, "recvbuf", {"mdring::reduce", "overlap"}, "reduce root");
    for (std::size_t i = 0; i < 3; ++i) {
      INFO("rank " << i << ": " << describe(rec[i].first));
      CHECK(as<md::remote_error>(rec[i].first) != nullptr);
      CHECK(rec[i].seconds < 5.0);
    }
  }
  SUBCASE("exact in place works for all four") {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record&) {
      auto comm = md::bind(t22, ep, local_opts());
      const int r = int(comm.rank());
      std::vector<int> v(9);
      for (int i = 0; i < 9; ++i) v[i] = r * 100 + i;
      md::all_reduce(comm, v.data(), v.data(), v.size());
      for (int i = 0; i < 9; ++i) CHECK(v[i] == 600 + 4 * i);
      // reduce_scatter in place: recvbuf == sendbuf + rank * recvcount.
      std::vector<int> rs(4 * 5);
      for (int i = 0; i < 20; ++i) rs[i] = r + i;
      md::reduce_scatter(comm, rs.data(), rs.data() + r * 5, 5);
      for (int i = 0; i < 5; ++i) CHECK(rs[r * 5 + i] == 6 + 4 * (r * 5 + i));
      // all_gather in place: sendbuf == recvbuf + rank * sendcount.
      std::vector<int> ag(4 * 3, -1);
      for (int i = 0; i < 3; ++i) ag[r * 3 + i] = 10 * r + i;
      md::all_gather(comm, ag.data() + r * 3, ag.data(), 3);
      for (int q = 0; q < 4; ++q)
        for (int i = 0; i < 3; ++i) CHECK(ag[q * 3 + i] == 10 * q + i);
      // reduce in place on the root.
      std::vector<int> rd(6, r + 1);
      md::reduce(comm, rd.data(), r == 2 ? rd.data() : nullptr, 6, 2);
      if (r == 2)
        for (int x : rd) CHECK(x == 10);
    });
    for (auto& r : rec) CHECK_MESSAGE(!r.first, describe(r.first));
  }
}

TEST_CASE("root out of range") {
  std::vector<std::vector<int>> bufs(4, std::vector<int>(8, 1));
  all_ranks_reject([&](auto& c) { md::broadcast(c, bufs[c.rank()].data(), 8, 4); }, "root",
                   {"mdring::broadcast", "root 4", "size 4"}, "broadcast root 4");
  all_ranks_reject([&](auto& c) { md::broadcast(c, std::span<int>(bufs[c.rank()]), std::size_t(-1)); }, "root",
                   {"mdring::broadcast", "root", "size 4"}, "broadcast root SIZE_MAX");
  all_ranks_reject(
      [&](auto& c) {
        std::vector<int> out(8);
        md::reduce(c, bufs[c.rank()].data(), out.data(), 8, 7);
      },
      "root", {"mdring::reduce", "root 7", "size 4"}, "reduce root 7");
  // A bad root even with count 0 (nothing to move, but the call is wrong).
  all_ranks_reject([&](auto& c) { md::broadcast(c, static_cast<int*>(nullptr), 0, 9); }, "root", {"root 9"},
                   "broadcast count 0 root 9");
}

TEST_CASE("span size mismatch") {
  std::vector<std::vector<int>> s(4, std::vector<int>(13, 1)), r(4, std::vector<int>(13, 0));
  all_ranks_reject(
      [&](auto& c) {
        md::all_reduce(c, std::span<const int>(s[c.rank()].data(), 8), std::span<int>(r[c.rank()].data(), 7));
      },
      "recvbuf", {"mdring::all_reduce", "recvbuf has 7", "sendbuf has 8"}, "all_reduce spans");
  all_ranks_reject(
      [&](auto& c) {
        md::reduce_scatter(c, std::span<const int>(s[c.rank()].data(), 13), std::span<int>(r[c.rank()].data(), 3));
      },
      "sendbuf", {"mdring::reduce_scatter", "sendbuf has 13", "12"}, "reduce_scatter spans");
  all_ranks_reject(
      [&](auto& c) {
        md::all_gather(c, std::span<const int>(s[c.rank()].data(), 3), std::span<int>(r[c.rank()].data(), 11));
      },
      "recvbuf", {"mdring::all_gather", "recvbuf has 11", "12"}, "all_gather spans");
  // reduce: only the root's recvbuf has a size to check, so only the root (rank 0)
  // throws invalid_argument; the others are told and stop with remote_error.
  auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& rr) {
    auto comm = md::bind(t22, ep, local_opts());
    const auto t0 = steady::now();
    rr.first = thrown(
        [&] { md::reduce(comm, std::span<const int>(s[ep.rank].data(), 8), std::span<int>(r[ep.rank].data(), 9), 0); });
    rr.seconds = seconds_since(t0);
  });
  expect_arg_error<md::invalid_argument>(rec[0].first, "recvbuf", {"mdring::reduce", "recvbuf has 9", "sendbuf has 8"},
                                         "reduce spans, root");
  for (std::size_t i = 1; i < 4; ++i) {
    INFO("rank " << i << ": " << describe(rec[i].first));
    CHECK(as<md::remote_error>(rec[i].first) != nullptr);
    CHECK(rec[i].seconds < 5.0);
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("other error paths of the public API") {
  SUBCASE("threads::world and bind") {
    expect_arg_error<md::invalid_argument>(thrown([] { md::threads::world w(0); }), "n",
                                           {"mdring::threads::world", "at least 1"}, "world(0)");
    md::threads::world w(2);
    expect_arg_error<md::invalid_argument>(thrown([&] { (void)w.at(2); }), "rank",
                                           {"mdring::threads::world::at", "rank 2", "size 2"}, "at(2)");
    expect_arg_error<md::invalid_argument>(thrown([] { auto c = md::bind(t22, md::threads::endpoint{}); }), "endpoint",
                                           {"mdring::bind", "no world"}, "endpoint{}");
  }
  SUBCASE("parse_topology") {
    auto bad = [](std::string_view text, std::vector<std::string> words) {
      expect_arg_error<md::topology_error>(
          thrown([&] { (void)md::parse_topology(text); }), "topology",
          [&] {
            words.push_back("mdring::parse_topology");
            words.push_back("\"" + std::string(text) + "\"");
            return words;
          }(),
          "parse_topology(\"" + std::string(text) + "\")");
    };
    bad("", {"empty"});
    bad("   ", {"empty"});
    bad("warp:4", {"unknown link \"warp\"", "known:", "nvlink"});
    bad("shm 4", {"expected ':'"});
    bad("shm:", {"expected an extent"});
    bad("shm:0", {"extent 0"});
    bad("shm:* x ethernet:*", {"second dynamic extent"});
    bad("shm:2 x", {"expected a dimension"});
    bad("shm:2 + shm:2", {"unexpected character '+'", "position 6"});
    bad("shm:99999999999999999999", {"extent too large"});
  }
  SUBCASE("runtime_topology") {
    expect_arg_error<md::topology_error>(
        thrown([] { md::runtime_topology t(std::vector<md::runtime_topology::dimension>{}); }), "topology",
        {"at least one dimension"}, "no dimensions");
    const auto shm = md::link_info_of<md::shm>();
    expect_arg_error<md::topology_error>(thrown([&] {
                                           md::runtime_topology t({{shm, 0}});
                                         }),
                                         "topology", {"extent 0"}, "extent 0");
    expect_arg_error<md::topology_error>(
        thrown([&] {
          md::runtime_topology t({{shm, md::dynamic_extent}, {shm, md::dynamic_extent}});
        }),
        "topology", {"more than one dynamic extent"}, "two dynamic");
    const auto dyn = md::parse_topology("shm:2 x shm:*");
    expect_arg_error<md::topology_error>(thrown([&] { (void)dyn.coordinates(1); }), "topology",
                                         {"coordinates", "dynamic extent", "resolve"}, "coordinates of dynamic");
    expect_arg_error<md::topology_error>(thrown([&] { (void)dyn.resolve(0); }), "topology",
                                         {"mdring::resolve", "size 0"}, "resolve(0)");
    expect_arg_error<md::topology_error>(thrown([&] { (void)md::parse_topology("shm:2 x shm:3").resolve(5); }),
                                         "topology", {"mdring::resolve", "6 ranks", "5"}, "resolve(5)");
  }
  SUBCASE("explain") {
    expect_arg_error<md::topology_error>(
        thrown([] { (void)md::explain(md::ring<md::shm, 2> * md::ring<md::shm>, 10); }), "topology",
        {"mdring::explain", "dynamic extent", "resolve"}, "dynamic");
    expect_arg_error<md::invalid_argument>(thrown([] { (void)md::explain(t22, 10, md::collective::all_reduce, 4); }),
                                           "rank", {"mdring::explain", "rank 4", "size 4"}, "rank 4");
  }
  SUBCASE("register_link") {
    md::link_info bad{"my link", 1e9, 1e-6, true, md::memory_space::host};
    expect_arg_error<md::invalid_argument>(thrown([&] { md::register_link(bad); }), "info",
                                           {"mdring::register_link", "\"my link\""}, "blank in name");
    bad.name = "";
    expect_arg_error<md::invalid_argument>(thrown([&] { md::register_link(bad); }), "info", {"non-empty"}, "empty");
    bad.name = "fastlink";
    bad.bandwidth = 0;
    expect_arg_error<md::invalid_argument>(thrown([&] { md::register_link(bad); }), "info", {"bandwidth > 0"},
                                           "bandwidth 0");
  }
}
