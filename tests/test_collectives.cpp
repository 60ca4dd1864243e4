// tests/test_collectives.cpp: the five collectives over the threads transport.
//
// MPICH coll-test style: every input is a closed-form function of (rank, index), so
// every expected value is exact (sums of rank-dependent integers, products of 1, 2
// and -1, min/max of known patterns, averages that truncate); random floats are
// compared with a float64 reference within a stated bound. Each rank records what
// it found in its own vector; the main thread turns that into doctest assertions
// (doctest's assertions are not used from the rank threads).
//
// Coverage, as a subset cross-product (so that it compiles in about two minutes and
// runs in a few seconds):
//   shapes   1, 1 x p, p x 1, 2, 5, 7, 9, 11, 2 x 3, 3 x 5, 4 x 4, 2 x 2 x 2, 2 x 1 x 3,
//            2 x 2 x 2 x 2, dynamic extents (compile-time ring<shm,2> * ring<shm> and
//            runtime "shm:2 x shm:*"), parsed runtime topologies; shm (direct by default
//            for 3..8), ethernet and infiniband (ring; halving-doubling for small
//            calls); algorithms forced to ring / direct / halving_doubling on every
//            dimension position, powers of two and not
//   counts   0, 1, fewer than the ranks, primes 13, 97, 1009, and 4099; per-rank counts
//            0, 1, 2, 13, 97, 1009 for reduce_scatter / all_gather
//   calls    all_reduce, reduce_scatter, all_gather, broadcast (every root), reduce
//            (every root; null or untouched recvbuf elsewhere), in and out of place,
//            64-byte aligned and misaligned by one element
//   ops      sum, prod, min, max, avg on int32, int64, uint8, float, double, half,
//            bfloat16 through all_reduce (and reduce_scatter / reduce: every op on
//            int32 and float, sum on the others); bitwise xor (user op); non-commutative
//            2x2 matrix product mod 65521, "keep the left operand" (non_commutative())
//            and "keep the right operand" (is_commutative = false), on shm only
//   also     bitwise identity across ranks and runs, poison (sentinel) checks, many
//            consecutive collectives on one communicator, two communicators in one
//            world, scratch allocations (repeated calls, reserve()),
//
// The test cases are in three files: this one (every shape and algorithm, segments,
// compile-time topologies, consecutive calls, memory, checks, explain),
// test_collectives_ops.cpp (every op and type, user ops, random floats) and
// test_collectives_planning.cpp (calibrated profiles, measured planning); the
// harness is collective_support.hpp and collective_suites.hpp.
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
// ==== test cases =================================================================================

TEST_CASE("collectives: every shape and algorithm, all five, counts 0..4099, int32 and float sums") {
  const std::vector<shape> shapes = {
      {"shm:1", {}, 1},
      {"shm:1 x shm:4", {}, 4},  // 1 x p (direct)
      {"shm:1 x shm:4", {RING, RING}, 4},
      {"ethernet:4 x shm:1", {}, 4},  // p x 1 (ring)
      {"shm:6 x shm:1", {DIRECT, RING}, 6},
      {"shm:2", {}, 2},
      {"shm:2", {DIRECT}, 2},
      {"shm:2 x shm:3", {}, 6},  // merged: one direct stage over 6
      {"shm:2 x shm:3", {DIRECT, RING}, 6},
      {"shm:2 x shm:3", {RING, RING}, 6},
      {"shm:2 x shm:3", {DIRECT, DIRECT}, 6},
      {"shm:3 x ethernet:5", {}, 15},  // direct, ring
      {"shm:3 x ethernet:5", {RING, DIRECT}, 15},
      {"shm:2 x shm:2 x shm:2", {}, 8},
      {"shm:2 x shm:2 x shm:2", {DIRECT, RING, DIRECT}, 8},
      {"shm:2 x shm:2 x shm:2", {RING, DIRECT, RING}, 8},
      {"shm:5", {}, 5},
      {"shm:5", {RING}, 5},
      {"ethernet:7", {}, 7},
      {"infiniband:7", {DIRECT}, 7},
      {"shm:9", {}, 9},  // above direct_max_extent: ring
      {"shm:9", {DIRECT}, 9},
      {"shm:2 x shm:1 x infiniband:3", {}, 6},  // trivial middle dimension
      {"shm:2 x shm:1 x infiniband:3", {DIRECT, RING, DIRECT}, 6},
      {"infiniband:3 x shm:2", {RING, DIRECT}, 6},
      {"shm:2 x shm:*", {}, 6},  // runtime dynamic extent
      {"ethernet:* x shm:3", {RING, RING}, 6},
      {"ethernet:11", {}, 11},
      {"shm:4 x shm:4", {DIRECT, DIRECT}, 16},
      {"shm:2 x ethernet:2 x shm:2 x infiniband:2", {}, 16},  // four dimensions
      {"ethernet:16", {}, 16},                                // split: runs as ethernet:4 x ethernet:4
      {"ethernet:16", {RING}, 16},                            // one ring of 16
      {"shm:2 x infiniband:18", {}, 36},                      // split: shm:2 x infiniband:3 x infiniband:6
  };
  for (const auto& s : shapes) {
    const auto topo = md::parse_topology(s.topo);
    in_world(label_of(s), s.threads, topo, opts_with(s.algos), [](auto& c, rank_ctx& cx) { shape_suite(c, cx); });
  }
}

TEST_CASE("collectives: halving-doubling on every extent 2..12 and in products, all five, exact") {
  // plan/halving_doubling.hpp: powers of two, and extents with 1 to 5 pairs folded
  // in and handed out; in the first, middle and last dimension; next to direct and
  // ring stages; forced, and chosen by automatic for the small counts of the suite.
  const std::vector<shape> shapes = {
      {"ethernet:2", {HD}, 2},
      {"ethernet:3", {HD}, 3},
      {"ethernet:4", {HD}, 4},
      {"infiniband:5", {HD}, 5},
      {"ethernet:6", {HD}, 6},
      {"ethernet:7", {HD}, 7},
      {"ethernet:8", {HD}, 8},
      {"infiniband:11", {HD}, 11},
      {"ethernet:12", {HD}, 12},
      {"shm:2 x ethernet:6", {DIRECT, HD}, 12},
      {"shm:2 x ethernet:5", {}, 10},  // direct, then automatic: halving-doubling when small
      {"ethernet:5 x shm:2", {HD, DIRECT}, 10},
      {"ethernet:3 x ethernet:4", {HD, RING}, 12},
      {"ethernet:3 x ethernet:4", {RING, HD}, 12},
      {"shm:2 x infiniband:3 x ethernet:2", {RING, HD, HD}, 12},
      {"infiniband:6 x shm:1", {HD, RING}, 6},
  };
  run_shapes(shapes, {shape{"ethernet:6", {HD}, 6}, shape{"shm:2 x infiniband:5", {DIRECT, HD}, 10}});
}

TEST_CASE("collectives: recursive doubling and trees on every extent 2..12 and in products, all five, exact") {
  // Recursive doubling (all_reduce; the other collectives run halving-doubling
  // there): powers of two and extents with pairs folded in and handed out, in the
  // last dimensions (where automatic puts it) and asked for in the first (the
  // dimensions after it cut its whole range). Broadcast and reduce of the suite's
  // small counts run binomial trees where the model says (automatic), and the
  // rest their blocks: both are checked against the exact values.
  const std::vector<shape> shapes = {
      {"ethernet:2", {RD}, 2},
      {"ethernet:3", {RD}, 3},
      {"infiniband:5", {RD}, 5},
      {"ethernet:6", {RD}, 6},
      {"ethernet:8", {RD}, 8},
      {"infiniband:11", {RD}, 11},
      {"shm:2 x ethernet:6", {DIRECT, RD}, 12},
      {"ethernet:3 x ethernet:4", {RING, RD}, 12},
      {"ethernet:3 x ethernet:4", {RD, RING}, 12},
      {"shm:2 x infiniband:3 x ethernet:2", {HD, RD, RD}, 12},
      {"shm:2 x infiniband:5", {}, 10},  // automatic: direct, then recursive doubling or trees when small
      {"infiniband:12", {}, 12},
      {"shm:3 x ethernet:4", {}, 12},
  };
  run_shapes(shapes, {shape{"ethernet:6", {RD}, 6}, shape{"shm:2 x infiniband:5", {}, 10}});
}

TEST_CASE("collectives: automatic runs recursive doubling and trees for tiny calls only") {
  // infiniband:8 (2 us latency, 2 us overhead per message by default): 8 floats
  // all-reduce in 3 whole-vector exchanges rather than halving-doubling's 6 steps;
  // 100000 floats (over tune.recursive_doubling_max_bytes) keep halving-doubling or
  // rings. Broadcast and reduce of 8 floats run trees (3 steps), of 100000 floats
  // scatter/all-gather and reduce-scatter/gather. tune.recursive_doubling_max_bytes
  // = 0 turns both off.
  for (std::size_t cap : {std::size_t(64) << 10, std::size_t(0)}) {
    md::options o = opts_with();
    o.tune.recursive_doubling_max_bytes = cap;
    std::vector<std::vector<md::phase>> small(8), bcast(8), red(8), large(8);
    std::vector<float> got(8), b(8), r(8);
    md::threads::run(8, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("infiniband:8"), ep, o);
      for (auto& st : comm.make_plan<float>(8).stages) small[ep.rank].push_back(st.ph);
      for (auto& st : comm.make_plan<float>(8, md::collective::broadcast).stages) bcast[ep.rank].push_back(st.ph);
      for (auto& st : comm.make_plan<float>(8, md::collective::reduce, md::sum, 5).stages)
        red[ep.rank].push_back(st.ph);
      for (auto& st : comm.make_plan<float>(100000).stages) large[ep.rank].push_back(st.ph);
      std::vector<float> x(100000, float(ep.rank)), y(100000);
      md::all_reduce(comm, x.data(), y.data(), 100000, md::sum);
      md::all_reduce(comm, x.data(), y.data(), 8, md::sum);
      got[ep.rank] = y[7] + y[99999];  // 28 + 28
      std::vector<float> v(8, ep.rank == 3 ? 2.5f : 0.0f), w(8, -1.0f);
      md::broadcast(comm, v.data(), 8, 3);
      b[ep.rank] = v[7];
      md::reduce(comm, x.data(), w.data(), 8, 5, md::avg);
      r[ep.rank] = w[0];
    });
    INFO("cap " << cap);
    using ph = md::phase;
    for (std::size_t k = 0; k < 8; ++k) {
      CHECK(small[k] == (cap ? std::vector<ph>{ph::all_reduce} : std::vector<ph>{ph::reduce_scatter, ph::all_gather}));
      CHECK(bcast[k] == (cap ? std::vector<ph>{ph::broadcast} : std::vector<ph>{ph::scatter, ph::all_gather}));
      CHECK(red[k] == (cap ? std::vector<ph>{ph::reduce} : std::vector<ph>{ph::reduce_scatter, ph::gather}));
      CHECK(large[k] == std::vector<ph>{ph::reduce_scatter, ph::all_gather});
      CHECK(got[k] == 56.0f);
      CHECK(b[k] == 2.5f);
      CHECK(r[k] == (k == 5 ? 3.5f : -1.0f));  // avg of 0..7 on the root; recvbuf untouched elsewhere
    }
  }
}

TEST_CASE("collectives: automatic runs halving-doubling for small calls and rings for large ones") {
  // infiniband:8 (its default traits: 2 us latency and overhead per message): 8
  // floats are latency-bound, 3 exchanges beat 7 ring steps; so are 1000 floats
  // (for the model, a power of two never loses), unless tune.halving_doubling_max_bytes
  // caps it below their 4000 bytes.
  for (std::size_t cap : {SIZE_MAX, std::size_t(64)}) {
    md::options o = opts_with();
    o.tune.halving_doubling_max_bytes = cap;
    o.tune.recursive_doubling_max_bytes = 0;  // (recursive doubling: the test above)
    std::vector<std::vector<algorithm>> small(8), large(8);
    std::vector<std::size_t> steps(8);
    std::vector<float> got(8);
    md::threads::run(8, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("infiniband:8"), ep, o);
      for (auto& st : comm.make_plan<float>(8).stages) small[ep.rank].push_back(st.algo);
      for (auto& st : comm.make_plan<float>(1000).stages) large[ep.rank].push_back(st.algo);
      steps[ep.rank] = comm.make_plan<float>(8).stages.at(0).steps;
      std::vector<float> x(1000, float(ep.rank)), y(1000);
      md::all_reduce(comm, x.data(), y.data(), 1000, md::sum);
      md::all_reduce(comm, x.data(), y.data(), 8, md::sum);
      got[ep.rank] = y[7] + y[999];  // 28 + 28
    });
    INFO("cap " << cap);
    for (std::size_t r = 0; r < 8; ++r) {
      CHECK(small[r] == std::vector<algorithm>{HD, HD});
      CHECK(steps[r] == 3);
      CHECK(large[r] == std::vector<algorithm>(2, cap == SIZE_MAX ? HD : RING));
      CHECK(got[r] == 56.0f);
    }
  }
}

TEST_CASE("collectives: all_reduce cut into segments that overlap across dimensions") {
  // plan/pipeline.hpp: segments of about tune.segment_bytes move through the stages
  // one behind the other, up to tune.pipeline_depth in flight. Message stages (ring
  // and direct), shared stages, the fused last stage, short last segments and
  // empty blocks all meet here; every result is checked exactly.
  struct pshape {
    std::string topo;
    std::vector<algorithm> algos;
    std::size_t threads;
    bool shared;
  };
  const std::vector<pshape> shapes = {
      {"shm:2 x ethernet:3", {}, 6, true},         // shared direct, then a message ring
      {"shm:2 x ethernet:3", {}, 6, false},        // direct by messages, ring
      {"ethernet:3 x shm:2", {}, 6, true},         // ring, then the fused shared stage
      {"shm:3 x shm:2", {RING, DIRECT}, 6, true},  // message ring, fused shared direct
      {"shm:2 x infiniband:2 x shm:2", {DIRECT, RING, DIRECT}, 8, false},
      {"infiniband:2 x shm:1 x ethernet:3", {}, 6, true},  // a trivial dimension in between
      {"shm:2 x ethernet:5", {DIRECT, HD}, 10, false},     // halving-doubling with pairs, last
      {"ethernet:4 x shm:2", {HD, DIRECT}, 8, true},       // halving-doubling first
  };
  // Shared stages of such small segments go through the staging buffers; with
  // staging off they publish their buffers, and the segments in flight must not
  // publish over each other (one arrive-read-leave per dimension at a time).
  for (const auto& sh : shapes)
    for (std::size_t seg_bytes : {std::size_t(40), std::size_t(256)})
      for (std::size_t depth : {std::size_t(1), std::size_t(2), std::size_t(8)})
        for (bool staging : {true, false}) {
          if (!staging && (!sh.shared || depth == 1)) continue;
          md::options o = opts_with(sh.algos);
          o.shared_memory = sh.shared;
          o.tune.segment_bytes = seg_bytes;
          o.tune.pipeline_depth = depth;
          if (!staging) o.tune.shared_staging_bytes = 0;
          const std::string label = sh.topo + " algorithms " + algos_string(sh.algos) +
                                    (sh.shared ? ", shared" : ", messages") + (staging ? "" : " (no staging)") +
                                    ", segments of " + std::to_string(seg_bytes) + " B, depth " + std::to_string(depth);
          in_world(label, sh.threads, md::parse_topology(sh.topo), o, [&](auto& c, rank_ctx& cx) {
            const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
            const auto davg = bspec<double>(md::avg, opk::avg);
            for (std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(10), std::size_t(97), std::size_t(1000),
                                  std::size_t(4099)}) {
              cx.misaligned = n % 2 == 1;
              do_all_reduce<std::int32_t>(c, cx, isum, n, n % 3 == 0);
              do_all_reduce<double>(c, cx, davg, n, n % 3 == 1);
            }
            // the plan says how many segments: 4099 int32 in segments of 40 bytes,
            // rounded up to a cache line (16 elements), or of 256 bytes (64 elements)
            const std::string plan = c.template explain<std::int32_t>(4099);
            const std::size_t want = seg_bytes == 40 ? 257 : 65;
            if (plan.find("pipelined: " + std::to_string(want) + " segments") == std::string::npos)
              cx.fail("explain does not say " + std::to_string(want) + " segments:\n" + plan);
          });
        }
}

TEST_CASE("collectives: compile-time topologies, including a dynamic extent") {
  // One type only: the runtime topologies above run the same engine on every other shape.
  constexpr auto topo = md::ring<md::shm, 2> * md::ring<md::shm>;
  // A compile-time topology is a communicator type of its own, but the collectives run
  // on its core, the same type as a runtime topology's: no engine is compiled per
  // topology (collective/communicator.hpp, detail::communicator_core).
  using compiled = md::communicator<std::remove_const_t<decltype(topo)>, md::threads::transport>;
  using runtime = md::communicator<md::runtime_topology, md::threads::transport>;
  static_assert(!std::is_same_v<compiled, runtime>);
  static_assert(std::is_same_v<decltype(md::detail::core_of(std::declval<compiled&>())),
                               decltype(md::detail::core_of(std::declval<runtime&>()))>);
  std::vector<std::string> seen(6);
  in_world("ring<shm,2> * ring<shm> on 6", 6, topo, opts_with(), [&](auto& c, rank_ctx& cx) {
    seen[c.rank()] =
        c.topology().to_string() + " " + std::to_string(c.extents()[0]) + "," + std::to_string(c.extents()[1]);
    basic_suite(c, cx);
  });
  for (auto& s : seen) CHECK(s == "shm:2 x shm:3 2,3");
  in_world("ring<shm,2> * ring<shm> on 6, ring,ring", 6, topo, opts_with({RING, RING}),
           [](auto& c, rank_ctx& cx) { basic_suite(c, cx); });
  in_world("ring<shm,2> * ring<shm> on 2 (extent 1)", 2, topo, opts_with({DIRECT, RING}),
           [](auto& c, rank_ctx& cx) { basic_suite(c, cx); });
}

TEST_CASE("collectives: consecutive calls of different kinds and sizes; every element written") {
  // The sentinel is a NaN for float/double (no legitimate result), 0xA5 bytes otherwise;
  // do_* report "never written" when an element still holds it.
  for (const shape& s : {shape{"shm:2 x shm:3", {RING, DIRECT}, 6}, shape{"shm:3 x ethernet:5", {}, 15},
                         shape{"shm:2 x shm:1 x shm:2", {DIRECT, DIRECT, RING}, 4}}) {
    in_world(label_of(s), s.threads, md::parse_topology(s.topo), opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      const std::size_t P = c.size();
      const auto fsum = bspec<float>(md::sum, opk::sum);
      const auto dmax = bspec<double>(md::max, opk::max);
      const auto lsum = bspec<std::int64_t>(md::sum, opk::sum);
      const auto iavg = bspec<std::int32_t>(md::avg, opk::avg);
      for (int rep = 0; rep < 2; ++rep) {
        cx.misaligned = rep == 1;
        do_all_reduce<float>(c, cx, fsum, 1009, false);
        do_reduce_scatter<std::int64_t>(c, cx, lsum, 13, false);
        do_all_gather<std::uint8_t>(c, cx, 97, false);
        do_broadcast<double>(c, cx, 5, 4 % P);
        do_reduce<std::int32_t>(c, cx, iavg, 4099, 2 % P, false, false);
        do_all_reduce<std::int32_t>(c, cx, iavg, 1, false);
        do_all_reduce<double>(c, cx, dmax, 4099, false);
        do_reduce_scatter<float>(c, cx, fsum, 1, false);
        do_all_gather<double>(c, cx, 1009, false);
        do_broadcast<std::int64_t>(c, cx, 4099, P - 1);
        do_all_reduce<float>(c, cx, fsum, 0, false);
        do_reduce<double>(c, cx, dmax, 13, 0, false, false);
      }
      // The span overloads.
      std::vector<std::int32_t> a(P * 3), b(P * 3), g(P * 3);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i + c.rank());
      md::all_reduce(c, std::span<const std::int32_t>(a), std::span<std::int32_t>(b));
      cx.where = "all_reduce(span, span)";
      expect(cx, "recvbuf", b.data(), b.size(),
             [&](std::size_t i) { return static_cast<std::int32_t>(P * i + P * (P - 1) / 2); });
      std::vector<std::int32_t> blk(3);
      md::reduce_scatter(c, std::span<const std::int32_t>(a), std::span<std::int32_t>(blk));
      cx.where = "reduce_scatter(span, span)";
      expect(cx, "recvbuf", blk.data(), 3,
             [&](std::size_t i) { return static_cast<std::int32_t>(P * (c.rank() * 3 + i) + P * (P - 1) / 2); });
      md::all_gather(c, std::span<const std::int32_t>(blk), std::span<std::int32_t>(g));
      cx.where = "all_gather(span, span)";
      expect(cx, "recvbuf", g.data(), g.size(), [&](std::size_t i) { return b[i]; });
      md::broadcast(c, std::span<std::int32_t>(a), 0);
      cx.where = "broadcast(span)";
      expect(cx, "buf", a.data(), a.size(), [&](std::size_t i) { return static_cast<std::int32_t>(i); });
    });
  }
}

TEST_CASE("collectives: two communicators in one world do not mix their messages") {
  in_world("two communicators", 6, md::parse_topology("shm:2 x shm:3"), opts_with({RING, RING}),
           [](auto& c, rank_ctx& cx) {
             md::threads::endpoint ep{&c.get_transport().get_world(), c.rank()};
             auto other = md::bind(md::parse_topology("shm:3 x ethernet:2"), ep, opts_with());
             const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
             const auto imax = bspec<std::int32_t>(md::max, opk::max);
             for (std::size_t n : {1, 13, 1009}) {
               do_all_reduce<std::int32_t>(c, cx, isum, n, false);
               do_all_reduce<std::int32_t>(other, cx, imax, n, false);
               do_reduce_scatter<std::int32_t>(other, cx, isum, n, true);
               do_reduce_scatter<std::int32_t>(c, cx, imax, n, true);
               do_all_gather<std::int32_t>(c, cx, n, false);
               do_all_gather<std::int32_t>(other, cx, n, false);
             }
           });
}

namespace {
// Counts what the communicator's scratch takes from options.memory.
class counting_resource : public std::pmr::memory_resource {
public:
  std::size_t allocations = 0;

private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    ++allocations;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
}  // namespace

TEST_CASE("collectives: scratch comes from options.memory; repeated and reserved calls allocate nothing") {
  // communicator.hpp: "Calls then allocate nothing except scratch that grows to the
  // largest call (reserve() pre-sizes it)", and reserve<T>(count): "calls up to `count`
  // elements of T allocate nothing" (checked here for all_reduce, broadcast and reduce,
  // whose count is the whole buffer).
  const std::size_t n = 4099;
  for (const shape& s :
       {shape{"ethernet:4 x shm:2", {}, 8}, shape{"shm:8", {}, 8}, shape{"shm:4 x ethernet:2", {}, 8}}) {
    std::vector<std::size_t> used(s.threads, 0), repeat(s.threads, 99), reserved(s.threads, 99);
    in_world(label_of(s) + " memory", s.threads, md::parse_topology(s.topo), opts_with(s.algos),
             [&](auto& c0, rank_ctx& cx) {
               counting_resource mem;
               auto o = opts_with(s.algos);
               o.memory = &mem;
               o.tune.one_shot_stream_max_bytes = 0;  // the reduce's program (streamed it uses no scratch)
               md::threads::endpoint ep{&c0.get_transport().get_world(), c0.rank()};
               const auto fsum = bspec<float>(md::sum, opk::sum);
               {
                 auto c = md::bind(md::parse_topology(s.topo), ep, o);
                 do_all_reduce<float>(c, cx, fsum, n, false);
                 do_reduce<float>(c, cx, fsum, n, 1, false, false);
                 const std::size_t before = mem.allocations;
                 used[c.rank()] = before;
                 do_all_reduce<float>(c, cx, fsum, n, false);
                 do_reduce<float>(c, cx, fsum, n, 1, false, false);
                 do_all_reduce<float>(c, cx, fsum, n / 2, true);
                 repeat[c.rank()] = mem.allocations - before;
               }
               {
                 auto c = md::bind(md::parse_topology(s.topo), ep, o);
                 c.template reserve<float>(n);
                 const std::size_t before = mem.allocations;
                 do_all_reduce<float>(c, cx, fsum, n, false);
                 do_broadcast<float>(c, cx, n, 2);
                 do_reduce<float>(c, cx, fsum, n, 0, false, false);
                 do_reduce<float>(c, cx, fsum, n, 1, true, true);
                 reserved[c.rank()] = mem.allocations - before;
               }
             });
    for (std::size_t r = 0; r < s.threads; ++r) {
      INFO(label_of(s) << ", rank " << r);
      if (std::string(s.topo) == "shm:8")
        // One direct dimension of threads reads its peers in place: all_reduce needs no
        // scratch; reduce's non-roots keep their reduced block in W (the root, rank 1, in recvbuf).
        CHECK(used[r] == (r == 1 ? 0u : 1u));
      else CHECK(used[r] > 0);  // the scratch came from options.memory
      CHECK(repeat[r] == 0);    // scratch grew on the first calls and is reused
      CHECK(reserved[r] == 0);  // reserve<float>(n) covers calls of n floats
    }
  }
}

TEST_CASE("collectives: check_level::collective gives the same exact results") {
  auto o = opts_with({DIRECT, RING});
  o.checks = md::check_level::collective;
  in_world("shm:3 x infiniband:2, checks collective", 6, md::parse_topology("shm:3 x infiniband:2"), o,
           [](auto& c, rank_ctx& cx) { basic_suite(c, cx); });
}

TEST_CASE("collectives: explain names the stages") {
  std::vector<std::string> text(6);
  md::threads::run(6, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x shm:3"), ep, opts_with());
    text[ep.rank] = comm.explain<float>(1000);
  });
  for (auto& t : text) {
    CHECK(!t.empty());
    CHECK(t.find("reduce-scatter") != std::string::npos);
    CHECK(t.find("all-gather") != std::string::npos);
    // One direct stage over the six threads, which read and write each other's buffers.
    CHECK(t.find("(shared access)") != std::string::npos);
    CHECK(t.find("shared access: the stages marked so move no messages") != std::string::npos);
  }
}
