// test_mpi.cpp: the five collectives over MPI (mpi_main.cpp: every rank runs every
// test case). The same binary runs on 1, 2, 3, 4, 6 and 8 processes, so the
// topologies are derived from the world size P:
//   ring<shm> (flat), 2 x P/2 and P/2 x 2 when P is even, 3 x 2 for 6, 2 x 2 x 2
//   for 8; runtime strings (1 x P, P x 1, ethernet and infiniband rings, mixed
//   extents) and forced ring / direct / halving_doubling algorithms.
// Checks, as MPICH's collective tests do: closed-form expected values (rank-
// dependent integers, products of small values, min/max patterns, sums of floats
// that are exact), random floats against a float64 reference within a stated
// bound, bitwise identity of the results on all ranks, counts 0, 1, < P, primes,
// in place and out of place, every root, half and bfloat16, messages split into
// pieces by a small options.max_message_bytes, and guard elements around every
// receive buffer (nothing written outside it; sendbuf left unchanged).
//
// Every rank makes the same sequence of collective calls whatever its checks find
// (CHECK, never REQUIRE, between collectives), so a failure cannot desynchronize
// the ranks.
//
// The other test cases (options, memory, sub-communicators, planning, reproducible
// mode) are in test_mpi_options.cpp; the harness in mpi_support.hpp.
#include <doctest/doctest.h>

#include "mpi_support.hpp"
#include "one_shot_support.hpp"
#include "reproducible_reference.hpp"

// ---------------------------------------------------------------------------
TEST_CASE("the communicator matches the world (MPI_COMM_WORLD, or the UCX world)") {
  const std::size_t P = world_size(), R = world_rank();
  for_each_topology([&](auto& comm, const std::string& label) {
    INFO(label);
    CHECK(comm.size() == P);
    CHECK(comm.rank() == R);
    CHECK(comm.usable());
    std::size_t prod = 1;
    for (auto e : comm.extents()) prod *= e;
    CHECK(prod == P);
    CHECK(comm.topology().rank_of(comm.coordinates()) == R);
  });
}

TEST_CASE("shrink when nothing failed: UCX binds the same ranks again; MPI refuses, naming why") {
  const std::size_t P = world_size(), R = world_rank();
#if MDRING_TEST_UCX
  auto comm = md::bind(md::parse_topology("shm:*"), test_world());
  auto s = md::shrink(comm);
  CHECK(s.size() == P);
  CHECK(s.rank() == R);
  CHECK(s.topology() == comm.topology());
  std::vector<std::int64_t> x(1000, std::int64_t(R) + 1);
  md::all_reduce(s, x.data(), x.size());
  CHECK(x[999] == std::int64_t(P * (P + 1) / 2));
  CHECK_THROWS_AS(md::all_reduce(comm, x.data(), x.size()), md::communicator_error);
#else
  auto comm = md::bind(md::parse_topology("shm:*"), MPI_COMM_WORLD);
  try {
    (void)md::shrink(comm);
    FAIL("no error");
  } catch (const md::invalid_argument& e) {
    CHECK(e.argument() == "comm");
    CHECK(std::string(e.what()).find("the mpi transport cannot go on after a rank's failure") != std::string::npos);
    CHECK(std::string(e.what()).find("ULFM") != std::string::npos);
  }
  CHECK(comm.usable());  // refused before anything happened
  std::vector<std::int64_t> x(10, 1);
  md::all_reduce(comm, x.data(), x.size());
  CHECK(x[0] == std::int64_t(P));
  (void)R;
#endif
}

TEST_CASE("all_reduce: exact integer sums, every topology and count, in place and out of place") {
  const std::size_t P = world_size(), R = world_rank();
  const auto t0 = std::chrono::steady_clock::now();
  for_each_topology([&](auto& comm, const std::string& label) {
    for (std::size_t n : counts_for(P, label)) {
      INFO(label << ", count " << n);
      check_exact_sum(comm, P, R, n);
      guarded<std::int64_t> inplace(n, -77);
      for (std::size_t i = 0; i < n; ++i) inplace[i] = val(R, i);
      md::all_reduce(comm, inplace.data(), n);
      CHECK(first_bad(n, [&](std::size_t i) { return inplace[i] == val_sum(P, i); }) == n);
      CHECK(inplace.guards_intact());
      CHECK(identical_everywhere(inplace.data(), n * sizeof(std::int64_t)));
    }
  });
  if (R == 0) std::printf("test_mpi[%zu]: all_reduce integer sums %.2f s\n", P, since(t0));
}

TEST_CASE("all_reduce: prod, min, max, avg, a user op, exact floats") {
  const std::size_t P = world_size(), R = world_rank();
  for_each_topology(
      [&](auto& comm, const std::string& label) {
        for (std::size_t n : {std::size_t(1), P + 1, std::size_t(61), std::size_t(1009)}) {
          INFO(label << ", count " << n);
          // prod of small values: x_r[i] = (r + i) % 3 + 1, product at most 3^8.
          std::vector<std::int64_t> p(n);
          std::vector<double> pd(n);
          for (std::size_t i = 0; i < n; ++i) p[i] = std::int64_t((R + i) % 3 + 1), pd[i] = double(p[i]);
          md::all_reduce(comm, p.data(), n, md::prod);
          md::all_reduce(comm, pd.data(), n, md::prod);
          auto prod_ref = [&](std::size_t i) {
            std::int64_t x = 1;
            for (std::size_t r = 0; r < P; ++r) x *= std::int64_t((r + i) % 3 + 1);
            return x;
          };
          CHECK(first_bad(n, [&](std::size_t i) { return p[i] == prod_ref(i); }) == n);
          CHECK(first_bad(n, [&](std::size_t i) { return pd[i] == double(prod_ref(i)); }) == n);
          // min / max of a pattern with a unique extreme: x_r[i] = (r * 7 + i * 13) % 101 - 50.
          auto pat = [](std::size_t r, std::size_t i) { return int((r * 7 + i * 13) % 101) - 50; };
          std::vector<int> mn(n), mx(n);
          std::vector<float> fmn(n);
          for (std::size_t i = 0; i < n; ++i) mn[i] = mx[i] = pat(R, i), fmn[i] = float(pat(R, i)) * 0.25f;
          md::all_reduce(comm, mn.data(), n, md::min);
          md::all_reduce(comm, mx.data(), n, md::max);
          md::all_reduce(comm, fmn.data(), n, md::min);
          CHECK(first_bad(n, [&](std::size_t i) {
                  int lo = 1000, hi = -1000;
                  for (std::size_t r = 0; r < P; ++r) lo = std::min(lo, pat(r, i)), hi = std::max(hi, pat(r, i));
                  return mn[i] == lo && mx[i] == hi && fmn[i] == float(lo) * 0.25f;
                }) == n);
          // avg: integers truncate toward zero; doubles divide an exact sum once.
          std::vector<std::int64_t> ai(n);
          std::vector<double> ad(n);
          for (std::size_t i = 0; i < n; ++i) ai[i] = val(R, i) - 4000000, ad[i] = double(R) * 3 + double(i);
          md::all_reduce(comm, ai.data(), n, md::avg);
          md::all_reduce(comm, ad.data(), n, md::avg);
          CHECK(first_bad(n, [&](std::size_t i) {
                  return ai[i] == (val_sum(P, i) - 4000000 * std::int64_t(P)) / std::int64_t(P);
                }) == n);
          CHECK(first_bad(n, [&](std::size_t i) {
                  return ad[i] == (3.0 * double(P * (P - 1) / 2) + double(P) * double(i)) / double(P);
                }) == n);
          // A user op (commutative by default): xor.
          std::vector<std::uint32_t> x(n);
          for (std::size_t i = 0; i < n; ++i) x[i] = std::uint32_t(0x9e3779b9u * (R + 1) + i);
          md::all_reduce(comm, x.data(), n, [](std::uint32_t a, std::uint32_t b) { return a ^ b; });
          CHECK(first_bad(n, [&](std::size_t i) {
                  std::uint32_t w = 0;
                  for (std::size_t r = 0; r < P; ++r) w ^= std::uint32_t(0x9e3779b9u * (r + 1) + i);
                  return x[i] == w;
                }) == n);
          // Floats whose sums are exact in any order: halves and small integers.
          std::vector<float> f(n);
          for (std::size_t i = 0; i < n; ++i) f[i] = float(R + 1) * 0.5f + float(i % 17);
          md::all_reduce(comm, f.data(), n);
          CHECK(first_bad(n, [&](std::size_t i) {
                  return f[i] == 0.5f * float(P * (P + 1) / 2) + float(P) * float(i % 17);
                }) == n);
        }
      },
      false);
}

namespace {
// A random float of rank r, element i: sign, mantissa and a binary exponent in [-6, 6].
float rnd(std::size_t r, std::size_t i) {
  const std::uint64_t u = mdring_test::mix((std::uint64_t(r) << 40) ^ std::uint64_t(i) ^ 0x5eedull);
  const float m = float(u >> 40) / float(1ull << 24);  // [0, 1)
  const int e = int((u >> 8) % 13) - 6;
  return std::ldexp((u & 1) ? -m : m, e);
}
}  // namespace

TEST_CASE("all_reduce: random floats against a float64 reference, bitwise identical on all ranks") {
  // Bound: any order of float additions of P values, each rounded (relative error
  // u = 2^-24), errs by at most (P - 1) u sum|x_r| plus the final rounding; so
  // |result - exact| <= P * 2^-24 * sum_r |x_r[i]|.
  const std::size_t P = world_size(), R = world_rank();
  for_each_topology([&](auto& comm, const std::string& label) {
    for (std::size_t n : {std::size_t(3), std::size_t(1000), std::size_t(4099)}) {
      INFO(label << ", count " << n);
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = rnd(R, i);
      md::all_reduce(comm, x.data(), n);
      double worst = 0;
      const std::size_t bad = first_bad(n, [&](std::size_t i) {
        double exact = 0, mag = 0;
        for (std::size_t r = 0; r < P; ++r) exact += double(rnd(r, i)), mag += std::fabs(double(rnd(r, i)));
        const double err = std::fabs(double(x[i]) - exact), bound = double(P) * std::ldexp(1.0, -24) * mag;
        worst = std::max(worst, bound > 0 ? err / bound : err);
        return err <= bound;
      });
      INFO("worst error / bound = " << worst);
      CHECK(bad == n);
      CHECK(identical_everywhere(x.data(), n * sizeof(float)));
      // And run to run: the same call gives the same bits.
      std::vector<float> y(n);
      for (std::size_t i = 0; i < n; ++i) y[i] = rnd(R, i);
      md::all_reduce(comm, y.data(), n);
      CHECK(std::memcmp(x.data(), y.data(), n * sizeof(float)) == 0);
    }
  });
}

// ---------------------------------------------------------------------------
TEST_CASE("reduce_scatter: every topology and count, in place and out of place") {
  const std::size_t P = world_size(), R = world_rank();
  const auto t0 = std::chrono::steady_clock::now();
  for_each_topology([&](auto& comm, const std::string& label) {
    for (std::size_t rc : counts_for(P, label)) {
      INFO(label << ", recvcount " << rc);
      const std::size_t total = rc * P;
      std::vector<std::int64_t> send(total);
      for (std::size_t j = 0; j < total; ++j) send[j] = val(R, j);
      guarded<std::int64_t> recv(rc, -77);
      md::reduce_scatter(comm, send.data(), recv.data(), rc);
      CHECK(first_bad(rc, [&](std::size_t i) { return recv[i] == val_sum(P, R * rc + i); }) == rc);
      CHECK(recv.guards_intact());
      CHECK(first_bad(total, [&](std::size_t j) { return send[j] == val(R, j); }) == total);
      // In place: recvbuf == sendbuf + rank * recvcount.
      guarded<std::int64_t> buf(total, -77);
      for (std::size_t j = 0; j < total; ++j) buf[j] = val(R, j);
      md::reduce_scatter(comm, buf.data(), buf.data() + R * rc, rc);
      CHECK(first_bad(rc, [&](std::size_t i) { return buf[R * rc + i] == val_sum(P, R * rc + i); }) == rc);
      CHECK(buf.guards_intact());
      // max over the ranks as well (a different op through the same permutation).
      std::vector<int> m(total), mo(rc + 1, -1);
      for (std::size_t j = 0; j < total; ++j) m[j] = int((R * 5 + j * 3) % 11);
      md::reduce_scatter(comm, m.data(), mo.data(), rc, md::max);
      CHECK(first_bad(rc, [&](std::size_t i) {
              int hi = -1;
              for (std::size_t r = 0; r < P; ++r) hi = std::max(hi, int((r * 5 + (R * rc + i) * 3) % 11));
              return mo[i] == hi;
            }) == rc);
      CHECK(mo[rc] == -1);
    }
  });
  if (R == 0) std::printf("test_mpi[%zu]: reduce_scatter %.2f s\n", P, since(t0));
}

TEST_CASE("all_gather: every topology and count, in place and out of place, identical everywhere") {
  const std::size_t P = world_size(), R = world_rank();
  const auto t0 = std::chrono::steady_clock::now();
  for_each_topology([&](auto& comm, const std::string& label) {
    for (std::size_t sc : counts_for(P, label)) {
      INFO(label << ", sendcount " << sc);
      const std::size_t total = sc * P;
      std::vector<std::int64_t> send(sc);
      for (std::size_t i = 0; i < sc; ++i) send[i] = val(R, i);
      guarded<std::int64_t> recv(total, -77);
      md::all_gather(comm, send.data(), recv.data(), sc);
      CHECK(first_bad(total, [&](std::size_t j) { return recv[j] == val(j / sc, j % sc); }) == total);
      CHECK(recv.guards_intact());
      CHECK(identical_everywhere(recv.data(), total * sizeof(std::int64_t)));
      // In place: sendbuf == recvbuf + rank * sendcount.
      guarded<std::int64_t> buf(total, -77);
      for (std::size_t i = 0; i < sc; ++i) buf[R * sc + i] = val(R, i);
      md::all_gather(comm, buf.data() + R * sc, buf.data(), sc);
      CHECK(first_bad(total, [&](std::size_t j) { return buf[j] == val(j / sc, j % sc); }) == total);
      CHECK(buf.guards_intact());
      // A 2-byte type through the permutation.
      std::vector<std::uint16_t> s16(sc), r16(total);
      for (std::size_t i = 0; i < sc; ++i) s16[i] = std::uint16_t(R * 1000 + i);
      md::all_gather(comm, s16.data(), r16.data(), sc);
      CHECK(first_bad(total, [&](std::size_t j) { return r16[j] == std::uint16_t((j / sc) * 1000 + j % sc); }) ==
            total);
    }
  });
  if (R == 0) std::printf("test_mpi[%zu]: all_gather %.2f s\n", P, since(t0));
}

TEST_CASE("broadcast: every root") {
  const std::size_t P = world_size(), R = world_rank();
  const auto t0 = std::chrono::steady_clock::now();
  for_each_topology([&](auto& comm, const std::string& label) {
    for (std::size_t n : counts_for(P, label)) {
      for (std::size_t root = 0; root < P; ++root) {
        INFO(label << ", count " << n << ", root " << root);
        guarded<std::int64_t> buf(n, -77);
        for (std::size_t i = 0; i < n; ++i) buf[i] = R == root ? val(root, i) : -1;
        md::broadcast(comm, buf.data(), n, root);
        CHECK(first_bad(n, [&](std::size_t i) { return buf[i] == val(root, i); }) == n);
        CHECK(buf.guards_intact());
      }
    }
  });
  if (R == 0) std::printf("test_mpi[%zu]: broadcast %.2f s\n", P, since(t0));
}

TEST_CASE("reduce: every root; recvbuf untouched off the root") {
  const std::size_t P = world_size(), R = world_rank();
  const auto t0 = std::chrono::steady_clock::now();
  for_each_topology([&](auto& comm, const std::string& label) {
    for (std::size_t n : counts_for(P, label)) {
      for (std::size_t root = 0; root < P; ++root) {
        INFO(label << ", count " << n << ", root " << root);
        std::vector<std::int64_t> send(n);
        for (std::size_t i = 0; i < n; ++i) send[i] = val(R, i);
        guarded<std::int64_t> recv(n, -77);
        md::reduce(comm, send.data(), recv.data(), n, root);
        if (R == root) CHECK(first_bad(n, [&](std::size_t i) { return recv[i] == val_sum(P, i); }) == n);
        else CHECK(first_bad(n, [&](std::size_t i) { return recv[i] == -77; }) == n);
        CHECK(recv.guards_intact());
        CHECK(first_bad(n, [&](std::size_t i) { return send[i] == val(R, i); }) == n);
        // In place on the root, null recvbuf elsewhere.
        std::vector<std::int64_t> buf(n);
        for (std::size_t i = 0; i < n; ++i) buf[i] = val(R, i);
        md::reduce(comm, buf.data(), R == root ? buf.data() : nullptr, n, root);
        if (R == root) CHECK(first_bad(n, [&](std::size_t i) { return buf[i] == val_sum(P, i); }) == n);
        else CHECK(first_bad(n, [&](std::size_t i) { return buf[i] == val(R, i); }) == n);
      }
    }
  });
  if (R == 0) std::printf("test_mpi[%zu]: reduce %.2f s\n", P, since(t0));
}

// ---------------------------------------------------------------------------
TEST_CASE("half and bfloat16: exact integer sums, avg, identical everywhere") {
  const std::size_t P = world_size(), R = world_rank();
  for_each_topology(
      [&](auto& comm, const std::string& label) {
        for (std::size_t n : {std::size_t(1), P + 1, std::size_t(333)}) {
          INFO(label << ", count " << n);
          // Small integers: every partial sum is exact in 16 bits (<= 8 * 4 + 4).
          std::vector<md::half> h(n);
          std::vector<md::bfloat16> b(n);
          for (std::size_t i = 0; i < n; ++i)
            h[i] = md::half(float((R + i) % 5)), b[i] = md::bfloat16(float((R * 3 + i) % 5));
          md::all_reduce(comm, h.data(), n);
          md::all_reduce(comm, b.data(), n);
          auto hsum = [&](std::size_t i) {
            float s = 0;
            for (std::size_t r = 0; r < P; ++r) s += float((r + i) % 5);
            return s;
          };
          auto bsum = [&](std::size_t i) {
            float s = 0;
            for (std::size_t r = 0; r < P; ++r) s += float((r * 3 + i) % 5);
            return s;
          };
          CHECK(first_bad(n, [&](std::size_t i) { return float(h[i]) == hsum(i); }) == n);
          CHECK(first_bad(n, [&](std::size_t i) { return float(b[i]) == bsum(i); }) == n);
          CHECK(identical_everywhere(h.data(), n * 2));
          CHECK(identical_everywhere(b.data(), n * 2));
          // avg divides the exact float sum once, then rounds to 16 bits.
          std::vector<md::half> ha(n);
          for (std::size_t i = 0; i < n; ++i) ha[i] = md::half(float((R + i) % 5));
          md::all_reduce(comm, ha.data(), n, md::avg);
          CHECK(first_bad(n, [&](std::size_t i) { return ha[i] == md::half(hsum(i) / float(P)); }) == n);
          // max of bfloat16 and broadcast of half bits.
          std::vector<md::bfloat16> bm(n);
          for (std::size_t i = 0; i < n; ++i) bm[i] = md::bfloat16(-float((R * 7 + i) % 9) * 0.125f);
          md::all_reduce(comm, bm.data(), n, md::max);
          CHECK(first_bad(n, [&](std::size_t i) {
                  float hi = -100;
                  for (std::size_t r = 0; r < P; ++r) hi = std::max(hi, -float((r * 7 + i) % 9) * 0.125f);
                  return float(bm[i]) == hi;
                }) == n);
          std::vector<md::half> hb(n);
          for (std::size_t i = 0; i < n; ++i) hb[i] = md::half::from_bits(std::uint16_t(R == 0 ? 0x3c00 + i : 0xffff));
          md::broadcast(comm, hb.data(), n, 0);
          CHECK(first_bad(n, [&](std::size_t i) { return hb[i].bits == std::uint16_t(0x3c00 + i); }) == n);
        }
      },
      false);
}

TEST_CASE("a non-commutative op on fully connected dimensions combines in rank order") {
  const std::size_t P = world_size(), R = world_rank();
  struct digits {
    std::uint64_t value = 0, len = 0;
  };
  const auto concat = md::non_commutative([](const digits& a, const digits& b) {
    std::uint64_t p = 1;
    for (std::uint64_t i = 0; i < b.len; ++i) p *= 10;
    return digits{a.value * p + b.value, a.len + b.len};
  });
  std::vector<std::string> topos = {"shm:*"};
  if (P % 2 == 0) topos.push_back("shm:2 x nvlink:*");
  for (auto& t : topos) {
    auto comm = md::bind(md::parse_topology(t), test_world());
    for (std::size_t n : {std::size_t(1), std::size_t(10), std::size_t(101)}) {
      INFO(t << ", count " << n);
      std::vector<digits> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = {(R + i) % 9 + 1, 1};
      md::all_reduce(comm, x.data(), n, concat);
      CHECK(first_bad(n, [&](std::size_t i) {
              std::uint64_t want = 0;
              for (std::size_t r = 0; r < P; ++r) want = want * 10 + (r + i) % 9 + 1;
              return x[i].value == want && x[i].len == P;
            }) == n);
      std::vector<digits> s(n), out(n);
      for (std::size_t i = 0; i < n; ++i) s[i] = {(R * 2 + i) % 9 + 1, 1};
      md::reduce(comm, s.data(), out.data(), n, P - 1, concat);
      if (R == P - 1)
        CHECK(first_bad(n, [&](std::size_t i) {
                std::uint64_t want = 0;
                for (std::size_t r = 0; r < P; ++r) want = want * 10 + (r * 2 + i) % 9 + 1;
                return out[i].value == want;
              }) == n);
    }
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("one-shot between processes: random small calls, nonblocking ones in flight, the reproducible bits") {
  // Every rank of the world on this node: small calls run one-shot over the flat
  // node window (plan/one_shot.hpp), each exact, and every one of them one-shot.
  const std::size_t P = world_size(), R = world_rank();
  if (P < 2) return;
  md::options o;
  o.reproducible = true;
  const std::string topo = P % 2 == 0 ? "shm:2 x ethernet:*" : "ethernet:*";
  auto comm = md::bind(md::parse_topology(topo), test_world(), o);
  const std::uint64_t before = mdring_test::one_shot_calls(comm);
  const auto fails = mdring_test::random_calls<float>(comm, 120, 3, 250);  // 8 x 250 floats: within 8 KiB
  for (const auto& f : fails) FAIL_CHECK(f);
  CHECK(mdring_test::one_shot_calls(comm) - before == 120);
  // A program's call in flight, small calls queued behind it, and one blocking.
  std::vector<double> big(200000, double(R)), a(9, double(R + 1)), b(9, -1.0);
  md::request q1 = md::iall_reduce(comm, big.data(), big.size());
  md::request q2 = md::iall_reduce(comm, a.data(), a.size());
  if (R == P - 1) b.assign(9, 3.5);
  md::broadcast(comm, b.data(), b.size(), P - 1);
  q2.wait();
  q1.wait();
  CHECK(big[12345] == double(P * (P - 1) / 2));
  CHECK(a[8] == double(P * (P + 1) / 2));
  CHECK(b[0] == 3.5);
  // The reproducible mode's bits, and the same on every rank.
  std::vector<float> x(97);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = mdring_test::wide_value(21, R, i, 20);
  md::all_reduce(comm, x.data(), x.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::vector<float> col(P);
    for (std::size_t r = 0; r < P; ++r) col[r] = mdring_test::wide_value(21, r, i, 20);
    const float want = mdring_test::contract_result(col, comm.topology().extents(), md::sum);
    wrong += std::memcmp(&want, &x[i], sizeof want) != 0;
  }
  CHECK(wrong == 0);
  CHECK(identical_everywhere(x.data(), x.size() * sizeof(float)));
}
