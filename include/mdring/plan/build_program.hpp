// mdring/plan/build_program.hpp: the stages of every algorithm, written once as
// program steps (plan/program.hpp).
//
// A stage works on a range r of the nested order (plan/blocks.hpp: stage d cuts
// the range the rank owns after stages 0..d-1 into p_d blocks; the rank keeps
// block c_d). Buffers are views: element x of the nested order lives at
// pos + (x - origin) of a region, or, for reduce_scatter's sendbuf and
// all_gather's recvbuf with two or more non-trivial dimensions, at the position
// of rank rank_of_nested(x / blk)'s block (MPI puts block r at rank r; the stages
// produce nested order). A view yields contiguous runs, so the executors never
// see the permutation: a fold or copy over a permuted range is one op per run.
//
// The stage emitters, by algorithm (each mirrors its comment in DESIGN.md):
//   ring_rs / ring_ag       p-1 steps; the partial from the left first, then own
//   direct_rs / direct_ag   one step by messages, one n-ary fold in coordinate order
//   hd_rs / hd_ag           halving-doubling (plan/halving_doubling.hpp)
//   shared_rs / shared_ag   shared access: arrive, read the peers, leave (two steps;
//                           ranges up to staging_bytes go through the staging
//                           buffers instead, and the second step is empty)
//   fused                   all_reduce's last shared dimension: reduce-scatter and
//                           all-gather in one pass that writes every peer's buffer
//   unpack                  all_gather's first stage into the permuted recvbuf
//   scatter / gather        broadcast's and reduce's stages on the root's line
// The collectives themselves: plan/collective_programs.hpp.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "blocks.hpp"
#include "cost.hpp"
#include "halving_doubling.hpp"
#include "program.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

// What a call runs in one executed dimension.
struct dim_program {
  std::size_t extent = 1, coord = 0;
  algorithm algo = algorithm::ring;  // ring, direct or halving_doubling
  bool shared = false;               // direct stages by shared access (ranks of a node)
  std::size_t staging_bytes = 0;     // shared: ranges of at most this many bytes are staged
  friend constexpr bool operator==(const dim_program&, const dim_program&) = default;
};

struct program_params {
  collective kind = collective::all_reduce;
  std::span<const dim_program> dims;
  // The collective's count argument: elements (all_reduce, broadcast, reduce), or
  // per rank (reduce_scatter: recvcount, all_gather: sendcount).
  std::size_t count = 0;
  std::size_t rank = 0, root = 0;
  std::size_t elem_size = 4;
  std::size_t segment_length = 0;        // all_reduce: 0 or >= count for one segment
  std::size_t vector_elements = 1;       // receive slots aligned like their fold's destination
  std::size_t recv_misalignment = 0;     // (address of recvbuf / elem_size) % vector_elements
  std::size_t nontemporal_bytes = std::numeric_limits<std::size_t>::max();  // tuning::nontemporal_bytes
};

namespace detail {

// Where element x of the nested order lives (see the top of this file).
struct bview {
  region where = region::recv;
  std::size_t pos = 0, origin = 0;  // contiguous: pos + (x - origin)
  std::size_t blk = 0;              // permuted: rank_of_nested(x / blk) * blk + x % blk
  std::span<const std::size_t> extents{};

  bool permuted() const noexcept { return blk != 0; }
  slice at(std::size_t x) const noexcept { return {where, 0, pos + (x - origin)}; }
  // f(slice, offset relative to lo, length) for each contiguous piece of [lo, lo+n).
  template <class F>
  void runs(std::size_t lo, std::size_t n, F&& f) const {
    if (n == 0) return;
    if (!permuted()) return f(at(lo), std::size_t(0), n);
    for (std::size_t x = lo, end = lo + n; x < end;) {
      const std::size_t q = x / blk, off = x % blk, len = blk - off < end - x ? blk - off : end - x;
      f(slice{where, 0, rank_of_nested(q, extents) * blk + off}, x - lo, len);
      x += len;
    }
  }
  // What this rank publishes for a shared stage on range r: peers read element x
  // at the published slice + (position of x - its offset), the same on every rank
  // of the ring (they share r, and the permutation).
  slice base(block_range r) const noexcept { return permuted() ? slice{where, 0, 0} : at(r.offset); }
};

constexpr slice operator+(slice s, std::size_t n) noexcept { return {s.where, s.peer, s.offset + n}; }
constexpr slice peer_slice(region where, std::size_t peer, std::size_t offset) noexcept {
  return {where, std::uint32_t(peer), offset};
}

// Scratch elements, 64-byte aligned.
inline std::size_t aligned_elements(std::size_t elems, std::size_t elem_size) {
  const std::size_t bytes = (elems * elem_size + 63) / 64 * 64;
  return bytes / elem_size;
}

class program_builder {
public:
  explicit program_builder(const program_params& p) : p_(p), V_(p.vector_elements ? p.vector_elements : 1) {
    for (const auto& d : p.dims) ext_.push_back(d.extent), coords_.push_back(d.coord);
  }

protected:
  // The receive buffers of a stage that is not all_reduce's (whose receive slots
  // are the segment's slot region): offsets into the scratch region.
  struct scratch_layout {
    std::size_t r0 = 0, r1 = 0, q = 0, pack = 0, w = 0;
  };
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

  const dim_program& dim(std::size_t d) const { return p_.dims[d]; }
  bool slots_region() const noexcept { return p_.kind == collective::all_reduce; }
  bool staged(std::size_t d, std::size_t n) const { return n * p_.elem_size <= dim(d).staging_bytes; }
  bool stream(std::size_t bytes) const noexcept { return bytes >= p_.nontemporal_bytes; }
  std::size_t steps_of(std::size_t d) const {
    if (dim(d).algo == algorithm::direct) return dim(d).shared ? 2 : 1;
    return dim(d).algo == algorithm::halving_doubling ? hd_shape_of(ext_[d]).steps() : ext_[d] - 1;
  }

  // ---- emitting steps ----------------------------------------------------------
  void open(std::size_t d, std::size_t index, phase ph, sync_kind sync) {
    cur_ = program_step{};
    cur_.segment = seg_, cur_.stage = stage_, cur_.dim = d, cur_.index = index, cur_.ph = ph, cur_.sync = sync;
    cur_.first_pre = out_.ops.size();
    cur_.first_send = out_.sends.size(), cur_.first_recv = out_.recvs.size();
    post_ = false;
  }
  void close() {
    if (!post_) cur_.pre = out_.ops.size() - cur_.first_pre, cur_.first_op = out_.ops.size();
    else cur_.ops = out_.ops.size() - cur_.first_op;
    cur_.sends = out_.sends.size() - cur_.first_send;
    cur_.recvs = out_.recvs.size() - cur_.first_recv;
    out_.shared |= cur_.sync == sync_kind::arrive || cur_.sync == sync_kind::leave;
    out_.steps.push_back(cur_);
  }
  // A stage of `n` steps: f(i) fills step i (sync(i) says what it waits for).
  template <class Sync, class F>
  void stage(std::size_t d, phase ph, std::size_t n, Sync&& sync, F&& f) {
    for (std::size_t i = 0; i < n; ++i) {
      open(d, i, ph, sync(i));
      cur_.stage_begin = i == 0, cur_.stage_end = i + 1 == n;
      f(i);
      close();
    }
    ++stage_;
  }
  template <class F>
  void message_stage(std::size_t d, phase ph, std::size_t n, F&& f) {
    stage(d, ph, n, [](std::size_t) { return sync_kind::messages; }, f);
  }
  void send(std::size_t peer, slice at, std::size_t n) {
    if (n) out_.sends.push_back({peer, at, n});
  }
  void recv(std::size_t peer, slice at, std::size_t n) {
    if (n) out_.recvs.push_back({peer, at, n});
  }
  // An op before the step's messages (pre) or after its sync.
  void op(local_op::kind_t kind, std::span<const slice> outs, std::span<const slice> ins, std::size_t n, bool final,
          bool nt, bool pre = false) {
    if (!n) return;
    if (!pre && !post_) {
      post_ = true;
      cur_.pre = out_.ops.size() - cur_.first_pre, cur_.first_op = out_.ops.size();
    }
    local_op o;
    o.kind = kind, o.final = final, o.nontemporal = nt, o.count = n;
    o.first_out = out_.slices.size(), o.outs = outs.size();
    out_.slices.insert(out_.slices.end(), outs.begin(), outs.end());
    o.first_in = out_.slices.size(), o.ins = ins.size();
    out_.slices.insert(out_.slices.end(), ins.begin(), ins.end());
    out_.ops.push_back(o);
  }
  void fold(slice dst, std::initializer_list<slice> ins, std::size_t n, bool final) {
    op(local_op::fold, {&dst, 1}, {ins.begin(), ins.size()}, n, final, false);
  }
  void copy(slice dst, slice src, std::size_t n, bool pre = false) {
    op(local_op::copy, {&dst, 1}, {&src, 1}, n, false, false, pre);
  }
  // Copies the runs of [lo, lo+n) of v to `to` (pre: packing before a send).
  void pack(const bview& v, std::size_t lo, std::size_t n, slice to, bool pre = true) {
    v.runs(lo, n, [&](slice s, std::size_t rel, std::size_t len) { copy(to + rel, s, len, pre); });
  }
  // Elements [lo, lo+n) of v as one slice, packed into `scratch` first if v is permuted.
  slice contiguous_or_pack(const bview& v, std::size_t lo, std::size_t n, slice scratch) {
    if (!v.permuted()) return v.at(lo);
    pack(v, lo, n, scratch);
    return scratch;
  }

  // ---- receive buffers -----------------------------------------------------------
  // all_reduce: receive slot j of dimension d, shifted so that the slot and a fold
  // destination at recv offset dst are alike modulo vector_elements.
  std::size_t slot_stride(std::size_t d) const { return stride_[d]; }
  slice slot(std::size_t d, std::size_t j, std::size_t dst) const {
    return {region::slot, 0, j * stride_[d] + (p_.recv_misalignment + dst) % V_};
  }
  slice R(std::size_t i) const { return {region::scratch, 0, i ? L_.r1 : L_.r0}; }

  // ---- reduce-scatter stages ---------------------------------------------------------
  void reduce_scatter_stage(const rs_args& s) {
    if (dim(s.d).shared) return shared_rs(s);
    if (dim(s.d).algo == algorithm::direct) return direct_rs(s);
    if (dim(s.d).algo == algorithm::halving_doubling) return hd_rs(s);
    ring_rs(s);
  }

  void ring_rs(const rs_args& s) {
    const std::size_t d = s.d, p = ext_[d], c = coords_[d];
    const block_range r = s.r;
    // Where step i receives: R0, or without mid R0 and R1 in turn (the partial being
    // sent sits in the other one).
    auto rbuf = [&](std::size_t i) {
      const std::size_t dst = r.offset + block_of(r.count, p, ring_rs_recv_block(c, i, p)).offset;
      if (slots_region()) return slot(d, 0, dst);
      return s.mid || i % 2 == 0 ? R(0) : R(1);
    };
    message_stage(d, phase::reduce_scatter, p - 1, [&](std::size_t i) {
      const block_range bs = block_of(r.count, p, ring_rs_send_block(c, i, p));
      const block_range br = block_of(r.count, p, ring_rs_recv_block(c, i, p));
      const slice sp = i == 0 ? contiguous_or_pack(s.src, r.offset + bs.offset, bs.count, R(1))
                              : (s.mid ? *s.mid + bs.offset : rbuf(i - 1));
      recv((c + p - 1) % p, rbuf(i), br.count);
      send((c + 1) % p, sp, bs.count);
      const bool last = i + 2 == p;
      const slice dst = last ? s.out : (s.mid ? *s.mid + br.offset : rbuf(i));
      s.src.runs(r.offset + br.offset, br.count, [&](slice own, std::size_t rel, std::size_t len) {
        fold(dst + rel, {rbuf(i) + rel, own}, len, last && s.final);
      });
    });
  }

  void direct_rs(const rs_args& s) {
    const std::size_t d = s.d, p = ext_[d], c = coords_[d], mb = max_block(s.r.count, p);
    const block_range r = s.r, bc = block_of(r.count, p, c);
    auto q = [&](std::size_t j) {
      const std::size_t k = j < c ? j : j - 1;
      return slots_region() ? slot(d, k, r.offset + bc.offset) : slice{region::scratch, 0, L_.q + k * mb};
    };
    message_stage(d, phase::reduce_scatter, 1, [&](std::size_t) {
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) recv(j, q(j), bc.count);
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const block_range bj = block_of(r.count, p, j);
        const slice pk{region::scratch, 0, L_.pack + (j < c ? j : j - 1) * mb};
        send(j, contiguous_or_pack(s.src, r.offset + bj.offset, bj.count, pk), bj.count);
      }
      s.src.runs(r.offset + bc.offset, bc.count, [&](slice own, std::size_t rel, std::size_t len) {
        ins_.clear();
        for (std::size_t j = 0; j < p; ++j) ins_.push_back(j == c ? own : q(j) + rel);
        const slice o = s.out + rel;
        op(local_op::fold, {&o, 1}, ins_, len, s.final, false);
      });
    });
  }

  // Halving-doubling: partials in acc (mid, or R1), received halves in rbuf (as large
  // as the range); the hand-out lands in out. Sends come from the source until the
  // rank has a partial of its own (before its first fold).
  void hd_rs(const rs_args& s) {
    const std::size_t d = s.d, p = ext_[d], c = coords_[d];
    const block_range r = s.r;
    const hd_shape h = hd_shape_of(p);
    const std::size_t lead = h.rem ? 1 : 0;
    const slice acc = s.mid ? *s.mid : R(1);
    const slice rbuf = slots_region() ? slot(d, 0, r.offset) : R(0);
    message_stage(d, phase::reduce_scatter, h.steps(), [&](std::size_t i) {
      const hd_step st = hd_rs_step(h, r.count, c, i);
      if (st.receives)
        recv(st.partner, st.kind == hd_step::hand_out ? s.out : rbuf + st.recv.offset, st.recv.count);
      if (st.sends) {
        const bool partial = i > lead || (h.rem && i > 0 && c < 2 * h.rem);
        send(st.partner,
             partial ? acc + st.send.offset
                     : contiguous_or_pack(s.src, r.offset + st.send.offset, st.send.count, acc + st.send.offset),
             st.send.count);
      }
      if (!st.receives || st.kind == hd_step::hand_out) return;
      const bool partial = st.kind == hd_step::exchange && (i > lead || (h.rem && c < 2 * h.rem));
      auto f = [&](std::size_t lo, std::size_t len, slice dst, bool fin) {  // elements [lo, lo+len) of the range
        if (partial) return fold(dst, {rbuf + lo, acc + lo}, len, fin);
        s.src.runs(r.offset + lo, len, [&](slice mine, std::size_t rel, std::size_t l) {
          fold(dst + rel, {rbuf + lo + rel, mine}, l, fin);
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
    const std::size_t d = s.d, p = ext_[d], c = coords_[d];
    const block_range r = s.r, bc = block_of(r.count, p, c);
    if (r.count == 0) return empty_stage(d, phase::reduce_scatter, 2);
    if (staged(d, r.count)) {
      stage(d, phase::reduce_scatter, 2, staged_sync, [&](std::size_t i) {
        if (i) return;
        cur_.signature = r.count;
        pack(s.src, r.offset, r.count, {region::staging_next, 0, 0});
        fold_peers(region::staging, p, {&s.out, 1}, bc.offset, bc.count, s.final, false);
      });
      return;
    }
    const slice base = s.src.base(r);
    stage(d, phase::reduce_scatter, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      publish(r.count, &base, nullptr);
      const bool nt = stream(bc.count * p_.elem_size);
      s.src.runs(r.offset + bc.offset, bc.count, [&](slice own, std::size_t rel, std::size_t len) {
        ins_.clear();
        for (std::size_t j = 0; j < p; ++j) ins_.push_back(j == c ? own : peer_slice(region::peer_src, j, own.offset - base.offset));
        const slice o = s.out + rel;
        op(local_op::fold, {&o, 1}, ins_, len, s.final, nt);
      });
    });
  }

  // all_reduce's last shared dimension: the reduce-scatter stage's one step folds
  // block c from every peer's source and writes it into every peer's recvbuf (the
  // all-gather in the same pass); the all-gather stage's one step is the leave.
  void fused_rs(std::size_t d, block_range r, const bview& src) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bc = block_of(r.count, p, c);
    if (r.count == 0) return empty_stage(d, phase::reduce_scatter, 1);
    const slice buf{region::recv, 0, r.offset};
    stage(d, phase::reduce_scatter, 1, shared_sync, [&](std::size_t) {
      if (staged(d, r.count)) {  // every rank folds the whole range from the staging buffers
        cur_.signature = r.count;
        pack(src, r.offset, r.count, {region::staging_next, 0, 0});
        return fold_peers(region::staging, p, {&buf, 1}, 0, r.count, true, false);
      }
      const slice base = src.base(r);
      publish(r.count, &base, &buf);
      outs_.clear(), ins_.clear();
      for (std::size_t j = 0; j < p; ++j) {
        outs_.push_back(j == c ? buf + bc.offset : peer_slice(region::peer_dst, j, bc.offset));
        ins_.push_back(j == c ? src.at(r.offset + bc.offset) : peer_slice(region::peer_src, j, bc.offset));
      }
      op(local_op::fold, outs_, ins_, bc.count, true, stream(bc.count * p_.elem_size * p));
    });
  }
  void fused_ag(std::size_t d, block_range r) {
    const bool leave = r.count && !staged(d, r.count);
    stage(d, phase::all_gather, 1, [&](std::size_t) { return leave ? sync_kind::leave : sync_kind::none; },
          [](std::size_t) {});
  }

  // ---- all-gather stages -------------------------------------------------------------
  // buf covers the stage's range, this rank's block present.
  void all_gather_stage(std::size_t d, block_range r, slice buf) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bc = block_of(r.count, p, c);
    if (dim(d).shared) {
      if (r.count == 0) return empty_stage(d, phase::all_gather, 2);
      const bool small = staged(d, r.count);
      stage(d, phase::all_gather, 2, small ? staged_sync : shared_sync, [&](std::size_t i) {
        if (i) return;
        if (small) {
          cur_.signature = r.count;
          copy({region::staging_next, 0, 0}, buf + bc.offset, bc.count, true);
        } else {
          publish(r.count, nullptr, &buf);
        }
        for (std::size_t j = 0; j < p; ++j) {
          const block_range bj = block_of(r.count, p, j);
          if (j != c) copy(buf + bj.offset, peer_slice(small ? region::staging : region::peer_dst, j, small ? 0 : bj.offset), bj.count);
        }
      });
      return;
    }
    if (dim(d).algo == algorithm::direct) {
      return message_stage(d, phase::all_gather, 1, [&](std::size_t) {
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) recv(j, buf + block_of(r.count, p, j).offset, block_of(r.count, p, j).count);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) send(j, buf + bc.offset, bc.count);
      });
    }
    if (dim(d).algo == algorithm::halving_doubling) {
      return message_stage(d, phase::all_gather, hd_shape_of(p).steps(), [&](std::size_t i) {
        const hd_step st = hd_ag_step(hd_shape_of(p), r.count, c, i);
        if (st.receives) recv(st.partner, buf + st.recv.offset, st.recv.count);
        if (st.sends) send(st.partner, buf + st.send.offset, st.send.count);
      });
    }
    message_stage(d, phase::all_gather, p - 1, [&](std::size_t i) {
      const block_range bs = block_of(r.count, p, ring_ag_send_block(c, i, p));
      const block_range br = block_of(r.count, p, ring_ag_recv_block(c, i, p));
      recv((c + p - 1) % p, buf + br.offset, br.count);
      send((c + 1) % p, buf + bs.offset, bs.count);
    });
  }

  // ---- shared-access helpers -----------------------------------------------------------
  static sync_kind shared_sync(std::size_t i) { return i ? sync_kind::leave : sync_kind::arrive; }
  static sync_kind staged_sync(std::size_t i) { return i ? sync_kind::none : sync_kind::arrive; }
  void publish(std::size_t n, const slice* src, const slice* dst) {
    cur_.signature = n;
    if (src) cur_.publish_src = *src, cur_.publishes_src = true;
    if (dst) cur_.publish_dst = *dst, cur_.publishes_dst = true;
  }
  // outs = the fold, in coordinate order, of elements [off, off+n) of every peer's `where`.
  void fold_peers(region where, std::size_t p, std::span<const slice> outs, std::size_t off, std::size_t n, bool final,
                  bool nt) {
    ins_.clear();
    for (std::size_t j = 0; j < p; ++j) ins_.push_back(peer_slice(where, j, off));
    op(local_op::fold, outs, ins_, n, final, nt);
  }
  // A stage whose range is empty on every rank of the ring: its steps, doing nothing.
  void empty_stage(std::size_t d, phase ph, std::size_t n) {
    stage(d, ph, n, [](std::size_t) { return sync_kind::none; }, [](std::size_t) {});
  }

  const program_params& p_;
  std::size_t V_;
  std::vector<std::size_t> ext_, coords_;
  std::vector<std::size_t> stride_;  // all_reduce: receive slot stride per dimension
  scratch_layout L_;
  program out_;
  program_step cur_;
  bool post_ = false;
  std::size_t seg_ = 0, stage_ = 0;
  std::vector<slice> ins_, outs_;
};

}  // namespace detail

MDRING_NAMESPACE_END
