// mdring/plan/build_stages.hpp: the stages of every algorithm, written once as
// program steps (plan/program.hpp, plan/program_writer.hpp).
//
// stage_emitter holds references to the step writer, the call (call_context) and
// its receive buffers (buffer_layout: plan/build_program.hpp), and nothing of the
// collective: the collective builders (plan/collective_programs.hpp names them)
// tell it which stage to write on which range of which buffer. builder_parts
// (at the end) makes the four once per program. The emitters:
// reduce_scatter_stage and all_gather_stage, each a branch per algorithm (each
// mirrors its comment in DESIGN.md), and the stages of one pass and of recursive
// doubling, which all_reduce calls (and reduce_scatter streamed_rs):
//   ring                    p-1 steps; the partial from the left first, then own
//   direct                  one step by messages, one n-ary fold in coordinate order
//   halving-doubling        plan/halving_doubling.hpp's exchanges
//   shared access           arrive, read the peers, leave (two steps; ranges up to
//                           staging_bytes go through the staging buffers instead,
//                           and the second step is empty)
//   fused_rs, fused_ag      all_reduce's last shared dimension: reduce-scatter and
//                           all-gather in one pass that writes every peer's buffer
//   streamed_rs, streamed_ag
//                           the same in the pull form (dim_program::streamed)
//   rd_stage                recursive doubling: all_reduce's whole range, no blocks
// all_gather's unpacking stage and the scatter, gather, tree and one-stage shared
// forms of broadcast and reduce are with their collectives
// (plan/all_gather_program.hpp, plan/broadcast_program.hpp, plan/reduce_program.hpp).
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "blocks.hpp"
#include "build_program.hpp"
#include "halving_doubling.hpp"
#include "program.hpp"
#include "program_writer.hpp"

#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// One reduce-scatter stage: range r of src; `mid` covers the range when the
// stage keeps its partials there (all_reduce: recvbuf), `out` receives block c.
struct rs_args {
  std::size_t d = 0;
  block_range r;
  bview src;
  std::optional<slice> mid;
  slice out;
  bool final = false;
};

class stage_emitter {
public:
  // The three outlive the emitter; the layout is sized before the first stage.
  stage_emitter(program_writer& w, const call_context& c, const buffer_layout& L) : w_(w), c_(c), L_(L) {}

  // ---- reduce-scatter stages ---------------------------------------------------------
  void reduce_scatter_stage(const rs_args& s) {
    if (c_.dim(s.d).shared) return shared_rs(s);
    if (c_.dim(s.d).algo == algorithm::direct) return direct_rs(s);
    if (c_.dim(s.d).algo == algorithm::halving_doubling) return hd_rs(s);
    ring_rs(s);
  }

  // The most elements a halving-doubling reduce-scatter on a range of n receives in
  // one step (into the receive buffer; the hand-out goes to out): half the range and
  // a block for a power of two, the whole range when pairs fold in.
  std::size_t hd_receive_elements(std::size_t d, std::size_t n) const {
    const hd_shape h = hd_shape_of(c_.extent(d));
    std::size_t most = 0;
    for (std::size_t i = 0; i < h.steps(); ++i) {
      const hd_step st = hd_rs_step(h, n, c_.coord(d), i);
      if (st.receives && st.kind != hd_step::hand_out && st.recv.count > most) most = st.recv.count;
    }
    return most;
  }

  // Elements [lo, lo+n) of src (published by every peer of d at `base`) folded in
  // coordinate order, run by run, into out(offset relative to lo): shared access's
  // fold, by the reduce-scatter and the reduce's one-stage forms.
  template <class Out>
  void fold_from_peers(std::size_t d, const bview& src, slice base, std::size_t lo, std::size_t n, bool final,
                       Out&& out) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const bool nt = c_.stream(n * c_.params().elem_size);
    src.runs(lo, n, [&](slice own, std::size_t rel, std::size_t len) {
      ins_.clear();
      for (std::size_t j = 0; j < p; ++j)
        ins_.push_back(j == c ? own : peer_slice(region::peer_src, j, own.offset - base.offset));
      const slice o = out(rel);
      w_.op(local_op::fold, {&o, 1}, ins_, len, final, nt);
    });
  }

  // ---- one pass over a last shared dimension; recursive doubling ------------------------
  // all_reduce's last shared dimension: the reduce-scatter stage's one step folds
  // block c from every peer's source and writes it into every peer's recvbuf (the
  // all-gather in the same pass); the all-gather stage's one step is the leave.
  void fused_rs(std::size_t d, block_range r, const bview& src) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const block_range bc = block_of(r.count, p, c);
    if (r.count == 0) return w_.empty_stage(d, phase::reduce_scatter, 1);
    const slice buf{region::recv, 0, r.offset};
    w_.stage(d, phase::reduce_scatter, 1, shared_sync, [&](std::size_t) {
      if (c_.staged(d, r.count)) {  // every rank folds the whole range from the staging buffers
        w_.sign(r.count);
        pack(src, r.offset, r.count, {region::staging_next, 0, 0});
        return fold_peers(region::staging, p, {&buf, 1}, 0, r.count, true, false);
      }
      const slice base = src.base(r);
      w_.publish(r.count, &base, &buf);
      outs_.clear(), ins_.clear();
      for (std::size_t j = 0; j < p; ++j) {
        outs_.push_back(j == c ? buf + bc.offset : peer_slice(region::peer_dst, j, bc.offset));
        ins_.push_back(j == c ? src.at(r.offset + bc.offset) : peer_slice(region::peer_src, j, bc.offset));
      }
      w_.op(local_op::fold, outs_, ins_, bc.count, true, c_.stream(bc.count * c_.params().elem_size * p));
    });
  }
  // The pull form of the same (dim_program::streamed; the source is send). Step 1:
  // copy the peers' blocks of send into `source` (pre: nothing where source is
  // send), arrive, fold block c from every peer's source into `outs` (all_reduce:
  // recv and `result` at the block; reduce_scatter: recv). all_reduce's stage has
  // this one step (steps 1); its all-gather: arrive (every peer's fold is done),
  // copy block j from peer j's result, leave. The two addresses are published at
  // both arrives (an arrive rewrites both, and a peer may still be folding from
  // this rank's source). reduce_scatter's (steps 2) leaves after the fold.
  void streamed_rs(std::size_t d, block_range r, std::span<const slice> outs, std::size_t steps) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const block_range bc = block_of(r.count, p, c);
    const slice send{region::send, 0, r.offset}, src{region::source, 0, r.offset};
    w_.stage(d, phase::reduce_scatter, steps, shared_sync, [&](std::size_t i) {
      if (i) return;
      const bool nt = c_.stream(r.count * c_.params().elem_size);
      w_.copy(src, send, bc.offset, true, nt);
      w_.copy(src + (bc.offset + bc.count), send + (bc.offset + bc.count), r.count - bc.offset - bc.count, true, nt);
      w_.publish(r.count, &src, nullptr);
      ins_.clear();
      for (std::size_t j = 0; j < p; ++j)
        ins_.push_back(j == c ? send + bc.offset : peer_slice(region::peer_src, j, bc.offset));
      w_.op(local_op::fold, outs, ins_, bc.count, true, c_.stream(bc.count * c_.params().elem_size * outs.size()));
    });
  }
  void streamed_ag(std::size_t d, block_range r) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const slice buf{region::recv, 0, r.offset}, res{region::result, 0, r.offset}, src{region::source, 0, r.offset};
    w_.stage(d, phase::all_gather, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      w_.publish(r.count, &src, &res);
      const bool nt = c_.stream(r.count * c_.params().elem_size);
      for (std::size_t j = 0; j < p; ++j) {
        const block_range bj = block_of(r.count, p, j);
        if (j != c) w_.copy(buf + bj.offset, peer_slice(region::peer_dst, j, bj.offset), bj.count, false, nt);
      }
    });
  }
  void fused_ag(std::size_t d, block_range r) {
    const bool leave = r.count && !c_.staged(d, r.count);
    w_.stage(
        d, phase::all_gather, 1, [&](std::size_t) { return leave ? sync_kind::leave : sync_kind::none; },
        [](std::size_t) {});
  }

  // Recursive doubling: all_reduce of range r over dimension d, whole
  // (plan/halving_doubling.hpp rd_step_of). Partials in recvbuf's range; this rank's
  // own data in src until its first fold; whole ranges received into R0 (the
  // segment's slot). The last exchange folds the finished values (final).
  void rd_stage(std::size_t d, block_range r, const bview& src, bool final) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const hd_shape h = hd_shape_of(p);
    const std::size_t last_exchange = (h.rem ? 1 : 0) + h.levels - 1;
    const slice acc{region::recv, 0, r.offset};
    const slice rbuf = L_.slots() ? L_.slot(d, 0, r.offset) : L_.R(0);
    bool folded = false;  // this rank's partial is in acc
    w_.message_stage(d, phase::all_reduce, h.steps(), [&](std::size_t i) {
      const rd_step st = rd_step_of(h, c, i);
      if (st.kind == hd_step::hand_out) {
        if (st.receives) w_.recv(st.partner, acc, r.count);
        if (st.sends) w_.send(st.partner, acc, r.count);
        return;
      }
      const slice own = folded ? acc : src.at(r.offset);
      if (st.receives) w_.recv(st.partner, rbuf, r.count);
      if (st.sends) w_.send(st.partner, own, r.count);
      if (!st.receives) return;
      const bool fin = final && i == last_exchange;
      if (st.mine_first) w_.fold(acc, {own, rbuf}, r.count, fin);
      else w_.fold(acc, {rbuf, own}, r.count, fin);
      folded = true;
    });
  }

  // ---- all-gather stages -------------------------------------------------------------
  // buf covers the stage's range, this rank's block present. pull (all_gather's
  // pull form, shared and not staged): the peers' blocks are read from their
  // `source`, laid out as buf, where each rank put its block.
  void all_gather_stage(std::size_t d, block_range r, slice buf, bool pull = false) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const block_range bc = block_of(r.count, p, c);
    if (c_.dim(d).shared) {
      if (r.count == 0) return w_.empty_stage(d, phase::all_gather, 2);
      const bool small = c_.staged(d, r.count);
      const slice src{region::source, 0, r.offset};
      const region from = small ? region::staging : pull ? region::peer_src : region::peer_dst;
      w_.stage(d, phase::all_gather, 2, small ? staged_sync : shared_sync, [&](std::size_t i) {
        if (i) return;
        if (small) {
          w_.sign(r.count);
          w_.copy({region::staging_next, 0, 0}, buf + bc.offset, bc.count, true);
        } else {
          w_.publish(r.count, pull ? &src : nullptr, &buf);
        }
        for (std::size_t j = 0; j < p; ++j) {
          const block_range bj = block_of(r.count, p, j);
          if (j != c) w_.copy(buf + bj.offset, peer_slice(from, j, small ? 0 : bj.offset), bj.count);
        }
      });
      return;
    }
    if (c_.dim(d).algo == algorithm::direct) {
      return w_.message_stage(d, phase::all_gather, 1, [&](std::size_t) {
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) w_.recv(j, buf + block_of(r.count, p, j).offset, block_of(r.count, p, j).count);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) w_.send(j, buf + bc.offset, bc.count);
      });
    }
    if (c_.dim(d).algo == algorithm::halving_doubling) {
      return w_.message_stage(d, phase::all_gather, hd_shape_of(p).steps(), [&](std::size_t i) {
        const hd_step st = hd_ag_step(hd_shape_of(p), r.count, c, i);
        if (st.receives) w_.recv(st.partner, buf + st.recv.offset, st.recv.count);
        if (st.sends) w_.send(st.partner, buf + st.send.offset, st.send.count);
      });
    }
    w_.message_stage(d, phase::all_gather, p - 1, [&](std::size_t i) {
      const block_range bs = block_of(r.count, p, ring_ag_send_block(c, i, p));
      const block_range br = block_of(r.count, p, ring_ag_recv_block(c, i, p));
      w_.recv((c + p - 1) % p, buf + br.offset, br.count);
      w_.send((c + 1) % p, buf + bs.offset, bs.count);
    });
  }

  // ---- helpers the collectives share --------------------------------------------------
  // Copies the runs of [lo, lo+n) of v to `to` (pre: packing before a send).
  void pack(const bview& v, std::size_t lo, std::size_t n, slice to, bool pre = true) {
    v.runs(lo, n, [&](slice s, std::size_t rel, std::size_t len) { w_.copy(to + rel, s, len, pre); });
  }
  // Elements [lo, lo+n) of v as one slice, packed into `scratch` first if v is permuted.
  slice contiguous_or_pack(const bview& v, std::size_t lo, std::size_t n, slice scratch) {
    if (!v.permuted()) return v.at(lo);
    pack(v, lo, n, scratch);
    return scratch;
  }
  // outs = the fold, in coordinate order, of elements [off, off+n) of every peer's `where`.
  void fold_peers(region where, std::size_t p, std::span<const slice> outs, std::size_t off, std::size_t n, bool final,
                  bool nt) {
    ins_.clear();
    for (std::size_t j = 0; j < p; ++j) ins_.push_back(peer_slice(where, j, off));
    w_.op(local_op::fold, outs, ins_, n, final, nt);
  }

private:
  // ---- reduce_scatter_stage's branches ------------------------------------------------
  void ring_rs(const rs_args& s) {
    const std::size_t d = s.d, p = c_.extent(d), c = c_.coord(d);
    const block_range r = s.r;
    // Where step i receives: R0, or without mid R0 and R1 in turn (the partial being
    // sent sits in the other one).
    auto rbuf = [&](std::size_t i) {
      const std::size_t dst = r.offset + block_of(r.count, p, ring_rs_recv_block(c, i, p)).offset;
      if (L_.slots()) return L_.slot(d, 0, dst);
      return s.mid || i % 2 == 0 ? L_.R(0) : L_.R(1);
    };
    w_.message_stage(d, phase::reduce_scatter, p - 1, [&](std::size_t i) {
      const block_range bs = block_of(r.count, p, ring_rs_send_block(c, i, p));
      const block_range br = block_of(r.count, p, ring_rs_recv_block(c, i, p));
      const slice sp = i == 0 ? contiguous_or_pack(s.src, r.offset + bs.offset, bs.count, L_.R(1))
                              : (s.mid ? *s.mid + bs.offset : rbuf(i - 1));
      w_.recv((c + p - 1) % p, rbuf(i), br.count);
      w_.send((c + 1) % p, sp, bs.count);
      const bool last = i + 2 == p;
      const slice dst = last ? s.out : (s.mid ? *s.mid + br.offset : rbuf(i));
      s.src.runs(r.offset + br.offset, br.count, [&](slice own, std::size_t rel, std::size_t len) {
        w_.fold(dst + rel, {rbuf(i) + rel, own}, len, last && s.final);
      });
    });
  }

  void direct_rs(const rs_args& s) {
    const std::size_t d = s.d, p = c_.extent(d), c = c_.coord(d), mb = max_block(s.r.count, p);
    const block_range r = s.r, bc = block_of(r.count, p, c);
    auto q = [&](std::size_t j) {
      const std::size_t k = j < c ? j : j - 1;
      return L_.slots() ? L_.slot(d, k, r.offset + bc.offset) : L_.Q(k, mb);
    };
    w_.message_stage(d, phase::reduce_scatter, 1, [&](std::size_t) {
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) w_.recv(j, q(j), bc.count);
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const block_range bj = block_of(r.count, p, j);
        const slice pk = L_.P(j < c ? j : j - 1, mb);
        w_.send(j, contiguous_or_pack(s.src, r.offset + bj.offset, bj.count, pk), bj.count);
      }
      s.src.runs(r.offset + bc.offset, bc.count, [&](slice own, std::size_t rel, std::size_t len) {
        ins_.clear();
        for (std::size_t j = 0; j < p; ++j) ins_.push_back(j == c ? own : q(j) + rel);
        const slice o = s.out + rel;
        w_.op(local_op::fold, {&o, 1}, ins_, len, s.final, false);
      });
    });
  }

  // Halving-doubling: partials in acc (mid, or R1); each step's received half lands
  // at the start of the receive buffer (all_reduce: the slot, shifted to the fold's
  // destination; hd_receive_elements says how large), the hand-out in out. Sends
  // come from the source until the rank has a partial of its own (before its first fold).
  void hd_rs(const rs_args& s) {
    const std::size_t d = s.d, p = c_.extent(d), c = c_.coord(d);
    const block_range r = s.r;
    const hd_shape h = hd_shape_of(p);
    const std::size_t lead = h.rem ? 1 : 0;
    const slice acc = s.mid ? *s.mid : L_.R(1);
    w_.message_stage(d, phase::reduce_scatter, h.steps(), [&](std::size_t i) {
      const hd_step st = hd_rs_step(h, r.count, c, i);
      // element lo of the range, received this step, is at rb + (lo - recv.offset)
      const slice rb = L_.slots() ? L_.slot(d, 0, r.offset + st.recv.offset) : L_.R(0);
      if (st.receives) w_.recv(st.partner, st.kind == hd_step::hand_out ? s.out : rb, st.recv.count);
      if (st.sends) {
        const bool partial = i > lead || (h.rem && i > 0 && c < 2 * h.rem);
        w_.send(st.partner,
                partial ? acc + st.send.offset
                        : contiguous_or_pack(s.src, r.offset + st.send.offset, st.send.count, acc + st.send.offset),
                st.send.count);
      }
      if (!st.receives || st.kind == hd_step::hand_out) return;
      const bool partial = st.kind == hd_step::exchange && (i > lead || (h.rem && c < 2 * h.rem));
      auto f = [&](std::size_t lo, std::size_t len, slice dst, bool fin) {  // elements [lo, lo+len) of the range
        const slice got = rb + (lo - st.recv.offset);
        if (partial) return w_.fold(dst, {got, acc + lo}, len, fin);
        s.src.runs(r.offset + lo, len, [&](slice mine, std::size_t rel, std::size_t l) {
          w_.fold(dst + rel, {got + rel, mine}, l, fin);
        });
      };
      if (st.kind == hd_step::fold_in || i + 1 < lead + h.levels)
        return f(st.recv.offset, st.recv.count, acc + st.recv.offset, false);
      const std::size_t lo = st.recv.offset, hi = lo + st.recv.count;
      const block_range own = block_of(r.count, p, c);
      f(lo, own.offset - lo, acc + lo, s.final);
      f(own.offset, own.count, s.out, s.final);
      f(own.offset + own.count, hi - own.offset - own.count, acc + own.offset + own.count, s.final);
    });
  }

  // Shared access: rank c folds block c straight from every peer's source.
  void shared_rs(const rs_args& s) {
    const std::size_t d = s.d, p = c_.extent(d), c = c_.coord(d);
    const block_range r = s.r, bc = block_of(r.count, p, c);
    if (r.count == 0) return w_.empty_stage(d, phase::reduce_scatter, 2);
    if (c_.staged(d, r.count)) {
      w_.stage(d, phase::reduce_scatter, 2, staged_sync, [&](std::size_t i) {
        if (i) return;
        w_.sign(r.count);
        pack(s.src, r.offset, r.count, {region::staging_next, 0, 0});
        fold_peers(region::staging, p, {&s.out, 1}, bc.offset, bc.count, s.final, false);
      });
      return;
    }
    const slice base = s.src.base(r);
    w_.stage(d, phase::reduce_scatter, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      w_.publish(r.count, &base, nullptr);
      fold_from_peers(d, s.src, base, r.offset + bc.offset, bc.count, s.final,
                      [&](std::size_t rel) { return s.out + rel; });
    });
  }
  program_writer& w_;
  const call_context& c_;
  const buffer_layout& L_;
  std::vector<slice> ins_, outs_;  // a fold's inputs and outputs, reused
};

// What a collective's builder (plan/collective_programs.hpp names them) works
// with, made once per program: the call, its buffers, the writer and the stage
// emitters. Each part refers to the ones before it, so the parts stay where they
// are made (no copy, no move). A builder holds references to them and writes its
// stages; finish() then hands the program over:
//
//   builder_parts x(p, collective::all_reduce);
//   all_reduce_builder(x).write();
//   program pr = std::move(x).finish();
struct builder_parts {
  builder_parts(const program_params& p, collective kind) : c(p, kind), L(c, kind), w(kind, p.count), st(w, c, L) {}
  builder_parts(const builder_parts&) = delete;
  builder_parts& operator=(const builder_parts&) = delete;

  program finish() && { return std::move(w).finish(L.scratch_elements(), L.slot_elements()); }

  call_context c;
  buffer_layout L;
  program_writer w;
  stage_emitter st;
};

}  // namespace detail

MDRING_NAMESPACE_END
