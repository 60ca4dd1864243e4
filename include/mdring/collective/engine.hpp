// mdring/collective/engine.hpp: executes the stages of plan.hpp on one rank.
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

#include "../config.hpp"
#include "../error.hpp"
#include "../plan/blocks.hpp"
#include "../plan/cost.hpp"
#include "../reduce/host.hpp"
#include "../executor/progress.hpp"
#include "../transport/shared_access.hpp"
#include "communicator.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

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
  return (bytes + workspace::alignment - 1) / workspace::alignment * workspace::alignment;
}

template <class T, class Op, class Comm>
class engine {
public:
  using transport_t = typename Comm::transport_type;

  engine(Comm& c, const char* name, Op op, bool commutative)
      : c_(c), tr_(c.get_transport()), red_(op, c.size()), name_(name), dims_(c.dims()),
        ext_(c.executed_extents()), coords_(c.executed_coordinates()), reqs_(c.requests()), infos_(c.request_infos()),
        commutative_(commutative) {}

  // ---- the five collectives (arguments already checked) ---------------------

  // all_reduce: the reduce-scatter stages inwards-out, then the all-gathers back,
  // run by the segment executor below (one segment: the stages one after another).
  void all_reduce(const T* send, T* recv, std::size_t n) {
    if (first_dim() < 0) return red_.finalize(recv, send, n, true);
    pipeline pl = pipeline_of(n);
    reserve_pipeline(pl);
    run_pipeline(pl, send, recv);
  }

  void reduce_scatter(const T* send, T* recv, std::size_t rc) {
    const std::size_t n = rc * c_.size();
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (first < 0) return red_.finalize(recv, send, rc, true);
    const bool permuted = nontrivial_dims() > 1;
    reserve(n, sizes_rs(n, permuted, false, first != last));
    view<const T> src{send, 0, rc, permuted, ext_};
    const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
    const std::size_t w_lo = r1.offset + b1.offset;
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
      if (ext_[d] == 1) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      const bool is_last = int(d) == last;
      if (int(d) == first) {
        reduce_scatter_stage(d, r, src, nullptr, is_last ? recv : W_, is_last);
      } else {
        T* mid = W_ + (r.offset - w_lo);
        reduce_scatter_stage(d, r, view<const T>{W_, w_lo}, mid, is_last ? recv : mid + b.offset, is_last);
      }
    }
  }

  void all_gather(const T* send, T* recv, std::size_t sc) {
    const std::size_t n = sc * c_.size();
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (sc == 0) return;
    T* own = recv + c_.rank() * sc;
    if (first < 0) {
      if (send != recv) std::memmove(recv, send, sc * sizeof(T));
      return;
    }
    if (first == last) {  // one ring: nested order is rank order
      if (send != own) std::memcpy(own, send, sc * sizeof(T));
      reserve(n, sizes_ag(n, false));
      all_gather_stage(std::size_t(first), rg[first], recv);
      return;
    }
    reserve(n, sizes_ag(n, true));
    const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
    const std::size_t w_lo = r1.offset + b1.offset;
    const std::size_t q = nested_index(ext_, coords_);
    std::memcpy(W_ + (q * sc - w_lo), send, sc * sizeof(T));
    for (std::size_t d = std::size_t(last); d > std::size_t(first); --d)
      if (ext_[d] > 1) all_gather_stage(d, rg[d], W_ + (rg[d].offset - w_lo));
    all_gather_unpack_stage(std::size_t(first), r1, W_, view<T>{recv, 0, sc, true, ext_});
  }

  void broadcast(T* buf, std::size_t n, std::size_t root) {
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (first < 0) return;
    auto& rc = root_coords(root);
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d)
      if (ext_[d] > 1 && line_of_root(d, rc)) scatter_stage(d, rg[d], buf + rg[d].offset, rc[d]);
    for (std::size_t d = std::size_t(last) + 1; d-- > std::size_t(first);)
      if (ext_[d] > 1) all_gather_stage(d, rg[d], buf + rg[d].offset);
  }

  void reduce(const T* send, T* recv, std::size_t n, std::size_t root) {
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    const bool is_root = c_.rank() == root;
    if (first < 0) return red_.finalize(recv, send, n, true);
    auto& rc = root_coords(root);
    if (is_root) {
      all_reduce_scatter_into(send, recv, n, first, last);
    } else {
      reserve(n, sizes_rs(n, false, false, true));
      const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
      const std::size_t w_lo = r1.offset + b1.offset;
      for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
        if (ext_[d] == 1) continue;
        const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
        if (int(d) == first) {
          reduce_scatter_stage(d, r, view<const T>{send}, nullptr, W_, int(d) == last);
        } else {
          T* mid = W_ + (r.offset - w_lo);
          reduce_scatter_stage(d, r, view<const T>{W_, w_lo}, mid, mid + b.offset, int(d) == last);
        }
      }
      w_lo_ = w_lo;
    }
    for (std::size_t d = std::size_t(last) + 1; d-- > std::size_t(first);) {
      if (ext_[d] == 1 || !line_of_root(d, rc)) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      T* whole = is_root ? recv + r.offset : (coords_[d] == rc[d] ? W_ + (r.offset - w_lo_) : nullptr);
      const T* own = is_root ? recv + r.offset + b.offset : W_ + (r.offset + b.offset - w_lo_);
      gather_stage(d, r, whole, own, rc[d]);
    }
  }

  // Scratch bytes a call of this kind and count needs (for communicator::reserve).
  std::size_t scratch_bytes(collective kind, std::size_t count) {
    const std::size_t n = (kind == collective::reduce_scatter || kind == collective::all_gather) ? count * c_.size() : count;
    ranges(n);
    const bool multi = nontrivial_dims() > 1;
    scratch_sizes s;
    switch (kind) {
      case collective::all_reduce: return pipeline_scratch_bytes(pipeline_of(n));
      case collective::reduce_scatter: s = sizes_rs(n, multi, false, multi); break;
      case collective::all_gather: s = sizes_ag(n, multi); break;
      case collective::reduce: s = sizes_rs(n, false, false, true); break;  // a non-root rank
      default: break;
    }
    return total_bytes(s);
  }

private:
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
      return dims_[d].algo_for(commutative_) == algorithm::direct && tr_.shared(dims_[d].ch);
    else
      return false;
  }

  // Publishes this rank's buffers for the stage on a range of n elements and waits
  // for every peer's. Ranks whose ranges differ passed different counts (or types,
  // or roots): every rank of the ring sees that, and throws.
  void shared_arrive(std::size_t d, phase ph, std::size_t n, const void* src, void* dst) {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      g.arrive(src, dst, std::uint64_t(n) * 64 + sizeof(T) % 64);
      auto failed = [&] { return tr_.shared_failure(); };
      const wait_status st = wait_or_yield(
          deadline(), [&](deadline_clock::time_point dl) { return g.wait_arrived(dl, failed); },
          [&] { return g.test_arrived(failed); });
      if (st.kind != wait_status::done)
        raise(st, ph, d, 0, dims_[d].members[st.index], " to publish its buffers to rank ");
      if (const std::size_t j = g.mismatch(); j < g.size())
        throw transport_error(std::string("mdring::") + name_ + ": rank " + std::to_string(dims_[d].members[j]) +
                                  " works on " + std::to_string(g.signature(j) / 64) + " elements of " +
                                  std::to_string(g.signature(j) % 64) + " bytes in dimension " + std::to_string(d) +
                                  " where rank " + std::to_string(c_.rank()) + " works on " + std::to_string(n) +
                                  " of " + std::to_string(sizeof(T) % 64) +
                                  ": the ranks passed different counts, types or roots to the same collective",
                              0);
    }
  }
  // Says this rank is done with its peers' buffers and waits until they are done with its own.
  void shared_leave(std::size_t d, phase ph) {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      g.leave();
      auto failed = [&] { return tr_.shared_failure(); };
      const wait_status st = wait_or_yield(
          deadline(), [&](deadline_clock::time_point dl) { return g.wait_left(dl, failed); },
          [&] { return g.test_left(failed); });
      if (st.kind != wait_status::done)
        raise(st, ph, d, 1, dims_[d].members[st.index], " to finish with the buffers of rank ");
    }
  }

  // Elements per piece when peers' data must be copied in (processes): small
  // enough that the p-1 pieces and the output stay in L2 while they are folded.
  static constexpr std::size_t piece = (std::size_t(256) << 10) / sizeof(T);

  // Peer j's `remote` range of n elements as a pointer this rank can use: the
  // address itself for threads, the mapped node_alloc segment between processes
  // (transport's local_address), else nullptr (then: cross-memory attach).
  template <class P>
  P* reach(std::size_t d, std::size_t j, P* remote, std::size_t n) {
    if constexpr (transport_t::same_address_space) {
      return remote;
    } else if constexpr (requires(transport_t& t, typename transport_t::channel& ch) {
                           t.local_address(ch, j, remote, n);
                         }) {
      return static_cast<P*>(tr_.local_address(dims_[d].ch, j, remote, n * sizeof(T)));
    } else {
      (void)d, (void)j, (void)remote, (void)n;
      return nullptr;
    }
  }
  // Peer j's published source, `off` bytes further (in the peer's address space).
  static const T* peer_src_at(const detail::access_group& g, std::size_t j, std::uintptr_t off) {
    return reinterpret_cast<const T*>(reinterpret_cast<std::uintptr_t>(g.peer_src(j)) + off);
  }
  // Stage results of this many bytes are written with non-temporal stores.
  bool stream(std::size_t bytes) const noexcept { return bytes >= c_.get_options().tune.nontemporal_bytes; }

  // out[i] = fold over the ring of src[i] for the elements [lo, lo+n) of the
  // nested order, reading the peers' src through the published bases: in place
  // where they are reachable by pointer, else piece by piece through scratch.
  void shared_fold(std::size_t d, const view<const T>& src, std::size_t lo, std::size_t n, T* out, bool final) {
    if constexpr (has_shared_access) {
      const std::size_t p = ext_[d], c = coords_[d];
      auto& ch = dims_[d].ch;
      auto& g = tr_.group(ch);
      auto& ptrs = c_.pointer_slots();
      const std::uintptr_t base = src.base_address();
      const bool nt = stream(n * sizeof(T));
      src.runs(lo, n, [&](const T* own, std::size_t rel, std::size_t len) {
        // The same byte offset from the base in every rank's view.
        const std::uintptr_t off = reinterpret_cast<std::uintptr_t>(own) - base;
        auto peer = [&](std::size_t j) { return peer_src_at(g, j, off); };
        bool direct = true;
        for (std::size_t j = 0; j < p && direct; ++j) direct = (ptrs[j] = j == c ? own : reach(d, j, peer(j), len));
        if (direct) {
          T* o = out + rel;
          return red_.combine_n_to(&o, 1, reinterpret_cast<const T* const*>(ptrs.data()), p, len, final, nt);
        }
        for (std::size_t done = 0; done < len; done += piece) {
          const std::size_t m = len - done < piece ? len - done : piece;
          for (std::size_t j = 0; j < p; ++j) {
            if (j == c) {
              ptrs[j] = own + done;
              continue;
            }
            T* slot = Q_ + (j < c ? j : j - 1) * piece;
            tr_.read(ch, j, peer(j) + done, slot, m * sizeof(T));
            ptrs[j] = slot;
          }
          red_.combine_n(out + rel + done, reinterpret_cast<const T* const*>(ptrs.data()), p, m, final);
        }
      });
    }
  }

  // The fused stage when every peer's source and destination are reachable by
  // pointer: one pass reads the p inputs of block c and writes the result into all
  // p buffers. False (nothing done) when some peer's are not.
  bool shared_all_reduce_direct(std::size_t d, block_range r, block_range bc, const view<const T>& src, T* buf,
                                bool final) {
    const std::size_t p = ext_[d], c = coords_[d];
    auto& g = tr_.group(dims_[d].ch);
    auto& ptrs = c_.pointer_slots();
    T* outs[detail::access_group::max_ranks];
    const std::uintptr_t base = src.base_address();
    const bool nt = stream(bc.count * sizeof(T) * p);
    bool direct = p <= detail::access_group::max_ranks;
    auto gather = [&](const T* own, std::size_t rel, std::size_t len) {
      const std::uintptr_t off = reinterpret_cast<std::uintptr_t>(own) - base;
      for (std::size_t j = 0; j < p && direct; ++j) {
        const std::size_t at = bc.offset + rel;
        if (j == c) {
          ptrs[j] = own;
          outs[j] = buf + at;
          continue;
        }
        ptrs[j] = reach(d, j, peer_src_at(g, j, off), len);
        outs[j] = reach(d, j, static_cast<T*>(g.peer_dst(j)) + at, len);
        direct = ptrs[j] && outs[j];
      }
    };
    src.runs(r.offset + bc.offset, bc.count, gather);  // every run reachable?
    if (!direct) return false;
    src.runs(r.offset + bc.offset, bc.count, [&](const T* own, std::size_t rel, std::size_t len) {
      gather(own, rel, len);
      red_.combine_n_to(outs, p, reinterpret_cast<const T* const*>(ptrs.data()), p, len, final, nt);
    });
    return true;
  }

  // A stage of n elements on dimension d goes through the staging buffers.
  bool staged(std::size_t d, std::size_t n) {
    if constexpr (has_shared_access) return n * sizeof(T) <= tr_.group(dims_[d].ch).staging_bytes();
    else return false;
  }
  static void copy_bytes(void* to, const void* from, std::size_t elems) {
    if (elems) std::memcpy(to, from, elems * sizeof(T));
  }
  // Copies this rank's contribution to range r into its next staging buffer.
  void stage_in(std::size_t d, const view<const T>& src, block_range r) {
    if constexpr (has_shared_access) {
      T* mine = static_cast<T*>(tr_.group(dims_[d].ch).next_staging(coords_[d]));
      src.runs(r.offset, r.count, [&](const T* from, std::size_t rel, std::size_t len) { copy_bytes(mine + rel, from, len); });
    }
  }
  // out = the fold, in coordinate order, of elements [off, off+n) of every rank's staging.
  void fold_staging(std::size_t d, std::size_t off, std::size_t n, T* out, bool final) {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      auto& ptrs = c_.pointer_slots();
      for (std::size_t j = 0; j < ext_[d]; ++j) ptrs[j] = static_cast<const T*>(g.staging(j)) + off;
      red_.combine_n(out, reinterpret_cast<const T* const*>(ptrs.data()), ext_[d], n, final);
    }
  }

  // Reduce-scatter of dimension d by shared access: rank c folds block c straight
  // from its peers' sources into out.
  void shared_reduce_scatter_stage(std::size_t d, block_range r, const view<const T>& src, T* out, bool final) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bc = block_of(r.count, p, c);
    if (staged(d, r.count)) {
      stage_in(d, src, r);
      shared_arrive(d, phase::reduce_scatter, r.count, nullptr, nullptr);
      fold_staging(d, bc.offset, bc.count, out, final);
      return;
    }
    shared_arrive(d, phase::reduce_scatter, r.count, reinterpret_cast<const void*>(src.base_address()), nullptr);
    shared_fold(d, src, r.offset + bc.offset, bc.count, out, final);
    shared_leave(d, phase::reduce_scatter);
  }

  // All-gather of dimension d by shared access: copy every peer's block from its
  // buffer (buf holds the stage's range on every rank) into this rank's.
  void shared_all_gather_stage(std::size_t d, block_range r, T* buf) {
    if constexpr (has_shared_access) {
      const std::size_t p = ext_[d], c = coords_[d];
      auto& ch = dims_[d].ch;
      auto& g = tr_.group(ch);
      if (staged(d, r.count)) {
        const block_range bc = block_of(r.count, p, c);
        copy_bytes(g.next_staging(c), buf + bc.offset, bc.count);
        shared_arrive(d, phase::all_gather, r.count, nullptr, nullptr);
        for (std::size_t j = 0; j < p; ++j) {
          if (j == c) continue;
          const block_range bj = block_of(r.count, p, j);
          copy_bytes(buf + bj.offset, g.staging(j), bj.count);
        }
        return;
      }
      shared_arrive(d, phase::all_gather, r.count, nullptr, buf);
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const block_range bj = block_of(r.count, p, j);
        tr_.read(ch, j, static_cast<const T*>(g.peer_dst(j)) + bj.offset, buf + bj.offset, bj.count * sizeof(T));
      }
      shared_leave(d, phase::all_gather);
    }
  }

  // The last dimension's reduce-scatter and all-gather in one pass: rank c folds
  // block c from every peer's source and writes the result into every peer's
  // buffer (directly, or piece by piece while it is in cache). No block is read twice.
  void shared_all_reduce_stage(std::size_t d, block_range r, const view<const T>& src, T* buf, bool final) {
    if constexpr (has_shared_access) {
      const std::size_t p = ext_[d], c = coords_[d];
      const block_range bc = block_of(r.count, p, c);
      auto& ch = dims_[d].ch;
      auto& g = tr_.group(ch);
      if (staged(d, r.count)) {
        // Small: every rank folds the whole range from the staging buffers, in
        // coordinate order, so all get the same bits with one synchronization.
        stage_in(d, src, r);
        shared_arrive(d, phase::reduce_scatter, r.count, nullptr, nullptr);
        fold_staging(d, 0, r.count, buf, final);
        return;
      }
      shared_arrive(d, phase::reduce_scatter, r.count, reinterpret_cast<const void*>(src.base_address()), buf);
      if (shared_all_reduce_direct(d, r, bc, src, buf, final)) return shared_leave(d, phase::all_gather);
      for (std::size_t done = 0; done < bc.count; done += piece) {
        const std::size_t m = bc.count - done < piece ? bc.count - done : piece;
        T* mine = buf + bc.offset + done;
        shared_fold(d, src, r.offset + bc.offset + done, m, mine, final);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) tr_.write(ch, j, mine, static_cast<T*>(g.peer_dst(j)) + bc.offset + done, m * sizeof(T));
      }
      shared_leave(d, phase::all_gather);
    }
  }

  // ---- stages ---------------------------------------------------------------

  // Reduce-scatter in dimension d over range r (see the buffer roles at the top).
  void reduce_scatter_stage(std::size_t d, block_range r, const view<const T>& src, T* mid, T* out, bool final) {
    const std::size_t p = ext_[d];
    if (r.count == 0) return;
    if (shared(d)) return shared_reduce_scatter_stage(d, r, src, out, final);
    if (direct(d)) {
      direct_rs_post(d, r, src, Q_, P_);
      wait(phase::reduce_scatter, d, 0);
      return direct_rs_fold(d, r, src, Q_, out, final);
    }
    const ring_bufs b{mid, R_[0], R_[1]};
    for (std::size_t s = 0; s + 1 < p; ++s) {
      ring_rs_post(d, r, src, b, s);
      wait(phase::reduce_scatter, d, s);
      ring_rs_fold(d, r, src, b, out, s, final);
    }
  }

  // All-gather in dimension d; buf holds the stage's whole range, own block present.
  void all_gather_stage(std::size_t d, block_range r, T* buf) {
    const std::size_t p = ext_[d];
    if (r.count == 0) return;
    if (shared(d)) return shared_all_gather_stage(d, r, buf);
    if (direct(d)) {
      direct_ag_post(d, r, buf);
      return wait(phase::all_gather, d, 0);
    }
    for (std::size_t s = 0; s + 1 < p; ++s) {
      ring_ag_post(d, r, buf, s);
      wait(phase::all_gather, d, s);
    }
  }

  // ---- the steps of the message stages (one post, one wait, one fold) --------

  bool direct(std::size_t d) const { return dims_[d].algo_for(commutative_) == algorithm::direct; }

  // Where a ring reduce-scatter keeps things: mid covers the range (or is null),
  // r0 receives, r1 holds a packed first send and, without mid, alternates with
  // r0 as the partial being sent.
  struct ring_bufs {
    T* mid;
    T* r0;
    T* r1;
    T* recv_buf(std::size_t s) const { return mid || s % 2 == 0 ? r0 : r1; }
  };

  void ring_rs_post(std::size_t d, block_range r, const view<const T>& src, const ring_bufs& b, std::size_t s) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bs = block_of(r.count, p, ring_rs_send_block(c, s, p));
    const block_range br = block_of(r.count, p, ring_rs_recv_block(c, s, p));
    const T* sp = s == 0 ? contiguous_or_pack(src, r.offset + bs.offset, bs.count, b.r1)
                         : (b.mid ? b.mid + bs.offset : b.recv_buf(s - 1));
    post_recv(d, b.recv_buf(s), br.count, (c + p - 1) % p, phase::reduce_scatter, s);
    post_send(d, sp, bs.count, (c + 1) % p, phase::reduce_scatter, s);
  }
  // The partial from the left (ranks c-1, c-2, ...) first, this rank's input second.
  void ring_rs_fold(std::size_t d, block_range r, const view<const T>& src, const ring_bufs& b, T* out, std::size_t s,
                    bool final) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range br = block_of(r.count, p, ring_rs_recv_block(c, s, p));
    const bool last = s + 2 == p;
    T* rp = b.recv_buf(s);
    T* dst = last ? out : (b.mid ? b.mid + br.offset : rp);
    src.runs(r.offset + br.offset, br.count, [&](const T* own, std::size_t rel, std::size_t len) {
      red_.combine(dst + rel, rp + rel, own, len, last && final);
    });
  }
  // Direct: p-1 receive slots of max_block elements in q, packed sends in pack.
  void direct_rs_post(std::size_t d, block_range r, const view<const T>& src, T* q, T* pack) {
    const std::size_t p = ext_[d], c = coords_[d], mb = max_block(r.count, p);
    const block_range bc = block_of(r.count, p, c);
    auto slot = [&](std::size_t j) { return (j < c ? j : j - 1) * mb; };
    for (std::size_t j = 0; j < p; ++j)
      if (j != c) post_recv(d, q + slot(j), bc.count, j, phase::reduce_scatter, 0);
    for (std::size_t j = 0; j < p; ++j) {
      if (j == c) continue;
      const block_range bj = block_of(r.count, p, j);
      post_send(d, contiguous_or_pack(src, r.offset + bj.offset, bj.count, pack + slot(j)), bj.count, j,
                phase::reduce_scatter, 0);
    }
  }
  void direct_rs_fold(std::size_t d, block_range r, const view<const T>& src, const T* q, T* out, bool final) {
    const std::size_t p = ext_[d], c = coords_[d], mb = max_block(r.count, p);
    const block_range bc = block_of(r.count, p, c);
    auto& ptrs = c_.pointer_slots();
    src.runs(r.offset + bc.offset, bc.count, [&](const T* own, std::size_t rel, std::size_t len) {
      for (std::size_t j = 0; j < p; ++j) ptrs[j] = j == c ? own : q + (j < c ? j : j - 1) * mb + rel;
      red_.combine_n(out + rel, reinterpret_cast<const T* const*>(ptrs.data()), p, len, final);
    });
  }
  void ring_ag_post(std::size_t d, block_range r, T* buf, std::size_t s) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bs = block_of(r.count, p, ring_ag_send_block(c, s, p));
    const block_range br = block_of(r.count, p, ring_ag_recv_block(c, s, p));
    post_recv(d, buf + br.offset, br.count, (c + p - 1) % p, phase::all_gather, s);
    post_send(d, buf + bs.offset, bs.count, (c + 1) % p, phase::all_gather, s);
  }
  void direct_ag_post(std::size_t d, block_range r, T* buf) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bc = block_of(r.count, p, c);
    for (std::size_t j = 0; j < p; ++j)
      if (j != c) post_recv(d, buf + block_of(r.count, p, j).offset, block_of(r.count, p, j).count, j, phase::all_gather, 0);
    for (std::size_t j = 0; j < p; ++j)
      if (j != c) post_send(d, buf + bc.offset, bc.count, j, phase::all_gather, 0);
  }

  // All-gather in dimension d whose result lands in `out` through the permutation;
  // `own` holds this rank's block c of the range, contiguous.
  void all_gather_unpack_stage(std::size_t d, block_range r, const T* own, const view<T>& out) {
    const std::size_t p = ext_[d], c = coords_[d], n = r.count;
    auto unpack = [&](const T* from, const block_range& b) {
      out.runs(r.offset + b.offset, b.count, [&](T* to, std::size_t rel, std::size_t len) {
        if (to != from + rel) std::memcpy(to, from + rel, len * sizeof(T));
      });
    };
    const block_range bc = block_of(n, p, c);
    unpack(own, bc);
    if (n == 0) return;
    if constexpr (has_shared_access) {
      if (shared(d)) {
        // Read each peer's block straight from its W into this rank's runs.
        auto& ch = dims_[d].ch;
        auto& g = tr_.group(ch);
        if (staged(d, n)) {
          copy_bytes(g.next_staging(c), own, bc.count);
          shared_arrive(d, phase::all_gather, n, nullptr, nullptr);
          for (std::size_t j = 0; j < p; ++j)
            if (j != c) unpack(static_cast<const T*>(g.staging(j)), block_of(n, p, j));
          return;
        }
        shared_arrive(d, phase::all_gather, n, nullptr, const_cast<T*>(own));
        for (std::size_t j = 0; j < p; ++j) {
          if (j == c) continue;
          const block_range bj = block_of(n, p, j);
          out.runs(r.offset + bj.offset, bj.count, [&](T* to, std::size_t rel, std::size_t len) {
            tr_.read(ch, j, static_cast<const T*>(g.peer_dst(j)) + rel, to, len * sizeof(T));
          });
        }
        shared_leave(d, phase::all_gather);
        return;
      }
    }
    if (dims_[d].algo_for(commutative_) == algorithm::direct) {
      const std::size_t mb = max_block(n, p);
      auto slot = [&](std::size_t j) { return Q_ + (j < c ? j : j - 1) * mb; };
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) post_recv(d, slot(j), block_of(n, p, j).count, j, phase::all_gather, 0);
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) post_send(d, own, bc.count, j, phase::all_gather, 0);
      wait(phase::all_gather, d, 0);
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) unpack(slot(j), block_of(n, p, j));
      return;
    }
    const T* cur = own;
    for (std::size_t s = 0; s + 1 < p; ++s) {
      const block_range bs = block_of(n, p, ring_ag_send_block(c, s, p));
      const block_range br = block_of(n, p, ring_ag_recv_block(c, s, p));
      T* rp = R_[s % 2];
      post_recv(d, rp, br.count, (c + p - 1) % p, phase::all_gather, s);
      post_send(d, cur, bs.count, (c + 1) % p, phase::all_gather, s);
      wait(phase::all_gather, d, s);
      unpack(rp, br);
      cur = rp;
    }
  }

  // Broadcast's scatter: the rank at coordinate root_c sends block j to rank j.
  void scatter_stage(std::size_t d, block_range r, T* buf, std::size_t root_c) {
    const std::size_t p = ext_[d], c = coords_[d], n = r.count;
    if (c == root_c) {
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const block_range bj = block_of(n, p, j);
        post_send(d, buf + bj.offset, bj.count, j, phase::scatter, 0);
      }
    } else {
      const block_range bc = block_of(n, p, c);
      post_recv(d, buf + bc.offset, bc.count, root_c, phase::scatter, 0);
    }
    wait(phase::scatter, d, 0);
  }

  // Reduce's gather: every rank sends its block to the rank at coordinate root_c,
  // which receives them into `whole` (its own block is already there).
  void gather_stage(std::size_t d, block_range r, T* whole, const T* own, std::size_t root_c) {
    const std::size_t p = ext_[d], c = coords_[d], n = r.count;
    if (c == root_c) {
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const block_range bj = block_of(n, p, j);
        post_recv(d, whole + bj.offset, bj.count, j, phase::gather, 0);
      }
    } else {
      post_send(d, own, block_of(n, p, c).count, root_c, phase::gather, 0);
    }
    wait(phase::gather, d, 0);
  }

  // The root of reduce runs all_reduce's reduce-scatter half into its recvbuf.
  void all_reduce_scatter_into(const T* send, T* recv, std::size_t n, int first, int last) {
    auto& rg = c_.range_slots();
    reserve(n, sizes_rs(n, false, true, false));
    view<const T> src{send};
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
      if (ext_[d] == 1) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      reduce_scatter_stage(d, r, src, recv + r.offset, recv + r.offset + b.offset, int(d) == last);
      src = view<const T>{recv};
    }
  }

  // ---- the segment executor of all_reduce ------------------------------------
  //
  // The buffer is cut into segments (plan/pipeline.hpp picks how many); each is an
  // all_reduce of its own range, whose program is the reduce-scatter stages, the
  // last dimension's reduce-scatter and all-gather (fused when shared), and the
  // all-gathers back. Up to tuning::pipeline_depth segments are in flight, each
  // with its own requests and receive slots; a new one starts when the newest has
  // left the first stage, so consecutive segments sit in consecutive stages.
  //
  // The executor always completes the step of the segment that has waited longest
  // (a FIFO), and every stage has the same number of steps on every rank (ring:
  // p-1, direct and shared: 1; empty ranges post nothing): so every rank runs the
  // same sequence of posts and waits. The wait that comes first in it has all its
  // messages posted by then, which is why this cannot deadlock; tags carry the
  // segment, so the matching does not depend on the order either.

  struct pipeline {
    std::size_t segments = 1, seg_len = 0, depth = 1;
    std::vector<block_range> full, tail;  // stage ranges of a full and of the last segment
    std::size_t slot_elems = 0;           // receive slots of one segment in flight
    std::size_t piece_elems = 0;          // shared access between processes: p-1 pieces
  };
  struct pipeline_stage {
    phase ph;
    std::size_t d;
    std::size_t rs_steps;  // the fused last stage: steps [0, rs_steps) reduce-scatter
    std::size_t steps;
  };
  struct segment {
    std::size_t index = 0, lo = 0, stage = 0, step = 0, nreq = 0;
    bool busy = false;
  };
  static constexpr std::size_t max_depth = 8;

  std::size_t stage_steps(std::size_t d) const { return direct(d) ? 1 : ext_[d] - 1; }

  pipeline pipeline_of(std::size_t n) {
    pipeline pl;
    const auto& tune = c_.get_options().tune;
    std::vector<algorithm> al(dims_.size());
    for (std::size_t d = 0; d < dims_.size(); ++d) al[d] = dims_[d].algo_for(commutative_);
    const std::size_t len = segment_elements(c_.executed_topology(), al, n, sizeof(T), tune);
    pl.seg_len = len;
    pl.segments = len ? max_block(n, len) : 1;
    pl.depth = tune.pipeline_depth < pl.segments ? tune.pipeline_depth : pl.segments;
    pl.full.resize(ext_.size());
    pl.tail.resize(ext_.size());
    stage_ranges(len, ext_, coords_, pl.full);
    stage_ranges(n - (pl.segments - 1) * len, ext_, coords_, pl.tail);
    for (std::size_t d = 0; d < ext_.size(); ++d) {
      if (ext_[d] == 1) continue;
      std::size_t need;
      if (shared(d)) {
        need = direct_slots(d, pl.full[d].count);
        pl.piece_elems = need > pl.piece_elems ? need : pl.piece_elems;
        continue;
      }
      const std::size_t mb = max_block(pl.full[d].count, ext_[d]);
      need = direct(d) ? (ext_[d] - 1) * mb : mb;
      pl.slot_elems = need > pl.slot_elems ? need : pl.slot_elems;
    }
    return pl;
  }
  std::size_t pipeline_scratch_bytes(const pipeline& pl) const {
    return pl.depth * align_up(pl.slot_elems * sizeof(T)) + align_up(pl.piece_elems * sizeof(T));
  }
  void reserve_pipeline(const pipeline& pl) {
    auto* base = static_cast<unsigned char*>(c_.scratch().get(pipeline_scratch_bytes(pl)));
    slots_ = reinterpret_cast<T*>(base);
    slot_stride_ = align_up(pl.slot_elems * sizeof(T)) / sizeof(T);
    Q_ = reinterpret_cast<T*>(base + pl.depth * align_up(pl.slot_elems * sizeof(T)));
  }

  void run_pipeline(const pipeline& pl, const T* send, T* recv) {
    const std::size_t first = std::size_t(first_dim()), last = std::size_t(last_dim());
    std::vector<pipeline_stage> prog;
    for (std::size_t d = first; d <= last; ++d)
      if (ext_[d] > 1)
        prog.push_back({phase::reduce_scatter, d, stage_steps(d), stage_steps(d) * (d == last ? 2 : 1)});
    for (std::size_t d = last; d-- > first;)
      if (ext_[d] > 1) prog.push_back({phase::all_gather, d, 0, stage_steps(d)});

    std::array<segment, max_depth> segs{};
    std::array<std::size_t, max_depth> queue{};
    std::size_t head = 0, queued = 0, active = 0, next = 0, newest = max_depth;
    const std::size_t per_slot = c_.request_slot_size();
    auto select = [&](segment& sg, std::size_t slot) {
      seg_ = sg.index;
      base_ = slot * per_slot;
      nreq_ = sg.nreq;
    };
    auto post = [&](std::size_t slot) {
      segment& sg = segs[slot];
      select(sg, slot);
      pipeline_step(pl, prog[sg.stage], sg, slot, send, recv, false, first, last);
      sg.nreq = nreq_;
      queue[(head + queued++) % max_depth] = slot;
    };
    // Tags carry the segment modulo max_depth: when segments finish out of order,
    // one may start only while no segment max_depth before it is still in flight.
    auto oldest = [&] {
      std::size_t o = next;
      for (const auto& sg : segs)
        if (sg.busy && sg.index < o) o = sg.index;
      return o;
    };
    auto admit = [&] {
      while (next < pl.segments && active < pl.depth && next - oldest() < max_depth &&
             (newest == max_depth || !segs[newest].busy || segs[newest].stage > 0)) {
        std::size_t slot = 0;
        while (segs[slot].busy) ++slot;
        segs[slot] = segment{next, next * pl.seg_len, 0, 0, 0, true};
        ++next, ++active;
        newest = slot;
        post(slot);
      }
    };
    // Completes the posted step of the segment in queue position i and posts its next.
    auto advance = [&](std::size_t i) {
      const std::size_t slot = queue[(head + i) % max_depth];
      for (std::size_t j = i; j > 0; --j) queue[(head + j) % max_depth] = queue[(head + j - 1) % max_depth];
      head = (head + 1) % max_depth, --queued;
      segment& sg = segs[slot];
      select(sg, slot);
      pipeline_step(pl, prog[sg.stage], sg, slot, send, recv, true, first, last);
      sg.nreq = 0;
      if (++sg.step == prog[sg.stage].steps) sg.step = 0, ++sg.stage;
      if (sg.stage < prog.size()) post(slot);
      else sg.busy = false, --active;
      admit();
    };
    try {
      admit();
      if (any_order(prog)) {
        // Whichever segment's step is done goes on first, so a long stage of one
        // segment (a direct stage inside a node) does not hold up the steps of the
        // others (a ring between nodes). No step here is a shared one, whose
        // arrive/leave must happen in the same order on every rank; every other
        // step waits only for messages already posted (see above), so this order
        // cannot deadlock either.
        while (queued) {
          std::size_t ready = queued;
          for (std::size_t i = 0; i < queued && ready == queued; ++i) {
            const segment& sg = segs[queue[(head + i) % max_depth]];
            const auto* rq = reqs_ + queue[(head + i) % max_depth] * per_slot;
            bool done = true;
            for (std::size_t k = 0; k < sg.nreq && done; ++k) done = transport_t::complete(rq[k]);
            if (done) ready = i;
          }
          if (ready < queued) {
            advance(ready);
            continue;
          }
          wait_any_segment(prog, segs, pl.depth * per_slot, per_slot);
        }
      } else {
        while (queued) advance(0);
      }
    } catch (...) {
      for (std::size_t slot = 0; slot < max_depth; ++slot)
        if (segs[slot].busy && segs[slot].nreq)
          tr_.cancel_all(std::span<typename transport_t::request>(reqs_ + slot * per_slot, segs[slot].nreq));
      nreq_ = 0;
      throw;
    }
  }

  static constexpr bool has_wait_any = requires(transport_t& t, std::span<typename transport_t::request> rs,
                                                const typename transport_t::request& r, deadline_clock::time_point dl) {
    { t.wait_any(rs, dl) } -> std::same_as<wait_status>;
    { transport_t::complete(r) } -> std::convertible_to<bool>;
  };
  // Segments may complete their steps out of order: the transport can wait for
  // any of several requests, and no stage of the program uses shared access.
  bool any_order(const std::vector<pipeline_stage>& prog) {
    if constexpr (!has_wait_any) return false;
    for (const auto& st : prog)
      if (shared(st.d)) return false;
    return true;
  }
  // Blocks until some request of the segments in flight completes; raises what a
  // timeout or a failed peer means, naming the step of the segment it concerns.
  template <class Segs>
  void wait_any_segment(const std::vector<pipeline_stage>& prog, Segs& segs, std::size_t n, std::size_t per_slot) {
    if constexpr (has_wait_any) {
      std::span<typename transport_t::request> rs(reqs_, n);
      const wait_status st =
          wait_or_yield(deadline(), [&](deadline_clock::time_point dl) { return tr_.wait_any(rs, dl); },
                        [&] { return tr_.wait_any(rs, deadline_clock::time_point{}); });
      if (st.kind == wait_status::done) return;
      const std::size_t slot = st.kind == wait_status::timeout ? st.index / per_slot : 0;
      const auto& sg = segs[slot];
      const auto& stage = prog[sg.stage < prog.size() ? sg.stage : 0];
      const bool rs_phase = stage.ph == phase::reduce_scatter && sg.step < stage.rs_steps;
      const std::size_t step = rs_phase ? sg.step : sg.step - stage.rs_steps;
      const auto& info = infos_[st.kind == wait_status::timeout ? st.index : slot * per_slot];
      raise(st, rs_phase ? phase::reduce_scatter : phase::all_gather,
            st.kind == wait_status::timeout ? info.dim : stage.d, step, info.peer,
            info.is_send ? " to receive what rank " : " to send to rank ");
    }
  }

  // Posts (finish == false) or completes one step of segment sg.
  void pipeline_step(const pipeline& pl, const pipeline_stage& st, const segment& sg, std::size_t slot, const T* send,
                     T* recv, bool finish, std::size_t first, std::size_t last) {
    const std::size_t d = st.d, p = ext_[d], c = coords_[d];
    const auto& rg = sg.index + 1 == pl.segments ? pl.tail : pl.full;
    const block_range r{sg.lo + rg[d].offset, rg[d].count};
    const view<const T> src{d == first ? send : recv};
    T* mid = recv + r.offset;
    T* out = mid + block_of(r.count, p, c).offset;
    const bool rs = st.ph == phase::reduce_scatter && sg.step < st.rs_steps;
    const std::size_t s = rs ? sg.step : sg.step - st.rs_steps;
    const bool final = d == last;
    if (shared(d)) {
      if (!finish || s != 0 || r.count == 0) return;
      if (st.rs_steps && st.steps > st.rs_steps) {
        if (rs) shared_all_reduce_stage(d, r, src, mid, true);  // the fused last dimension
      } else if (rs) {
        shared_reduce_scatter_stage(d, r, src, out, final);
      } else {
        shared_all_gather_stage(d, r, mid);
      }
      return;
    }
    T* q = slots_ + slot * slot_stride_;
    const ring_bufs b{mid, q, nullptr};
    if (!finish) {
      if (rs) direct(d) ? direct_rs_post(d, r, src, q, nullptr) : ring_rs_post(d, r, src, b, s);
      else direct(d) ? direct_ag_post(d, r, mid) : ring_ag_post(d, r, mid, s);
      return;
    }
    wait(rs ? phase::reduce_scatter : phase::all_gather, d, s);
    if (rs) direct(d) ? direct_rs_fold(d, r, src, q, out, final) : ring_rs_fold(d, r, src, b, out, s, final);
  }

  // ---- helpers --------------------------------------------------------------

  // A pointer to elements [lo, lo+n) of src, packing them into `scratch` if src is permuted.
  const T* contiguous_or_pack(const view<const T>& src, std::size_t lo, std::size_t n, T* scratch) {
    if (src.contiguous()) return src.at(lo);
    src.runs(lo, n, [&](const T* p, std::size_t rel, std::size_t len) { std::memcpy(scratch + rel, p, len * sizeof(T)); });
    return scratch;
  }

  std::vector<block_range>& ranges(std::size_t n) {
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
      if (dims_[d].algo_for(commutative_) == algorithm::direct) {
        const std::size_t slots = direct_slots(d, rg[d].count);
        s.q = slots > s.q ? slots : s.q;
        if (permuted && int(d) == first && !shared(d)) s.pack = slots;
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
    if (dims_[first].algo_for(commutative_) != algorithm::direct) s.r = mb1;
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

template <class Topology, transport Transport>
template <class T>
void communicator<Topology, Transport>::reserve(std::size_t count) {
  std::size_t bytes = 0;
  for (bool commutative : {true, false}) {  // non-commutative ops run direct everywhere
    detail::engine<T, sum_t, communicator> e(*this, "reserve", sum_t{}, commutative);
    for (auto kind : {collective::all_reduce, collective::reduce_scatter, collective::all_gather, collective::reduce}) {
      const std::size_t b = e.scratch_bytes(kind, count);
      bytes = b > bytes ? b : bytes;
    }
  }
  ws_.get(bytes);
}

MDRING_NAMESPACE_END
