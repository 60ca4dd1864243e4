// mdring/executor/host/core.hpp: how a host rank runs one step of a program.
//
// The host executor runs programs (plan/program.hpp): it knows the step vocabulary,
// not the algorithms, and it is written once per transport, not per element type
// and op: a call's element size is a number, and only the arithmetic of its folds
// depends on the type (local_ops.hpp). An engine is composed of parts, each its own
// class with its own invariants, holding references to the ones before it (no
// inheritance):
//
//   workspace.hpp  call_workspace: what the executor keeps for a communicator (request
//                  slots, the call's decision and program, scratch, measured plans);
//                  host_binding: what a call runs with (layout, options, transport,
//                  channels, workspace, hang report, the flat channel)
//   core.hpp       engine_state: one call's buffers, where a slice lives, posting a
//                  step's messages and shared-access announcements, and testing or
//                  waiting for its sync with a deadline
//   local_ops.hpp  step_ops, local_ops<T, Op>: the folds and copies of one element
//                  type and op, reading and writing peers' buffers (pointers between
//                  threads and for mapped node memory, cross-memory attach otherwise)
//   cursor.hpp     call_cursor: the segments of a call in flight, moved on one step at
//                  a time, blocking or not (a call is a program and a cursor)
//   engine.hpp     engine: owns the state and the cursor; the five collectives (their
//                  decision, program, scratch, the pull form); measure.hpp: measured
//                  planning
//
// Every wait has a deadline that starts when the step is first waited for; a
// timeout names the collective, dimension, phase, step and peer.
#pragma once

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../options.hpp"
#include "../../plan/bound_layout.hpp"
#include "../../plan/program.hpp"
#include "../../transport/shared_access.hpp"
#include "../../transport/transport.hpp"
#include "../state.hpp"
#include "workspace.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// What one call on a host communicator runs with (collective/communicator.hpp makes
// it): the bind result, the options, the transport and its channel per executed
// dimension, the executor's workspace, and the hang report's board.
template <transport Transport>
struct host_binding {
  const bound_layout& layout;
  const options& opts;
  Transport& transport;
  std::span<typename Transport::channel> channels;
  call_workspace<Transport>& workspace;
  state_board& board;
  // The channel over every rank where they all share a node (the one-shot path:
  // one_shot.hpp), else null.
  typename Transport::channel* flat = nullptr;
};

// The buffers of a call: the user's, and the scratch the engine laid out (bytes).
struct call_buffers {
  const void* send = nullptr;
  void* recv = nullptr;
  void* scratch = nullptr;  // program::scratch_elements
  void* slots = nullptr;    // receive slots, slot_stride elements apart per pipeline slot
  std::size_t slot_stride = 0;
  void* pieces = nullptr;  // p pieces for cross-memory attach (engine.hpp piece_elements)
  // A streamed dimension's region::source and region::result: send and recv, or
  // one block of node memory (engine.hpp stream_in).
  const void* source = nullptr;
  void* result = nullptr;
};

template <transport Transport>
class engine_state {
public:
  using transport_t = Transport;
  using request_t = typename Transport::request;
  using workspace_t = call_workspace<Transport>;
  static constexpr bool has_shared_access = shared_access_transport<Transport>;

  engine_state(const host_binding<Transport>& b, const char* name, std::size_t elem_size, bool commutative) noexcept
      : b_(b), name_(name), elem_(elem_size), commutative_(commutative) {}
  engine_state(const engine_state&) = delete;
  engine_state& operator=(const engine_state&) = delete;

  // ---- what the call is -------------------------------------------------------------------
  const host_binding<Transport>& binding() const noexcept { return b_; }
  const bound_layout& layout() const noexcept { return b_.layout; }
  const options& opts() const noexcept { return b_.opts; }
  Transport& transport() const noexcept { return b_.transport; }
  typename Transport::channel& channel(std::size_t d) const noexcept { return b_.channels[d]; }
  workspace_t& ws() const noexcept { return b_.workspace; }
  state_board& board() const noexcept { return b_.board; }
  const char* name() const noexcept { return name_; }
  std::size_t elem_size() const noexcept { return elem_; }
  bool commutative() const noexcept { return commutative_; }

  call_buffers& buffers() noexcept { return buf_; }
  const call_buffers& buffers() const noexcept { return buf_; }

  // ---- where a slice lives -------------------------------------------------------
  // This rank's own regions (not a peer's): `slot` is the pipeline slot the
  // segment runs in.
  void* local(slice s, std::size_t d, std::size_t slot) const {
    switch (s.where) {
      case region::send:
        return at(buf_.send, s.offset);
      case region::recv:
        return at(buf_.recv, s.offset);
      case region::scratch:
        return at(buf_.scratch, s.offset);
      case region::slot:
        return at(buf_.slots, slot * buf_.slot_stride + s.offset);
      case region::source:
        return at(buf_.source, s.offset);
      case region::result:
        return at(buf_.result, s.offset);
      default:
        return at(staging_of(d, s), s.offset);
    }
  }
  // Element `off` of p, of this call's element size.
  void* at(const void* p, std::size_t off) const noexcept {
    return static_cast<unsigned char*>(const_cast<void*>(p)) + off * elem_;
  }

  // ---- shared access ------------------------------------------------------------------
  // Dimension d runs its direct stages by shared access in this call (the call's
  // description, plan/call.hpp describe_call).
  bool shared(std::size_t d) const noexcept { return ws().description().dims[d].shared; }
  void* staging_of(std::size_t d, slice s) const {
    if constexpr (has_shared_access) {
      auto& g = transport().group(channel(d));
      return s.where == region::staging_next ? g.next_staging(layout().coords[d]) : g.staging(s.peer);
    } else {
      return (void)d, (void)s, nullptr;
    }
  }

  // ---- posting a step -------------------------------------------------------------------
  // 15 bits (MPI guarantees tags up to 32767): the segment (mod 8, at most 8 in
  // flight), the phase, and the step (mod 1024; a segment's steps in one stage
  // follow each other, so equal tags never meet).
  static int tag_of(const program_step& st) {
    return int((st.segment % 8) << 12) | (int(st.ph) << 10) | int(st.index & 0x3ff);
  }

  // Posts step st's messages into request slot `slot`; returns how many. Shared
  // stages announce themselves here (arrive publishes, leave says done).
  std::size_t post_messages(const program& pr, const program_step& st, std::size_t slot) {
    const std::size_t d = st.dim, base = slot * ws().per_slot();
    const auto& members = layout().dims[d].members;
    request_t* reqs = ws().requests();
    std::size_t n = 0;
    for (const auto& m : pr.recvs_of(st)) {
      ws().info(base + n) = {d, members[m.peer], false};
      transport().irecv(channel(d), local(m.at, d, slot), m.count * elem_, m.peer, tag_of(st), reqs[base + n++]);
    }
    for (const auto& m : pr.sends_of(st)) {
      ws().info(base + n) = {d, members[m.peer], true};
      transport().isend(channel(d), local(m.at, d, slot), m.count * elem_, m.peer, tag_of(st), reqs[base + n++]);
    }
    if constexpr (has_shared_access) {
      if (st.sync == sync_kind::arrive) {
        auto& g = transport().group(channel(d));
        g.arrive(st.publishes_src ? local(st.publish_src, d, slot) : nullptr,
                 st.publishes_dst ? local(st.publish_dst, d, slot) : nullptr,
                 std::uint64_t(st.signature) * 64 + elem_ % 64, unmapped_);
      } else if (st.sync == sync_kind::leave) {
        transport().group(channel(d)).leave();
      }
    }
    return n;
  }

  // ---- waiting for a step -------------------------------------------------------------
  // Whether step st's sync has passed (nreq requests in request slot `slot`): waits
  // until `deadline` when block, else tests once. A step still pending at its
  // deadline, or one a peer's failure interrupts, throws what that means.
  bool sync(const program_step& st, std::size_t slot, std::size_t& nreq, deadline_clock::time_point deadline,
            bool block) {
    const std::size_t d = st.dim;
    if (st.sync == sync_kind::messages) {
      if (nreq == 0) return true;
      std::span<request_t> rs(ws().requests(slot), nreq);
      wait_status w;
      try {
        w = transport().wait_all(rs, block ? deadline : deadline_clock::time_point{});
      } catch (...) {
        transport().cancel_all(rs);
        nreq = 0;
        throw;
      }
      if (w.kind == wait_status::done) return nreq = 0, true;
      if (w.kind == wait_status::timeout && deadline_clock::now() < deadline) return false;
      transport().cancel_all(rs);
      nreq = 0;
      raise_for_request(w, st, slot * ws().per_slot() + w.index);
    }
    if constexpr (has_shared_access) {
      if (st.sync == sync_kind::none) return true;
      auto& g = transport().group(channel(d));
      auto failed = [&] { return transport().shared_failure(); };
      const bool arrive = st.sync == sync_kind::arrive;
      wait_status w = block ? (arrive ? g.wait_arrived(deadline, failed) : g.wait_left(deadline, failed))
                            : (arrive ? g.test_arrived(failed) : g.test_left(failed));
      if (w.kind == wait_status::timeout && !block && deadline_clock::now() < deadline) return false;
      if (w.kind != wait_status::done)
        raise(w, st.ph, d, arrive ? 0 : 1, layout().dims[d].members[w.index],
              arrive ? " to publish its buffers to rank " : " to finish with the buffers of rank ",
              state_board::dir::group);
      if (arrive) {
        check_signatures(g, d, st.signature);
        // Every rank of the ring reads the same flags: the next all_reduce on d
        // decides the same (engine.hpp program_of).
        if (note_unmapped_) ws().note_unmapped(d, g.any_unmapped());
      }
    }
    return true;  // sync_kind::none
  }

  // A failed wait on request `index` (of the workspace's slots) of step st.
  [[noreturn]] void raise_for_request(const wait_status& w, const program_step& st, std::size_t index) {
    const auto& info = ws().info(index);
    raise(w, st.ph, w.kind == wait_status::timeout ? info.dim : st.dim, st.index, info.peer,
          info.is_send ? " to receive what rank " : " to send to rank ",
          info.is_send ? state_board::dir::send : state_board::dir::recv);
  }

  // Throws the error a failed wait means: timeout_error naming the peer, or
  // remote_error naming the rank that failed.
  [[noreturn]] MDRING_COLD void raise(const wait_status& st, phase ph, std::size_t d, std::size_t step,
                                      std::size_t peer, const char* waiting_for, state_board::dir dir) {
    if (st.kind == wait_status::timeout) {
      board().waiting_on((long long)peer, dir);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.3g", std::chrono::duration<double>(opts().timeout).count());
      const std::string what = std::string("mdring::") + name_ + ": timed out after " + secs + " s in dimension " +
                               std::to_string(d) + " (" + layout().dim_name(d) + "), " + std::string(to_string(ph)) +
                               " step " + std::to_string(step) + ", waiting for rank " + std::to_string(peer) +
                               on_host(peer) + waiting_for + std::to_string(layout().rank) + " (" + transport().name() +
                               " transport)";
      throw timeout_error(what, name_, d, std::string(to_string(ph)), step, peer);
    }
    throw remote_error(std::string("mdring::") + name_ + ": rank " + std::to_string(st.failed_rank) +
                           on_host(st.failed_rank) + " failed, so rank " + std::to_string(layout().rank) +
                           " stopped waiting in dimension " + std::to_string(d) + ", " + std::string(to_string(ph)) +
                           " step " + std::to_string(step) + ": " + st.reason,
                       st.failed_rank);
  }

  deadline_clock::time_point deadline() const { return deadline_clock::now() + opts().timeout; }

  // ---- the pull form's flags (engine.hpp program_of and stream_in) --------------------
  // This call's buffers are ones the peers cannot map (published at every arrive),
  // and whether the call notes what its ranks published, for the next call.
  void set_unmapped(bool unmapped) noexcept { unmapped_ = unmapped; }
  void set_notes_unmapped(bool notes) noexcept { note_unmapped_ = notes; }
  bool notes_unmapped() const noexcept { return note_unmapped_; }

private:
  // Ranks whose ranges differ passed different counts (or types, or roots): every
  // rank of the ring sees that, and throws.
  MDRING_COLD void check_signatures(const access_group& g, std::size_t d, std::size_t n) {
    if (const std::size_t j = g.mismatch(); j < g.size())
      throw transport_error(std::string("mdring::") + name_ + ": rank " + std::to_string(layout().dims[d].members[j]) +
                                " works on " + std::to_string(g.signature(j) / 64) + " elements of " +
                                std::to_string(g.signature(j) % 64) + " bytes in dimension " + std::to_string(d) +
                                " where rank " + std::to_string(layout().rank) + " works on " + std::to_string(n) +
                                " of " + std::to_string(elem_ % 64) +
                                ": the ranks passed different counts, types or roots to the same collective",
                            0);
  }

  // " (host NAME)" where the transport knows the peer's host (UCX: from its world).
  std::string on_host(std::size_t peer) const {
    if constexpr (requires { transport().peer_host(peer); }) {
      const std::string h = transport().peer_host(peer);
      if (!h.empty()) return " (host " + h + ")";
    }
    return {};
  }

  host_binding<Transport> b_;
  const char* name_;
  std::size_t elem_;
  bool commutative_;
  call_buffers buf_;
  bool unmapped_ = false, note_unmapped_ = false;
};

}  // namespace detail

MDRING_NAMESPACE_END
