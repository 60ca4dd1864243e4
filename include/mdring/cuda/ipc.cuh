// mdring/cuda/ipc.cuh: the ipc transport of the GPU path: the processes of one
// node read each other's device buffers in place, through CUDA IPC.
//
// A dimension on a GPU link (nvlink, pcie) whose ranks are processes of one node
// runs its direct stages by shared access, as the host path does between the
// processes of a node (plan/build_stages.hpp shared_rs, fused_rs): the fold of a
// rank's block reads every peer's source where it lies, and all_reduce's last such
// dimension writes the folded block straight into every peer's recvbuf (one fused
// pass, cuda/reduce.cuh with several outputs). Nothing is copied into a receive
// slot before it is folded, and nothing goes through host memory. Stages of at
// most staging_bytes go through each rank's staging buffer instead (copy in, then
// every rank folds the whole range from the peers' staging: all_reduce's one-shot,
// with no host exchange at all). Other stages (rings, trees, broadcast's scatter,
// reduce's gather) move messages: the receiver copies from the sender's buffer.
//
// Per link, made once at bind (open(), collective over the dimension):
//   - a node segment with a slot per rank (transport/ipc_window.hpp), where the
//     host publishes which allocations a step's buffers are in;
//   - a control block in device memory per rank: [2][p] flag words and two
//     staging buffers, exported by CUDA IPC and mapped by every peer.
// Per step that touches peers' buffers:
//   - the host publishes this rank's buffers (IPC handle, allocation id, offset),
//     waits until every peer has published the same step (deadline; a peer that
//     failed or died ends the wait), and maps each peer allocation the first time
//     it sees it (cached by allocation id: a pointer into a caching allocator's
//     block maps the block once, as NCCL's buffer registration does);
//   - the stream waits for the peers (a flag barrier of stream memory operations,
//     ipc_window.hpp), then the folds or copies read the peers' memory, then a
//     second barrier before anyone touches those buffers again.
// All of it is enqueued: the call returns once its work is on the stream, and it
// can be captured into a CUDA graph (the flags' values are the same every call).
// Point-to-point messages (p2p(), NCCL's send and receive) are pulled the same way,
// pair by pair: a mailbox note says where the data lie, flag words when they are
// ready and when read (transport/p2p_mailbox.hpp).
// A buffer that CUDA IPC cannot share (cudaMallocAsync pools, managed memory,
// VMM allocations made without an IPC handle type) is refused with
// invalid_argument naming the collective.
#pragma once

#include "../collective/communicator_base.hpp"
#include "../error.hpp"
#include "../options.hpp"
#include "../plan/bound_layout.hpp"
#include "../plan/merge.hpp"
#include "../topology/runtime.hpp"
#include "../transport/device_select.hpp"
#include "../transport/ipc_window.hpp"
#include "config.cuh"
#include "driver.cuh"
#include "engine.cuh"
#include "ipc_memory.cuh"

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace cuda {

namespace detail {

// The layout of a rank's control block: the flag words (the barriers' [2][p], then
// point to point's ready[p] and done[p]: transport/p2p_mailbox.hpp), then two
// staging buffers.
inline std::size_t ipc_flags_bytes(std::size_t p) {
  return (mdring::detail::p2p_flag_words(p) * sizeof(std::uint32_t) + 255) / 256 * 256;
}

}  // namespace detail

/// A message of ipc_link::p2p (transport/p2p_mailbox.hpp): `bytes` at `ptr` to (a send) or from (a receive)
/// member `peer`, enqueued on `stream`.
///@{
using p2p_send = mdring::detail::p2p_message<const void*, cudaStream_t>;
using p2p_recv = mdring::detail::p2p_message<void*, cudaStream_t>;
///@}

/// The link of one dimension whose ranks are processes of one node: CUDA IPC (see the top).
class ipc_link {
public:
  /// Every rank of the dimension takes part in every step that moves messages,
  /// even one with nothing to send or receive (the steps are barriers).
  static constexpr bool collective_steps = true;

  ipc_link() = default;
  /// Movable, not copyable.
  ///@{
  ipc_link(ipc_link&&) noexcept = default;
  ipc_link& operator=(ipc_link&&) noexcept = default;
  ///@}
  ~ipc_link() = default;

  /// Collective over the dimension's ranks (ex.all_gather(mine, bytes, all), by
  /// coordinate). members: their global ranks (errors name them); me: this rank's
  /// coordinate; staging_bytes: each staging buffer's size. Returns a link that is
  /// not open() on every rank when they are not all on this node, or when CUDA IPC
  /// does not work between them (any rank's failure makes every rank's answer no).
  /// p2p: with the mailboxes of point-to-point messages (p2p()).
  template <class Exchange>
  static ipc_link open(Exchange& ex, std::span<const std::size_t> members, std::size_t me, std::size_t staging_bytes,
                       std::string* why_not = nullptr, bool p2p = false) {
    ipc_link l;
    auto st = std::make_unique<state>();
    const std::size_t p = members.size();
    if (!st->window.open(ex, p, me, p2p)) {
      if (why_not) *why_not = "its ranks are not processes of one node";
      return l;
    }
    st->p = p, st->me = me;
    st->members.assign(members.begin(), members.end());
    st->staging = staging_bytes;
    /// The control block: allocated, zeroed and exported here; mapped by the peers.
    struct msg {
      int ok;
      cudaIpcMemHandle_t h;
    } mine{0, {}};
    std::string err;
    try {
      const std::size_t bytes = detail::ipc_flags_bytes(p) + 2 * staging_bytes;
      detail::check(cudaMalloc(&st->own, bytes), "cudaMalloc");
      detail::check(cudaMemset(st->own, 0, bytes), "cudaMemset");
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      detail::check(cudaIpcGetMemHandle(&mine.h, st->own), "cudaIpcGetMemHandle");
      (void)detail::require_driver();
      mine.ok = 1;
    } catch (const std::exception& e) {
      err = e.what();
    }
    std::vector<msg> all(p);
    ex.all_gather(&mine, sizeof mine, all.data());
    int ok = 1;
    for (const auto& m : all) ok &= m.ok;
    st->peer_block.assign(p, nullptr);
    st->peer_block[me] = static_cast<char*>(st->own);
    for (std::size_t j = 0; j < p && ok; ++j) {
      if (j == me) continue;
      void* q = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&q, all[j].h, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ok = 0;
        err =
            "cudaIpcOpenMemHandle of rank " + std::to_string(members[j]) + "'s control block: " + detail::error_text(e);
        break;
      }
      st->peer_block[j] = static_cast<char*>(q);
    }
    std::vector<int> oks(p);
    ex.all_gather(&ok, sizeof ok, oks.data());
    for (int v : oks) ok &= v;
    if (!ok) {
      if (why_not)
        *why_not = err.empty() ? "CUDA IPC failed on another rank of the dimension" : "CUDA IPC failed: " + err;
      return l;  // state's destructor closes and frees what was opened
    }
    st->src.assign(p, nullptr);
    st->dst.assign(p, nullptr);
    st->stg.assign(p, nullptr);
    l.s_ = std::move(st);
    return l;
  }

  bool is_open() const noexcept { return s_ != nullptr; }  ///< open() succeeded
  bool capturable() const noexcept { return true; }        ///< its steps can be captured into a CUDA graph
  /// Bytes per staging buffer (0 when not open).
  std::size_t staging_bytes() const noexcept { return s_ ? s_->staging : 0; }
  std::size_t size() const noexcept { return s_ ? s_->p : 0; }  ///< ranks of the dimension (0 when not open)
  /// Peer allocations mapped so far (tests: a repeated call maps nothing new).
  std::size_t mappings() const noexcept { return s_ ? s_->maps.count() : 0; }

  // ---- messages (pull): see the top --------------------------------------------------
  /// Enqueues one step's messages on `stream`: each receiver copies from its sender's buffer (see the top).
  void exchange(std::span<const device_message> sends, std::span<const device_message> recvs, cudaStream_t stream,
                const step_context& cx) {
    state& s = *s_;
    const bool cap = detail::capturing(stream);
    auto& pub = s.window.next();
    mdring::detail::publication_builder b(pub);
    pub.kind = mdring::detail::ipc_publication::messages;
    pub.signature = std::uint64_t(cx.ph) << 32 | std::uint64_t(cx.step);
    for (const auto& m : sends) {
      std::uint64_t off = 0;
      const auto a = s.exports.find(m.ptr, off, "a send buffer");
      b.message(m.peer, b.add(a, off), m.bytes);
    }
    publish_and_wait(cx);
    barrier(stream);  // every peer's data is ready, and this rank's receive buffers are free
    for (const auto& m : recvs) {
      const auto& e = s.window.entry(m.peer);
      const mdring::detail::ipc_message* found = nullptr;
      for (std::uint32_t i = 0; i < e.messages_count; ++i)
        if (e.msg[i].peer == s.me) found = &e.msg[i];
      if (!found || found->bytes != m.bytes || e.signature != pub.signature)
        throw transport_error(cx.where() + ": rank " + std::to_string(s.members[m.peer]) + " sends " +
                                  (found ? std::to_string(found->bytes) + " bytes" : std::string("nothing")) +
                                  " where this rank expects " + std::to_string(m.bytes) +
                                  " (the ranks run different programs: different counts or types?)",
                              0);
      const char* from = resolve(m.peer, e, found->at, cap);
      detail::check(cudaMemcpyAsync(m.ptr, from, m.bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    }
    barrier(stream);  // every peer has read what this rank sent
  }

  // ---- point to point: transport/p2p_mailbox.hpp ------------------------------------------
  /// One rank's part of a group of point-to-point messages, each on its own stream:
  /// the k-th send to a peer meets that peer's k-th receive from this rank (in this
  /// group or a later one). Returns once they are enqueued, having waited on the host
  /// only for the notes of what it receives (and for a receiver that has not taken
  /// p2p_depth earlier sends). A size that differs from the send's is invalid_argument
  /// naming "count" on the receiver (the sender's stream is still released). Any
  /// failure is announced to the peers (their waits on this rank end), then thrown.
  void p2p(std::span<const p2p_send> sends, std::span<const p2p_recv> recvs, const step_context& cx) {
    if (!s_->window.has_p2p())
      throw communicator_error(cx.where() + ": this link was opened without point-to-point mailboxes");
    std::vector<std::uint32_t> to(sends.size()), from(recvs.size());
    for (std::size_t i = 0; i < sends.size(); ++i) to[i] = std::uint32_t(sends[i].peer);
    for (std::size_t i = 0; i < recvs.size(); ++i) from[i] = std::uint32_t(recvs[i].peer);
    const auto plan = mdring::detail::p2p_schedule(s_->p, s_->me, to, from);  // (refused: nothing enqueued)
    try {
      enqueue_p2p(plan, sends, recvs, cx);
    } catch (const std::exception& e) {
      s_->window.fail(e.what());
      throw;
    }
  }

  // ---- shared access --------------------------------------------------------------------
  /// Shared access: publishes this rank's src and dst for the step and enqueues the wait for every peer's (see the
  /// top).
  void arrive(const void* src, const void* dst, std::uint64_t signature, cudaStream_t stream, const step_context& cx) {
    state& s = *s_;
    ++s.arrived;
    if (src || dst) {  // in place: publish, map the peers'
      const bool cap = detail::capturing(stream);
      auto& pub = s.window.next();
      mdring::detail::publication_builder b(pub);
      pub.kind = mdring::detail::ipc_publication::arrive;
      pub.signature = signature;
      // (find() sets the offset: it must run before the offset is read, in its own statement)
      std::uint64_t off = 0;
      if (src) {
        const auto a = s.exports.find(src, off, "sendbuf");
        pub.src = b.add(a, off);
      }
      if (dst) {
        const auto a = s.exports.find(dst, off, "recvbuf");
        pub.dst = b.add(a, off);
      }
      publish_and_wait(cx);
      for (std::size_t j = 0; j < s.p; ++j) {
        const auto& e = s.window.entry(j);
        if (e.signature != signature || e.kind != pub.kind)
          throw invalid_argument("count", cx.where() + ": rank " + std::to_string(s.members[j]) +
                                              " works on a different count or element type in this stage (" +
                                              std::to_string(e.signature / 64) + " elements against " +
                                              std::to_string(signature / 64) + " here)");
        s.src[j] = j == s.me ? src : (e.src.allocation ? resolve(j, e, e.src, cap) : nullptr);
        s.dst[j] = j == s.me ? const_cast<void*>(dst) : (e.dst.allocation ? resolve(j, e, e.dst, cap) : nullptr);
      }
      s.pending_leave = true;
    } else {  // staged: the peers' staging buffers of this stage
      for (std::size_t j = 0; j < s.p; ++j) s.stg[j] = staging_of(j, s.arrived);
      s.pending_staged = true;
    }
    barrier(stream);
  }
  /// Shared access: enqueues the barrier after which the peers' buffers are free again.
  void leave(cudaStream_t stream, const step_context&) {
    s_->pending_leave = false;
    barrier(stream);
  }
  /// A staged stage has no leave step: its second barrier goes here, so that every
  /// stage (and so every call) has an even number of barriers (ipc_window.hpp).
  void stage_end(cudaStream_t stream, const step_context&) {
    if (!s_->pending_staged) return;
    s_->pending_staged = false;
    barrier(stream);
  }
  /// Where the peers' published buffers and staging are, for the folds.
  const detail::remote_view* view() {
    state& s = *s_;
    s.rv.src = s.src.data();
    s.rv.dst = s.dst.data();
    s.rv.staging = s.stg.data();
    s.rv.staging_next = staging_of(s.me, s.arrived + 1);
    return &s.rv;
  }
  /// Barriers so far, modulo 2 (0 between calls).
  std::size_t barrier_parity() const noexcept { return s_ ? s_->barriers % 2 : 0; }
  /// At the end of every call: an odd count of barriers gets one more, on every
  /// rank alike (they run the same steps), so the next call starts at parity 0.
  void finish(cudaStream_t stream) {
    if (s_ && s_->barriers % 2) barrier(stream);
  }

  /// This rank failed: peers waiting on the host for it stop (remote_error).
  void abort(const std::string& why) noexcept {
    if (s_) s_->window.fail(why);
  }

private:
  struct state {
    mdring::detail::ipc_window window;
    std::size_t p = 0, me = 0, staging = 0;
    std::vector<std::size_t> members;
    void* own = nullptr;            // this rank's control block
    std::vector<char*> peer_block;  // every rank's control block, mapped here
    detail::ipc_exports exports;
    detail::ipc_mappings maps;
    std::vector<const void*> src;
    std::vector<void*> dst, stg;
    detail::remote_view rv;
    std::size_t arrived = 0, barriers = 0;
    bool pending_staged = false, pending_leave = false;
    std::vector<mdring::detail::flag_op> ops;
    cudaEvent_t p2p_done = nullptr;  // the end of the last point-to-point group (p2p_device)
    cudaStream_t p2p_last = nullptr;
    bool p2p_marked = false;

    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      if (own) cudaDeviceSynchronize();  // no work of ours still writes the peers' flags or reads ours
      for (std::size_t j = 0; j < peer_block.size(); ++j)
        if (j != me && peer_block[j]) cudaIpcCloseMemHandle(peer_block[j]);
      if (p2p_done) cudaEventDestroy(p2p_done);
      if (own) cudaFree(own);
    }
  };

  // p2p_enqueue's device: CUDA's (transport/p2p_mailbox.hpp).
  struct p2p_device {
    ipc_link& l;
    const step_context& cx;
    mdring::detail::ipc_allocation export_of(const void* p, std::uint64_t& offset) {
      return l.s_->exports.find(p, offset, "sendbuff");
    }
    char* map(std::size_t peer, const mdring::detail::ipc_allocation& a) {
      return l.s_->maps.map(l.s_->window.pid(peer), a);
    }
    void flags(cudaStream_t s, const std::vector<mdring::detail::flag_op>& ops) {
      l.s_->ops = ops;
      l.run_ops(s);
    }
    void copy(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
      detail::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync (a message)");
    }
    void join(cudaStream_t before, cudaStream_t after) { ipc_link::join(before, after); }
    // The previous group's end, as an event (its stream may be gone by now); none
    // across a capture (an event recorded outside it cannot be waited on inside).
    void begin_group(cudaStream_t g) {
      state& s = *l.s_;
      if (s.p2p_marked && s.p2p_last != g && !detail::capturing(g))
        detail::check(cudaStreamWaitEvent(g, s.p2p_done, 0), "cudaStreamWaitEvent (the previous point-to-point group)");
    }
    void end_group(cudaStream_t g) {
      state& s = *l.s_;
      s.p2p_marked = false;
      if (detail::capturing(g)) return;
      if (!s.p2p_done)
        detail::check(cudaEventCreateWithFlags(&s.p2p_done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      detail::check(cudaEventRecord(s.p2p_done, g), "cudaEventRecord (a point-to-point group)");
      s.p2p_last = g, s.p2p_marked = true;
    }
    void waited(const wait_status& st, std::size_t peer, const char* what) { l.wait_done(st, cx, peer, what); }
    [[noreturn]] void mismatch(std::size_t peer, std::size_t sent, std::size_t expected) {
      throw l.size_mismatch(cx, peer, sent, expected);
    }
  };
  void enqueue_p2p(const std::vector<mdring::detail::p2p_action>& plan, std::span<const p2p_send> sends,
                   std::span<const p2p_recv> recvs, const step_context& cx) {
    p2p_device dev{*this, cx};
    mdring::detail::p2p_enqueue<mdring::detail::flag_op>(s_->window, s_->p, s_->me, plan, sends, recvs, cx.deadline,
                                                         dev);
  }

  void* staging_of(std::size_t j, std::size_t arrive) const {
    return s_->peer_block[j] + detail::ipc_flags_bytes(s_->p) + (arrive % 2) * s_->staging;
  }
  std::uint32_t* flag(std::size_t j, std::uint32_t index) const {
    return reinterpret_cast<std::uint32_t*>(s_->peer_block[j]) + index;
  }
  void barrier(cudaStream_t stream) {
    state& s = *s_;
    s.ops.clear();
    mdring::detail::barrier_ops(s.p, s.me, s.barriers++, s.ops);
    run_ops(stream);
  }
  // Enqueues s.ops on the stream.
  void run_ops(cudaStream_t stream) {
    state& s = *s_;
    for (const auto& op : s.ops) {
      if (op.kind == mdring::detail::flag_op::write_peer)
        detail::stream_write(stream, flag(op.peer, op.index), op.value);
      else if (op.kind == mdring::detail::flag_op::wait_own)
        detail::stream_wait(stream, flag(s.me, op.index), op.value);
      else detail::stream_write(stream, flag(s.me, op.index), op.value);
    }
  }
  void publish_and_wait(const step_context& cx) {
    state& s = *s_;
    s.window.publish();
    wait_done(s.window.wait(cx.deadline), cx, std::size_t(-1), "to reach the same step");
  }
  // Throws what a host wait that did not end done means: a peer's failure, or the
  // deadline, naming member `peer` (-1: the one the wait names) and what it waited for.
  void wait_done(const wait_status& st, const step_context& cx, std::size_t peer, const char* what) {
    state& s = *s_;
    if (st.kind == wait_status::done) return;
    if (st.kind == wait_status::peer_failed) {
      // The window names a member; a relayed failure names the global rank that failed first.
      const wait_status g = received_failure(s.members[st.failed_rank], st.reason);
      throw remote_error(
          cx.where() + ": rank " + std::to_string(g.failed_rank) + " failed, so this rank stopped waiting: " + g.reason,
          g.failed_rank);
    }
    const std::size_t who = s.members[peer == std::size_t(-1) ? st.index : peer];
    throw timeout_error(
        cx.where() + ": timed out waiting for rank " + std::to_string(who) + " " + what + " (ipc transport)",
        cx.collective, cx.dim, std::string(to_string(cx.ph)), cx.step, who);
  }
  invalid_argument size_mismatch(const step_context& cx, std::size_t peer, std::size_t sent, std::size_t expected) {
    return invalid_argument("count", cx.where() + ": rank " + std::to_string(s_->members[peer]) + " sends " +
                                         std::to_string(sent) + " bytes where this rank receives " +
                                         std::to_string(expected) + " (different counts or types?)");
  }
  // Later work on `after` waits for what `before` has enqueued so far (nothing when they are one stream).
  static void join(cudaStream_t before, cudaStream_t after) {
    if (before == after) return;
    cudaEvent_t e = nullptr;
    detail::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    cudaError_t r = cudaEventRecord(e, before);
    if (r == cudaSuccess) r = cudaStreamWaitEvent(after, e, 0);
    (void)cudaEventDestroy(e);
    detail::check(r, "cudaEventRecord / cudaStreamWaitEvent (a message to itself on another stream)");
  }
  char* resolve(std::size_t j, const mdring::detail::ipc_publication& e, const mdring::detail::ipc_pointer& at,
                bool capturing) {
    if (at.allocation == 0 || at.allocation > e.allocations)
      throw transport_error("mdring::cuda: a peer's publication names no allocation (an internal error)", 0);
    (void)capturing;
    return s_->maps.map(s_->window.pid(j), e.alloc[at.allocation - 1]) + at.offset;
  }

  std::unique_ptr<state> s_;
};

}  // namespace cuda

MDRING_NAMESPACE_END
