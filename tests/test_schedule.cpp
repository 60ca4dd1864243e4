// tests/test_schedule.cpp: the all_reduce program as the GPU runs it (plan/program.hpp).
//
// The GPU path enqueues make_program()'s all_reduce steps on streams in wavefront
// order (wavefront_order); this test replays them on the host in that order, for
// all ranks in lock step (exactly what the single-GPU executor of several logical
// ranks does: step k's messages are matched between ranks and copied, step k's
// folds run, then step k + 1), with host_reducer for the folds: the simulator of
// tests/program_sim.hpp in mode::lockstep (tests/test_program.cpp runs every
// collective's programs on it, as the host executor does). So the program the GPU
// runs is checked here without a GPU:
//   - exact results: int32 sums of rank-dependent values, avg on int32 (truncating
//     division once, by the owner), non-commutative "keep the left operand" on
//     direct stages (rank order), float quarters (exact);
//   - bitwise identity on every rank;
//   - and what the simulator checks in lock step: every message of step k has one
//     matching message on the peer, of the same count; no receive of a step
//     overlaps a send or another receive of the same rank (on the GPU they run
//     concurrently); every rank has the same steps, (segment, stage, dimension,
//     index, phase), in the same wavefront order; only messages synchronize, no
//     step has pre ops, every op is a fold into recvbuf, no send reads scratch;
//     nothing is out of bounds; folds never read unwritten scratch or slots;
//   - with vector_elements V, every fold's destination and inputs have the same
//     address modulo V (send and recv equally misaligned), which is what lets the
//     kernels use 16-byte loads on any block boundaries;
//   - counts 0, 1, fewer than ranks, 13, 97, 1009, 4099; in and out of place; one
//     segment and many (pipelined wavefront order).
// Also the structure of the worked examples of program.hpp.
#include <doctest/doctest.h>
#include "program_sim.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace {

// Replays all_reduce of n elements on shape s in lock step with op on T:
// input(rank, i) -> T, want(i) -> T expected on every rank.
template <class T, class Op, class In, class Want>
void check_case(const shape& s, std::size_t n, std::size_t len, std::size_t V, std::size_t mis, bool ip, Op op,
                In input, Want want) {
  const sim_case c{s, collective::all_reduce, n, 0, len, 0, ip, false, mode::lockstep, 0, V, mis};
  replay<T>(c, op, input, [&](std::size_t, std::size_t i) { return want(i); });
}

struct keep_left {
  static constexpr bool is_commutative = false;
  std::int32_t operator()(std::int32_t a, std::int32_t) const { return a; }
};

const algorithm R = algorithm::ring, D = algorithm::direct, H = algorithm::halving_doubling,
                Rd = algorithm::recursive_doubling;

const std::vector<shape> shapes = {
    {{1, R, false}},
    {{2, D, false}},
    {{2, R, false}},
    {{5, R, false}},
    {{5, D, false}},
    {{1, R, false}, {4, D, false}},
    {{4, R, false}, {1, R, false}},
    {{2, D, false}, {3, R, false}},
    {{2, R, false}, {3, D, false}},
    {{4, D, false}, {3, R, false}},
    {{3, R, false}, {5, R, false}},
    {{2, D, false}, {2, R, false}, {2, D, false}},
    {{2, R, false}, {1, R, false}, {3, D, false}},
    {{9, R, false}},
    // halving-doubling runs on the GPU path too
    {{4, H, false}},
    {{6, H, false}},
    {{2, D, false}, {3, H, false}},
    {{3, H, false}, {4, R, false}},
    // and recursive doubling (whole ranges)
    {{4, Rd, false}},
    {{5, Rd, false}},
    {{2, D, false}, {3, Rd, false}},
    {{3, R, false}, {4, Rd, false}},
};

}  // namespace

TEST_CASE("schedule: int32 sum on every shape, count, segment length, alignment, in and out of place") {
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    std::vector<std::size_t> counts = {0, 1, 13, 97, 1009, 4099};
    if (P > 2) counts.push_back(P - 1);
    for (std::size_t n : counts)
      for (std::size_t len : {std::size_t(0), std::size_t(64), std::size_t(1000)})
        for (std::size_t V : {std::size_t(1), std::size_t(4)})
          for (bool ip : {false, true}) {
            const std::size_t mis = V > 1 ? (n + len) % V : 0;
            auto in = [](std::size_t r, std::size_t i) { return std::int32_t((r + 1) * 1000 + i % 997); };
            auto want = [P](std::size_t i) {
              std::int64_t sum = 0;
              for (std::size_t r = 0; r < P; ++r) sum += std::int64_t((r + 1) * 1000 + i % 997);
              return std::int32_t(sum);
            };
            check_case<std::int32_t>(s, n, len, V, mis, ip, md::sum, in, want);
          }
  }
}

TEST_CASE("schedule: avg divides once by the owner; float quarters are exact") {
  for (const auto& s : shapes) {
    const std::size_t P = size_of(s);
    for (std::size_t n : {std::size_t(1), std::size_t(97), std::size_t(1009)})
      for (std::size_t len : {std::size_t(0), std::size_t(128)}) {
        // Truncation shows that the division happens once, on the full sum.
        auto in = [](std::size_t r, std::size_t i) { return std::int32_t(3 * r + i % 5); };
        auto want = [P](std::size_t i) {
          std::int64_t sum = 0;
          for (std::size_t r = 0; r < P; ++r) sum += std::int64_t(3 * r + i % 5);
          return std::int32_t(sum / std::int64_t(P));
        };
        check_case<std::int32_t>(s, n, len, 4, 1, false, md::avg, in, want);
        auto fin = [](std::size_t r, std::size_t i) { return float(r) * 0.25f + float(i % 7); };
        auto fwant = [P](std::size_t i) {
          double sum = 0;
          for (std::size_t r = 0; r < P; ++r) sum += double(r) * 0.25 + double(i % 7);
          return float(sum);
        };
        check_case<float>(s, n, len, 4, 3, true, md::sum, fin, fwant);
      }
  }
}

TEST_CASE("schedule: a non-commutative op on direct stages combines in rank order") {
  // keep_left over ranks 0..P-1 in rank order gives rank 0's value.
  const std::vector<shape> direct_shapes = {
      {{2, D, false}}, {{5, D, false}}, {{2, D, false}, {3, D, false}}, {{2, D, false}, {2, D, false}, {2, D, false}}};
  for (const auto& s : direct_shapes)
    for (std::size_t n : {std::size_t(1), std::size_t(13), std::size_t(1009)})
      for (std::size_t len : {std::size_t(0), std::size_t(100)})
        check_case<std::int32_t>(
            s, n, len, 1, 0, false, keep_left{},
            [](std::size_t r, std::size_t i) { return std::int32_t(r * 100000 + i); },
            [](std::size_t i) { return std::int32_t(i); });
}

TEST_CASE("schedule: structure") {
  // 2 ranks, direct, n = 10, rank 0: the example at the top of program.hpp.
  const std::vector<md::dim_program> one = {{2, 0, algorithm::direct, false, 0}};
  md::program_params p;
  p.dims = one, p.count = 10;
  auto s = md::make_program(p);
  REQUIRE(s.steps.size() == 2);
  CHECK(s.segments == 1);
  CHECK(s.stage_dims == std::vector<std::size_t>{0, 0});
  const auto& rs = s.steps[0];
  CHECK(rs.ph == md::phase::reduce_scatter);
  REQUIRE(rs.sends == 1);
  CHECK(s.sends[rs.first_send].peer == 1);
  CHECK(s.sends[rs.first_send].at == md::slice{md::region::send, 0, 5});
  CHECK(s.sends[rs.first_send].count == 5);
  REQUIRE(rs.recvs == 1);
  CHECK(s.recvs[rs.first_recv].at.where == md::region::slot);
  CHECK(s.recvs[rs.first_recv].count == 5);
  REQUIRE(rs.ops == 1);
  const auto& f = s.ops[rs.first_op];
  CHECK(s.outputs_of(f)[0] == md::slice{md::region::recv, 0, 0});
  CHECK(f.count == 5);
  CHECK(f.final);
  REQUIRE(f.ins == 2);
  CHECK(s.inputs_of(f)[0] == md::slice{md::region::send, 0, 0});  // coordinate 0 first: this rank
  const auto& ag = s.steps[1];
  CHECK(ag.ph == md::phase::all_gather);
  CHECK(s.sends[ag.first_send].at == md::slice{md::region::recv, 0, 0});
  CHECK(s.recvs[ag.first_recv].at == md::slice{md::region::recv, 0, 5});
  CHECK(ag.ops == 0);

  // 4 segments over 2 dimensions (2 stages each way): wavefront order.
  const std::vector<md::dim_program> two = {{2, 0, algorithm::direct, false, 0}, {2, 0, algorithm::direct, false, 0}};
  p.dims = two, p.count = 400, p.segment_length = 100;
  s = md::make_program(p);
  CHECK(s.segments == 4);
  CHECK(s.stage_dims == std::vector<std::size_t>{0, 1, 1, 0});
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (segment, stage)
  for (std::size_t i : md::wavefront_order(s)) order.emplace_back(s.steps[i].segment, s.steps[i].stage);
  const std::vector<std::pair<std::size_t, std::size_t>> expect = {{0, 0}, {1, 0}, {0, 1}, {2, 0}, {1, 1}, {0, 2},
                                                                   {3, 0}, {2, 1}, {1, 2}, {0, 3}, {3, 1}, {2, 2},
                                                                   {1, 3}, {3, 2}, {2, 3}, {3, 3}};
  CHECK(order == expect);
  // Each segment has its own receive slots (the GPU lays them out one after the other).
  CHECK(s.slot_elements > 0);
  CHECK(s.scratch_elements == 0);

  // Count 0: nothing to do; a single rank: a copy.
  p.count = 0;
  CHECK(md::make_program(p).steps.empty());
  const std::vector<md::dim_program> single = {{1, 0, algorithm::ring, false, 0}};
  p.dims = single, p.count = 10, p.segment_length = 0;
  s = md::make_program(p);  // one local step: recvbuf = sendbuf
  REQUIRE(s.steps.size() == 1);
  CHECK(s.steps[0].sends + s.steps[0].recvs == 0);
  REQUIRE(s.steps[0].ops == 1);
  CHECK(s.ops[0].ins == 1);
  CHECK(s.inputs_of(s.ops[0])[0] == md::slice{md::region::send, 0, 0});
}

TEST_CASE("program: structure of a shared stage and of a pipelined call") {
  // (The worked example of program.hpp by messages, and the wavefront order, are
  // above.)
  md::program_params p;
  p.count = 10;
  // 2 ranks by shared access, all_reduce of 10, rank 0: arrive (publishing sendbuf
  // and recvbuf), one fused fold into both ranks' recvbufs, then leave.
  const std::vector<md::dim_program> sh = {{2, 0, algorithm::direct, true, 0}};
  p.dims = sh;
  const auto pr = md::make_program(p);
  REQUIRE(pr.steps.size() == 2);
  CHECK(pr.shared);
  CHECK(pr.steps[0].sync == md::sync_kind::arrive);
  CHECK(pr.steps[0].publish_src == md::slice{md::region::send, 0, 0});
  CHECK(pr.steps[0].publish_dst == md::slice{md::region::recv, 0, 0});
  CHECK(pr.steps[0].signature == 10);
  REQUIRE(pr.steps[0].ops == 1);
  const auto& fu = pr.ops[pr.steps[0].first_op];
  CHECK(fu.outs == 2);
  CHECK(pr.outputs_of(fu)[1] == md::slice{md::region::peer_dst, 1, 0});
  CHECK(pr.inputs_of(fu)[1] == md::slice{md::region::peer_src, 1, 0});
  CHECK(pr.steps[1].sync == md::sync_kind::leave);
  CHECK(pr.slot_elements == 0);

  // The same streamed (the pull form): copy block 1 of send into source (pre),
  // arrive publishing source, fold block 0 into recv and result; arrive publishing
  // both, copy block 1 from rank 1's result; leave.
  const std::vector<md::dim_program> st = {{2, 0, algorithm::direct, true, 0, true}};
  p.dims = st;
  const auto pull = md::make_program(p);
  REQUIRE(pull.steps.size() == 3);
  CHECK(pull.steps[0].sync == md::sync_kind::arrive);
  CHECK(pull.steps[0].publish_src == md::slice{md::region::source, 0, 0});
  CHECK_FALSE(pull.steps[0].publishes_dst);
  REQUIRE(pull.steps[0].pre == 1);
  const auto& in = pull.ops[pull.steps[0].first_pre];
  CHECK(pull.inputs_of(in)[0] == md::slice{md::region::send, 0, 5});
  CHECK(pull.outputs_of(in)[0] == md::slice{md::region::source, 0, 5});
  CHECK(in.count == 5);
  REQUIRE(pull.steps[0].ops == 1);
  const auto& fold = pull.ops[pull.steps[0].first_op];
  CHECK(pull.outputs_of(fold)[0] == md::slice{md::region::recv, 0, 0});
  CHECK(pull.outputs_of(fold)[1] == md::slice{md::region::result, 0, 0});
  CHECK(pull.inputs_of(fold)[0] == md::slice{md::region::send, 0, 0});
  CHECK(pull.inputs_of(fold)[1] == md::slice{md::region::peer_src, 1, 0});
  CHECK(fold.count == 5);
  CHECK(pull.steps[1].sync == md::sync_kind::arrive);
  CHECK(pull.steps[1].publish_src == md::slice{md::region::source, 0, 0});
  CHECK(pull.steps[1].publish_dst == md::slice{md::region::result, 0, 0});
  REQUIRE(pull.steps[1].ops == 1);
  const auto& cp = pull.ops[pull.steps[1].first_op];
  CHECK(pull.inputs_of(cp)[0] == md::slice{md::region::peer_dst, 1, 5});
  CHECK(pull.outputs_of(cp)[0] == md::slice{md::region::recv, 0, 5});
  CHECK(pull.steps[2].sync == md::sync_kind::leave);

  // 4 segments over 2 dimensions (2 stages each way): segment after segment in the
  // program (the host's cursor admits them one behind the other).
  const std::vector<md::dim_program> two = {{2, 0, algorithm::direct, false, 0}, {2, 0, algorithm::direct, false, 0}};
  p.dims = two, p.count = 400, p.segment_length = 100;
  const auto piped = md::make_program(p);
  CHECK(piped.segments == 4);
  CHECK(piped.segment_begin == std::vector<std::size_t>{0, 4, 8, 12, 16});
  for (std::size_t seg = 0; seg < 4; ++seg)
    for (std::size_t k = 0; k < 4; ++k) CHECK(piped.steps[4 * seg + k].segment == seg);
}
