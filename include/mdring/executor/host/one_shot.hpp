// mdring/executor/host/one_shot.hpp: a small call in one step over node memory
// (plan/one_shot.hpp says when).
//
// The communicator's flat channel: an access group (transport/shared_access.hpp)
// over all its ranks, opened at bind where they all share a node. Each rank's two
// staging buffers are laid out as two data buffers and a ring of slots of a few
// cache lines (one_shot_layout). A call is one stage s of the channel:
//
//   0. a rank makes sure that what it is about to write has been read: its slot
//      s % ring was last written at stage s - ring, its data buffer s % 2 at the
//      stage the workspace noted, and a rank has read a stage once it has arrived
//      at the next one (the ranks' arrive words, looked at again only when the
//      last look does not suffice);
//   1. a rank that gives data copies it into its slot's first line (up to 48 bytes),
//      the slot's other lines (up to 448) or a data buffer, writes the line's
//      signature (the collective, count, element size and root) and stage, and
//      bumps its arrive word; a rank that gives none arrives at once;
//   2. it waits until the lines it reads say s (a short spin, then the owner's
//      arrive word, with sleeps), checks each one's signature and that none has
//      broken (a failure in an earlier call marks its lines), and
//   3. reads them: all_reduce, all_gather, reduce_scatter every rank's; broadcast
//      the root's (the root reads none); reduce: the root every other rank's (the
//      others read none).
//
// A streamed broadcast or reduce (plan/one_shot.hpp: above the cap, up to
// tune.one_shot_stream_max_bytes) is a run of such stages s, s + 1, ..., each
// carrying the next cap's worth of elements under the whole call's signature: a
// giver writes step k + 1 into its other data buffer while the readers read step k
// (step 0 makes it wait until they have), so the two copies overlap.
//
// By default every rank waits for every rank's line, rooted calls too, so that a
// peer that failed or passed other arguments reaches every rank in the call, as with
// the programs. With options::eager_rooted (and local checks) the root of a
// broadcast and the leaves of a reduce wait for no line: they return as soon as
// their data is in node memory, as MPI's eager path does, and can run up to ring - 1
// calls (data in the slot) or one call (data in a buffer) ahead of the slowest
// reader; what they do not read reaches them at their next call that waits (the
// readers find it in this call). Waits spin, then yield, then sleep on the peer's
// futex, with the communicator's deadline from the moment spinning stops, watching
// for a peer's failure (the transport's shared_failure) and writing the hang
// report's waiting line.
#pragma once

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../plan/one_shot.hpp"
#include "../../transport/shared_access.hpp"
#include "core.hpp"
#include "local_ops.hpp"
#include "one_shot_layout.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <transport Transport>
class one_shot {
public:
  // A call of `name` on binding b (whose flat channel exists), elements of elem_size
  // bytes folded by ops.
  one_shot(const host_binding<Transport>& b, const char* name, step_ops<Transport>& ops, std::size_t elem_size) noexcept
      : b_(b), name_(name), ops_(ops), elem_(elem_size) {}
  one_shot(const one_shot&) = delete;
  one_shot& operator=(const one_shot&) = delete;

  // This rank's communicator broke: all its lines say so (see peer_broke).
  static void mark_failed(const host_binding<Transport>& b) noexcept {
    if (!b.flat) return;
    access_group& g = b.transport.group(*b.flat);
    const one_shot_layout l(g.staging_bytes());
    auto* lines = reinterpret_cast<one_shot_line*>(g.region(g.index()) + l.ring_offset());
    for (std::size_t i = 0; i < l.ring; ++i) lines[i * l.slot_lines].failed.store(1, std::memory_order_seq_cst);
  }
  // The bytes a call can publish (a data buffer's: one_shot_layout).
  static std::size_t capacity(std::size_t staging) noexcept { return one_shot_layout(staging).data; }
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
    for (;;) {
      if (step_ == 0) {
        if (!free_to_write(block)) return false;
        publish();
        step_ = 1;
      }
      if (step_ == 1) {
        if (!arrivals(block)) return false;
        finish();
        step_ = 2;
        b_.board.step_done(bytes_);
        ++steps_done_;
      }
      if (done_ + n_ == count_) return true;
      done_ += n_;  // streamed: the next step
      begin_step();
    }
  }
  std::uint64_t progress() const noexcept { return 2 * steps_done_ + std::uint64_t(step_); }

private:
  access_group& group() const noexcept { return b_.transport.group(*b_.flat); }
  std::size_t me() const noexcept { return b_.layout.rank; }
  std::size_t ranks() const noexcept { return b_.layout.size; }

  void take(collective kind, const void* send, void* recv, std::size_t count, std::size_t root) {
    kind_ = kind, send_ = send, recv_ = recv, count_ = count, root_ = root;
    done_ = 0, steps_done_ = 0;
    if (!available(b_)) return;
    layout_ = one_shot_layout(group().staging_bytes());
    const one_shot_call c{kind, count, elem_, ranks(), root};
    taken_ = one_shot_applies(c, b_.opts, layout_.data, b_.layout.written_extents);
    std::size_t stream_limit = stream_limit_of_options;
    if (!taken_ && b_.workspace.streams().armed()) {  // (bind left streaming to the calls: timed)
      // (a call that applies only under the limit as bound is one that streams)
      const std::size_t asked = b_.workspace.streams().requested();
      if (one_shot_applies(c, b_.opts, layout_.data, b_.layout.written_extents, asked)) {
        taken_ = streams_by_timing(c);
        stream_limit = asked;
      }
    }
    b_.workspace.note_one_shot(taken_);
    if (!taken_) return;
    step_count_ = one_shot_step_count(c, b_.opts, layout_.data, stream_limit);
    waits_all_ = !b_.opts.eager_rooted || b_.opts.checks == check_level::collective ||
                 (kind != collective::broadcast && kind != collective::reduce);
    b_.board.begin_program((count + step_count_ - 1) / step_count_);
    begin_step();
  }

  // A broadcast or reduce that would stream but for bind's distance: its size class
  // streams or not as its first calls' times say (plan/stream_choice.hpp); the call
  // after the trials first exchanges them. A trial is left pending for the caller
  // to time (collective/launch.hpp call_runner).
  bool streams_by_timing(const one_shot_call& c) {
    stream_choice& ch = b_.workspace.streams();
    const std::size_t slot = stream_choice::slot_of(c.kind, one_shot_bytes(c));
    if (ch.must_agree(slot)) exchange_times(slot);
    return ch.begin(slot) == stream_choice::way::stream;
  }
  // Every rank's least times of slot's trials (program, streamed) over node memory,
  // a one-shot all_gather of 16 bytes per rank that waits for every rank (a failure
  // or the deadline throw, as in any call), and the decision all ranks make from them.
  MDRING_COLD void exchange_times(std::size_t slot) {
    stream_choice& ch = b_.workspace.streams();
    std::uint64_t mine[2], all[2 * access_group::max_ranks];
    ch.times(slot, mine);
    // (a failure names what waited: "mdring::reduce (exchanging its first calls' times): ...")
    one_shot x(b_,
               kind_ == collective::broadcast ? "broadcast (exchanging its first calls' times)"
                                              : "reduce (exchanging its first calls' times)",
               ops_, sizeof(std::uint64_t));
    x.take(collective::all_gather, mine, all, 2, 0);
    if (!x.taken()) return ch.decide(slot, nullptr, 0);  // (a cap under 16 bytes: the programs)
    x.run(true);
    ch.decide(slot, all, ranks());
  }

  // The next step of the call (the only one unless streamed: plan/one_shot.hpp):
  // elements [done_, done_ + n_), stage s of the flat channel.
  void begin_step() noexcept {
    n_ = count_ - done_ < step_count_ ? count_ - done_ : step_count_;
    bytes_ = one_shot_bytes({kind_, n_, elem_, ranks(), root_});
    s_ = group().sequence() + 1;
    first_line_ = (s_ & (layout_.ring - 1)) * layout_.slot_lines;
    b_.workspace.note_one_shot_stage();
    step_ = 0;
    deadline_ = {};  // (each step's waits have the whole timeout, as a program's steps do)
    waits_on_ = std::size_t(-1);
  }
  // This step's part of the caller's buffers (a step's elements are the call's at done_).
  const void* send_part() const noexcept { return static_cast<const char*>(send_) + done_ * elem_; }
  void* recv_part() const noexcept { return static_cast<char*>(recv_) + done_ * elem_; }

  // Whether this rank gives data in this call, and reads rank j's.
  bool gives() const noexcept {
    if (kind_ == collective::broadcast) return me() == root_;
    if (kind_ == collective::reduce) return me() != root_;
    return true;
  }

  // Whether this rank reads rank j's line in this call (every rank's unless an eager
  // rooted call: see the top).
  bool reads(std::size_t j) const noexcept {
    if (waits_all_) return true;
    return kind_ == collective::broadcast ? j == root_ : me() == root_;
  }

  // Step 0: every rank has read what this rank last wrote where it writes now (see
  // the top): its line at s - ring, its data buffer at the stage the workspace
  // noted. The stage the workspace last saw every peer at suffices, or each peer's
  // arrive word is read (and waited for).
  bool free_to_write(bool block) {
    auto& ws = b_.workspace;
    // (the first ring stages find their lines unwritten: one_shot_stages counts this one)
    std::uint32_t need =
        ws.one_shot_stages() > layout_.ring ? s_ - std::uint32_t(layout_.ring - 1) : ws.one_shot_peers();
    if (!in_line() && gives())
      if (const std::uint32_t last = ws.one_shot_buffer(s_ % 2); last != 0 && !reached(need, last + 1)) need = last + 1;
    if (reached(ws.one_shot_peers(), need)) return true;
    access_group& g = group();
    std::uint32_t least = s_;
    for (std::size_t j = 0; j < ranks(); ++j) {
      if (j == me()) continue;
      std::uint32_t at = g.slot(j).arrive.load(std::memory_order_acquire);
      if (!reached(at, need)) {
        if (!wait_for(j, need, nullptr, block, " to read the data of an earlier call of rank ")) return false;
        at = g.slot(j).arrive.load(std::memory_order_acquire);
      }
      if (!reached(at, least)) least = at;
    }
    ws.note_one_shot_peers(least);
    return true;
  }

  // Step 2: every rank this one reads has arrived at s, with this call's signature, unbroken.
  bool arrivals(bool block) {
    for (std::size_t j = 0; j < ranks(); ++j) {
      if (j == me() || !reads(j)) continue;
      if (!wait_for(j, s_, &line(j).stage, block, " to arrive at the call with rank ")) return false;
      const one_shot_line& l = line(j);
      // A line of this stage with other arguments first: its owner may have broken
      // since, on finding this very mismatch, and the mismatch is what every rank names.
      if (l.signature != signature()) mismatch(j);
      if (l.failed.load(std::memory_order_acquire)) peer_broke(j);
    }
    if (waits_all_) b_.workspace.note_one_shot_peers(s_);  // every peer has arrived at s
    return true;
  }

  // The data fit in the slot (its line, and the lines after it).
  bool in_line() const noexcept { return bytes_ <= layout_.slot_bytes(); }
  // Rank j's line of stage s, and where its data is: the line's payload and on, or a data buffer.
  one_shot_line& line(std::size_t j) const noexcept {
    return reinterpret_cast<one_shot_line*>(group().region(j) + layout_.ring_offset())[first_line_];
  }
  unsigned char* buffer(std::size_t j) const noexcept { return group().region(j) + (s_ % 2) * layout_.data; }
  void* data_of(std::size_t j) const noexcept {
    if (bytes_ <= one_shot_line::payload) return line(j).data;
    return in_line() ? static_cast<void*>(&line(j) + 1) : static_cast<void*>(buffer(j));
  }

  std::uint64_t signature() const noexcept {
    return std::uint64_t(count_) | std::uint64_t(elem_ & 0xff) << 32 | std::uint64_t(root_ & 0xffff) << 40 |
           std::uint64_t(kind_) << 56;
  }

  // Rank j has arrived at stage seq: `stage` (its line's word, else null) says so at
  // once or after a short spin, else when block its arrive word is waited for (a
  // peer's failure or the deadline throw, the message naming what was waited for).
  bool wait_for(std::size_t j, std::uint32_t seq, const std::atomic<std::uint32_t>* stage, bool block,
                const char* what) {
    access_group& g = group();
    const std::atomic<std::uint32_t>& word = stage ? *stage : g.slot(j).arrive;
    auto there = [&] {
      const std::uint32_t v = word.load(std::memory_order_acquire);
      return stage ? v == seq : reached(v, seq);
    };
    for (unsigned i = 0; i < g.spins(); ++i) {
      if (there()) return true;
      MDRING_CPU_RELAX();
    }
    if (there()) return true;
    auto failed = [&] { return b_.transport.shared_failure(); };
    auto started = [&]() -> deadline_clock::time_point {  // the deadline runs from the first wait
      if (deadline_ == deadline_clock::time_point{}) deadline_ = deadline_clock::now() + b_.opts.timeout;
      if (waits_on_ != j) {  // the hang report names the rank waited for now
        b_.board.waiting(0, int(phase_of()), steps_done_, (long long)j, state_board::dir::group, bytes_, deadline_);
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
    one_shot_line& l = line(me());
    if (gives()) {
      std::memcpy(data_of(me()), send_part(), bytes_);
      if (!in_line()) b_.workspace.note_one_shot_buffer(s_ % 2, s_);
    }
    l.signature = signature();
    l.stage.store(s_, std::memory_order_release);
    g.arrive_signed(signature());
  }

  // Step 3: read the givers' buffers.
  void finish() {
    const std::size_t p = ranks(), n = n_, e = elem_;
    void* const recv = recv_part();
    switch (kind_) {
      case collective::broadcast:
        if (me() != root_) std::memcpy(recv, data_of(root_), n * e);
        return;
      case collective::all_gather:
        for (std::size_t j = 0; j < p; ++j) std::memcpy(static_cast<char*>(recv) + j * n * e, data_of(j), n * e);
        return;
      case collective::all_reduce:
      case collective::reduce_scatter:
      case collective::reduce: {
        if (kind_ == collective::reduce && me() != root_) return;
        const void* in[access_group::max_ranks];
        const std::size_t off = kind_ == collective::reduce_scatter ? me() * n * e : 0;
        for (std::size_t j = 0; j < p; ++j)
          in[j] = j == me() && kind_ == collective::reduce ? send_part() : static_cast<const char*>(data_of(j)) + off;
        fold_all_near(ops_, recv, in, p, me(), n, e, nest());
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
  // (a streamed one's step k from 0) of dimension 0 as the hang report shows it, over
  // every rank of the node.
  [[noreturn]] MDRING_COLD void raise(const wait_status& st, std::size_t j, const char* waiting_for) {
    if (deadline_ == deadline_clock::time_point{}) {  // failed before any wait (a peer's line said so)
      deadline_ = deadline_clock::now() + b_.opts.timeout;
      b_.board.waiting(0, int(phase_of()), steps_done_, (long long)j, state_board::dir::group, bytes_, deadline_);
    }
    const std::string where = " in dimension 0 (one-shot over node memory, all " + std::to_string(ranks()) +
                              " ranks), " + std::string(to_string(phase_of())) + " step " + std::to_string(steps_done_);
    if (st.kind == wait_status::timeout) {
      b_.board.waiting_on((long long)j, state_board::dir::group);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.3g", std::chrono::duration<double>(b_.opts.timeout).count());
      throw timeout_error(std::string("mdring::") + name_ + ": timed out after " + secs + " s" + where +
                              ", waiting for rank " + std::to_string(j) + waiting_for + std::to_string(me()) + " (" +
                              b_.transport.name() + " transport)",
                          name_, 0, std::string(to_string(phase_of())), steps_done_, j);
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
  // Streamed (plan/one_shot.hpp): the elements a step carries, the elements of the
  // step under way, and those of the steps before it; steps completed.
  std::size_t step_count_ = 0, n_ = 0, done_ = 0;
  std::uint64_t steps_done_ = 0;
  std::uint32_t s_ = 0;
  one_shot_layout layout_{0};
  std::size_t first_line_ = 0;  // the line of slot s % ring in a rank's region
  int step_ = 0;
  bool taken_ = false, waits_all_ = true;
  deadline_clock::time_point deadline_{};
  std::size_t waits_on_ = std::size_t(-1);
  std::size_t nest_[host_reducer<int, sum_t>::max_nest] = {};
};

}  // namespace detail

MDRING_NAMESPACE_END
