// mdring/executor/host/core.hpp: what every stage of the host executor stands on.
//
// The host executor runs a collective's stages on one rank (the "engine"). It is
// written once against the transport concept and split by what each part does,
// each part a class deriving from the one before (so a stage's code reads the
// shared state and helpers by name):
//
//   core.hpp           engine_core: the call's state (communicator, transport,
//                      reducer, request slots, scratch), posting and waiting for
//                      messages with a deadline, block ranges, scratch sizes
//   shared_stages.hpp  shared_stages: the direct stages of ranks that read and
//                      write each other's buffers (threads, processes of a node)
//   stages.hpp         stages: the message stages, ring and direct, and the
//                      scatter / gather / unpack stages of the other collectives
//   segments.hpp       segment_executor: all_reduce cut into pipelined segments
//   engine.hpp         engine: the five collectives, composed of the above
//
// Every wait goes through wait_or_yield (executor/progress.hpp), so the same code
// runs blocking on the caller's thread and resumably on a fiber.
//
// The engine is written once against the transport concept. A stage is a few
// nonblocking sends and receives on one dimension's channel, one wait with a
// deadline, and one fused reduction pass. Buffer roles:
//
//   src   where the rank's own contributions are read (the user's sendbuf in the
//         first stage; reduce_scatter reads it through a block permutation, below)
//   mid   a buffer covering the whole range of the stage, where a ring keeps its
//         partial results (all_reduce uses recvbuf itself: no scratch for them)
//   out   where the rank's fully reduced block goes
//   R0/R1 two scratch blocks: the receive buffer, and the ring's partial results
//         when there is no mid (double-buffered, so a block can be sent while the
//         next one arrives)
//   Q     p-1 receive slots for the direct algorithm
//   W     the rank's share after the first stage, when recvbuf cannot hold it
//
// Block order. The stages cut the buffer in nested order: stage 0 splits it into
// p0 blocks and rank c keeps block c0, stage 1 splits that, and so on. So the rank
// at coordinates (c0, c1, ...) ends with nested block q = ((c0 p1 + c1) p2 + c2)...,
// while MPI's reduce_scatter and all_gather put block r at rank r. With two or more
// non-trivial dimensions the engine therefore reads reduce_scatter's sendbuf and
// writes all_gather's recvbuf through that permutation (rank-sized runs, no extra
// pass); with one non-trivial dimension the two orders coincide.
#pragma once

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../options.hpp"
#include "../../plan/blocks.hpp"
#include "../../plan/cost.hpp"
#include "../../plan/halving_doubling.hpp"
#include "../../plan/pipeline.hpp"
#include "../../reduce/host.hpp"
#include "../../transport/shared_access.hpp"
#include "../../transport/transport.hpp"
#include "../progress.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Scratch regions are aligned to cache lines.
inline constexpr std::size_t scratch_alignment = 64;

// Element x of the nested order lives at ptr + (x - origin), or, when permuted,
// block q = x / blk lives at rank rank_of_nested(q)'s position.
template <class T>
struct view {
  T* ptr = nullptr;
  std::size_t origin = 0;
  std::size_t blk = 0;  // elements per rank block, when permuted
  bool permuted = false;
  std::span<const std::size_t> extents{};

  // f(pointer, offset relative to lo, length) for each contiguous piece of [lo, lo+n).
  template <class F>
  void runs(std::size_t lo, std::size_t n, F&& f) const {
    if (n == 0) return;
    if (!permuted) return f(ptr + (lo - origin), std::size_t(0), n);
    std::size_t x = lo;
    const std::size_t end = lo + n;
    while (x < end) {
      const std::size_t q = x / blk, off = x % blk;
      const std::size_t len = blk - off < end - x ? blk - off : end - x;
      f(ptr + rank_of_nested(q, extents) * blk + off, x - lo, len);
      x += len;
    }
  }
  bool contiguous() const noexcept { return !permuted; }
  // The address logical element 0 would have (an integer: it may lie outside the
  // buffer). Ranks publish it, so that the same element has the same offset from
  // it in every rank's view, whatever buffer and origin each rank uses.
  std::uintptr_t base_address() const noexcept {
    return reinterpret_cast<std::uintptr_t>(ptr) - (permuted ? 0 : origin * sizeof(T));
  }
  T* at(std::size_t x) const noexcept { return ptr + (x - origin); }
};

// Scratch sizes in elements, one region each, 64-byte aligned.
struct scratch_sizes {
  std::size_t r = 0;     // R0 (and R1 when two_r)
  bool two_r = false;
  std::size_t q = 0;     // Q
  std::size_t pack = 0;  // packing permuted blocks for direct sends
  std::size_t w = 0;     // W
};

inline std::size_t align_up(std::size_t bytes) {
  return (bytes + scratch_alignment - 1) / scratch_alignment * scratch_alignment;
}

template <class T, class Op, class Comm>
class engine_core {
public:
  using transport_t = typename Comm::transport_type;

  engine_core(Comm& c, const char* name, Op op, bool commutative)
      : c_(c), tr_(c.get_transport()), red_(op, c.size()), name_(name), dims_(c.dims()),
        ext_(c.executed_extents()), coords_(c.executed_coordinates()), reqs_(c.requests()), infos_(c.request_infos()),
        commutative_(commutative) {}

  // ---- messages -------------------------------------------------------------

  // 15 bits (MPI guarantees tags up to 32767): the segment (mod 8, at most 8 in
  // flight), the phase, and the step (mod 1024; a segment's steps in one stage
  // follow each other, so equal tags never meet).
  int tag_of(phase ph, std::size_t step) const {
    return int((seg_ % 8) << 12) | (int(ph) << 10) | int(step & 0x3ff);
  }

  void post_recv(std::size_t d, T* p, std::size_t n, std::size_t peer_coord, phase ph, std::size_t step) {
    if (n == 0) return;
    infos_[base_ + nreq_] = {d, dims_[d].members[peer_coord], false};
    tr_.irecv(dims_[d].ch, p, n * sizeof(T), peer_coord, tag_of(ph, step), reqs_[base_ + nreq_++]);
  }
  void post_send(std::size_t d, const T* p, std::size_t n, std::size_t peer_coord, phase ph, std::size_t step) {
    if (n == 0) return;
    infos_[base_ + nreq_] = {d, dims_[d].members[peer_coord], true};
    tr_.isend(dims_[d].ch, p, n * sizeof(T), peer_coord, tag_of(ph, step), reqs_[base_ + nreq_++]);
  }

  // Waits for the requests posted since the last wait (of the current segment).
  void wait(phase ph, std::size_t d, std::size_t step) {
    if (nreq_ == 0) return;
    std::span<typename transport_t::request> rs(reqs_ + base_, nreq_);
    const auto deadline = deadline_clock::now() + c_.get_options().timeout;
    wait_status st;
    try {
      st = wait_or_yield(deadline, [&](deadline_clock::time_point dl) { return tr_.wait_all(rs, dl); },
                         [&] { return tr_.wait_all(rs, deadline_clock::time_point{}); });
    } catch (...) {
      tr_.cancel_all(rs);
      nreq_ = 0;
      throw;
    }
    if (st.kind == wait_status::done) {
      nreq_ = 0;
      return;
    }
    tr_.cancel_all(rs);
    nreq_ = 0;
    const auto& info = infos_[base_ + st.index];
    raise(st, ph, st.kind == wait_status::timeout ? info.dim : d, step, info.peer,
          info.is_send ? " to receive what rank " : " to send to rank ");
  }

  // Throws the error a failed wait means: timeout_error naming the peer, or
  // remote_error naming the rank that failed.
  [[noreturn]] void raise(const wait_status& st, phase ph, std::size_t d, std::size_t step, std::size_t peer,
                          const char* waiting_for) {
    if (st.kind == wait_status::timeout) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.3g", std::chrono::duration<double>(c_.get_options().timeout).count());
      const std::string what = std::string("mdring::") + name_ + ": timed out after " + secs + " s in dimension " +
                               std::to_string(d) + " (" + dims_[d].link.name + ":" + std::to_string(dims_[d].extent) +
                               "), " + std::string(to_string(ph)) + " step " + std::to_string(step) +
                               ", waiting for rank " + std::to_string(peer) + waiting_for + std::to_string(c_.rank()) +
                               " (" + tr_.name() + " transport)";
      throw timeout_error(what, name_, d, std::string(to_string(ph)), step, peer);
    }
    throw remote_error(std::string("mdring::") + name_ + ": rank " + std::to_string(st.failed_rank) +
                           " failed, so rank " + std::to_string(c_.rank()) + " stopped waiting in dimension " +
                           std::to_string(d) + ", " + std::string(to_string(ph)) + " step " + std::to_string(step) +
                           ": " + st.reason,
                       st.failed_rank);
  }

  deadline_clock::time_point deadline() const { return deadline_clock::now() + c_.get_options().timeout; }

  // ---- shared access: ranks of a node read and write each other's buffers ------

  static constexpr bool has_shared_access = shared_access_transport<transport_t>;

  // Dimension d runs its direct stages through shared access instead of messages.
  bool shared(std::size_t d) {
    if constexpr (has_shared_access)
      return algo(d) == algorithm::direct && tr_.shared(dims_[d].ch);
    else
      return false;
  }

  // Elements per piece when peers' data must be copied in (processes): small
  // enough that the p-1 pieces and the output stay in L2 while they are folded.
  static constexpr std::size_t piece = (std::size_t(256) << 10) / sizeof(T);

  // The algorithm dimension d runs in this call (choose_algorithms).
  algorithm algo(std::size_t d) const { return c_.algorithm_slots()[d]; }
  // Dimension d runs the direct algorithm (for this op).
  bool direct(std::size_t d) const { return algo(d) == algorithm::direct; }
  bool halving_doubling(std::size_t d) const { return algo(d) == algorithm::halving_doubling; }

  // ---- helpers --------------------------------------------------------------

  // A pointer to elements [lo, lo+n) of src, packing them into `scratch` if src is permuted.
  const T* contiguous_or_pack(const view<const T>& src, std::size_t lo, std::size_t n, T* scratch) {
    if (src.contiguous()) return src.at(lo);
    src.runs(lo, n, [&](const T* p, std::size_t rel, std::size_t len) { std::memcpy(scratch + rel, p, len * sizeof(T)); });
    return scratch;
  }

  // What this call of n elements (the whole buffer the stages cut up) runs in each
  // dimension: the bind-time algorithm for the op, with automatic rings refined
  // for the size (plan/pipeline.hpp call_algorithms). Every collective starts here.
  void choose_algorithms(std::size_t n) {
    auto& al = c_.algorithm_slots();
    for (std::size_t d = 0; d < dims_.size(); ++d) al[d] = dims_[d].algo_for(commutative_);
    call_algorithms(ext_, [&](std::size_t d) -> const link_info& { return dims_[d].rank_link; },
                    c_.requested_algorithms(), al, n, sizeof(T), c_.get_options().tune);
  }
  // The call's algorithms and stage ranges for n elements.
  std::vector<block_range>& ranges(std::size_t n) {
    choose_algorithms(n);
    auto& rg = c_.range_slots();
    stage_ranges(n, ext_, coords_, rg);
    return rg;
  }
  std::vector<std::size_t>& root_coords(std::size_t root) {
    auto& rc = c_.root_coordinates();
    to_coordinates(root, ext_, rc);
    return rc;
  }
  // This rank takes part in the scatter/gather of dimension d: its coordinates
  // above d equal the root's.
  bool line_of_root(std::size_t d, const std::vector<std::size_t>& rc) const {
    for (std::size_t e = d + 1; e < ext_.size(); ++e)
      if (coords_[e] != rc[e]) return false;
    return true;
  }
  int first_dim() const {
    for (std::size_t d = 0; d < ext_.size(); ++d)
      if (ext_[d] > 1) return int(d);
    return -1;
  }
  int last_dim() const {
    for (std::size_t d = ext_.size(); d-- > 0;)
      if (ext_[d] > 1) return int(d);
    return -1;
  }
  std::size_t nontrivial_dims() const {
    std::size_t k = 0;
    for (auto e : ext_) k += e > 1;
    return k;
  }

  // Scratch for the reduce-scatter half. mid-less first stage when `need_w`
  // (reduce_scatter, non-root reduce) or when the source is permuted.
  // Q elements a direct stage of dimension d needs on a range of n elements:
  // p-1 receive blocks, or p-1 pieces for shared access between processes, or
  // nothing when threads read their peers' buffers in place.
  std::size_t direct_slots(std::size_t d, std::size_t n) {
    if (shared(d)) return transport_t::same_address_space ? 0 : (ext_[d] - 1) * piece;
    return (ext_[d] - 1) * max_block(n, ext_[d]);
  }

  // Scratch for the reduce-scatter half. The first stage has no mid buffer for
  // reduce_scatter and a non-root reduce (need_w: its result goes to W).
  scratch_sizes sizes_rs(std::size_t n, bool permuted, bool first_has_mid, bool need_w) {
    scratch_sizes s;
    const int first = first_dim();
    if (first < 0) return s;
    auto& rg = c_.range_slots();
    const std::size_t mb1 = max_block(rg[first].count, ext_[first]);
    // Without a mid buffer the ring double-buffers its partials; a permuted source
    // packs its first send into R1.
    s.two_r = !first_has_mid || permuted;
    if (need_w) s.w = mb1;
    for (std::size_t d = std::size_t(first); d < ext_.size(); ++d) {
      if (ext_[d] == 1) continue;
      if (direct(d)) {
        const std::size_t slots = direct_slots(d, rg[d].count);
        s.q = slots > s.q ? slots : s.q;
        if (permuted && int(d) == first && !shared(d)) s.pack = slots;
      } else if (halving_doubling(d)) {
        // R0 receives up to the whole range, R1 holds the partials without mid.
        s.r = rg[d].count > s.r ? rg[d].count : s.r;
        s.two_r = true;
      } else {
        const std::size_t mb = max_block(rg[d].count, ext_[d]);
        s.r = mb > s.r ? mb : s.r;
      }
    }
    (void)n;
    return s;
  }
  scratch_sizes sizes_ag(std::size_t n, bool permuted) {
    scratch_sizes s;
    const int first = first_dim();
    if (first < 0 || !permuted) return s;
    auto& rg = c_.range_slots();
    const std::size_t mb1 = max_block(rg[first].count, ext_[first]);
    s.w = mb1;
    s.two_r = true;
    if (halving_doubling(std::size_t(first))) s.r = rg[first].count;  // the range, gathered before unpacking
    else if (!direct(std::size_t(first))) s.r = mb1;
    else if (!shared(std::size_t(first))) s.q = (ext_[first] - 1) * mb1;
    (void)n;
    return s;
  }
  static std::size_t total_bytes(const scratch_sizes& s) {
    return (s.two_r ? 2 : 1) * align_up(s.r * sizeof(T)) + align_up(s.q * sizeof(T)) + align_up(s.pack * sizeof(T)) +
           align_up(s.w * sizeof(T));
  }
  void reserve(std::size_t, const scratch_sizes& s) {
    auto* base = static_cast<unsigned char*>(c_.scratch().get(total_bytes(s)));
    auto take = [&](std::size_t elems) {
      T* p = reinterpret_cast<T*>(base);
      base += align_up(elems * sizeof(T));
      return p;
    };
    R_[0] = take(s.r);
    R_[1] = s.two_r ? take(s.r) : nullptr;
    Q_ = take(s.q);
    P_ = take(s.pack);
    W_ = take(s.w);
  }

  Comm& c_;
  transport_t& tr_;
  host_reducer<T, Op> red_;
  const char* name_;
  std::vector<typename Comm::dim_state>& dims_;
  const std::vector<std::size_t>& ext_;
  const std::vector<std::size_t>& coords_;
  typename transport_t::request* reqs_;
  std::vector<typename Comm::request_info>& infos_;
  bool commutative_;
  std::size_t nreq_ = 0;   // requests posted by the current segment
  std::size_t base_ = 0;   // its first request slot
  std::size_t seg_ = 0;    // its index (in the tags)
  T* slots_ = nullptr;     // the pipeline's receive slots
  std::size_t slot_stride_ = 0;
  std::size_t w_lo_ = 0;
  T* R_[2] = {nullptr, nullptr};
  T* Q_ = nullptr;
  T* P_ = nullptr;
  T* W_ = nullptr;
};

}  // namespace detail

MDRING_NAMESPACE_END
