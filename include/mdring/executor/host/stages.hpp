// mdring/executor/host/stages.hpp: the message stages (see core.hpp).
//
// A stage is a few nonblocking sends and receives on one dimension's channel,
// one wait, and one fused reduction pass: ring (p-1 steps), direct (one step) or
// halving-doubling (log2 p steps, plan/halving_doubling.hpp), plus the scatter and
// gather stages of broadcast and reduce and the all-gather that unpacks into the
// permuted block order.
#pragma once

#include "shared_stages.hpp"

#include <cstring>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class stages : public shared_stages<T, Op, Comm> {
public:
  using B = shared_stages<T, Op, Comm>;
  using B::B;
  using B::c_, B::tr_, B::red_, B::dims_, B::ext_, B::coords_, B::commutative_, B::R_, B::Q_, B::P_, B::post_recv;
  using B::post_send, B::wait, B::has_shared_access, B::shared, B::direct, B::contiguous_or_pack, B::sizes_rs;
  using B::reserve, B::shared_arrive, B::shared_leave, B::staged, B::copy_bytes, B::shared_reduce_scatter_stage;
  using B::shared_all_gather_stage, B::halving_doubling;

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
    if (halving_doubling(d)) {
      T* acc = mid ? mid : R_[1];
      for (std::size_t s = 0; s < hd_shape_of(p).steps(); ++s) {
        hd_rs_post(d, r, src, acc, R_[0], out, s);
        wait(phase::reduce_scatter, d, s);
        hd_rs_fold(d, r, src, acc, R_[0], out, s, final);
      }
      return;
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
    const bool hd = halving_doubling(d);
    for (std::size_t s = 0; s < (hd ? hd_shape_of(p).steps() : p - 1); ++s) {
      hd ? hd_ag_post(d, r, buf, s) : ring_ag_post(d, r, buf, s);
      wait(phase::all_gather, d, s);
    }
  }

  // Halving-doubling (plan/halving_doubling.hpp). The reduce-scatter keeps its
  // partials in acc (covering the range: mid, or scratch) and receives into rbuf (as
  // large as the range); the rank's block ends in out. Sends come from the source
  // until the rank has a partial of its own: before its first fold.
  void hd_rs_post(std::size_t d, block_range r, const view<const T>& src, T* acc, T* rbuf, T* out, std::size_t s) {
    const hd_shape h = hd_shape_of(ext_[d]);
    const std::size_t c = coords_[d];
    const hd_step st = hd_rs_step(h, r.count, c, s);
    if (st.receives)
      post_recv(d, st.kind == hd_step::hand_out ? out : rbuf + st.recv.offset, st.recv.count, st.partner,
                phase::reduce_scatter, s);
    if (!st.sends) return;
    const bool partial = s > (h.rem ? 1 : 0) || (h.rem && s > 0 && c < 2 * h.rem);
    const T* from = partial ? acc + st.send.offset
                            : contiguous_or_pack(src, r.offset + st.send.offset, st.send.count, acc + st.send.offset);
    post_send(d, from, st.send.count, st.partner, phase::reduce_scatter, s);
  }
  // Folds what step s received: the whole range (fold in), or the half kept; the
  // last exchange writes the rank's block to out (and a pair's other block to acc,
  // for the hand-out), finalized when the stage is the last.
  void hd_rs_fold(std::size_t d, block_range r, const view<const T>& src, T* acc, const T* rbuf, T* out,
                  std::size_t s, bool final) {
    const hd_shape h = hd_shape_of(ext_[d]);
    const std::size_t c = coords_[d];
    const hd_step st = hd_rs_step(h, r.count, c, s);
    if (!st.receives || st.kind == hd_step::hand_out) return;
    const std::size_t lead = h.rem ? 1 : 0;
    const bool partial = st.kind == hd_step::exchange && (s > lead || (h.rem && c < 2 * h.rem));
    auto fold = [&](std::size_t lo, std::size_t len, T* dst, bool fin) {  // elements [lo, lo+len) of the range
      if (len == 0) return;
      if (partial) return red_.combine(dst, rbuf + lo, acc + lo, len, fin);
      src.runs(r.offset + lo, len, [&](const T* mine, std::size_t rel, std::size_t l) {
        red_.combine(dst + rel, rbuf + lo + rel, mine, l, fin);
      });
    };
    if (st.kind == hd_step::fold_in || s + 1 < lead + h.levels)
      return fold(st.recv.offset, st.recv.count, acc + st.recv.offset, false);
    const std::size_t lo = st.recv.offset, hi = lo + st.recv.count;
    const block_range own = block_of(r.count, ext_[d], c);
    fold(lo, own.offset - lo, acc + lo, final);
    fold(own.offset, own.count, out, final);
    fold(own.offset + own.count, hi - own.offset - own.count, acc + own.offset + own.count, final);
  }
  // Step s of the all-gather on buf (the stage's range, this rank's block present).
  void hd_ag_post(std::size_t d, block_range r, T* buf, std::size_t s) {
    const hd_step st = hd_ag_step(hd_shape_of(ext_[d]), r.count, coords_[d], s);
    if (st.receives) post_recv(d, buf + st.recv.offset, st.recv.count, st.partner, phase::all_gather, s);
    if (st.sends) post_send(d, buf + st.send.offset, st.send.count, st.partner, phase::all_gather, s);
  }

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
    if (halving_doubling(d)) {
      // Gathered in block order into R0 (the range), then unpacked.
      T* whole = R_[0];
      std::memcpy(whole + bc.offset, own, bc.count * sizeof(T));
      for (std::size_t s = 0; s < hd_shape_of(p).steps(); ++s) {
        hd_ag_post(d, r, whole, s);
        wait(phase::all_gather, d, s);
      }
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) unpack(whole + block_of(n, p, j).offset, block_of(n, p, j));
      return;
    }
    if (direct(d)) {
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
};

}  // namespace detail

MDRING_NAMESPACE_END
