// mdring/executor/host/core.hpp: how a host rank runs one step of a program.
//
// The host executor runs programs (plan/program.hpp): it knows the step vocabulary,
// not the algorithms. An engine is composed of three parts, each its own class
// holding references to the ones before it (no inheritance):
//
//   core.hpp       engine_state: the call's state (communicator, its internals,
//                  transport, reducer, request slots, buffers), where a slice
//                  lives, posting a step's messages and shared-access
//                  announcements, and testing or waiting for its sync with a deadline
//   local_ops.hpp  local_ops (on an engine_state): the folds and copies, reading and
//                  writing peers' buffers (pointers between threads and for mapped
//                  node memory, cross-memory attach piece by piece otherwise)
//   cursor.hpp     call_cursor (on an engine_state and its local_ops): the segments
//                  of a call in flight, moved on one step at a time, blocking or not
//                  (a call is a program and a cursor)
//   engine.hpp     engine: owns the three; the five collectives (their decision,
//                  programs, scratch), measured planning
//
// Every wait has a deadline that starts when the step is first waited for; a
// timeout names the collective, dimension, phase, step and peer.
#pragma once

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../options.hpp"
#include "../../plan/program.hpp"
#include "../../reduce/host.hpp"
#include "../../transport/shared_access.hpp"
#include "../../transport/transport.hpp"
#include "../internals.hpp"
#include "../state.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Scratch regions are aligned to cache lines.
inline constexpr std::size_t scratch_alignment = 64;

inline std::size_t align_up(std::size_t bytes) {
  return (bytes + scratch_alignment - 1) / scratch_alignment * scratch_alignment;
}

template <class T, class Op, class Comm>
class engine_state {
public:
  using transport_t = typename Comm::transport_type;
  using request_t = typename transport_t::request;

  engine_state(Comm& c, const char* name, Op op, bool commutative)
      : c_(c),
        in_(c),
        tr_(c.get_transport()),
        red_(op, c.size()),
        name_(name),
        dims_(in_.dims()),
        ext_(c.executed_extents()),
        coords_(c.executed_coordinates()),
        reqs_(in_.requests()),
        infos_(in_.request_infos()),
        per_slot_(in_.request_slot_size()),
        commutative_(commutative) {}

  // The buffers of the call: the user's, and the scratch the engine laid out.
  struct buffers {
    const T* send = nullptr;
    T* recv = nullptr;
    T* scratch = nullptr;  // program::scratch_elements
    T* slots = nullptr;    // receive slots, slot_stride apart per pipeline slot
    std::size_t slot_stride = 0;
    T* pieces = nullptr;  // p pieces for cross-memory attach (engine.hpp piece_elements)
    // A streamed dimension's region::source and region::result: send and recv, or
    // one block of node memory (engine.hpp stream_in).
    const T* source = nullptr;
    T* result = nullptr;
  };

  // ---- where a slice lives -------------------------------------------------------
  // This rank's own regions (not a peer's): `slot` is the pipeline slot the
  // segment runs in.
  T* local(slice s, std::size_t d, std::size_t slot) const {
    switch (s.where) {
      case region::send:
        return const_cast<T*>(buf_.send) + s.offset;
      case region::recv:
        return buf_.recv + s.offset;
      case region::scratch:
        return buf_.scratch + s.offset;
      case region::slot:
        return buf_.slots + slot * buf_.slot_stride + s.offset;
      case region::source:
        return const_cast<T*>(buf_.source) + s.offset;
      case region::result:
        return buf_.result + s.offset;
      default:
        return static_cast<T*>(staging_of(d, s)) + s.offset;
    }
  }

  // ---- shared access ------------------------------------------------------------------
  static constexpr bool has_shared_access = shared_access_transport<transport_t>;

  // Dimension d runs its direct stages by shared access in this call.
  bool shared(std::size_t d) {
    if constexpr (has_shared_access) return algo(d) == algorithm::direct && tr_.shared(dims_[d].ch);
    else return (void)d, false;
  }
  std::size_t staging_bytes(std::size_t d) {
    if constexpr (has_shared_access) return shared(d) ? tr_.group(dims_[d].ch).staging_bytes() : 0;
    else return (void)d, 0;
  }
  void* staging_of(std::size_t d, slice s) const {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      return s.where == region::staging_next ? g.next_staging(coords_[d]) : g.staging(s.peer);
    } else {
      return (void)d, (void)s, nullptr;
    }
  }

  // The algorithm dimension d runs in this call (engine::decide, from plan/call.hpp).
  algorithm algo(std::size_t d) const { return in_.algorithm_slots()[d]; }

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
    const std::size_t d = st.dim, base = slot * per_slot_;
    std::size_t n = 0;
    for (const auto& m : pr.recvs_of(st)) {
      infos_[base + n] = {d, dims_[d].members[m.peer], false};
      tr_.irecv(dims_[d].ch, local(m.at, d, slot), m.count * sizeof(T), m.peer, tag_of(st), reqs_[base + n++]);
    }
    for (const auto& m : pr.sends_of(st)) {
      infos_[base + n] = {d, dims_[d].members[m.peer], true};
      tr_.isend(dims_[d].ch, local(m.at, d, slot), m.count * sizeof(T), m.peer, tag_of(st), reqs_[base + n++]);
    }
    if constexpr (has_shared_access) {
      if (st.sync == sync_kind::arrive) {
        auto& g = tr_.group(dims_[d].ch);
        g.arrive(st.publishes_src ? local(st.publish_src, d, slot) : nullptr,
                 st.publishes_dst ? local(st.publish_dst, d, slot) : nullptr,
                 std::uint64_t(st.signature) * 64 + sizeof(T) % 64, unmapped_);
      } else if (st.sync == sync_kind::leave) {
        tr_.group(dims_[d].ch).leave();
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
      std::span<request_t> rs(reqs_ + slot * per_slot_, nreq);
      wait_status w;
      try {
        w = tr_.wait_all(rs, block ? deadline : deadline_clock::time_point{});
      } catch (...) {
        tr_.cancel_all(rs);
        nreq = 0;
        throw;
      }
      if (w.kind == wait_status::done) return nreq = 0, true;
      if (w.kind == wait_status::timeout && deadline_clock::now() < deadline) return false;
      tr_.cancel_all(rs);
      nreq = 0;
      const auto& info = infos_[slot * per_slot_ + w.index];
      raise(w, st.ph, w.kind == wait_status::timeout ? info.dim : d, st.index, info.peer,
            info.is_send ? " to receive what rank " : " to send to rank ",
            info.is_send ? state_board::dir::send : state_board::dir::recv);
    }
    if constexpr (has_shared_access) {
      if (st.sync == sync_kind::none) return true;
      auto& g = tr_.group(dims_[d].ch);
      auto failed = [&] { return tr_.shared_failure(); };
      const bool arrive = st.sync == sync_kind::arrive;
      wait_status w = block ? (arrive ? g.wait_arrived(deadline, failed) : g.wait_left(deadline, failed))
                            : (arrive ? g.test_arrived(failed) : g.test_left(failed));
      if (w.kind == wait_status::timeout && !block && deadline_clock::now() < deadline) return false;
      if (w.kind != wait_status::done)
        raise(w, st.ph, d, arrive ? 0 : 1, dims_[d].members[w.index],
              arrive ? " to publish its buffers to rank " : " to finish with the buffers of rank ",
              state_board::dir::group);
      if (arrive) {
        check_signatures(g, d, st.signature);
        // Every rank of the ring reads the same flags: the next all_reduce on d
        // decides the same (engine.hpp program_of).
        if (note_unmapped_) in_.unmapped_buffers()[d] = g.any_unmapped();
      }
    }
    return true;  // sync_kind::none
  }

  // Ranks whose ranges differ passed different counts (or types, or roots): every
  // rank of the ring sees that, and throws.
  void check_signatures(const access_group& g, std::size_t d, std::size_t n) {
    if (const std::size_t j = g.mismatch(); j < g.size())
      throw transport_error(std::string("mdring::") + name_ + ": rank " + std::to_string(dims_[d].members[j]) +
                                " works on " + std::to_string(g.signature(j) / 64) + " elements of " +
                                std::to_string(g.signature(j) % 64) + " bytes in dimension " + std::to_string(d) +
                                " where rank " + std::to_string(c_.rank()) + " works on " + std::to_string(n) + " of " +
                                std::to_string(sizeof(T) % 64) +
                                ": the ranks passed different counts, types or roots to the same collective",
                            0);
  }

  // " (host NAME)" where the transport knows the peer's host (UCX: from its world).
  std::string on_host(std::size_t peer) const {
    if constexpr (requires { tr_.peer_host(peer); }) {
      const std::string h = tr_.peer_host(peer);
      if (!h.empty()) return " (host " + h + ")";
    }
    return {};
  }

  // Throws the error a failed wait means: timeout_error naming the peer, or
  // remote_error naming the rank that failed.
  [[noreturn]] void raise(const wait_status& st, phase ph, std::size_t d, std::size_t step, std::size_t peer,
                          const char* waiting_for, state_board::dir dir) {
    if (st.kind == wait_status::timeout) {
      in_.board().waiting_on((long long)peer, dir);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.3g", std::chrono::duration<double>(c_.get_options().timeout).count());
      const std::string what = std::string("mdring::") + name_ + ": timed out after " + secs + " s in dimension " +
                               std::to_string(d) + " (" + dims_[d].link.name + ":" + std::to_string(dims_[d].extent) +
                               "), " + std::string(to_string(ph)) + " step " + std::to_string(step) +
                               ", waiting for rank " + std::to_string(peer) + on_host(peer) + waiting_for +
                               std::to_string(c_.rank()) + " (" + tr_.name() + " transport)";
      throw timeout_error(what, name_, d, std::string(to_string(ph)), step, peer);
    }
    throw remote_error(std::string("mdring::") + name_ + ": rank " + std::to_string(st.failed_rank) +
                           on_host(st.failed_rank) + " failed, so rank " + std::to_string(c_.rank()) +
                           " stopped waiting in dimension " + std::to_string(d) + ", " + std::string(to_string(ph)) +
                           " step " + std::to_string(step) + ": " + st.reason,
                       st.failed_rank);
  }

  deadline_clock::time_point deadline() const { return deadline_clock::now() + c_.get_options().timeout; }

  Comm& c_;
  internals<Comm> in_;  // the communicator's per-call state (collective/communicator.hpp)
  transport_t& tr_;
  host_reducer<T, Op> red_;
  const char* name_;
  std::vector<typename internals<Comm>::dim_state>& dims_;
  const std::vector<std::size_t>& ext_;
  const std::vector<std::size_t>& coords_;
  request_t* reqs_;
  std::vector<typename internals<Comm>::request_info>& infos_;
  std::size_t per_slot_;
  bool commutative_;
  buffers buf_;
  // all_reduce between processes (engine.hpp program_of, stream_in): this call's
  // buffers are ones the peers cannot map (published at every arrive), and whether
  // the call notes what its ranks published, for the next call to decide on.
  bool unmapped_ = false, note_unmapped_ = false;
};

}  // namespace detail

MDRING_NAMESPACE_END
