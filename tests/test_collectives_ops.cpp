// tests/test_collectives_ops.cpp: every built-in op on every element type, 16-bit
// accumulation, wrapping, user ops (commutative or not, refused with a forced ring),
// and random floats within a float64 bound, bitwise identical on every rank and run
// (the harness: collective_suites.hpp; the rest of the collectives' tests:
// test_collectives.cpp).
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include "collective_suites.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <memory_resource>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
TEST_CASE("collectives: every built-in op on every element type, exact") {
  const std::vector<shape> shapes = {
      {"shm:1", {}, 1},
      {"shm:2 x shm:3", {RING, DIRECT}, 6},
      {"shm:2 x shm:3", {DIRECT, RING}, 6},
      {"ethernet:5", {}, 5},
      {"shm:3 x infiniband:2", {}, 6},
      {"shm:2 x shm:2 x shm:2", {DIRECT, DIRECT, DIRECT}, 8},
      {"shm:3 x shm:1 x ethernet:2", {RING, RING, RING}, 6},
  };
  for (const auto& s : shapes) {
    const auto topo = md::parse_topology(s.topo);
    in_world(label_of(s), s.threads, topo, opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      type_suite<std::int32_t, true>(c, cx);
      type_suite<std::int64_t, false>(c, cx);
      type_suite<std::uint8_t, false>(c, cx);
      type_suite<float, true>(c, cx);
      type_suite<double, false>(c, cx);
      type_suite<md::half, false>(c, cx);
      type_suite<md::bfloat16, false>(c, cx);
    });
  }
}

TEST_CASE("collectives: 16-bit floats: the direct algorithm accumulates in float and rounds once") {
  // types.hpp: "a reduction that combines k inputs in one pass (the direct algorithm)
  // accumulates all k in float and rounds once". Rank 0 adds a large value and the
  // others add 1, so rounding each partial to 16 bits would lose the ones:
  // half: 2048 + 1 + 1 + 1 = 2051 -> 2052; bfloat16: 256 + 3 = 259 -> 260.
  in_world("shm:4 direct, 16-bit", 4, md::parse_topology("shm:4"), opts_with({DIRECT}), [](auto& c, rank_ctx& cx) {
    const bool r0 = c.rank() == 0;
    md::half h[3] = {r0 ? 2048.0f : 1.0f, r0 ? 2048.0f : 1.0f, r0 ? -2048.0f : -1.0f};
    md::bfloat16 b[2] = {r0 ? 256.0f : 1.0f, r0 ? 256.0f : 1.0f};
    md::all_reduce(c, h, 3, md::sum);
    md::all_reduce(c, b, 1, md::sum);
    md::all_reduce(c, b + 1, 1, md::avg);
    cx.where = "all_reduce<half> sum, direct";
    expect(cx, "buf", h, 3, [](std::size_t i) { return md::half(i == 2 ? -2051.0f : 2051.0f); });
    cx.where = "all_reduce<bfloat16> sum / avg, direct";
    expect(cx, "buf", b, 2, [](std::size_t i) { return md::bfloat16(i == 0 ? 259.0f : 259.0f / 4.0f); });
    ++cx.checks;
  });
}

TEST_CASE("collectives: uint8 sum wraps modulo 256") {
  // 200 + 100 on two ranks, 3 x 100 + ... : the exact answers are taken mod 256.
  in_world("shm:2 x shm:3 uint8 wrap", 6, md::parse_topology("shm:2 x shm:3"), opts_with(), [](auto& c, rank_ctx& cx) {
    buffer<std::uint8_t> b(5, false);
    for (std::size_t i = 0; i < 5; ++i) b[i] = static_cast<std::uint8_t>(200 + i);
    cx.where = "all_reduce<uint8> sum of 200+i on 6 ranks";
    md::all_reduce(c, b.data(), 5, md::sum);
    expect(cx, "buf", b.data(), 5, [](std::size_t i) { return static_cast<std::uint8_t>((6 * (200 + i)) % 256); });
  });
}

TEST_CASE("collectives: user op xor (commutative) on ring and direct dimensions") {
  const std::vector<shape> shapes = {
      {"ethernet:7", {}, 7},
      {"shm:2 x infiniband:3", {}, 6},
      {"shm:3 x shm:5", {RING, DIRECT}, 15},
      {"shm:1", {}, 1},
  };
  for (const auto& s : shapes) {
    in_world(label_of(s), s.threads, md::parse_topology(s.topo), opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      user_suite<std::int32_t>(c, cx, xor_spec<std::int32_t>{});
      user_suite<std::uint8_t>(c, cx, xor_spec<std::uint8_t>{});
    });
  }
}

TEST_CASE("collectives: non-commutative ops fold in rank order on fully connected links") {
  // The result must be x_0 op x_1 op ... op x_{P-1}, with rank = c0 + p0 (c1 + p1 c2 ...).
  const std::vector<shape> shapes = {
      {"shm:1", {}, 1},
      {"shm:2", {}, 2},
      {"shm:5", {}, 5},
      {"shm:9", {}, 9},  // automatic would be ring for commutative ops
      {"shm:2 x shm:3", {}, 6},
      {"shm:3 x shm:2", {DIRECT, DIRECT}, 6},
      {"shm:3 x shm:1 x shm:2", {}, 6},
      {"shm:2 x shm:2 x shm:2", {}, 8},
      {"shm:3 x shm:5", {}, 15},
  };
  for (const auto& s : shapes) {
    in_world(label_of(s), s.threads, md::parse_topology(s.topo), opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      user_suite<mat2>(c, cx, mat_spec{});
      user_suite<std::int32_t>(c, cx, keep_left_spec{});
      user_suite<std::int32_t>(c, cx, keep_right_spec{});
    });
  }
  // A compile-time topology of fully connected links accepts them too.
  in_world("ring<shm,2> * ring<shm> on 6, matmul", 6, md::ring<md::shm, 2> * md::ring<md::shm>, opts_with(),
           [](auto& c, rank_ctx& cx) { user_suite<mat2>(c, cx, mat_spec{}); });
}

TEST_CASE("collectives: a non-commutative op with a forced ring is rejected on every rank") {
  for (algorithm forced : {RING, HD}) {
    INFO("forced " << md::to_string(forced));
    std::vector<std::string> caught(4);
    try {
      md::threads::run(4, [&](md::threads::endpoint ep) {
        auto comm = md::bind(md::parse_topology("shm:4"), ep, opts_with({forced}));
        std::int32_t x[3] = {1, 2, 3};
        try {
          md::all_reduce(comm, x, 3, keep_left_spec{}.op);
          caught[ep.rank] = "no exception";
        } catch (const md::invalid_argument& e) {
          caught[ep.rank] = "invalid_argument " + e.argument();
        } catch (const std::exception& e) {
          caught[ep.rank] = std::string("other exception: ") + e.what();
        }
      });
    } catch (const std::exception& e) {
      FAIL_CHECK("run threw: " << e.what());
    }
    for (std::size_t r = 0; r < 4; ++r) {
      CAPTURE(r);
      CHECK(caught[r] == "invalid_argument op");
    }
  }
}

namespace {
// Random floats: inputs uniform in [-1, 1) (mt19937, fixed seed, generated once).
struct random_case {
  std::vector<std::vector<float>> in;  // per rank
  std::vector<std::vector<float>> ar, ar2, ar_in, rs, red;
};

void run_random(const shape& s, std::size_t n, random_case& rc, std::vector<std::vector<float>>& out_first) {
  const std::size_t P = s.threads;
  rc.ar.assign(P, {});
  rc.ar2.assign(P, {});
  rc.ar_in.assign(P, {});
  rc.rs.assign(P, {});
  rc.red.assign(P, {});
  const auto topo = md::parse_topology(s.topo);
  in_world(label_of(s) + " random floats n=" + std::to_string(n), P, topo, opts_with(s.algos),
           [&](auto& c, rank_ctx& cx) {
             const std::size_t r = c.rank();
             const auto& x = rc.in[r];
             std::vector<float> out(n);
             md::all_reduce(c, x.data(), out.data(), n, md::sum);
             rc.ar[r] = out;
             md::all_reduce(c, x.data(), out.data(), n, md::sum);  // the same call again
             rc.ar2[r] = out;
             std::vector<float> inplace = x;
             md::all_reduce(c, inplace.data(), n, md::sum);
             rc.ar_in[r] = inplace;
             const std::size_t blk = n / P;
             std::vector<float> rsout(blk);
             md::reduce_scatter(c, x.data(), rsout.data(), blk, md::sum);
             rc.rs[r] = rsout;
             std::vector<float> red(n);
             md::reduce(c, x.data(), red.data(), n, P - 1, md::sum);
             if (r == P - 1) rc.red[r] = red;
             ++cx.checks;
           });
  out_first = rc.ar;
}
}  // namespace

TEST_CASE("collectives: random floats within the float64 bound, bitwise identical on all ranks and runs") {
  // Bound: a float sum of P terms, combined in any order (ring partials, direct
  // n-ary folds, stage by stage), is within (P-1) * u * sum_r |x_r| of the exact sum
  // (u = eps/2; we allow eps). So |got - ref| <= (P-1) * FLT_EPSILON * sum_r |x_r| + 1e-30,
  // where ref is the sum in double of the same float inputs.
  const std::vector<shape> shapes = {
      {"shm:2 x shm:3", {RING, DIRECT}, 6},
      {"shm:2 x shm:3", {DIRECT, RING}, 6},
      {"ethernet:7", {}, 7},
      {"ethernet:7", {HD}, 7},
      {"shm:2 x infiniband:6", {DIRECT, HD}, 12},
      {"shm:3 x shm:5", {RING, RING}, 15},
      {"shm:3 x shm:5", {DIRECT, DIRECT}, 15},
      {"shm:2 x shm:1 x shm:2 x ethernet:2", {}, 8},
  };
  const float eps = std::numeric_limits<float>::epsilon();
  for (const auto& s : shapes) {
    for (std::size_t n : {std::size_t(4099), std::size_t(10007)}) {
      INFO(label_of(s) << " n=" << n);
      const std::size_t P = s.threads;
      random_case rc;
      rc.in.resize(P);
      for (std::size_t r = 0; r < P; ++r) {
        std::mt19937 gen(static_cast<unsigned>(12345 + 101 * r + n));
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        rc.in[r].resize(n);
        for (auto& v : rc.in[r]) v = dist(gen);
      }
      std::vector<std::vector<float>> first;
      run_random(s, n, rc, first);
      std::vector<std::vector<float>> second_world;
      random_case rc2;
      rc2.in = rc.in;
      run_random(s, n, rc2, second_world);

      auto ref = [&](std::size_t i, double& abs_sum) {
        double sref = 0;
        abs_sum = 0;
        for (std::size_t r = 0; r < P; ++r) sref += double(rc.in[r][i]), abs_sum += std::fabs(double(rc.in[r][i]));
        return sref;
      };
      auto within = [&](float got, std::size_t i) {
        double a = 0;
        const double sref = ref(i, a);
        return std::fabs(double(got) - sref) <= double(P - 1) * double(eps) * a + 1e-30;
      };
      std::size_t bad_bound = 0, bad_ident = 0, bad_rerun = 0, bad_world = 0, bad_inplace = 0, bad_rs = 0, bad_red = 0;
      for (std::size_t r = 0; r < P; ++r) {
        if (rc.ar[r].size() != n || rc.ar_in[r].size() != n || second_world[r].size() != n) {
          FAIL_CHECK("rank " << r << " recorded no result");
          continue;
        }
        bad_ident += std::memcmp(rc.ar[r].data(), rc.ar[0].data(), n * sizeof(float)) != 0;
        bad_rerun += std::memcmp(rc.ar[r].data(), rc.ar2[r].data(), n * sizeof(float)) != 0;
        bad_world += std::memcmp(rc.ar[r].data(), second_world[r].data(), n * sizeof(float)) != 0;
        bad_inplace += std::memcmp(rc.ar[r].data(), rc.ar_in[r].data(), n * sizeof(float)) != 0;
        const std::size_t blk = n / P;
        for (std::size_t i = 0; i < blk && rc.rs[r].size() == blk; ++i) bad_rs += !within(rc.rs[r][i], r * blk + i);
      }
      for (std::size_t i = 0; i < n; ++i) {
        bad_bound += !within(rc.ar[0][i], i);
        bad_red += rc.red[P - 1].size() != n || !within(rc.red[P - 1][i], i);
      }
      CHECK(bad_ident == 0);    // all ranks hold the same bits
      CHECK(bad_rerun == 0);    // the same call twice on one communicator
      CHECK(bad_world == 0);    // a fresh world and communicator
      CHECK(bad_inplace == 0);  // in place runs the same schedule
      CHECK(bad_bound == 0);
      CHECK(bad_rs == 0);
      CHECK(bad_red == 0);
    }
  }
}
