// mdring/transport/p2p_mailbox.hpp: point-to-point messages between the processes
// of a node on the GPU path (cuda/ipc.cuh's ipc_link::p2p, which serves ncclSend
// and ncclRecv), the parts that need no GPU, so that they are tested without one.
//
// A send from rank s to rank r is pulled, as the ipc transport's other messages:
// r copies from s's buffer where it lies, through a CUDA IPC mapping. Two things
// cross between them:
//
//   1. Where the data are (host, when the calls are enqueued): s writes a note
//      (the allocation, offset and size of its buffer) into the mailbox (s -> r), a
//      ring of p2p_depth notes in the node segment (ipc_window), and counts it
//      `posted`; r takes the notes in order and counts them `taken`. s waits, on
//      the host, only when p2p_depth notes are not taken yet. The k-th send from s
//      to r so meets r's k-th receive from s, as in NCCL.
//   2. When the data are ready, and when they have been read (GPU, stream-ordered
//      flag words in each rank's control block, after the barrier flags [2][p]):
//
//        s (post):     write 1 to r's ready[s]
//        r (receive):  wait until my ready[s] == 1, write 0 to it, copy from s's
//                      buffer, write 1 to s's done[r]
//        s (complete): wait until my done[r] == 1, write 0 to it
//
//      Fixed values (1, then 0), so that a captured CUDA graph replays correctly.
//      It is safe because a pair has one message in flight at a time: s posts
//      again only after its complete, which follows r's reset of ready[s]; r waits
//      on ready[s] again only after it reset it. That needs each rank's messages in
//      order on one stream: p2p_enqueue runs a group on one stream and each group
//      after the previous one.
//
// A group of sends and receives (ncclGroupStart/End) runs in rounds (p2p_schedule):
// round i posts the i-th send to every peer, then receives the i-th message from
// every peer, then completes the round's sends. Every wait of round i is on a post
// of round i, which waits on nothing, or on a receive of round i, which waits only
// on posts; so a group in which each rank's k-th send to a peer meets that peer's
// k-th receive from it never deadlocks, however its calls are ordered (two ranks
// that each send to the other and then receive, in one group, included). A send
// to this rank itself meets its receive from itself in the same round: a copy.
// p2p_enqueue walks a group's rounds against a Device (what touches memory and
// streams): cuda/ipc.cuh gives it CUDA's, the tests one of host threads.
// Tests: tests/test_p2p_mailbox.cpp (the mailbox, the schedule, and p2p_enqueue on
// host threads standing in for processes and streams, replayed like graphs).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "transport.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// ---- 1. the mailbox ---------------------------------------------------------------------
inline constexpr std::uint32_t p2p_depth = 8;  // notes a sender may post ahead of its receiver

// Where one send's data lie: an allocation of the sender (as ipc_window's
// publications name them), an offset into it, and the size.
template <class Allocation>
struct p2p_note_of {
  Allocation alloc{};
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

// The mailbox (s -> r): `posted` written by s only, `taken` by r only.
template <class Note>
struct alignas(64) p2p_box_of {
  std::atomic<std::uint32_t> posted{0};
  char pad0[60] = {};
  std::atomic<std::uint32_t> taken{0};
  char pad1[60] = {};
  Note note[p2p_depth];
};

// ---- 2. the flags -------------------------------------------------------------------------
// Flag words of the control block after the barriers' [2][p]: ready[from], done[to].
constexpr std::uint32_t p2p_ready_flag(std::size_t p, std::size_t from) noexcept { return std::uint32_t(2 * p + from); }
constexpr std::uint32_t p2p_done_flag(std::size_t p, std::size_t to) noexcept { return std::uint32_t(3 * p + to); }
constexpr std::size_t p2p_flag_words(std::size_t p) noexcept { return 4 * p; }  // barriers and p2p

// The stream memory operations of each part of a message (see the top), appended
// to out. FlagOp is ipc_window.hpp's flag_op.
template <class FlagOp>
void p2p_post_ops(std::size_t p, std::size_t me, std::size_t to, std::vector<FlagOp>& out) {
  out.push_back({FlagOp::write_peer, std::uint32_t(to), p2p_ready_flag(p, me), 1});
}
// Waits until this rank's word `index` is 1 (set by member `peer`), then resets it.
template <class FlagOp>
void p2p_take_flag(std::size_t peer, std::uint32_t index, std::vector<FlagOp>& out) {
  out.push_back({FlagOp::wait_own, std::uint32_t(peer), index, 1});
  out.push_back({FlagOp::write_own, std::uint32_t(peer), index, 0});
}
template <class FlagOp>
void p2p_before_copy_ops(std::size_t p, std::size_t from, std::vector<FlagOp>& out) {
  p2p_take_flag(from, p2p_ready_flag(p, from), out);
}
template <class FlagOp>
void p2p_after_copy_ops(std::size_t p, std::size_t me, std::size_t from, std::vector<FlagOp>& out) {
  out.push_back({FlagOp::write_peer, std::uint32_t(from), p2p_done_flag(p, me), 1});
}
template <class FlagOp>
void p2p_complete_ops(std::size_t p, std::size_t to, std::vector<FlagOp>& out) {
  p2p_take_flag(to, p2p_done_flag(p, to), out);
}

// ---- the rounds of a group -------------------------------------------------------------
// One thing a rank does for a group, in order: post send `send` (to `peer`),
// receive recv `recv` (from `peer`), complete send `send`, or copy send `send`
// into recv `recv` (both with this rank itself).
struct p2p_action {
  enum kind_t : std::uint8_t { post, receive, complete, self_copy } kind = post;
  std::uint32_t peer = 0;
  std::uint32_t send = 0, recv = 0;  // indices into the group's sends and receives
  bool operator==(const p2p_action&) const = default;
};

// The actions of a group whose sends go to send_peers[i] and whose receives come
// from recv_peers[j] (each in call order), for rank `me` of p (see the top).
// A peer outside [0, p), or sends to itself that its receives from itself do not
// match one for one, is invalid_argument naming "peer".
inline std::vector<p2p_action> p2p_schedule(std::size_t p, std::size_t me, std::span<const std::uint32_t> send_peers,
                                            std::span<const std::uint32_t> recv_peers) {
  std::vector<std::vector<std::uint32_t>> sends(p), recvs(p);  // by peer: indices, in call order
  auto sort_in = [&](std::span<const std::uint32_t> peers, std::vector<std::vector<std::uint32_t>>& by,
                     const char* what) {
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (peers[i] >= p)
        throw invalid_argument("peer", std::string("a ") + what + " names peer " + std::to_string(peers[i]) +
                                           " (expected a rank in [0, " + std::to_string(p) + "))");
      by[peers[i]].push_back(std::uint32_t(i));
    }
  };
  sort_in(send_peers, sends, "send");
  sort_in(recv_peers, recvs, "receive");
  if (sends[me].size() != recvs[me].size())
    throw invalid_argument("peer", "rank " + std::to_string(me) + " sends to itself " +
                                       std::to_string(sends[me].size()) + " times but receives from itself " +
                                       std::to_string(recvs[me].size()) +
                                       " times (a send to itself needs its receive in the same group)");
  std::size_t rounds = 0;
  for (std::size_t j = 0; j < p; ++j) rounds = std::max({rounds, sends[j].size(), recvs[j].size()});
  std::vector<p2p_action> out;
  out.reserve(2 * send_peers.size() + recv_peers.size());
  for (std::size_t i = 0; i < rounds; ++i) {
    for (std::size_t j = 0; j < p; ++j)
      if (j != me && i < sends[j].size()) out.push_back({p2p_action::post, std::uint32_t(j), sends[j][i], 0});
    for (std::size_t j = 0; j < p; ++j) {
      if (i >= recvs[j].size()) continue;
      if (j == me) out.push_back({p2p_action::self_copy, std::uint32_t(j), sends[j][i], recvs[j][i]});
      else out.push_back({p2p_action::receive, std::uint32_t(j), 0, recvs[j][i]});
    }
    for (std::size_t j = 0; j < p; ++j)
      if (j != me && i < sends[j].size()) out.push_back({p2p_action::complete, std::uint32_t(j), sends[j][i], 0});
  }
  return out;
}

// One message of a group: `bytes` at `ptr` to (a send) or from (a receive) member
// `peer`, its work enqueued on `stream`.
template <class Pointer, class Stream>
struct p2p_message {
  Pointer ptr = nullptr;  ///< the data (for a send: memory its peers can map)
  std::size_t bytes = 0;  ///< their size
  std::size_t peer = 0;   ///< the member sent to or received from
  Stream stream{};        ///< where the message's work is enqueued
};

// Enqueues member me's part of a group (plan: p2p_schedule of its sends and recvs)
// through mailboxes `w` (ipc_window's post and take) and `dev`, which provides:
//   dev.export_of(ptr, offset&) -> the allocation a send's data lie in (its offset set)
//   dev.map(peer, allocation)   -> where a peer's allocation is mapped here (char*)
//   dev.flags(stream, ops)      -> enqueues flag operations (FlagOp: ipc_window's flag_op)
//   dev.copy(dst, src, bytes, stream), dev.join(before, after): later work on `after`
//                                  waits for what `before` has so far
//   dev.begin_group(stream), dev.end_group(stream): the stream waits for the link's
//                                  previous group (what end_group marked) / marks this one
//   dev.waited(status, peer, what): throws unless the host wait ended done
//   dev.mismatch(peer, sent, expected): throws (a receive whose size is not the send's)
// The whole group runs on one stream, its first message's: the others' work so far
// joins it first and they wait for it after, as NCCL's groups join their streams;
// and it follows the link's previous group. So one pair's messages never run on two
// streams at once, which the flags' fixed values need (see the top). Every send's
// buffer is exported before anything is posted, and a receive of another size is
// thrown only once the whole group is enqueued (its copy left out), so that no
// peer's stream waits for ever on a message this rank gave up on.
template <class FlagOp, class Window, class Send, class Recv, class Device>
void p2p_enqueue(Window& w, std::size_t p, std::size_t me, const std::vector<p2p_action>& plan,
                 std::span<const Send> sends, std::span<const Recv> recvs, deadline_clock::time_point deadline,
                 Device& dev) {
  if (sends.empty() && recvs.empty()) return;
  const auto g = sends.empty() ? recvs[0].stream : sends[0].stream;
  std::vector<decltype(sends[0].stream)> others;
  auto other = [&](auto s) {
    if (s != g && std::find(others.begin(), others.end(), s) == others.end()) others.push_back(s);
  };
  for (const Send& m : sends) other(m.stream);
  for (const Recv& m : recvs) other(m.stream);
  std::vector<typename Window::note_type> notes(sends.size());
  for (std::size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].bytes) notes[i].alloc = dev.export_of(sends[i].ptr, notes[i].offset);
    notes[i].bytes = sends[i].bytes;
  }
  dev.begin_group(g);
  for (const auto& s : others) dev.join(s, g);
  struct bad_size {
    std::size_t peer = 0, sent = 0, expected = 0;
    bool seen = false;
  } bad;
  std::vector<FlagOp> ops;
  for (const p2p_action& a : plan) {
    ops.clear();
    switch (a.kind) {
      case p2p_action::post:
        dev.waited(w.post(a.peer, notes[a.send], deadline), a.peer, "to take this rank's earlier messages");
        p2p_post_ops(p, me, a.peer, ops);
        dev.flags(g, ops);
        break;
      case p2p_action::receive: {
        const Recv& m = recvs[a.recv];
        typename Window::note_type n;
        dev.waited(w.take(a.peer, n, deadline), a.peer, "to send the message this rank receives");
        p2p_before_copy_ops(p, a.peer, ops);
        dev.flags(g, ops);
        if (n.bytes == m.bytes && m.bytes) dev.copy(m.ptr, dev.map(a.peer, n.alloc) + n.offset, m.bytes, g);
        if (n.bytes != m.bytes && !bad.seen) bad = {a.peer, std::size_t(n.bytes), m.bytes, true};
        ops.clear();
        p2p_after_copy_ops(p, me, a.peer, ops);  // also on a mismatch: the sender goes on
        dev.flags(g, ops);
        break;
      }
      case p2p_action::complete:
        p2p_complete_ops(p, a.peer, ops);
        dev.flags(g, ops);
        break;
      case p2p_action::self_copy: {
        const Send& x = sends[a.send];
        const Recv& y = recvs[a.recv];
        if (x.bytes == y.bytes && y.bytes) dev.copy(y.ptr, x.ptr, y.bytes, g);
        if (x.bytes != y.bytes && !bad.seen) bad = {me, x.bytes, y.bytes, true};
        break;
      }
    }
  }
  dev.end_group(g);
  for (const auto& s : others) dev.join(g, s);
  if (bad.seen) dev.mismatch(bad.peer, bad.sent, bad.expected);
}

}  // namespace detail

MDRING_NAMESPACE_END
