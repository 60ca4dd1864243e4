// mdring/plan/schedule.hpp: an all_reduce as a flat list of steps, for executors
// that enqueue work instead of waiting for it (the GPU path, mdring/cuda/).
//
// The host engine (executor/host/) runs the stages with waits that block or yield. A
// stream-ordered executor needs the whole program of a call up front: per step,
// the messages it sends and receives and the folds that follow them. This header
// writes that program from the same pieces as the host path: block_of and the ring
// schedules (blocks.hpp), the stage ranges, and the segment length of the cost
// model (pipeline.hpp). Every rank gets the same sequence of steps (same segment,
// stage, dimension and step index at the same position), which is what lets a
// lock-step executor (several ranks on one GPU) and NCCL (operations issued in the
// same order on every rank) run it without deadlock.
//
// The program of one segment (range [s * len, min(n, (s+1) * len))) is
//   RS d_0, RS d_1, ..., RS d_last, AG d_last, ..., AG d_0   (non-trivial dimensions only)
// and the segments are interleaved as a wavefront: at time t, segment s runs stage
// t - s, later segments (earlier stages) first. Stages of one dimension share a
// stream in the executor, so a dimension's link works on segment s+1 while the next
// dimension works on segment s.
//
// Buffers: `send` (the user's sendbuf; equal to recvbuf in place), `recv` (also
// where ring stages keep their partial results), and `scratch` (receive slots;
// each segment has its own, so no slot is reused within a call and the executor
// needs no reuse barriers). Receive slots are placed so that a slot and the fold's
// destination have the same offset modulo `vector_elements` (for 16-byte vector
// loads): a slot's start is shifted by (recv_misalignment + destination offset)
// mod vector_elements.
//
// With no dimension of more than one rank the program is one local step without
// messages: recvbuf = sendbuf (finalized), which the executor runs as a copy.
//
// Example, 2 ranks ("nvlink:2", direct), n = 10, rank 0: one step, send elements
// [5, 10) of send to rank 1, receive rank 1's [0, 5) into scratch, fold
// recv[0..5) = send[0..5) op scratch[..]; then one all-gather step: send recv[0, 5),
// receive recv[5, 10).
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "blocks.hpp"
#include "cost.hpp"
#include "pipeline.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

enum class region : std::uint8_t { send, recv, scratch };

// Elements [offset, offset + count) of a region (the count is held by the user of the slice).
struct slice {
  region where = region::recv;
  std::size_t offset = 0;
  friend constexpr bool operator==(const slice&, const slice&) = default;
};

// One message: `count` elements at `at`, to or from the rank at coordinate `peer`
// of the step's dimension.
struct transfer {
  std::size_t peer = 0;
  slice at;
  std::size_t count = 0;
};

// dst[i] = in_0[i] op in_1[i] op ... op in_{k-1}[i] for i < count (k = inputs, in
// coordinate order), finalized (avg's division) when `final`.
struct fold_task {
  slice dst;
  std::size_t first_input = 0, inputs = 0;  // into all_reduce_schedule::inputs
  std::size_t count = 0;
  bool final = false;
};

struct schedule_step {
  std::size_t segment = 0;
  std::size_t stage = 0;  // index into the segment's program
  std::size_t dim = 0;    // executed dimension
  std::size_t index = 0;  // step within the stage (ring: 0 .. p-2)
  phase ph = phase::reduce_scatter;
  bool stage_begin = false, stage_end = false;
  std::size_t first_send = 0, sends = 0;
  std::size_t first_recv = 0, recvs = 0;
  std::size_t first_fold = 0, folds = 0;
};

struct all_reduce_schedule {
  std::size_t count = 0;
  std::size_t segments = 0, segment_length = 0;
  std::vector<std::size_t> stage_dims;  // the program of one segment: dimension of each stage
  std::vector<phase> stage_phases;
  std::vector<schedule_step> steps;
  std::vector<transfer> sends, recvs;
  std::vector<fold_task> folds;
  std::vector<slice> inputs;
  std::size_t scratch_elements = 0;     // all segments together
  std::size_t segment_scratch = 0;      // per segment (segment s starts at s * segment_scratch)

  std::span<const transfer> sends_of(const schedule_step& s) const { return {sends.data() + s.first_send, s.sends}; }
  std::span<const transfer> recvs_of(const schedule_step& s) const { return {recvs.data() + s.first_recv, s.recvs}; }
  std::span<const fold_task> folds_of(const schedule_step& s) const { return {folds.data() + s.first_fold, s.folds}; }
  std::span<const slice> inputs_of(const fold_task& f) const { return {inputs.data() + f.first_input, f.inputs}; }
};

struct schedule_params {
  std::span<const std::size_t> extents;  // executed topology
  std::span<const std::size_t> coords;
  std::span<const algorithm> algos;      // per executed dimension: ring or direct
  std::size_t count = 0;
  std::size_t segment_length = 0;        // 0 or >= count: one segment
  std::size_t vector_elements = 1;       // elements per vector load (16 / sizeof(T)), 1 for none
  std::size_t recv_misalignment = 0;     // (address of recvbuf / sizeof(T)) % vector_elements
};

namespace detail {

class schedule_builder {
public:
  explicit schedule_builder(const schedule_params& p) : p_(p), v_(p.vector_elements ? p.vector_elements : 1) {}

  all_reduce_schedule build() {
    all_reduce_schedule& s = out_;
    s.count = p_.count;
    const std::size_t k = p_.extents.size();
    for (std::size_t d = 0; d < k; ++d)
      if (p_.extents[d] > 1) s.stage_dims.push_back(d), s.stage_phases.push_back(phase::reduce_scatter);
    for (std::size_t i = s.stage_dims.size(); i-- > 0;)
      s.stage_dims.push_back(s.stage_dims[i]), s.stage_phases.push_back(phase::all_gather);
    if (p_.count == 0) return s;
    if (s.stage_dims.empty()) {  // one rank: recvbuf = fin(sendbuf), one local step
      s.segments = 1, s.segment_length = p_.count;
      schedule_step st;
      st.stage_begin = st.stage_end = true;
      st.folds = 1;
      fold({region::recv, 0}, {{region::send, 0}}, p_.count, true);
      s.steps.push_back(st);
      return std::move(s);
    }
    last_ = s.stage_dims[s.stage_dims.size() / 2 - 1];
    first_ = s.stage_dims[0];
    seg_ = make_segmentation(p_.count, p_.segment_length, p_.extents, p_.coords);
    s.segment_length = seg_.length;
    s.segments = seg_.segments;
    // Receive slots of one segment: the most any stage needs (a full segment is the largest).
    for (std::size_t d = 0; d < k; ++d) {
      if (p_.extents[d] <= 1) continue;
      const std::size_t need = slots(d) * slot_stride(d);
      s.segment_scratch = need > s.segment_scratch ? need : s.segment_scratch;
    }
    s.scratch_elements = s.segments * s.segment_scratch;
    const std::size_t S = s.stage_dims.size(), K = s.segments;
    for (std::size_t t = 0; t + 1 < S + K; ++t) {
      const std::size_t hi = t < K - 1 ? t : K - 1;
      const std::size_t lo = t >= S - 1 ? t - (S - 1) : 0;
      for (std::size_t seg = hi + 1; seg-- > lo;) emit_stage(seg, t - seg);
    }
    return std::move(s);
  }

private:
  bool direct(std::size_t d) const { return p_.algos[d] == algorithm::direct; }
  std::size_t slots(std::size_t d) const { return direct(d) ? p_.extents[d] - 1 : 1; }
  // A slot holds the largest block plus room to shift it into vector alignment.
  std::size_t slot_stride(std::size_t d) const {
    const std::size_t mb = max_block(seg_.full[d].count, p_.extents[d]) + (v_ > 1 ? v_ : 0);
    return (mb + v_ - 1) / v_ * v_;
  }

  // The slot of peer slot j (0-based) of segment seg, shifted to match a fold
  // destination at recv offset dst_offset.
  slice slot(std::size_t seg, std::size_t d, std::size_t j, std::size_t dst_offset) const {
    const std::size_t shift = (p_.recv_misalignment + dst_offset) % v_;
    return {region::scratch, seg * out_.segment_scratch + j * slot_stride(d) + shift};
  }

  void emit_stage(std::size_t seg, std::size_t stage) {
    const std::size_t d = out_.stage_dims[stage];
    const phase ph = out_.stage_phases[stage];
    const auto& rg = seg_.ranges(seg);
    const block_range r{seg_.first(seg) + rg[d].offset, rg[d].count};
    const std::size_t steps = direct(d) ? 1 : p_.extents[d] - 1;
    for (std::size_t i = 0; i < steps; ++i) {
      schedule_step st;
      st.segment = seg, st.stage = stage, st.dim = d, st.index = i, st.ph = ph;
      st.stage_begin = i == 0, st.stage_end = i + 1 == steps;
      st.first_send = out_.sends.size(), st.first_recv = out_.recvs.size(), st.first_fold = out_.folds.size();
      if (ph == phase::reduce_scatter) direct(d) ? direct_rs(seg, d, r) : ring_rs(seg, d, r, i);
      else direct(d) ? direct_ag(d, r) : ring_ag(d, r, i);
      st.sends = out_.sends.size() - st.first_send;
      st.recvs = out_.recvs.size() - st.first_recv;
      st.folds = out_.folds.size() - st.first_fold;
      out_.steps.push_back(st);
    }
  }

  // Where this rank's own contribution to element x lives at stage d: the user's
  // sendbuf in the first stage, recvbuf (the partial results) afterwards.
  slice own(std::size_t d, std::size_t x) const { return {d == first_ ? region::send : region::recv, x}; }

  void send(std::size_t peer, slice at, std::size_t n) {
    if (n) out_.sends.push_back({peer, at, n});
  }
  void recv(std::size_t peer, slice at, std::size_t n) {
    if (n) out_.recvs.push_back({peer, at, n});
  }
  void fold(slice dst, std::initializer_list<slice> in, std::size_t n, bool final) {
    if (!n) return;
    out_.folds.push_back({dst, out_.inputs.size(), in.size(), n, final});
    out_.inputs.insert(out_.inputs.end(), in.begin(), in.end());
  }

  // Ring reduce-scatter, step s: send block c-s-1 (this rank's input at s = 0, the
  // partial folded at s-1 afterwards) to c+1, receive block c-s-2 from c-1 and fold
  // it: partial_from_left op own, into recvbuf (the block to send at s+1), or the
  // finished block c at the last step. One pass: reduce and forward.
  void ring_rs(std::size_t seg, std::size_t d, block_range r, std::size_t s) {
    const std::size_t p = p_.extents[d], c = p_.coords[d];
    const block_range bs = block_of(r.count, p, ring_rs_send_block(c, s, p));
    const block_range br = block_of(r.count, p, ring_rs_recv_block(c, s, p));
    const std::size_t dst = r.offset + br.offset;
    const slice q = slot(seg, d, 0, dst);
    recv((c + p - 1) % p, q, br.count);
    send((c + 1) % p, s == 0 ? own(d, r.offset + bs.offset) : slice{region::recv, r.offset + bs.offset}, bs.count);
    const bool last_step = s + 2 == p;
    fold({region::recv, dst}, {q, own(d, dst)}, br.count, last_step && d == last_);
  }

  // Direct reduce-scatter: send block j to rank j, receive p-1 copies of block c,
  // fold all p in coordinate order in one n-ary pass.
  void direct_rs(std::size_t seg, std::size_t d, block_range r) {
    const std::size_t p = p_.extents[d], c = p_.coords[d];
    const block_range bc = block_of(r.count, p, c);
    const std::size_t dst = r.offset + bc.offset;
    auto q = [&](std::size_t j) { return slot(seg, d, j < c ? j : j - 1, dst); };
    for (std::size_t j = 0; j < p; ++j)
      if (j != c) recv(j, q(j), bc.count);
    for (std::size_t j = 0; j < p; ++j) {
      if (j == c) continue;
      const block_range bj = block_of(r.count, p, j);
      send(j, own(d, r.offset + bj.offset), bj.count);
    }
    if (!bc.count) return;
    const std::size_t first = out_.inputs.size();
    for (std::size_t j = 0; j < p; ++j) out_.inputs.push_back(j == c ? own(d, dst) : q(j));
    out_.folds.push_back({{region::recv, dst}, first, p, bc.count, d == last_});
  }

  void ring_ag(std::size_t d, block_range r, std::size_t s) {
    const std::size_t p = p_.extents[d], c = p_.coords[d];
    const block_range bs = block_of(r.count, p, ring_ag_send_block(c, s, p));
    const block_range br = block_of(r.count, p, ring_ag_recv_block(c, s, p));
    recv((c + p - 1) % p, {region::recv, r.offset + br.offset}, br.count);
    send((c + 1) % p, {region::recv, r.offset + bs.offset}, bs.count);
  }

  void direct_ag(std::size_t d, block_range r) {
    const std::size_t p = p_.extents[d], c = p_.coords[d];
    const block_range bc = block_of(r.count, p, c);
    for (std::size_t j = 0; j < p; ++j) {
      if (j == c) continue;
      const block_range bj = block_of(r.count, p, j);
      recv(j, {region::recv, r.offset + bj.offset}, bj.count);
    }
    for (std::size_t j = 0; j < p; ++j)
      if (j != c) send(j, {region::recv, r.offset + bc.offset}, bc.count);
  }

  const schedule_params& p_;
  std::size_t v_;
  std::size_t first_ = 0, last_ = 0;
  segmentation seg_;
  all_reduce_schedule out_;
};

}  // namespace detail

// The program of one rank's all_reduce (see the top of this file). Postconditions:
// steps.size() is the same on every rank for the same extents, algorithms, count
// and segment length; step i has the same segment, stage, dimension and index on
// every rank; a message from rank a to rank b in step i has the same count on both.
inline all_reduce_schedule make_all_reduce_schedule(const schedule_params& p) {
  return detail::schedule_builder(p).build();
}

MDRING_NAMESPACE_END
