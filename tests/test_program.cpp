// tests/test_program.cpp: the programs of every collective (plan/program.hpp,
// plan/collective_programs.hpp), run for all ranks at once by the simulator of
// tests/program_sim.hpp, which knows nothing of the algorithms: only the step
// vocabulary. Besides what the simulator checks on every run (progress whatever
// the order the ranks move in, message counts, bounds, scratch written before it
// is read, shared stages' publications, the same steps on every rank of a ring),
// this file checks:
//   - exact results: int32 sums, avg truncated once (the owner's last fold),
//     a non-commutative op in rank order on direct dimensions; bitwise identity;
//   - the GPU's order and the ipc transport's barriers (mode::gpu) for every
//     collective.
// For all five collectives, rings, direct stages by messages and by shared access
// (with and without staging), halving-doubling, recursive doubling, permuted block
// orders, every root, counts 0, 1, P-1 and uneven ones, in and out of place, one
// segment and many; all_reduce's pull form with any mix of streaming ranks.
#include <doctest/doctest.h>
#include "program_sim.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

TEST_CASE("program: the simulator runs a tiny all_reduce") {
  world<std::int32_t> w({{2, algorithm::direct, false}}, collective::all_reduce, 10, 0, 0, 0, false);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < 10; ++i) w.ranks[r].sendv[i] = std::int32_t(r * 100 + i);
  w.run(md::sum, false);
  REQUIRE(w.failures.empty());
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t i = 0; i < 10; ++i) CHECK(w.ranks[r].recvv[i] == std::int32_t(100 + 2 * i));
}

namespace {

const algorithm R = algorithm::ring, D = algorithm::direct, H = algorithm::halving_doubling,
                Rd = algorithm::recursive_doubling;

const std::vector<shape> shapes = {
    {{1, R, false}},
    {{2, D, false}},
    {{2, D, true}},
    {{5, R, false}},
    {{5, D, true}},
    {{3, H, false}},
    {{6, H, false}},
    {{8, H, false}},
    {{1, R, false}, {4, D, false}},
    {{4, R, false}, {1, R, false}},
    {{2, D, true}, {3, R, false}},
    {{4, D, true}, {3, H, false}},
    {{3, R, false}, {2, D, false}},
    {{2, D, true}, {3, D, true}},
    {{3, H, false}, {2, D, true}},
    {{2, R, false}, {1, R, false}, {3, D, false}},
    {{2, D, true}, {2, R, false}, {2, H, false}},
    // recursive doubling (all_reduce; the others run halving-doubling there)
    {{2, Rd, false}},
    {{5, Rd, false}},
    {{8, Rd, false}},
    {{2, D, true}, {6, Rd, false}},
    {{3, R, false}, {4, Rd, false}, {3, Rd, false}},
    {{3, Rd, false}, {2, R, false}},  // asked for in the middle: the later dimensions cut its whole range
};

// Runs one case: rank r's input element i is val(r, i); combine(a, b) folds two
// values as the op does (for the expected values), fin(x) finalizes.
template <class Op, class Val, class Combine, class Fin>
void check(const shape& s, collective k, std::size_t n, std::size_t root, std::size_t len, std::size_t stg, bool ip,
           Op op, Val val, Combine combine, Fin fin, bool trees = false, bool gpu = false, int streams = 0) {
  const std::size_t P = size_of(s);
  auto reduced = [&](std::size_t i) {
    std::int32_t a = val(0, i);
    for (std::size_t r = 1; r < P; ++r) a = combine(a, val(r, i));
    return fin(a);
  };
  auto want = [&](std::size_t r, std::size_t i) -> std::int32_t {
    switch (k) {
      case collective::reduce_scatter:
        return reduced(r * n + i);
      case collective::all_gather:
        return val(i / n, i % n);
      case collective::broadcast:
        return val(root, i);
      default:  // all_reduce, reduce
        return reduced(i);
    }
  };
  const sim_case c{s, k, n, root, len, stg, ip, trees, gpu ? mode::gpu : mode::host, streams};
  replay<std::int32_t>(c, op, val, want);
}

std::int32_t value(std::size_t r, std::size_t i) { return std::int32_t((r + 1) * 1000 + i % 997); }
std::int32_t add(std::int32_t a, std::int32_t b) { return a + b; }
std::int32_t same(std::int32_t a) { return a; }

}  // namespace

TEST_CASE("program: all_reduce, int32 sum, every shape, count, segment length and staging, in and out of place") {
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(13), std::size_t(97), std::size_t(1009)})
      for (std::size_t len : {std::size_t(0), std::size_t(64), std::size_t(300)})
        for (std::size_t stg : {std::size_t(0), std::size_t(64), std::size_t(4096)})
          for (bool ip : {false, true}) check(s, collective::all_reduce, n, 0, len, stg, ip, md::sum, value, add, same);
  }
}

namespace {
// Shapes with a streamed dimension (dim_program::streamed): alone, between trivial
// ones, and beside another (where the pull form does not run).
const std::vector<shape> streamed = {
    {{2, D, true, true}},
    {{5, D, true, true}},
    {{1, R, false}, {4, D, true, true}, {1, R, false}},
    {{2, D, true, true}, {3, R, false}},
    {{3, R, false}, {2, D, true, true}},
};

struct keep_left {
  static constexpr bool is_commutative = false;
  std::int32_t operator()(std::int32_t a, std::int32_t) const { return a; }
};
}  // namespace

TEST_CASE("program: all_reduce's pull form (a streamed dimension), whichever ranks keep their results in send") {
  // dim_program::streamed: peers read a rank's region source and result, which are
  // its send and recv, or one block (the executor streams where its buffers cannot
  // be mapped) that the program fills; any mix of ranks works. Where the dimension
  // is not the call's only one, the fused form runs.
  auto val = [](std::size_t r, std::size_t i) { return std::int32_t(3 * r + i % 5); };
  auto left = [](std::int32_t a, std::int32_t) { return a; };
  for (const auto& s : streamed) {
    const std::size_t P = size_of(s);
    auto fin = [P](std::int32_t a) { return std::int32_t(a / std::int32_t(P)); };
    for (int streams : {0, 1, 2})
      for (std::size_t stg : {std::size_t(0), std::size_t(64)}) {
        for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(13), std::size_t(1009)})
          for (std::size_t len : {std::size_t(0), std::size_t(64), std::size_t(300)})
            for (bool ip : {false, true})
              check(s, collective::all_reduce, n, 0, len, stg, ip, md::sum, value, add, same, false, false, streams);
        check(s, collective::all_reduce, 97, 0, 32, stg, false, md::avg, val, add, fin, false, false, streams);
        if (std::all_of(s.begin(), s.end(), [](const dim_case& d) { return d.extent == 1 || d.algo == D; }))
          check(s, collective::all_reduce, 1009, 0, 100, stg, false, keep_left{}, value, left, same, false, false,
                streams);  // in rank order (direct dimensions only)
      }
  }
}

TEST_CASE("program: broadcast's, all_gather's and reduce_scatter's pull form, whichever ranks stream") {
  // dim_program::streamed on broadcast (the root's source: its recvbuf, or a copy
  // it fills), all_gather (every rank's block in its source, laid out as recvbuf)
  // and reduce_scatter (the blocks its peers fold in its source, laid out as
  // sendbuf); peers read the source. Where the dimension is not the call's only
  // one, or the range is staged, the plain forms run.
  for (const auto& s : streamed) {
    const std::size_t P = size_of(s);
    for (int streams : {0, 1, 2})
      for (std::size_t stg : {std::size_t(0), std::size_t(64)}) {
        for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(13), std::size_t(1009)}) {
          for (std::size_t root : {std::size_t(0), P / 2, P - 1})
            check(s, collective::broadcast, n, root, 0, stg, false, md::sum, value, add, same, false, false, streams);
          for (bool ip : {false, true}) {
            check(s, collective::all_gather, n, 0, 0, stg, ip, md::sum, value, add, same, false, false, streams);
            check(s, collective::reduce_scatter, n, 0, 0, stg, ip, md::sum, value, add, same, false, false, streams);
          }
        }
      }
  }
}

TEST_CASE("program: reduce_scatter, all_gather, broadcast and reduce, every shape, count, root and staging") {
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t stg : {std::size_t(0), std::size_t(64), std::size_t(4096)}) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(17)})
        for (bool ip : {false, true}) {
          check(s, collective::reduce_scatter, n, 0, 0, stg, ip, md::sum, value, add, same);
          check(s, collective::all_gather, n, 0, 0, stg, ip, md::sum, value, add, same);
        }
      for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(97)})
        for (std::size_t root : {std::size_t(0), P / 2, P - 1})
          for (bool trees : {false, true}) {
            check(s, collective::broadcast, n, root, 0, stg, false, md::sum, value, add, same, trees);
            check(s, collective::reduce, n, root, 0, stg, false, md::sum, value, add, same, trees);
          }
    }
  }
}

TEST_CASE("program: every collective as the GPU runs it (wavefront order, the ipc transport's barriers)") {
  // Shared dimensions are the ipc transport's: direct stages read the peers'
  // buffers in place, staged ones (one-shot) go through the staging buffers.
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t stg : {std::size_t(0), std::size_t(64), std::size_t(4096)}) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), P - 1, std::size_t(97), std::size_t(1009)})
        for (std::size_t len : {std::size_t(0), std::size_t(64)})
          for (bool ip : {false, true})
            check(s, collective::all_reduce, n, 0, len, stg, ip, md::sum, value, add, same, false, true);
      for (std::size_t n : {std::size_t(1), std::size_t(17)})
        for (bool ip : {false, true}) {
          check(s, collective::reduce_scatter, n, 0, 0, stg, ip, md::sum, value, add, same, false, true);
          check(s, collective::all_gather, n, 0, 0, stg, ip, md::sum, value, add, same, false, true);
        }
      for (std::size_t root : {std::size_t(0), P - 1})
        for (bool trees : {false, true}) {
          check(s, collective::broadcast, 97, root, 0, stg, false, md::sum, value, add, same, trees, true);
          check(s, collective::reduce, 97, root, 0, stg, false, md::sum, value, add, same, trees, true);
        }
    }
  }
}

TEST_CASE("program: avg divides once, by the owner") {
  // Truncating integer division shows that the division happens once, on the full sum.
  auto val = [](std::size_t r, std::size_t i) { return std::int32_t(3 * r + i % 5); };
  for (const auto& s : shapes) {
    const std::int32_t P = std::int32_t(size_of(s));
    auto fin = [P](std::int32_t a) { return std::int32_t(a / P); };
    for (std::size_t stg : {std::size_t(0), std::size_t(4096)}) {
      check(s, collective::all_reduce, 97, 0, 32, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce_scatter, 7, 0, 0, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce, 97, std::size_t(P) - 1, 0, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce, 13, std::size_t(P) - 1, 0, stg, false, md::avg, val, add, fin);
      check(s, collective::reduce, 97, std::size_t(P) / 2, 0, stg, false, md::avg, val, add, fin, true);
    }
  }
}

TEST_CASE("program: a non-commutative op on direct stages combines in rank order") {
  // keep_left over ranks 0..P-1 in rank order gives rank 0's value.
  const std::vector<shape> direct_shapes = {
      {{2, D, false}},
      {{5, D, true}},
      {{2, D, true}, {3, D, false}},
      {{2, D, false}, {2, D, true}, {2, D, false}},
      {{3, D, false}, {2, D, true}}};  // (the last: reduce's root folds the last dimension alone)
  auto left = [](std::int32_t a, std::int32_t) { return a; };
  for (const auto& s : direct_shapes)
    for (std::size_t stg : {std::size_t(0), std::size_t(64)}) {
      check(s, collective::all_reduce, 1009, 0, 100, stg, false, keep_left{}, value, left, same);
      check(s, collective::reduce_scatter, 13, 0, 0, stg, false, keep_left{}, value, left, same);
      check(s, collective::reduce, 97, 1, 0, stg, false, keep_left{}, value, left, same);
      check(s, collective::reduce, 13, 1, 0, stg, false, keep_left{}, value, left, same);
    }
}
