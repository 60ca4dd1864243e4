// tests/test_errors_bind.cpp: errors at bind on the threads transport: a topology
// that does not fit, ranks binding different topologies or options (the
// fingerprint), options validated on every rank, a non-commutative op where a ring
// would reorder it. Harness: errors_threads.hpp.
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
TEST_CASE("a topology that does not fit the world throws topology_error on every rank") {
  auto bind_fails = [](std::size_t n, auto make, std::vector<std::string> words, const std::string& where) {
    auto rec = on_ranks(n, [&](md::threads::endpoint ep, rank_record& r) {
      const auto t0 = steady::now();
      r.first = thrown([&] { auto comm = make(ep); });
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 0; i < n; ++i) {
      expect_arg_error<md::topology_error>(rec[i].first, "topology", words, where + ", rank " + std::to_string(i));
      CHECK(rec[i].seconds < 5.0);
    }
  };
  SUBCASE("static topology of the wrong size") {
    bind_fails(
        3, [](auto ep) { return md::bind(t22, ep, local_opts()); }, {"shm:2 x shm:2", "4 ranks", "has 3"},
        "2 x 2 on 3 ranks");
    bind_fails(
        5, [](auto ep) { return md::bind(t22, ep, local_opts()); }, {"4 ranks", "has 5"}, "2 x 2 on 5 ranks");
    bind_fails(
        2, [](auto ep) { return md::bind(md::ring<md::shm, 3>, ep, local_opts()); }, {"shm:3", "3 ranks", "2"},
        "ring of 3 on 2 ranks");
    bind_fails(
        4, [](auto ep) { return md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, local_opts()); },
        {"shm:2 x ethernet:3", "6 ranks", "4"}, "runtime 2 x 3 on 4 ranks");
  }
  SUBCASE("a world size that the static extents do not divide") {
    bind_fails(
        3, [](auto ep) { return md::bind(md::ring<md::shm, 2> * md::ring<md::shm>, ep, local_opts()); },
        {"size 3", "not a multiple of 2", "shm:2 x shm:*"}, "2 x * on 3 ranks");
    bind_fails(
        5, [](auto ep) { return md::bind(md::ring<md::shm> * md::ring<md::ethernet, 2>, ep, local_opts()); },
        {"size 5", "not a multiple of 2"}, "* x 2 on 5 ranks");
    bind_fails(
        4, [](auto ep) { return md::bind(md::parse_topology("shm:3 x infiniband:*"), ep, local_opts()); },
        {"size 4", "not a multiple of 3"}, "runtime 3 x * on 4 ranks");
  }
}

TEST_CASE("ranks binding different topologies: topology_error, and nobody waits for the deadline") {
  // Rank 0 binds first (the others wait for it), so which ranks throw at bind is
  // deterministic: the later ones, whose topology differs from the one recorded.
  auto run = [](auto make0, auto make_other, std::vector<std::string> words) {
    std::atomic<bool> first_bound{false};
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      const auto t0 = steady::now();
      if (ep.rank == 0) {
        auto comm = make0(ep);
        first_bound = true;
        r.next = thrown([&] {
          std::vector<float> x(100, 1.0f);
          md::all_reduce(comm, x.data(), x.size());
        });
      } else {
        while (!first_bound) std::this_thread::yield();
        r.first = thrown([&] { auto comm = make_other(ep); });
      }
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 1; i < 4; ++i)
      expect_arg_error<md::topology_error>(rec[i].first, "topology", words, "rank " + std::to_string(i));
    // Rank 0's bind could not know yet; its first collective must not wait for the
    // 30 s deadline: the others' failure reached it.
    INFO("rank 0: " << describe(rec[0].next));
    CHECK(as<md::remote_error>(rec[0].next) != nullptr);
    if (auto* e = as<md::error>(rec[0].next)) CHECK(contains(e->what(), "bound"));
    for (auto& r : rec) CHECK(r.seconds < 5.0);
  };
  SUBCASE("2 x 2 against a ring of 4") {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [](auto ep) { return md::bind(md::ring<md::shm, 4>, ep, local_opts()); },
        {"mdring::bind", "shm:4", "shm:2 x shm:2"});
  }
  SUBCASE("a compile-time topology against a different runtime one") {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [](auto ep) { return md::bind(md::parse_topology("shm:2 x ethernet:2"), ep, local_opts()); },
        {"ethernet:2", "shm:2 x shm:2"});
  }
  SUBCASE("same topology, different algorithms") {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [](auto ep) {
          auto o = local_opts();
          o.algorithms = {md::algorithm::direct, md::algorithm::ring};
          return md::bind(t22, ep, o);
        },
        {"direct", "ring"});
  }
  // Options that change the schedule or the framing of messages: ranks that
  // disagreed would post messages that never match.
  auto other_option = [&](auto change, std::vector<std::string> words) {
    run([](auto ep) { return md::bind(t22, ep, local_opts()); },
        [change](auto ep) {
          auto o = local_opts();
          change(o);
          return md::bind(t22, ep, o);
        },
        std::move(words));
  };
  SUBCASE("same topology, a different segment length") {
    other_option([](md::options& o) { o.tune.segment_bytes = 4096; }, {"segment 4096", "segment 0"});
  }
  SUBCASE("same topology, merging of same-link dimensions off") {
    other_option([](md::options& o) { o.tune.merge_same_link = false; }, {"nomerge", "|merge"});
  }
  SUBCASE("same topology, a different host gamma (cost model)") {
    // 1e-7 relative: lost by a decimal print of 6 digits, kept by the exact one.
    other_option([](md::options& o) { o.tune.host_gamma *= 1.0000001; }, {"host gamma"});
  }
}

TEST_CASE("the bind fingerprint names every option that changes the schedule or the messages") {
  const md::options base;
  const std::string b = md::detail::fingerprint(md::detail::to_runtime(t22), base);
  auto differs = [&](auto change, const char* what) {
    md::options o = base;
    change(o);
    INFO(what);
    CHECK(md::detail::fingerprint(md::detail::to_runtime(t22), o) != b);
  };
  differs([](md::options& o) { o.algorithms = {md::algorithm::ring}; }, "algorithms");
  differs([](md::options& o) { o.tune.direct_max_extent = 4; }, "direct_max_extent");
  differs([](md::options& o) { o.tune.split_ring_extent = 0; }, "split_ring_extent");
  differs([](md::options& o) { o.tune.merge_same_link = false; }, "merge_same_link");
  differs([](md::options& o) { o.tune.segment_bytes = 1 << 20; }, "segment_bytes");
  differs([](md::options& o) { o.tune.min_segment_bytes = 1 << 16; }, "min_segment_bytes");
  differs([](md::options& o) { o.tune.max_segments = 8; }, "max_segments");
  differs([](md::options& o) { o.tune.pipeline_depth = 2; }, "pipeline_depth");
  differs([](md::options& o) { o.tune.host_gamma = 1e-10; }, "host_gamma");
  differs([](md::options& o) { o.tune.device_gamma = 1e-13; }, "device_gamma");
  differs([](md::options& o) { o.tune.shared_staging_bytes = 4096; }, "shared_staging_bytes");
  differs([](md::options& o) { o.tune.cma_gamma = 0; }, "cma_gamma");  // the pull form: every rank alike
  differs([](md::options& o) { o.tune.copy_gamma = 1e-9; }, "copy_gamma");
  differs([](md::options& o) { o.tune.stream_min_bytes = 0; }, "stream_min_bytes");
  differs([](md::options& o) { o.tune.stream_broadcast_min_bytes = 0; }, "stream_broadcast_min_bytes");
  differs([](md::options& o) { o.tune.stream_blocks_min_bytes = 0; }, "stream_blocks_min_bytes");
  differs([](md::options& o) { o.tune.shared_reduce_max_bytes = 0; }, "shared_reduce_max_bytes");
  differs([](md::options& o) { o.tune.staging_chunk_bytes = 1 << 16; }, "staging_chunk_bytes");
  differs([](md::options& o) { o.max_message_bytes = 1 << 20; }, "max_message_bytes");
  differs(
      [](md::options& o) {
        o.checks = o.checks == md::check_level::collective ? md::check_level::local : md::check_level::collective;
      },
      "checks");
  differs([](md::options& o) { o.shared_memory = !o.shared_memory; }, "shared_memory");
  // The links' figures choose the segment length: each of them is in it too.
  auto link_differs = [&](auto change, const char* what) {
    auto rt = md::detail::to_runtime(t22);
    change(rt.dim(1).link);
    INFO(what);
    CHECK(md::detail::fingerprint(rt, base) != b);
  };
  link_differs([](md::link_info& l) { l.bandwidth *= 1.0000001; }, "bandwidth");
  link_differs([](md::link_info& l) { l.latency += 1e-9; }, "latency");
  link_differs([](md::link_info& l) { l.overhead += 1e-9; }, "overhead");
  link_differs([](md::link_info& l) { l.ports += 1; }, "ports");
  link_differs([](md::link_info& l) { l.fully_connected = !l.fully_connected; }, "fully_connected");
  // What only changes this rank's own behaviour is left out, so ranks may differ.
  md::options local = base;
  local.timeout = std::chrono::seconds(5);
  local.tune.nontemporal_bytes = 0;
  CHECK(md::detail::fingerprint(md::detail::to_runtime(t22), local) == b);
}

TEST_CASE("options are validated at bind, on every rank") {
  auto bind_fails = [](md::options o, std::string_view argument, std::vector<std::string> words,
                       const std::string& where) {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      const auto t0 = steady::now();
      r.first = thrown([&] { auto comm = md::bind(t22, ep, o); });
      r.seconds = seconds_since(t0);
    });
    for (std::size_t i = 0; i < 4; ++i) {
      expect_arg_error<md::invalid_argument>(rec[i].first, argument, words, where + ", rank " + std::to_string(i));
      CHECK(rec[i].seconds < 5.0);
    }
  };
  md::options o = local_opts();
  SUBCASE("timeout") {
    o.timeout = 0ms;
    bind_fails(o, "options.timeout", {"mdring::bind", "options.timeout", "positive"}, "timeout 0");
    o.timeout = -5ms;
    bind_fails(o, "options.timeout", {"options.timeout", "positive"}, "timeout -5 ms");
  }
  SUBCASE("max_message_bytes") {
    o.max_message_bytes = 0;
    bind_fails(o, "options.max_message_bytes", {"mdring::bind", "options.max_message_bytes", "got 0", "2^31 - 1"},
               "max_message_bytes 0");
    o.max_message_bytes = std::size_t(1) << 31;
    bind_fails(o, "options.max_message_bytes", {"got 2147483648"}, "max_message_bytes 2^31");
  }
  SUBCASE("algorithms longer than ndims") {
    o.algorithms = {md::algorithm::ring, md::algorithm::direct, md::algorithm::ring};
    bind_fails(o, "options.algorithms",
               {"mdring::bind", "options.algorithms", "3 entries", "2 dimensions", "shm:2 x shm:2"},
               "3 algorithms for 2 dimensions");
  }
  SUBCASE("tune.direct_max_extent") {
    o.tune.direct_max_extent = 1;
    bind_fails(o, "options.tune.direct_max_extent", {"options.tune.direct_max_extent", "at least 2"},
               "direct_max_extent 1");
  }
}

namespace {
// Concatenation of decimal digit strings: associative, not commutative.
struct digits {
  std::uint64_t value = 0;
  std::uint64_t len = 0;
};
struct concat_fn {
  digits operator()(const digits& a, const digits& b) const {
    std::uint64_t p = 1;
    for (std::uint64_t i = 0; i < b.len; ++i) p *= 10;
    return {a.value * p + b.value, a.len + b.len};
  }
};
}  // namespace

TEST_CASE("a non-commutative op is rejected where a ring would reorder it") {
  const auto concat = md::non_commutative(concat_fn{});
  SUBCASE("runtime topology with an ethernet (ring-only) dimension") {
    for (int which = 0; which < 3; ++which) {
      const std::string where = which == 0 ? "all_reduce" : which == 1 ? "reduce_scatter" : "reduce";
      auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
        auto comm = md::bind(md::parse_topology("shm:2 x ethernet:2"), ep, local_opts());
        std::vector<digits> s(8, digits{1, 1}), out(8);
        r.first = thrown([&] {
          if (which == 0) md::all_reduce(comm, s.data(), out.data(), 8, concat);
          else if (which == 1) md::reduce_scatter(comm, s.data(), out.data(), 2, concat);
          else md::reduce(comm, s.data(), out.data(), 8, 0, concat);
        });
      });
      for (std::size_t i = 0; i < 4; ++i)
        expect_arg_error<md::invalid_argument>(rec[i].first, "op",
                                               {"mdring::" + where, "not commutative", "dimension 1", "ethernet"},
                                               where + ", rank " + std::to_string(i));
    }
  }
  SUBCASE("algorithms forced to ring") {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record& r) {
      auto o = local_opts();
      o.algorithms = {md::algorithm::direct, md::algorithm::ring};
      auto comm = md::bind(t22, ep, o);
      std::vector<digits> s(8, digits{1, 1}), out(8);
      r.first = thrown([&] { md::all_reduce(comm, s.data(), out.data(), 8, concat); });
    });
    for (std::size_t i = 0; i < 4; ++i)
      expect_arg_error<md::invalid_argument>(rec[i].first, "op",
                                             {"mdring::all_reduce", "options.algorithms[1]", "ring", "not commutative"},
                                             "forced ring, rank " + std::to_string(i));
  }
  SUBCASE("control: on fully connected dimensions it runs, in rank order") {
    auto rec = on_ranks(4, [&](md::threads::endpoint ep, rank_record&) {
      auto comm = md::bind(md::parse_topology("shm:2 x shm:2"), ep, local_opts());
      const std::uint64_t r = comm.rank();
      std::vector<digits> s(7), out(7);
      for (std::uint64_t i = 0; i < 7; ++i) s[i] = {(r + i) % 9 + 1, 1};
      md::all_reduce(comm, s.data(), out.data(), 7, concat);
      for (std::uint64_t i = 0; i < 7; ++i) {
        std::uint64_t want = 0;
        for (std::uint64_t q = 0; q < 4; ++q) want = want * 10 + (q + i) % 9 + 1;
        CHECK(out[i].value == want);
        CHECK(out[i].len == 4);
      }
    });
    for (auto& r : rec) CHECK_MESSAGE(!r.first, describe(r.first));
  }
}
