// tests/test_schedule.cpp: the all_reduce program as the GPU runs it (plan/program.hpp).
//
// The GPU path enqueues make_program()'s all_reduce steps on streams in wavefront
// order (wavefront_order); this test replays them on the host in that order, for
// all ranks in lock step (exactly what the single-GPU executor of several logical
// ranks does: step i's messages are matched between ranks, copied, then step i's
// folds run), with host_reducer for the folds. So the program the GPU runs is
// checked here without a GPU (tests/test_program.cpp runs every collective's
// programs, as the host executor does):
//   - exact results: int32 sums of rank-dependent values, avg on int32 (truncating
//     division once, by the owner), non-commutative "keep the left operand" on
//     direct stages (rank order), float quarters (exact);
//   - bitwise identity on every rank;
//   - every message of step i has a matching message on the peer, of the same count;
//   - no receive of a step overlaps a send or another receive of the same rank (on
//     the GPU they run concurrently);
//   - every step has the same (segment, stage, dimension, index) on every rank;
//   - scratch stays inside scratch_elements; folds never read unwritten scratch;
//   - with vector_elements V, every fold's destination and inputs have the same
//     address modulo V (send and recv equally misaligned), which is what lets the
//     kernels use 16-byte loads on any block boundaries;
//   - counts 0, 1, fewer than ranks, 13, 97, 1009, 4099; in and out of place; one
//     segment and many (pipelined wavefront order).
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include <mdring/plan/collective_programs.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace md = mdring;
using md::algorithm;

namespace {

struct rank_state {
  std::vector<std::size_t> coords;
  md::program sch;
  std::vector<std::size_t> order;                             // wavefront_order(sch)
  std::vector<std::int64_t> raw_send, raw_recv, raw_scratch;  // element storage with guard room
  std::vector<unsigned char> written;                         // scratch elements written so far
};

constexpr std::size_t guard = 16;

template <class T>
struct sim {
  std::vector<std::size_t> ext;
  std::vector<algorithm> algos;
  std::size_t n, seg_len, V, mis;
  bool in_place;
  std::size_t P = 1;
  std::vector<rank_state> ranks;
  std::vector<std::vector<T>> send, recv, scratch;
  std::vector<std::vector<unsigned char>> scratch_written;
  std::vector<std::string> failures;

  sim(std::vector<std::size_t> e, std::vector<algorithm> a, std::size_t count, std::size_t len, std::size_t v,
      std::size_t m, bool ip)
      : ext(std::move(e)), algos(std::move(a)), n(count), seg_len(len), V(v), mis(m), in_place(ip) {
    for (auto x : ext) P *= x;
    ranks.resize(P);
    send.resize(P), recv.resize(P), scratch.resize(P), scratch_written.resize(P);
    for (std::size_t r = 0; r < P; ++r) {
      auto& rs = ranks[r];
      rs.coords.resize(ext.size());
      md::to_coordinates(r, ext, rs.coords);
      std::vector<md::dim_program> dims(ext.size());
      for (std::size_t d = 0; d < ext.size(); ++d) dims[d] = {ext[d], rs.coords[d], algos[d], false, 0};
      md::program_params p;
      p.dims = dims;
      p.count = n;
      p.rank = r;
      p.segment_length = seg_len;
      p.vector_elements = V;
      p.recv_misalignment = mis;
      rs.sch = md::make_program(p);
      rs.order = md::wavefront_order(rs.sch);
      // scratch: the scratch region, then each segment's slots (as the GPU lays it out)
      const std::size_t total = rs.sch.scratch_elements + rs.sch.segments * rs.sch.slot_elements;
      scratch[r].assign(total, T{});
      scratch_written[r].assign(total, 0);
    }
  }

  void fail(const std::string& s) {
    if (failures.size() < 20) failures.push_back(s);
  }

  // Slots are the scratch region's: segment s's start at scratch_elements + s * slot_elements.
  std::size_t slot_base(std::size_t r, std::size_t seg) const {
    return ranks[r].sch.scratch_elements + seg * ranks[r].sch.slot_elements;
  }
  // A slice as (buffer, element offset) with the slot region folded into scratch.
  md::slice flat(std::size_t r, md::slice s, std::size_t seg) const {
    if (s.where == md::region::slot) return {md::region::scratch, 0, slot_base(r, seg) + s.offset};
    return s;
  }
  T* base(std::size_t r, md::region g) {
    switch (g) {
      case md::region::send:
        return in_place ? recv[r].data() : send[r].data();
      case md::region::recv:
        return recv[r].data();
      default:
        return scratch[r].data();
    }
  }
  std::size_t limit(std::size_t r, md::region g) const { return g == md::region::scratch ? scratch[r].size() : n; }
  // Address modulo V of element `off` of region g (recv and send are misaligned by
  // mis; the device scratch block is aligned).
  std::size_t phase_of(md::region g, std::size_t off) const { return ((g == md::region::scratch ? 0 : mis) + off) % V; }

  template <class Op>
  void run(Op op) {
    const std::size_t steps = ranks[0].sch.steps.size();
    for (std::size_t r = 1; r < P; ++r) {
      if (ranks[r].sch.steps.size() != steps)
        return fail("step counts differ between ranks 0 and " + std::to_string(r));
      if (ranks[r].order != ranks[0].order)
        return fail("wavefront orders differ between ranks 0 and " + std::to_string(r));
    }
    for (std::size_t k = 0; k < steps; ++k) {
      const std::size_t i = ranks[0].order[k];
      const auto& s0 = ranks[0].sch.steps[i];
      for (std::size_t r = 1; r < P; ++r) {
        const auto& s = ranks[r].sch.steps[i];
        if (s.segment != s0.segment || s.stage != s0.stage || s.dim != s0.dim || s.index != s0.index || s.ph != s0.ph)
          return fail("step " + std::to_string(i) + " differs between ranks 0 and " + std::to_string(r));
        if (s.sync != md::sync_kind::messages && s.sync != md::sync_kind::none)
          return fail("a GPU program synchronizes by shared access");
      }
      // Messages: each recv matched with exactly one send of the peer, same count.
      struct copy {
        std::size_t r, j;
        md::transfer to, from;
      };
      std::vector<copy> copies;
      for (std::size_t r = 0; r < P; ++r) {
        const auto& rs = ranks[r];
        const auto& st = rs.sch.steps[i];
        if (st.pre) fail("a GPU all_reduce step has pre ops");
        for (const auto& m : rs.sch.recvs_of(st)) {
          const std::size_t j = md::peer_of(r, st.dim, m.peer, ext);
          const auto& ps = ranks[j].sch;
          std::size_t found = 0;
          md::transfer from;
          for (const auto& x : ps.sends_of(ps.steps[i]))
            if (x.peer == rs.coords[st.dim]) ++found, from = x;
          if (found != 1) {
            fail("step " + std::to_string(i) + ": rank " + std::to_string(r) + " receives from " + std::to_string(j) +
                 " which sends " + std::to_string(found) + " messages to it");
            continue;
          }
          if (from.count != m.count) fail("step " + std::to_string(i) + ": count mismatch");
          md::transfer to = m;
          to.at = flat(r, m.at, st.segment);
          from.at = flat(j, from.at, st.segment);
          copies.push_back({r, j, to, from});
        }
        // And each send has a receiver.
        for (const auto& x : rs.sch.sends_of(st)) {
          const std::size_t j = md::peer_of(r, st.dim, x.peer, ext);
          std::size_t found = 0;
          for (const auto& m : ranks[j].sch.recvs_of(ranks[j].sch.steps[i])) found += m.peer == rs.coords[st.dim];
          if (found != 1)
            fail("step " + std::to_string(i) + ": a send of rank " + std::to_string(r) + " has no receiver");
        }
      }
      // On the GPU a step's copies run concurrently with the peers' reads of this
      // rank's buffers: no receive may overlap a send or another receive of the
      // same rank in the same step.
      for (std::size_t r = 0; r < P; ++r) {
        const auto& sch = ranks[r].sch;
        const auto& st = sch.steps[i];
        auto buf = [&](md::region g) { return g == md::region::send && in_place ? md::region::recv : g; };
        auto overlap = [&](const md::transfer& a, const md::transfer& b) {
          const md::slice x = flat(r, a.at, st.segment), y = flat(r, b.at, st.segment);
          return buf(x.where) == buf(y.where) && x.offset < y.offset + b.count && y.offset < x.offset + a.count;
        };
        const auto recvs = sch.recvs_of(st);
        for (std::size_t a = 0; a < recvs.size(); ++a) {
          for (const auto& x : sch.sends_of(st))
            if (overlap(recvs[a], x))
              fail("step " + std::to_string(i) + ": a receive overlaps a send of the same rank");
          for (std::size_t b2 = a + 1; b2 < recvs.size(); ++b2)
            if (overlap(recvs[a], recvs[b2])) fail("step " + std::to_string(i) + ": two receives overlap");
        }
      }
      // Copy (reading the senders' buffers as they were before this step's folds).
      std::vector<std::vector<T>> staged;
      for (auto& c : copies) {
        if (c.from.at.offset + c.from.count > limit(c.j, c.from.at.where) ||
            c.to.at.offset + c.to.count > limit(c.r, c.to.at.where)) {
          fail("step " + std::to_string(i) + ": message out of bounds");
          staged.emplace_back();
          continue;
        }
        const T* src = base(c.j, c.from.at.where) + c.from.at.offset;
        staged.emplace_back(src, src + c.from.count);
        if (c.from.at.where == md::region::scratch) fail("a send reads scratch");
      }
      for (std::size_t q = 0; q < copies.size(); ++q) {
        auto& c = copies[q];
        if (staged[q].empty()) continue;
        std::memcpy(base(c.r, c.to.at.where) + c.to.at.offset, staged[q].data(), c.to.count * sizeof(T));
        if (c.to.at.where == md::region::scratch)
          for (std::size_t e = 0; e < c.to.count; ++e) scratch_written[c.r][c.to.at.offset + e] = 1;
      }
      // Folds.
      for (std::size_t r = 0; r < P; ++r) {
        const auto& sch = ranks[r].sch;
        const auto& st = sch.steps[i];
        md::host_reducer<T, Op> red(op, P);
        for (const auto& f : sch.ops_of(st)) {
          if (f.kind != md::local_op::fold || f.outs != 1) fail("a GPU all_reduce op is not a fold into one buffer");
          const md::slice dst = flat(r, sch.outputs_of(f)[0], st.segment);
          std::vector<const T*> in;
          const std::size_t want = phase_of(dst.where, dst.offset);
          for (const auto& given : sch.inputs_of(f)) {
            const md::slice s = flat(r, given, st.segment);
            if (s.offset + f.count > limit(r, s.where)) {
              fail("fold input out of bounds");
              return;
            }
            if (phase_of(s.where, s.offset) != want) fail("fold input not vector-aligned with its destination");
            if (s.where == md::region::scratch)
              for (std::size_t e = 0; e < f.count; ++e)
                if (!scratch_written[r][s.offset + e]) {
                  fail("fold reads scratch nothing wrote");
                  break;
                }
            in.push_back(base(r, s.where) + s.offset);
          }
          if (dst.where != md::region::recv) fail("fold writes outside recvbuf");
          red.combine_n(base(r, dst.where) + dst.offset, in.data(), in.size(), f.count, f.final);
        }
      }
    }
  }
};

std::string label(const std::vector<std::size_t>& ext, const std::vector<algorithm>& a, std::size_t n, std::size_t len,
                  std::size_t V, std::size_t mis, bool ip) {
  std::string s = "extents";
  for (auto e : ext) s += " " + std::to_string(e);
  s += ", algorithms";
  for (auto x : a) s += " " + std::string(md::to_string(x));
  return s + ", n " + std::to_string(n) + ", segment " + std::to_string(len) + ", V " + std::to_string(V) +
         ", misaligned " + std::to_string(mis) + (ip ? ", in place" : ", out of place");
}

// Runs one case with op on T: input(rank, i) -> T, want(i) -> T expected.
template <class T, class Op, class In, class Want>
void check_case(const std::vector<std::size_t>& ext, const std::vector<algorithm>& algos, std::size_t n,
                std::size_t len, std::size_t V, std::size_t mis, bool ip, Op op, In input, Want want) {
  sim<T> s(ext, algos, n, len, V, mis, ip);
  const std::string where = label(ext, algos, n, len, V, mis, ip);
  for (std::size_t r = 0; r < s.P; ++r) {
    s.recv[r].assign(n, T{});
    s.send[r].assign(n, T{});
    for (std::size_t i = 0; i < n; ++i) (ip ? s.recv[r] : s.send[r])[i] = input(r, i);
    if (!ip)
      for (std::size_t i = 0; i < n; ++i) s.recv[r][i] = T(-7);  // poison
  }
  s.run(op);
  for (auto& f : s.failures) FAIL_CHECK(where << ": " << f);
  if (!s.failures.empty()) return;
  std::size_t bad = 0;
  for (std::size_t r = 0; r < s.P; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      if (std::memcmp(&s.recv[r][i], &s.recv[0][i], sizeof(T)) != 0 && bad++ < 3)
        FAIL_CHECK(where << ": rank " << r << " element " << i << " differs from rank 0 in its bits");
      if (!(s.recv[r][i] == want(i)) && bad++ < 3)
        FAIL_CHECK(where << ": rank " << r << " element " << i << " is " << double(s.recv[r][i]) << ", expected "
                         << double(want(i)));
    }
  CHECK_MESSAGE(bad == 0, where);
}

struct keep_left {
  static constexpr bool is_commutative = false;
  std::int32_t operator()(std::int32_t a, std::int32_t) const { return a; }
};

const std::vector<std::pair<std::vector<std::size_t>, std::vector<algorithm>>> shapes = {
    {{1}, {algorithm::ring}},
    {{2}, {algorithm::direct}},
    {{2}, {algorithm::ring}},
    {{5}, {algorithm::ring}},
    {{5}, {algorithm::direct}},
    {{1, 4}, {algorithm::ring, algorithm::direct}},
    {{4, 1}, {algorithm::ring, algorithm::ring}},
    {{2, 3}, {algorithm::direct, algorithm::ring}},
    {{2, 3}, {algorithm::ring, algorithm::direct}},
    {{4, 3}, {algorithm::direct, algorithm::ring}},
    {{3, 5}, {algorithm::ring, algorithm::ring}},
    {{2, 2, 2}, {algorithm::direct, algorithm::ring, algorithm::direct}},
    {{2, 1, 3}, {algorithm::ring, algorithm::ring, algorithm::direct}},
    {{9}, {algorithm::ring}},
    // halving-doubling runs on the GPU path too
    {{4}, {algorithm::halving_doubling}},
    {{6}, {algorithm::halving_doubling}},
    {{2, 3}, {algorithm::direct, algorithm::halving_doubling}},
    {{3, 4}, {algorithm::halving_doubling, algorithm::ring}},
    // and recursive doubling (whole ranges)
    {{4}, {algorithm::recursive_doubling}},
    {{5}, {algorithm::recursive_doubling}},
    {{2, 3}, {algorithm::direct, algorithm::recursive_doubling}},
    {{3, 4}, {algorithm::ring, algorithm::recursive_doubling}},
};

}  // namespace

TEST_CASE("schedule: int32 sum on every shape, count, segment length, alignment, in and out of place") {
  for (const auto& [ext, algos] : shapes) {
    std::size_t P = 1;
    for (auto e : ext) P *= e;
    std::vector<std::size_t> counts = {0, 1, 13, 97, 1009, 4099};
    if (P > 2) counts.push_back(P - 1);
    for (std::size_t n : counts)
      for (std::size_t len : {std::size_t(0), std::size_t(64), std::size_t(1000)})
        for (std::size_t V : {std::size_t(1), std::size_t(4)})
          for (bool ip : {false, true}) {
            const std::size_t mis = V > 1 ? (n + len) % V : 0;
            auto in = [](std::size_t r, std::size_t i) { return std::int32_t((r + 1) * 1000 + i % 997); };
            auto want = [P](std::size_t i) {
              std::int64_t s = 0;
              for (std::size_t r = 0; r < P; ++r) s += std::int64_t((r + 1) * 1000 + i % 997);
              return std::int32_t(s);
            };
            check_case<std::int32_t>(ext, algos, n, len, V, mis, ip, md::sum, in, want);
          }
  }
}

TEST_CASE("schedule: avg divides once by the owner; float quarters are exact") {
  for (const auto& [ext, algos] : shapes) {
    std::size_t P = 1;
    for (auto e : ext) P *= e;
    for (std::size_t n : {std::size_t(1), std::size_t(97), std::size_t(1009)})
      for (std::size_t len : {std::size_t(0), std::size_t(128)}) {
        // Truncation shows that the division happens once, on the full sum.
        auto in = [](std::size_t r, std::size_t i) { return std::int32_t(3 * r + i % 5); };
        auto want = [P](std::size_t i) {
          std::int64_t s = 0;
          for (std::size_t r = 0; r < P; ++r) s += std::int64_t(3 * r + i % 5);
          return std::int32_t(s / std::int64_t(P));
        };
        check_case<std::int32_t>(ext, algos, n, len, 4, 1, false, md::avg, in, want);
        auto fin = [](std::size_t r, std::size_t i) { return float(r) * 0.25f + float(i % 7); };
        auto fwant = [P](std::size_t i) {
          double s = 0;
          for (std::size_t r = 0; r < P; ++r) s += double(r) * 0.25 + double(i % 7);
          return float(s);
        };
        check_case<float>(ext, algos, n, len, 4, 3, true, md::sum, fin, fwant);
      }
  }
}

TEST_CASE("schedule: a non-commutative op on direct stages combines in rank order") {
  // keep_left over ranks 0..P-1 in rank order gives rank 0's value.
  const std::vector<std::pair<std::vector<std::size_t>, std::vector<algorithm>>> direct_shapes = {
      {{2}, {algorithm::direct}},
      {{5}, {algorithm::direct}},
      {{2, 3}, {algorithm::direct, algorithm::direct}},
      {{2, 2, 2}, {algorithm::direct, algorithm::direct, algorithm::direct}}};
  for (const auto& [ext, algos] : direct_shapes)
    for (std::size_t n : {std::size_t(1), std::size_t(13), std::size_t(1009)})
      for (std::size_t len : {std::size_t(0), std::size_t(100)})
        check_case<std::int32_t>(
            ext, algos, n, len, 1, 0, false, keep_left{},
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
