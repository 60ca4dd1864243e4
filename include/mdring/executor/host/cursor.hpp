// mdring/executor/host/cursor.hpp: a call in flight is its program and a cursor
// (see core.hpp).
//
// The program's segments (plan/pipeline.hpp: all_reduce cut into pieces that
// follow each other through the stages) run in up to `depth` pipeline slots at
// once, each with its own request slots and receive slots; a new segment starts
// when the newest one has left its first stage, so consecutive segments sit in
// consecutive stages and the slow dimension's link is never idle. Other
// collectives have one segment.
//
// run(block) moves the call on: each step is posted (pre ops, messages, a shared
// stage's arrive or leave), its sync awaited, its ops run, the segment's next step
// posted. With block it returns when the call is done (a blocking call, exactly
// the work a loop over the stages would do); without, it returns as soon as
// nothing can move (a nonblocking call: wait/test or the progress agent call it
// again later). Nothing else about the call lives anywhere but here.
//
// Order. When any step uses shared access (whose arrive/leave must happen in the
// same order on every rank), the step of the segment that has waited longest goes
// first (a FIFO): every rank then runs the same sequence of posts and syncs,
// since every stage has the same number of steps on every rank of its ring, and
// the sync that comes first in it has all its messages posted by then, which is
// why this cannot deadlock. When every step moves messages and the transport can
// wait for any of several requests, whichever segment's step is done goes on
// first, so a long stage of one segment does not hold up the others; tags carry
// the segment, so the matching does not depend on the order.
#pragma once

#include "local_ops.hpp"

#include <array>
#include <cstdint>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <transport Transport>
class call_cursor {
public:
  using state = engine_state<Transport>;
  using transport_t = Transport;
  using request_t = typename state::request_t;
  call_cursor(state& s, step_ops<Transport>& ops) noexcept : s_(s), ops_(ops) {}

  static constexpr std::size_t max_depth = 8;

  // Sets the call going: `depth` segments of pr in flight at most.
  void begin(const program& pr, std::size_t depth) {
    pr_ = &pr;
    depth_ = depth < 1 ? 1 : depth > max_depth ? max_depth : depth;
    segs_ = {};
    head_ = queued_ = active_ = next_ = 0;
    newest_ = max_depth;
    any_order_ = false;
    if constexpr (waits_for_any<transport_t>) any_order_ = !pr.shared && pr.segments > 1;
    s_.board().begin_program(pr.steps.size());
  }

  // Moves the call on (see the top of this file); true once it is done. On a
  // failure everything this rank has posted is cancelled and the error thrown.
  bool run(bool block) {
    try {
      admit();
      while (queued_) {
        if (any_order_) {
          if (!run_any(block)) return false;
          continue;
        }
        segment& sg = segs_[queue_[head_]];
        if (!sg.announced) announce(queue_[head_]);
        if (sg.deadline == deadline_clock::time_point{}) {  // waited for from now
          sg.deadline = s_.deadline();
          show_waiting(step(sg), sg.deadline);
        }
        if (!s_.sync(step(sg), queue_[head_], sg.nreq, sg.deadline, block)) return false;
        advance(0);
      }
    } catch (...) {
      cancel();
      throw;
    }
    return true;
  }

  // Steps completed so far (the progress agent's sign that something moved).
  std::uint64_t progress() const noexcept { return progress_; }

private:
  struct segment {
    std::size_t index = 0, step = 0, nreq = 0;  // step: absolute, into program::steps
    bool busy = false;
    bool announced = false;  // the step's pre ops, messages and arrive/leave are posted
    deadline_clock::time_point deadline{};
  };

  const program_step& step(const segment& sg) const { return pr_->steps[sg.step]; }

  // The hang report's view (executor/state.hpp): the step now waited for and the
  // peer it waits on (the first it receives from, else the first it sends to; a
  // shared stage waits for the whole dimension), and the bytes a passed step moved.
  void show_waiting(const program_step& st, deadline_clock::time_point deadline) {
    const auto& members = s_.layout().dims[st.dim].members;
    long long peer = -1;
    auto d = state_board::dir::group;
    std::uint64_t bytes = 0;
    for (const auto& m : pr_->recvs_of(st)) {
      if (peer < 0) peer = (long long)members[m.peer], d = state_board::dir::recv;
      bytes += m.count * s_.elem_size();
    }
    if (peer < 0)
      for (const auto& m : pr_->sends_of(st)) {
        peer = (long long)members[m.peer], d = state_board::dir::send;
        break;
      }
    s_.board().waiting(st.dim, int(st.ph), st.index, peer, d, bytes, deadline);
  }
  std::uint64_t received_bytes(const program_step& st) const {
    std::uint64_t bytes = 0;
    for (const auto& m : pr_->recvs_of(st)) bytes += m.count * s_.elem_size();
    return bytes;
  }

  // Queues the current step of the segment in pipeline slot `slot`, posting its
  // messages at once. A shared-access step is announced (its pre ops, its arrive
  // or leave) only when it is next to complete, and a leave goes to the front of
  // the queue: a dimension has one shared stage at a time (its published
  // addresses, its staging buffers), so its arrive, the reads of the peers'
  // buffers and its leave come in one piece, before any other segment's arrive
  // (which would publish other addresses while a peer still reads these).
  void post(std::size_t slot) {
    segment& sg = segs_[slot];
    sg.announced = false;
    const sync_kind k = step(sg).sync;
    if (k != sync_kind::arrive && k != sync_kind::leave) announce(slot);
    if (k == sync_kind::leave) {
      head_ = (head_ + max_depth - 1) % max_depth;
      queue_[head_] = slot;
      ++queued_;
      return;
    }
    queue_[(head_ + queued_++) % max_depth] = slot;
  }
  void announce(std::size_t slot) {
    segment& sg = segs_[slot];
    const program_step& st = step(sg);
    ops_.run_ops(s_, *pr_, pr_->pre_of(st), st.dim, slot);
    sg.nreq = s_.post_messages(*pr_, st, slot);
    sg.deadline = {};  // set when the step is first waited for
    sg.announced = true;
  }

  // Tags carry the segment modulo max_depth: when segments finish out of order,
  // one may start only while no segment max_depth before it is still in flight.
  std::size_t oldest() const {
    std::size_t o = next_;
    for (const auto& sg : segs_)
      if (sg.busy && sg.index < o) o = sg.index;
    return o;
  }
  void admit() {
    while (next_ < pr_->segments && active_ < depth_ && next_ - oldest() < max_depth &&
           (newest_ == max_depth || !segs_[newest_].busy || step(segs_[newest_]).stage > 0)) {
      if (pr_->steps_of(next_) == 0) {  // nothing to do (count 0)
        ++next_;
        continue;
      }
      std::size_t slot = 0;
      while (segs_[slot].busy) ++slot;
      segs_[slot] = segment{next_, pr_->segment_begin[next_], 0, true, false, {}};
      ++next_, ++active_;
      newest_ = slot;
      post(slot);
    }
  }

  // The step of the segment in queue position i has passed its sync: its ops,
  // then its segment's next step.
  void advance(std::size_t i) {
    const std::size_t slot = queue_[(head_ + i) % max_depth];
    for (std::size_t j = i; j > 0; --j) queue_[(head_ + j) % max_depth] = queue_[(head_ + j - 1) % max_depth];
    head_ = (head_ + 1) % max_depth, --queued_;
    segment& sg = segs_[slot];
    const program_step& st = step(sg);
    ops_.run_ops(s_, *pr_, pr_->ops_of(st), st.dim, slot);
    ++progress_;
    s_.board().step_done(received_bytes(st));
    if (++sg.step < pr_->segment_begin[sg.index + 1]) post(slot);
    else sg.busy = false, --active_;
    admit();
  }

  // Any order: goes on with whichever queued step is done; else waits for one
  // (block) or tests once. False: nothing moved.
  bool run_any(bool block) {
    if constexpr (waits_for_any<transport_t>) {
      for (std::size_t i = 0; i < queued_; ++i) {
        const segment& sg = segs_[queue_[(head_ + i) % max_depth]];
        const request_t* rq = s_.ws().requests(queue_[(head_ + i) % max_depth]);
        bool done = true;
        for (std::size_t k = 0; k < sg.nreq && done; ++k) done = transport_t::complete(rq[k]);
        if (done) {
          segs_[queue_[(head_ + i) % max_depth]].nreq = 0;
          advance(i);
          return true;
        }
      }
      // Every queued step is waited for at once: the earliest deadline counts.
      deadline_clock::time_point dl = deadline_clock::time_point::max();
      for (std::size_t i = 0; i < queued_; ++i) {
        auto& d = segs_[queue_[(head_ + i) % max_depth]].deadline;
        if (d == deadline_clock::time_point{}) {
          d = s_.deadline();
          show_waiting(step(segs_[queue_[(head_ + i) % max_depth]]), d);
        }
        dl = d < dl ? d : dl;
      }
      const std::size_t per = s_.ws().per_slot();
      std::span<request_t> rs(s_.ws().requests(), depth_ * per);
      const wait_status st = s_.transport().wait_any(rs, block ? dl : deadline_clock::time_point{});
      if (st.kind == wait_status::done) return true;
      if (st.kind == wait_status::timeout && deadline_clock::now() < dl) return block;  // (block: a spurious return)
      const std::size_t slot = st.kind == wait_status::timeout ? st.index / per : queue_[head_];
      s_.raise_for_request(st, step(segs_[slot]), st.kind == wait_status::timeout ? st.index : slot * per);
    } else {
      (void)block;
      return false;
    }
  }

  // After a failure: forget every message this rank has in flight.
  void cancel() noexcept {
    for (std::size_t slot = 0; slot < max_depth; ++slot)
      if (segs_[slot].busy && segs_[slot].nreq) {
        s_.transport().cancel_all(std::span<request_t>(s_.ws().requests(slot), segs_[slot].nreq));
        segs_[slot].nreq = 0;
      }
  }

  const program* pr_ = nullptr;
  std::size_t depth_ = 1;
  std::array<segment, max_depth> segs_{};
  std::array<std::size_t, max_depth> queue_{};
  std::size_t head_ = 0, queued_ = 0, active_ = 0, next_ = 0, newest_ = max_depth;
  bool any_order_ = false;
  std::uint64_t progress_ = 0;
  state& s_;
  step_ops<Transport>& ops_;
};

}  // namespace detail

MDRING_NAMESPACE_END
