// mdring/executor/host/one_shot.hpp: a small call in one step over node memory
// (plan/one_shot.hpp says when).
//
// The communicator's flat channel: an access group (transport/shared_access.hpp)
// over all its ranks, opened at bind where they all share a node. A call is one
// stage s of it:
//
//   1. a rank that gives data copies it into its staging buffer of stage s (parity
//      s % 2: into the buffer's first line when it fits, after it otherwise), then
//      writes the line's signature (the collective, count, element size and root)
//      and stage, and bumps its arrive word; a rank that gives none arrives at once;
//   2. it waits until every rank's line says s (a short spin, then its arrive word,
//      with sleeps), checks each one's signature and that none has broken (a
//      failure in an earlier call marks its lines), and
//   3. reads the buffers it needs: all_reduce, all_gather, reduce_scatter every
//      rank's; broadcast the root's (the root reads none); reduce: the root every
//      other rank's (the others read none).
//
// Waiting for every rank, rooted calls too, is what lets a rank reuse its buffer of
// stage s - 2 without a second synchronization (every rank has arrived at s - 1,
// so it has finished s - 2), and what tells every rank of a peer that failed or
// passed other arguments in this very call, as the programs do. Waits spin, then yield, then sleep on the peer's futex,
// with the communicator's deadline from the moment spinning stops, watching for a peer's failure (the transport's
// shared_failure) and writing the hang report's waiting line.
#pragma once

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../plan/one_shot.hpp"
#include "../../transport/shared_access.hpp"
#include "core.hpp"
#include "local_ops.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

MDRING_NAMESPACE_BEGIN

namespace detail {

// The first cache line of each staging buffer of the flat channel: the stage its
// owner has arrived at, with the call's signature and, when they fit, its data. A
// reader waits on this line and finds everything a small call needs in it: one
// cache line moves from writer to reader (the slot's arrive word, which the owner
// also bumps for sleepers, stays in the owner's cache while nobody sleeps). Larger
// data follows the line. Node windows and the threads transport's regions start
// zeroed, and only the one-shot path writes here.
struct alignas(64) one_shot_line {
  static constexpr std::size_t payload = 48;  // bytes of data that fit in the line
  unsigned char data[payload];
  std::uint64_t signature;
  std::atomic<std::uint32_t> stage;
  std::atomic<std::uint32_t> failed;  // the owner's communicator broke
};
static_assert(sizeof(one_shot_line) == 64 && std::atomic<std::uint32_t>::is_always_lock_free);

template <transport Transport>
class one_shot {
public:
  // A call of `name` on binding b (whose flat channel exists), elements of elem_size
  // bytes folded by ops.
  one_shot(const host_binding<Transport>& b, const char* name, step_ops<Transport>& ops, std::size_t elem_size) noexcept
      : b_(b), name_(name), ops_(ops), elem_(elem_size) {}
  one_shot(const one_shot&) = delete;
  one_shot& operator=(const one_shot&) = delete;

  // This rank's communicator broke: both its lines say so (see peer_broke).
  static void mark_failed(const host_binding<Transport>& b) noexcept {
    if (!b.flat) return;
    access_group& g = b.transport.group(*b.flat);
    if (g.staging_bytes() < sizeof(one_shot_line)) return;  // (no call runs one-shot then)
    for (void* at : {g.staging(g.index()), g.next_staging(g.index())})
      static_cast<one_shot_line*>(at)->failed.store(1, std::memory_order_seq_cst);
  }
  // The staging bytes a call can use for its data (the rest is the line).
  static std::size_t capacity(std::size_t staging) noexcept {
    return staging > sizeof(one_shot_line) ? staging - sizeof(one_shot_line) : 0;
  }
  // Whether this communicator can run calls by the one-shot path at all.
  static bool available(const host_binding<Transport>& b) noexcept { return b.flat != nullptr; }
  // A call that cannot take it says so to the workspace (the last call's path).
  static void not_taken(const host_binding<Transport>& b) noexcept { b.workspace.note_one_shot(false); }

  // ---- the engine's five starts; each records the call and takes it if it applies --------
  void start_all_reduce(const void* send, void* recv, std::size_t n) { take(collective::all_reduce, send, recv, n, 0); }
  void start_reduce_scatter(const void* send, void* recv, std::size_t rc) {
    take(collective::reduce_scatter, send, recv, rc, 0);
  }
  void start_all_gather(const void* send, void* recv, std::size_t sc) {
    take(collective::all_gather, send, recv, sc, 0);
  }
  void start_broadcast(void* buf, std::size_t n, std::size_t root) { take(collective::broadcast, buf, buf, n, root); }
  void start_reduce(const void* send, void* recv, std::size_t n, std::size_t root) {
    take(collective::reduce, send, recv, n, root);
  }

  // The call runs here (else the caller runs its program).
  bool taken() const noexcept { return taken_; }
  // Moves the call on: to its end when block, else as far as it goes without
  // waiting; true once done. Throws what a failed wait or a mismatch means.
  bool run(bool block) {
    if (step_ == 0) {
      publish();
      step_ = 1;
    }
    if (step_ == 1) {
      if (!all_arrived(block)) return false;
      finish();
      step_ = 2;
      b_.board.step_done(bytes_);
    }
    return true;
  }
  std::uint64_t progress() const noexcept { return step_; }

private:
  access_group& group() const noexcept { return b_.transport.group(*b_.flat); }
  std::size_t me() const noexcept { return b_.layout.rank; }
  std::size_t ranks() const noexcept { return b_.layout.size; }

  void take(collective kind, const void* send, void* recv, std::size_t count, std::size_t root) {
    kind_ = kind, send_ = send, recv_ = recv, count_ = count, root_ = root;
    if (!available(b_)) return;
    taken_ = one_shot_applies({kind, count, elem_, ranks(), root}, b_.opts, capacity(group().staging_bytes()),
                              b_.layout.written_extents);
    b_.workspace.note_one_shot(taken_);
    if (!taken_) return;
    bytes_ = one_shot_bytes({kind, count, elem_, ranks(), root});
    s_ = group().sequence() + 1;
    b_.board.begin_program(1);
  }

  // Whether this rank gives data in this call, and reads rank j's.
  bool gives() const noexcept {
    if (kind_ == collective::broadcast) return me() == root_;
    if (kind_ == collective::reduce) return me() != root_;
    return true;
  }

  // Step 2: every rank has arrived at s, with this call's signature, unbroken.
  bool all_arrived(bool block) {
    for (std::size_t j = 0; j < ranks(); ++j) {
      if (j == me()) continue;
      if (!arrived(j, block, " to arrive at the call with rank ")) return false;
      const one_shot_line& l = line(j);
      if (l.failed.load(std::memory_order_acquire)) peer_broke(j);
      if (l.signature != signature()) mismatch(j);
    }
    return true;
  }

  // Rank j's line of this stage (after publish), and where its data is.
  one_shot_line& line(std::size_t j) const noexcept { return *static_cast<one_shot_line*>(group().staging(j)); }
  const void* data_of(std::size_t j) const noexcept {
    const one_shot_line& l = line(j);
    return bytes_ <= one_shot_line::payload ? static_cast<const void*>(l.data) : static_cast<const void*>(&l + 1);
  }

  std::uint64_t signature() const noexcept {
    return std::uint64_t(count_) | std::uint64_t(elem_ & 0xff) << 32 | std::uint64_t(root_ & 0xffff) << 40 |
           std::uint64_t(kind_) << 56;
  }

  // Rank j has arrived at s: its line says so at once or after a short spin, else
  // when block waits for its arrive word (a peer's failure or the deadline throw).
  bool arrived(std::size_t j, bool block, const char* what) {
    access_group& g = group();
    const std::uint32_t seq = s_;
    const std::atomic<std::uint32_t>& stage = line(j).stage;
    for (unsigned i = 0; i < g.spins(); ++i) {
      if (stage.load(std::memory_order_acquire) == seq) return true;
      MDRING_CPU_RELAX();
    }
    if (stage.load(std::memory_order_acquire) == seq) return true;
    auto failed = [&] { return b_.transport.shared_failure(); };
    auto started = [&]() -> deadline_clock::time_point {  // the deadline runs from the first wait
      if (deadline_ == deadline_clock::time_point{}) deadline_ = deadline_clock::now() + b_.opts.timeout;
      if (waits_on_ != j) {  // the hang report names the rank waited for now
        b_.board.waiting(0, int(phase_of()), 0, (long long)j, state_board::dir::group, bytes_, deadline_);
        waits_on_ = j;
      }
      return deadline_;
    };
    if (!block) {  // tested: a peer's failure or the deadline end the call, else later
      started();
      if (const wait_status st = failed(); st.kind != wait_status::done) raise(st, j, what);
      if (deadline_clock::now() >= deadline_) raise(wait_status{wait_status::timeout, j, 0, {}}, j, what);
      return false;
    }
    const wait_status st = g.wait_arrive_of(j, seq, started, failed, [](deadline_clock::time_point) {});
    if (st.kind != wait_status::done) raise(st, j, what);
    return true;  // (its line was written before its arrive word)
  }

  // Step 1: this rank's line (and data) of stage s, then its arrive word.
  void publish() {
    access_group& g = group();
    auto& l = *static_cast<one_shot_line*>(g.next_staging(me()));
    if (gives()) std::memcpy(bytes_ <= one_shot_line::payload ? static_cast<void*>(l.data) : &l + 1, send_, bytes_);
    l.signature = signature();
    l.stage.store(s_, std::memory_order_release);
    g.arrive_signed(signature());
  }

  // Step 3: read the givers' buffers.
  void finish() {
    const std::size_t p = ranks(), n = count_, e = elem_;
    switch (kind_) {
      case collective::broadcast:
        if (me() != root_) std::memcpy(recv_, data_of(root_), n * e);
        return;
      case collective::all_gather:
        for (std::size_t j = 0; j < p; ++j) std::memcpy(static_cast<char*>(recv_) + j * n * e, data_of(j), n * e);
        return;
      case collective::all_reduce:
      case collective::reduce_scatter:
      case collective::reduce: {
        if (kind_ == collective::reduce && me() != root_) return;
        const void* in[access_group::max_ranks];
        const std::size_t off = kind_ == collective::reduce_scatter ? me() * n * e : 0;
        for (std::size_t j = 0; j < p; ++j)
          in[j] = j == me() && kind_ == collective::reduce ? send_ : static_cast<const char*>(data_of(j)) + off;
        ops_.fold_all(recv_, in, p, n, nest());
        return;
      }
    }
  }

  static_assert(host_reducer<int, sum_t>::max_nest == 8);  // as one_shot_applies assumes
  // options.reproducible: the written dimensions of more than one rank, innermost
  // first (the contract's nested fold); otherwise none (a flat fold in rank order).
  std::span<const std::size_t> nest() noexcept {
    std::size_t k = 0;
    if (b_.opts.reproducible)
      for (std::size_t e : b_.layout.written_extents)
        if (e > 1 && k < host_reducer<int, sum_t>::max_nest) nest_[k++] = e;
    return {nest_, k >= 2 ? k : 0};
  }

  phase phase_of() const noexcept {
    switch (kind_) {
      case collective::reduce_scatter:
        return phase::reduce_scatter;
      case collective::all_gather:
        return phase::all_gather;
      case collective::broadcast:
        return phase::broadcast;
      case collective::reduce:
        return phase::reduce;
      default:
        return phase::all_reduce;
    }
  }

  // Throws what a failed wait on rank j means (as the engine does: core.hpp raise).
  // The words are the engine's (dimension, phase, step): a one-shot call is step 0
  // of dimension 0 as the hang report shows it, over every rank of the node.
  [[noreturn]] MDRING_COLD void raise(const wait_status& st, std::size_t j, const char* waiting_for) {
    if (deadline_ == deadline_clock::time_point{}) {  // failed before any wait (a peer's line said so)
      deadline_ = deadline_clock::now() + b_.opts.timeout;
      b_.board.waiting(0, int(phase_of()), 0, (long long)j, state_board::dir::group, bytes_, deadline_);
    }
    const std::string where = " in dimension 0 (one-shot over node memory, all " + std::to_string(ranks()) +
                              " ranks), " + std::string(to_string(phase_of())) + " step 0";
    if (st.kind == wait_status::timeout) {
      b_.board.waiting_on((long long)j, state_board::dir::group);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.3g", std::chrono::duration<double>(b_.opts.timeout).count());
      throw timeout_error(std::string("mdring::") + name_ + ": timed out after " + secs + " s" + where +
                              ", waiting for rank " + std::to_string(j) + waiting_for + std::to_string(me()) + " (" +
                              b_.transport.name() + " transport)",
                          name_, 0, std::string(to_string(phase_of())), 0, j);
    }
    throw remote_error(std::string("mdring::") + name_ + ": rank " + std::to_string(st.failed_rank) +
                           " failed, so rank " + std::to_string(me()) + " stopped waiting" + where + ": " + st.reason,
                       st.failed_rank);
  }

  // Rank j published its data but its communicator broke since (a failure it announced
  // too; the transport may know who failed first).
  [[noreturn]] MDRING_COLD void peer_broke(std::size_t j) {
    wait_status st = b_.transport.shared_failure();
    if (st.kind != wait_status::peer_failed)
      st = wait_status{wait_status::peer_failed, j, j, "its communicator is unusable after a failure"};
    raise(st, j, "");
  }

  // Rank j's signature differs: it passed another count, type or root.
  [[noreturn]] MDRING_COLD void mismatch(std::size_t j) {
    const std::uint64_t theirs = line(j).signature;
    throw transport_error(
        std::string("mdring::") + name_ + ": rank " + std::to_string(j) + " works on " +
            std::to_string(theirs & 0xffffffffu) + " elements of " + std::to_string((theirs >> 32) & 0xff) +
            " bytes (root " + std::to_string((theirs >> 40) & 0xffff) + ") where rank " + std::to_string(me()) +
            " works on " + std::to_string(count_) + " of " + std::to_string(elem_) + " (root " + std::to_string(root_) +
            "): the ranks passed different counts, types or roots to the same collective",
        0);
  }

  host_binding<Transport> b_;
  const char* name_;
  step_ops<Transport>& ops_;
  std::size_t elem_;
  collective kind_ = collective::all_reduce;
  const void* send_ = nullptr;
  void* recv_ = nullptr;
  std::size_t count_ = 0, root_ = 0, bytes_ = 0;
  std::uint32_t s_ = 0;
  int step_ = 0;
  bool taken_ = false;
  deadline_clock::time_point deadline_{};
  std::size_t waits_on_ = std::size_t(-1);
  std::size_t nest_[host_reducer<int, sum_t>::max_nest] = {};
};

}  // namespace detail

MDRING_NAMESPACE_END
