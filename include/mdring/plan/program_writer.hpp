// mdring/plan/program_writer.hpp: writing a program's steps (plan/program.hpp).
//
// program_writer holds the program being written and its open step, and nothing
// else: it knows the step vocabulary, not the algorithms. The stage emitters
// (plan/build_stages.hpp) and the collective builders (plan/all_reduce_program.hpp
// and the others that plan/collective_programs.hpp names) write through it:
//
//   stage(d, ph, n, sync, f)   a stage of n steps of dimension d: f(i) fills step
//                              i, sync(i) says what step i waits for
//   send, recv                 messages of the open step (none of 0 elements)
//   op, fold, copy             local operations of the open step: before its
//                              messages (pre) or after its sync; none of 0 elements
//   publish, sign              what the open step's arrive publishes, and the range
//                              every peer must agree on
//   begin_segment, add_stage, segments, finish
//                              the program around the steps
//
// Example: message_stage(0, phase::all_gather, 1, f) where f sends recv[0, 5) to
// coordinate 1 and receives recv[5, 10) from it writes one step (stage_begin and
// stage_end, sync messages) with one send and one receive, and moves on to the
// next stage.
#pragma once

#include "../config.hpp"
#include "../vocabulary.hpp"
#include "program.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace detail {

constexpr slice operator+(slice s, std::size_t n) noexcept { return {s.where, s.peer, s.offset + n}; }
constexpr slice peer_slice(region where, std::size_t peer, std::size_t offset) noexcept {
  return {where, std::uint32_t(peer), offset};
}

// What step i of a stage waits for: messages; nothing; shared access (arrive, then
// leave); shared access through the staging buffers (arrive, then nothing: the
// next arrive on the dimension says the peers are done with them).
constexpr sync_kind message_sync(std::size_t) noexcept { return sync_kind::messages; }
constexpr sync_kind no_sync(std::size_t) noexcept { return sync_kind::none; }
constexpr sync_kind shared_sync(std::size_t i) noexcept { return i ? sync_kind::leave : sync_kind::arrive; }
constexpr sync_kind staged_sync(std::size_t i) noexcept { return i ? sync_kind::none : sync_kind::arrive; }

class program_writer {
public:
  program_writer(collective kind, std::size_t count) {
    out_.kind = kind;
    out_.count = count;
  }

  // ---- the program around the steps ----------------------------------------------
  // Segment s starts here (stages count from 0 again).
  void begin_segment(std::size_t s) {
    seg_ = s, stage_ = 0;
    out_.segment_begin.push_back(out_.steps.size());
  }
  // The stages every segment has, in order: dimension and phase.
  void add_stage(std::size_t d, phase ph) { out_.stage_dims.push_back(d), out_.stage_phases.push_back(ph); }
  void segments(std::size_t n, std::size_t length) { out_.segments = n, out_.segment_length = length; }
  // The program, its scratch and receive slots sized (plan/build_program.hpp buffer_layout).
  program finish(std::size_t scratch_elements, std::size_t slot_elements) && {
    out_.segment_begin.push_back(out_.steps.size());
    out_.scratch_elements = scratch_elements, out_.slot_elements = slot_elements;
    return std::move(out_);
  }

  // ---- stages --------------------------------------------------------------------
  // A stage of `n` steps: f(i) fills step i (sync(i) says what it waits for).
  template <class Sync, class F>
  void stage(std::size_t d, phase ph, std::size_t n, Sync&& sync, F&& f) {
    for (std::size_t i = 0; i < n; ++i) {
      open(d, i, ph, sync(i));
      cur_.stage_begin = i == 0, cur_.stage_end = i + 1 == n;
      f(i);
      close();
    }
    ++stage_;
  }
  template <class F>
  void message_stage(std::size_t d, phase ph, std::size_t n, F&& f) {
    stage(d, ph, n, message_sync, f);
  }
  // A stage whose range is empty on every rank of the ring: its steps, doing nothing.
  void empty_stage(std::size_t d, phase ph, std::size_t n) {
    stage(d, ph, n, no_sync, [](std::size_t) {});
  }
  // One local step: recvbuf = sendbuf (finalized: a fold of one input), for one rank.
  void local_copy(std::size_t n, bool fold_op) {
    stage(0, phase::reduce_scatter, 1, no_sync, [&](std::size_t) {
      if (fold_op) fold({region::recv, 0, 0}, {{region::send, 0, 0}}, n, true);
      else copy({region::recv, 0, 0}, {region::send, 0, 0}, n);
    });
  }

  // ---- the open step ---------------------------------------------------------------
  void send(std::size_t peer, slice at, std::size_t n) {
    if (n) out_.sends.push_back({peer, at, n});
  }
  void recv(std::size_t peer, slice at, std::size_t n) {
    if (n) out_.recvs.push_back({peer, at, n});
  }
  // An op before the step's messages (pre) or after its sync.
  void op(local_op::kind_t kind, std::span<const slice> outs, std::span<const slice> ins, std::size_t n, bool final,
          bool nt, bool pre = false) {
    if (!n) return;
    if (!pre && !post_) {
      post_ = true;
      cur_.pre = out_.ops.size() - cur_.first_pre, cur_.first_op = out_.ops.size();
    }
    local_op o;
    o.kind = kind, o.final = final, o.nontemporal = nt, o.count = n;
    o.first_out = out_.slices.size(), o.outs = outs.size();
    out_.slices.insert(out_.slices.end(), outs.begin(), outs.end());
    o.first_in = out_.slices.size(), o.ins = ins.size();
    out_.slices.insert(out_.slices.end(), ins.begin(), ins.end());
    out_.ops.push_back(o);
  }
  void fold(slice dst, std::initializer_list<slice> ins, std::size_t n, bool final) {
    op(local_op::fold, {&dst, 1}, {ins.begin(), ins.size()}, n, final, false);
  }
  void copy(slice dst, slice src, std::size_t n, bool pre = false, bool nt = false) {
    op(local_op::copy, {&dst, 1}, {&src, 1}, n, false, nt, pre);
  }
  // The arrive of a shared stage on a range of n elements: what this rank publishes
  // (src, dst: either may be null).
  void publish(std::size_t n, const slice* src, const slice* dst) {
    sign(n);
    if (src) cur_.publish_src = *src, cur_.publishes_src = true;
    if (dst) cur_.publish_dst = *dst, cur_.publishes_dst = true;
  }
  // The stage's range in elements, which every peer of the arrive must agree on
  // (a staged stage publishes nothing else).
  void sign(std::size_t n) { cur_.signature = n; }

private:
  void open(std::size_t d, std::size_t index, phase ph, sync_kind sync) {
    cur_ = program_step{};
    cur_.segment = seg_, cur_.stage = stage_, cur_.dim = d, cur_.index = index, cur_.ph = ph, cur_.sync = sync;
    cur_.first_pre = out_.ops.size();
    cur_.first_send = out_.sends.size(), cur_.first_recv = out_.recvs.size();
    post_ = false;
  }
  void close() {
    if (!post_) cur_.pre = out_.ops.size() - cur_.first_pre, cur_.first_op = out_.ops.size();
    else cur_.ops = out_.ops.size() - cur_.first_op;
    cur_.sends = out_.sends.size() - cur_.first_send;
    cur_.recvs = out_.recvs.size() - cur_.first_recv;
    out_.shared |= cur_.sync == sync_kind::arrive || cur_.sync == sync_kind::leave;
    out_.steps.push_back(cur_);
  }

  program out_;
  program_step cur_;
  bool post_ = false;  // the open step has an op after its sync
  std::size_t seg_ = 0, stage_ = 0;
};

}  // namespace detail

MDRING_NAMESPACE_END
