// mdring/transport/ipc_window.hpp: the host side of the GPU path's IPC transport
// (cuda/ipc.cuh), in plain C++ so that it is tested without a GPU.
//
// The processes of a node-local GPU dimension read each other's device buffers in
// place, through CUDA IPC mappings. Two things must cross between them for that:
//
//   1. Where the buffers are, once per step that touches them (the host, when it
//      enqueues the step): each rank publishes the allocations its buffers live in
//      (an IPC handle, the allocation's id, an offset into it) in its slot of a
//      node shared-memory segment, then waits until every peer has published the
//      same step, and maps what it has not mapped yet (cached per allocation id).
//      The publications of a rank alternate between two entries, by parity: a rank
//      publishes step k + 1 only after it has read every peer's step k, so a peer's
//      entry for step k stays put while it is read. A peer that failed (its slot's
//      `failed` word) or whose process ended is noticed while waiting.
//
//   2. When the data are ready, on the GPU, stream-ordered (barrier_ops below):
//      flags in device memory, written into the peers' flag words and waited on
//      by stream memory operations, so that nothing waits on the host and a call
//      can be captured into a CUDA graph. A barrier with parity q (barriers
//      alternate 0, 1, 0, ...) is
//
//        for each peer j: write 1 to j's flag[q][me]
//        for each peer j: wait until my flag[q][j] == 1, then write 0 to it
//
//      Fixed values (1, then 0) make a captured graph replay correctly, and the
//      parity makes it safe: a peer signals my flag[q][j] again only for barrier
//      b + 2, after passing b + 1, which needs my signal of b + 1, which my stream
//      writes after it has reset flag[q][j] for b. That holds across calls only if
//      every call has an even number of barriers (each stage that waits has a
//      second barrier at its end), so that every call, eager or replayed from a
//      graph, starts at parity 0.
//
// Example, 2 ranks, all_reduce of 10 elements by shared access: both publish
// (sendbuf, recvbuf) at the reduce-scatter step's arrive (publication 1), map each
// other's, barrier (parity 0), fold their block from both sendbufs into both
// recvbufs, barrier (parity 1) at the all-gather step's leave. Publication 2 goes
// to entry 0 again.
// Tests: tests/test_ipc_window.cpp (the protocol on threads, replayed like graphs).
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "node_window.hpp"
#include "p2p_mailbox.hpp"
#include "shared_access.hpp"
#include "transport.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// ---- the flag protocol (2. above) -------------------------------------------------
// One stream memory operation of a barrier: write `value` into peer `peer`'s flag
// word `index` (write_peer), wait until this rank's own word `index` equals
// `value` (wait_own), or write `value` into it (write_own).
struct flag_op {
  enum kind_t : std::uint8_t { write_peer, wait_own, write_own } kind = write_peer;
  std::uint32_t peer = 0;
  std::uint32_t index = 0;  // into the [2][p] flag words
  std::uint32_t value = 0;
};

// Flag word of (parity q, member j) in a [2][p] array.
constexpr std::uint32_t flag_index(std::size_t p, std::size_t q, std::size_t j) noexcept {
  return std::uint32_t(q * p + j);
}

// The operations of barrier number `barrier` (0-based, within the call: parity
// barrier % 2) of member `me` of p, appended to out (see the top).
inline void barrier_ops(std::size_t p, std::size_t me, std::size_t barrier, std::vector<flag_op>& out) {
  const std::size_t q = barrier % 2;
  for (std::size_t j = 0; j < p; ++j)
    if (j != me) out.push_back({flag_op::write_peer, std::uint32_t(j), flag_index(p, q, me), 1});
  for (std::size_t j = 0; j < p; ++j)
    if (j != me) {
      out.push_back({flag_op::wait_own, std::uint32_t(j), flag_index(p, q, j), 1});
      out.push_back({flag_op::write_own, std::uint32_t(j), flag_index(p, q, j), 0});
    }
}

// ---- publications (1. above) ---------------------------------------------------------
// An allocation's CUDA IPC handle (cudaIpcMemHandle_t: 64 opaque bytes).
struct ipc_handle_bytes {
  unsigned char bytes[64];
};

// An allocation a rank publishes: peers map it once, by (rank, id), and reach any
// address in it as their mapping + offset. `base` is its address in the owner's
// process: a new allocation over the range of a mapped one means that one was
// freed, and its mapping must be closed before the new one opens (CUDA refuses,
// or returns the stale mapping, otherwise).
struct ipc_allocation {
  std::uint64_t id = 0;     // unique in the owner's process for its lifetime (CUDA's buffer id)
  std::uint64_t bytes = 0;  // its size
  std::uint64_t base = 0;   // its address in the owner's process
  ipc_handle_bytes handle{};
};

// An address in a publication: allocation `allocation` (1-based index into the
// publication's table; 0: none), `offset` bytes in.
struct ipc_pointer {
  std::uint32_t allocation = 0;
  std::uint32_t unused = 0;
  std::uint64_t offset = 0;
};

// A message of a step (transfers between the ranks of the dimension): `bytes` at
// `at`, for the rank at coordinate `peer`, which copies them into its own buffer.
struct ipc_message {
  std::uint32_t peer = 0;
  std::uint32_t unused = 0;
  ipc_pointer at;
  std::uint64_t bytes = 0;
};

inline constexpr std::size_t ipc_max_allocations = 6;
inline constexpr std::size_t ipc_max_ranks = 64;

struct ipc_publication {
  enum kind_t : std::uint32_t { none, arrive, messages } kind = none;
  std::uint32_t allocations = 0, messages_count = 0, unused = 0;
  std::uint64_t signature = 0;  // what the step works on: peers compare it
  ipc_pointer src, dst;         // arrive: the published source and destination
  ipc_allocation alloc[ipc_max_allocations];
  ipc_message msg[ipc_max_ranks];
};

// One rank's slot in the node segment; only its owner writes it (but `failed`).
struct alignas(64) ipc_slot {
  std::atomic<std::uint32_t> published{0};  // publications so far
  std::atomic<std::uint32_t> failed{0};     // this rank failed: peers stop waiting for it
  std::int64_t pid = 0;
  char reason[176] = {};     // why it failed
  ipc_publication entry[2];  // by parity of the publication number
};

// Builds one publication: add() returns the ipc_pointer of an address given as
// (allocation, offset), reusing the table entry of an allocation already added.
class publication_builder {
public:
  explicit publication_builder(ipc_publication& p) : p_(p) {
    p_.allocations = 0;
    p_.messages_count = 0;
    p_.src = p_.dst = {};
  }
  ipc_pointer add(const ipc_allocation& a, std::uint64_t offset) {
    for (std::uint32_t i = 0; i < p_.allocations; ++i)
      if (p_.alloc[i].id == a.id) return {i + 1, 0, offset};
    if (p_.allocations == ipc_max_allocations)
      throw transport_error("mdring::cuda: a step's buffers lie in more than " + std::to_string(ipc_max_allocations) +
                                " allocations (an internal error)",
                            0);
    p_.alloc[p_.allocations++] = a;
    return {p_.allocations, 0, offset};
  }
  void message(std::size_t peer, ipc_pointer at, std::uint64_t bytes) {
    if (p_.messages_count == ipc_max_ranks)
      throw transport_error(
          "mdring::cuda: a step has more than " + std::to_string(ipc_max_ranks) + " messages (an internal error)", 0);
    p_.msg[p_.messages_count++] = {std::uint32_t(peer), 0, at, bytes};
  }

private:
  ipc_publication& p_;
};

using p2p_note = p2p_note_of<ipc_allocation>;
using p2p_box = p2p_box_of<p2p_note>;

// The node segment of one dimension: a slot per member, and with p2p a mailbox
// per ordered pair of members (p2p_mailbox.hpp).
class ipc_window {
public:
  using note_type = p2p_note;  ///< what post() and take() carry
  ipc_window() = default;
  ipc_window(ipc_window&&) noexcept = default;
  ipc_window& operator=(ipc_window&&) noexcept = default;

  // Collective over the members (ex.all_gather, as node_window's). Returns false
  // on every member when they do not all run on this node or the segment could
  // not be made (then nothing is left behind). p2p: with the mailboxes.
  template <class Exchange>
  bool open(Exchange& ex, std::size_t p, std::size_t me, bool p2p = false) {
    if (p == 0 || p > ipc_max_ranks || me >= p) return false;
    auto pids = node_pids(ex, p);
    if (!pids) return false;
    int ok = segment_.open(ex, p, me, p * sizeof(ipc_slot) + (p2p ? p * p * sizeof(p2p_box) : 0));
    if (ok) {
      make_slot(slot_at(me))->pid = (*pids)[me];
      for (std::size_t j = 0; j < p && p2p; ++j) make_box(box_at(p, j, me));  // the boxes this rank receives in
    }
    std::vector<int> all(p);
    ex.all_gather(&ok, sizeof ok, all.data());
    for (int v : all)
      if (!v) return segment_.close(), false;
    segment_.unlink();
    p_ = p, me_ = me, seq_ = 0, p2p_ = p2p;
    pids_ = std::move(*pids);
    posted_.assign(p2p ? p : 0, 0);
    taken_.assign(p2p ? p : 0, 0);
    return true;
  }
  bool is_open() const noexcept { return segment_.data() != nullptr; }
  std::size_t size() const noexcept { return p_; }
  std::size_t index() const noexcept { return me_; }
  long pid(std::size_t j) const noexcept { return pids_[j]; }

  // The entry this rank fills for its next publication.
  ipc_publication& next() noexcept { return slot_at(me_)->entry[(seq_ + 1) % 2]; }
  // Publishes next() (release: peers that see the count see the entry).
  void publish() noexcept {
    ++seq_;
    slot_at(me_)->published.store(seq_, std::memory_order_release);
  }
  // Member j's entry for this rank's latest publication (after wait()).
  const ipc_publication& entry(std::size_t j) const noexcept { return slot_at(j)->entry[seq_ % 2]; }
  std::uint32_t sequence() const noexcept { return seq_; }

  // Waits until every peer has published as often as this rank. A peer that
  // failed or whose process ended: peer_failed (failed_rank is its index); at the
  // deadline: timeout (index: the first peer that had not published).
  wait_status wait(deadline_clock::time_point deadline) const {
    for (std::size_t j = 0; j < p_; ++j) {
      if (j == me_) continue;
      const ipc_slot& s = *slot_at(j);
      const wait_status st =
          wait_until(j, deadline, [&] { return reached(s.published.load(std::memory_order_acquire), seq_); });
      if (st.kind != wait_status::done) return st;
    }
    return wait_status::ok();
  }

  // ---- point to point (open with p2p; p2p_mailbox.hpp) ----------------------------------
  bool has_p2p() const noexcept { return p2p_; }
  // Posts the next note to member `to` (waits while p2p_depth notes are not taken:
  // timeout or peer_failed as wait()).
  wait_status post(std::size_t to, const p2p_note& n, deadline_clock::time_point deadline) {
    p2p_box& b = *box_at(p_, me_, to);
    const std::uint32_t k = posted_[to];
    const wait_status st = wait_until(
        to, deadline, [&] { return std::uint32_t(k - b.taken.load(std::memory_order_acquire)) < p2p_depth; });
    if (st.kind != wait_status::done) return st;
    b.note[k % p2p_depth] = n;
    b.posted.store(posted_[to] = k + 1, std::memory_order_release);
    return st;
  }
  // Takes the next note from member `from` into n (waits until it is posted).
  wait_status take(std::size_t from, p2p_note& n, deadline_clock::time_point deadline) {
    p2p_box& b = *box_at(p_, from, me_);
    const std::uint32_t k = taken_[from];
    const wait_status st = wait_until(from, deadline, [&] { return b.posted.load(std::memory_order_acquire) != k; });
    if (st.kind != wait_status::done) return st;
    n = b.note[k % p2p_depth];
    b.taken.store(taken_[from] = k + 1, std::memory_order_release);
    return st;
  }

  // A peer that said it failed, or whose process ended; else done.
  wait_status failure() const {
    for (std::size_t j = 0; j < p_; ++j) {
      if (j == me_) continue;
      const ipc_slot& s = *slot_at(j);
      if (s.failed.load(std::memory_order_acquire))  // (a relayed reason: received_failure decodes it)
        return wait_status{wait_status::peer_failed, 0, j, std::string(s.reason, strnlen(s.reason, sizeof s.reason))};
      if (pids_[j] > 0 && process_gone(pids_[j]))
        return wait_status{wait_status::peer_failed, 0, j, "its process ended"};
    }
    return wait_status::ok();
  }

  // This rank failed: its peers stop waiting for it (their wait() says why).
  void fail(const std::string& why) noexcept {
    if (!is_open()) return;
    ipc_slot& s = *slot_at(me_);
    if (s.failed.load(std::memory_order_relaxed)) return;
    std::snprintf(s.reason, sizeof s.reason, "%s", why.c_str());
    s.failed.store(1, std::memory_order_release);
  }

private:
  // Spins, then yields, then sleeps until ready(); member j is the one waited for
  // (named at the deadline); any peer's failure ends the wait, and so does this
  // rank's own (fail() from another thread: an abort).
  template <class Ready>
  wait_status wait_until(std::size_t j, deadline_clock::time_point deadline, Ready&& ready) const {
    unsigned spins = 0;
    while (!ready()) {
      if (++spins < 512) {
        MDRING_CPU_RELAX();
        continue;
      }
      if ((spins & 63) == 0) {
        if (auto st = failure(); st.kind != wait_status::done) return st;
        if (const ipc_slot& own = *slot_at(me_); own.failed.load(std::memory_order_acquire))  // (an abort elsewhere)
          return wait_status{wait_status::peer_failed, 0, me_,
                             std::string(own.reason, strnlen(own.reason, sizeof own.reason))};
        if (deadline_clock::now() >= deadline) return wait_status{wait_status::timeout, j, 0, {}};
      }
      if (spins < 4096) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return wait_status::ok();
  }
  // Outside the template open() (nvcc and placement new of an over-aligned type).
  static ipc_slot* make_slot(void* where) { return new (where) ipc_slot{}; }
  static p2p_box* make_box(void* where) { return new (where) p2p_box{}; }
  ipc_slot* slot_at(std::size_t j) const noexcept {
    return reinterpret_cast<ipc_slot*>(static_cast<char*>(segment_.data()) + j * sizeof(ipc_slot));
  }
  // The mailbox (from -> to), after the p slots.
  p2p_box* box_at(std::size_t p, std::size_t from, std::size_t to) const noexcept {
    return reinterpret_cast<p2p_box*>(static_cast<char*>(segment_.data()) + p * sizeof(ipc_slot) +
                                      (from * p + to) * sizeof(p2p_box));
  }
  shared_segment segment_;
  std::size_t p_ = 0, me_ = 0;
  std::uint32_t seq_ = 0;
  bool p2p_ = false;
  std::vector<long> pids_;
  std::vector<std::uint32_t> posted_, taken_;  // this rank's counts per peer (p2p)
};

}  // namespace detail

MDRING_NAMESPACE_END
