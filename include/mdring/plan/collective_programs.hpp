// mdring/plan/collective_programs.hpp: the five collectives as programs.
//
//   make_program(params)   the program of one rank's call (plan/program.hpp)
//
//   all_reduce      per segment: reduce-scatter in dims 0..k-1 (partials in recvbuf),
//                   all-gather in k-1..0; a shared last dimension fuses the two
//   reduce_scatter  reduce-scatter in 0..k-1 (partials in scratch W after the first
//                   stage), sendbuf read in MPI's block order
//   all_gather      the block copied into W, all-gather in k-1..1, then dimension 0
//                   unpacks into recvbuf in MPI's block order
//   broadcast       scatter from the root in 0..k-1 (the root's line), all-gather back
//                   (a shared last dimension: the range read from the root in
//                   between, or halves on two ranks); or (small calls,
//                   program_params::trees) binomial trees of the whole buffer in k-1..0
//   reduce          reduce-scatter in 0..k-1, then gather to the root in k-1..0 (a
//                   shared last dimension: both in one stage); or binomial trees to
//                   the root in 0..k-1
//
// A recursive_doubling dimension of all_reduce all-reduces its whole range in one
// stage (no all-gather); the dimensions after it cut that range as usual.
//
// Dimensions of extent 1 have no stage. Scratch (one region, 64-byte aligned
// parts; all_reduce uses receive slots per segment instead), with m the largest
// block of the first non-trivial dimension:
//   R0, R1  a received block (R1: the partial being sent when no recvbuf holds
//           partials; halving-doubling: the whole stage range)
//   Q       p-1 receive blocks of a direct stage by messages; P: packed sends
//   W       m elements: the rank's share after the first stage
// Postconditions: every rank of a ring of dimension d gets the same number of
// steps in each stage of d, and a message's count is the same at both ends
// (tests/test_program.cpp replays every program of every rank).
#pragma once

#include "build_stages.hpp"
#include "pipeline.hpp"

#include "../topology/coordinates.hpp"

#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

class collective_program_builder : public stage_builder {
public:
  using stage_builder::stage_builder;

  program build() {
    out_.kind = p_.kind;
    out_.count = p_.count;
    for (std::size_t d = 0; d < ext_.size(); ++d)
      if (ext_[d] > 1) nontrivial_.push_back(d);
    if (p_.kind != collective::all_reduce) begin_segment(0);
    switch (p_.kind) {
      case collective::all_reduce:
        all_reduce();
        break;
      case collective::reduce_scatter:
        reduce_scatter();
        break;
      case collective::all_gather:
        all_gather();
        break;
      case collective::broadcast:
        broadcast();
        break;
      default:
        reduce();
        break;
    }
    out_.segment_begin.push_back(out_.steps.size());
    return std::move(out_);
  }

private:
  std::size_t first() const { return nontrivial_.front(); }
  std::size_t last() const { return nontrivial_.back(); }
  std::size_t P() const {
    std::size_t n = 1;
    for (auto e : ext_) n *= e;
    return n;
  }
  void begin_segment(std::size_t s) {
    seg_ = s, stage_ = 0;
    out_.segment_begin.push_back(out_.steps.size());
  }
  // One local step: recvbuf = sendbuf (finalized), for one rank.
  void local_copy(std::size_t n, bool fold_op) {
    open(0, 0, phase::reduce_scatter, sync_kind::none);
    cur_.stage_begin = cur_.stage_end = true;
    if (fold_op) fold({region::recv, 0, 0}, {{region::send, 0, 0}}, n, true);
    else copy({region::recv, 0, 0}, {region::send, 0, 0}, n);
    close();
  }
  std::vector<block_range> ranges(std::size_t n) const {
    std::vector<block_range> rg(ext_.size());
    stage_ranges(n, ext_, coords_, rg);
    return rg;
  }
  std::size_t al(std::size_t elems) const { return aligned_elements(elems, p_.elem_size); }

  // ---- all_reduce -------------------------------------------------------------------
  bool rd(std::size_t d) const { return dim(d).algo == algorithm::recursive_doubling; }
  // The pull form (dim_program::streamed): the only ring, and the range is not
  // staged (on every rank of the ring alike: they share the range).
  bool pull(std::size_t d, block_range r) const { return dim(d).streamed && first() == last() && !staged(d, r.count); }

  void all_reduce() {
    const std::size_t n = p_.count;
    for (std::size_t d : nontrivial_)
      out_.stage_dims.push_back(d), out_.stage_phases.push_back(rd(d) ? phase::all_reduce : phase::reduce_scatter);
    for (std::size_t i = nontrivial_.size(); i-- > 0;)
      if (!rd(nontrivial_[i]))
        out_.stage_dims.push_back(nontrivial_[i]), out_.stage_phases.push_back(phase::all_gather);
    if (n == 0 || nontrivial_.empty()) begin_segment(0);
    if (n == 0) return;
    if (nontrivial_.empty()) return local_copy(n, true);
    // Recursive doubling keeps its range whole (plan/pipeline.hpp cut_shape_of).
    std::vector<algorithm> algos(ext_.size());
    for (std::size_t d = 0; d < ext_.size(); ++d) algos[d] = dim(d).algo;
    const cut_shape cut = cut_shape_of(ext_, coords_, algos);
    const segmentation sg = make_segmentation(n, p_.segment_length, cut.extents, cut.coords);
    out_.segments = sg.segments, out_.segment_length = sg.length;
    // Receive slots of one segment: the most any stage needs (a full segment is the largest).
    stride_.assign(ext_.size(), 0);
    for (std::size_t d : nontrivial_) {
      if (dim(d).shared) continue;
      const std::size_t range = sg.full[d].count, mb = max_block(range, ext_[d]);
      const std::size_t slots = dim(d).algo == algorithm::direct ? ext_[d] - 1 : 1;
      const std::size_t need = dim(d).algo == algorithm::halving_doubling ? hd_receive_elements(d, range)
                               : rd(d)                                    ? range
                                                                          : mb;
      stride_[d] = (need + (V_ > 1 ? V_ : 0) + V_ - 1) / V_ * V_;
      out_.slot_elements = slots * stride_[d] > out_.slot_elements ? slots * stride_[d] : out_.slot_elements;
    }
    const bool fuse = dim(last()).shared;
    for (std::size_t s = 0; s < sg.segments; ++s) {
      begin_segment(s);
      const auto& rg = sg.ranges(s);
      auto range = [&](std::size_t d) { return block_range{sg.first(s) + rg[d].offset, rg[d].count}; };
      for (std::size_t d : nontrivial_) {
        const block_range r = range(d);
        const bview src{d == first() ? region::send : region::recv};
        if (rd(d)) {
          rd_stage(d, r, src, d == last());
          continue;
        }
        if (fuse && d == last()) {
          if (pull(d, r)) {
            const std::size_t at = r.offset + block_of(r.count, ext_[d], coords_[d]).offset;
            const slice outs[] = {{region::recv, 0, at}, {region::result, 0, at}};
            streamed_rs(d, r, outs, 1);
          } else {
            fused_rs(d, r, src);
          }
          continue;
        }
        const slice mid{region::recv, 0, r.offset};
        reduce_scatter_stage({d, r, src, mid, mid + block_of(r.count, ext_[d], coords_[d]).offset, d == last()});
      }
      for (std::size_t i = nontrivial_.size(); i-- > 0;) {
        const std::size_t d = nontrivial_[i];
        if (rd(d)) continue;
        if (fuse && d == last()) pull(d, range(d)) ? streamed_ag(d, range(d)) : fused_ag(d, range(d));
        else all_gather_stage(d, range(d), {region::recv, 0, range(d).offset});
      }
    }
  }

  // ---- scratch of the other collectives --------------------------------------------------
  // The reduce-scatter half: no recvbuf for the first stage's partials unless
  // first_has_mid; W when need_w; packing when the source is permuted.
  void layout_rs(const std::vector<block_range>& rg, bool permuted, bool first_has_mid, bool need_w) {
    std::size_t r = 0, q = 0, pack = 0;
    bool two_r = !first_has_mid || permuted;
    for (std::size_t d : nontrivial_) {
      const std::size_t p = ext_[d], mb = max_block(rg[d].count, p);
      if (dim(d).algo == algorithm::direct) {
        if (dim(d).shared) continue;
        q = (p - 1) * mb > q ? (p - 1) * mb : q;
        if (permuted && d == first()) pack = (p - 1) * mb;
      } else if (dim(d).algo == algorithm::halving_doubling) {
        r = rg[d].count > r ? rg[d].count : r;
        two_r = true;
      } else {
        r = mb > r ? mb : r;
      }
    }
    place(r, two_r, q, pack, need_w ? max_block(rg[first()].count, ext_[first()]) : 0);
  }
  void place(std::size_t r, bool two_r, std::size_t q, std::size_t pack, std::size_t w) {
    L_.r0 = 0;
    L_.r1 = al(r);
    L_.q = L_.r1 + (two_r ? al(r) : 0);
    L_.pack = L_.q + al(q);
    L_.w = L_.pack + al(pack);
    out_.scratch_elements = L_.w + al(w);
  }

  // ---- reduce_scatter -----------------------------------------------------------------------
  void reduce_scatter() {
    const std::size_t rc = p_.count, n = rc * P();
    if (nontrivial_.empty()) return local_copy(rc, true);
    const auto rg = ranges(n);
    const bool permuted = nontrivial_.size() > 1;
    layout_rs(rg, permuted, false, first() != last());
    bview src{region::send};
    if (permuted) src.blk = rc, src.extents = ext_;
    const block_range b1 = block_of(rg[first()].count, ext_[first()], coords_[first()]);
    const std::size_t w_lo = rg[first()].offset + b1.offset;
    const bview w{region::scratch, L_.w, w_lo};
    for (std::size_t d : nontrivial_) {
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      if (r.count == 0) continue;
      const bool is_last = d == last();
      if (pull(d, r)) {  // the only ring: the pull form (a rank's blocks for its peers in `source`)
        const slice out{region::recv, 0, 0};
        streamed_rs(d, r, {&out, 1}, 2);
      } else if (d == first()) {
        reduce_scatter_stage({d, r, src, std::nullopt, is_last ? slice{region::recv, 0, 0} : w.at(w_lo), is_last});
      } else {
        const slice mid = w.at(r.offset);
        reduce_scatter_stage({d, r, w, mid, is_last ? slice{region::recv, 0, 0} : mid + b.offset, is_last});
      }
    }
  }

  // ---- all_gather -------------------------------------------------------------------------------
  void all_gather() {
    const std::size_t sc = p_.count, n = sc * P();
    if (sc == 0) return;
    if (nontrivial_.empty()) return local_copy(sc, false);
    const auto rg = ranges(n);
    const slice own_at{region::recv, 0, p_.rank * sc};
    if (first() == last()) {  // one ring: nested order is rank order
      // The pull form: the block into `source` too (node memory where recvbuf cannot
      // be mapped; engine.hpp stream_in), from which the peers read it.
      // Its peers read that copy at once, while it may still sit dirty in this
      // core's cache (2 to 3 x slower for blocks of 1 MiB here): from a block of
      // tune.nontemporal_bytes it goes around the cache. (The copy into recvbuf, read
      // by peers only without the pull form, stays cached: going around the cache
      // there cost node memory 10 % at 8 MiB, measured.)
      const bool stream = pull(first(), rg[first()]);
      local_step([&] {
        copy(own_at, {region::send, 0, 0}, sc, true);
        if (stream)
          copy({region::source, 0, own_at.offset}, {region::send, 0, 0}, sc, true, this->stream(sc * p_.elem_size));
      });
      return all_gather_stage(first(), rg[first()], {region::recv, 0, rg[first()].offset}, stream);
    }
    const std::size_t p1 = ext_[first()], c1 = coords_[first()], mb1 = max_block(rg[first()].count, p1);
    std::size_t r = 0, q = 0;
    if (dim(first()).algo == algorithm::halving_doubling) r = rg[first()].count;  // gathered before unpacking
    else if (dim(first()).algo != algorithm::direct) r = mb1;
    else if (!dim(first()).shared) q = (p1 - 1) * mb1;
    place(r, true, q, 0, mb1);
    const block_range b1 = block_of(rg[first()].count, p1, c1);
    const std::size_t w_lo = rg[first()].offset + b1.offset;
    const bview w{region::scratch, L_.w, w_lo};
    local_step([&] { copy(w.at(nested_index(ext_, coords_) * sc), {region::send, 0, 0}, sc, true); });
    for (std::size_t i = nontrivial_.size(); i-- > 1;) {
      const std::size_t d = nontrivial_[i];
      if (rg[d].count) all_gather_stage(d, rg[d], w.at(rg[d].offset));
    }
    bview outv{region::recv};
    outv.blk = sc, outv.extents = ext_;
    unpack(first(), rg[first()], w.at(w_lo), outv);
  }
  template <class F>
  void local_step(F&& f) {
    open(0, 0, phase::all_gather, sync_kind::none);
    cur_.stage_begin = cur_.stage_end = true;
    f();
    close();
    ++stage_;
  }

  // All-gather of dimension d whose blocks land in `out` through the permutation;
  // `own` holds this rank's block c of the range, contiguous.
  void unpack(std::size_t d, block_range r, slice own, const bview& outv) {
    const std::size_t p = ext_[d], c = coords_[d], n = r.count;
    const block_range bc = block_of(n, p, c);
    auto put = [&](slice from, const block_range& b, bool pre) {
      outv.runs(r.offset + b.offset, b.count,
                [&](slice to, std::size_t rel, std::size_t len) { copy(to, from + rel, len, pre); });
    };
    auto put_all = [&](auto&& from) {  // every peer's block, from(j)
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) put(from(j), block_of(n, p, j), false);
    };
    if (dim(d).shared) {
      const bool small = staged(d, n);
      return stage(d, phase::all_gather, 2, small ? staged_sync : shared_sync, [&](std::size_t i) {
        if (i) return;
        put(own, bc, true);
        if (small) {
          cur_.signature = n;
          copy({region::staging_next, 0, 0}, own, bc.count, true);
          return put_all([](std::size_t j) { return peer_slice(region::staging, j, 0); });
        }
        publish(n, nullptr, &own);
        put_all([](std::size_t j) { return peer_slice(region::peer_dst, j, 0); });
      });
    }
    if (dim(d).algo == algorithm::halving_doubling) {  // gathered in block order into R0, then unpacked
      const hd_shape h = hd_shape_of(p);
      return message_stage(d, phase::all_gather, h.steps(), [&](std::size_t i) {
        if (i == 0) put(own, bc, true), copy(R(0) + bc.offset, own, bc.count, true);
        const hd_step st = hd_ag_step(h, n, c, i);
        if (st.receives) recv(st.partner, R(0) + st.recv.offset, st.recv.count);
        if (st.sends) send(st.partner, R(0) + st.send.offset, st.send.count);
        if (i + 1 == h.steps()) put_all([&](std::size_t j) { return R(0) + block_of(n, p, j).offset; });
      });
    }
    if (dim(d).algo == algorithm::direct) {
      const std::size_t mb = max_block(n, p);
      auto q = [&](std::size_t j) { return slice{region::scratch, 0, L_.q + (j < c ? j : j - 1) * mb}; };
      return message_stage(d, phase::all_gather, 1, [&](std::size_t) {
        put(own, bc, true);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) recv(j, q(j), block_of(n, p, j).count);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) send(j, own, bc.count);
        put_all(q);
      });
    }
    message_stage(d, phase::all_gather, p - 1, [&](std::size_t i) {
      if (i == 0) put(own, bc, true);
      const block_range bs = block_of(n, p, ring_ag_send_block(c, i, p));
      const block_range br = block_of(n, p, ring_ag_recv_block(c, i, p));
      recv((c + p - 1) % p, R(i % 2), br.count);
      send((c + 1) % p, i == 0 ? own : R((i - 1) % 2), bs.count);
      put(R(i % 2), br, false);
    });
  }

  // ---- broadcast and reduce ----------------------------------------------------------------------
  std::vector<std::size_t> root_coords() const {
    std::vector<std::size_t> rc(ext_.size());
    to_coordinates(p_.root, ext_, rc);
    return rc;
  }
  // This rank takes part in dimension d's scatter/gather: its coordinates above d are the root's.
  bool line_of_root(std::size_t d, const std::vector<std::size_t>& rc) const {
    for (std::size_t e = d + 1; e < ext_.size(); ++e)
      if (coords_[e] != rc[e]) return false;
    return true;
  }

  // The ranks whose coordinates below d are the root's: a tree stage of dimension d.
  bool below_root(std::size_t d, const std::vector<std::size_t>& rc) const {
    for (std::size_t e = 0; e < d; ++e)
      if (coords_[e] != rc[e]) return false;
    return true;
  }

  // Broadcast by binomial trees (program_params::trees): the whole buffer from the
  // root's coordinate along each dimension, outermost first, among the ranks whose
  // lower coordinates are the root's. Step s: relative coordinate v < 2^s sends to
  // v + 2^s.
  void broadcast_trees(const std::vector<std::size_t>& rc) {
    const std::size_t n = p_.count;
    const slice buf{region::recv, 0, 0};
    for (std::size_t i = nontrivial_.size(); i-- > 0;) {
      const std::size_t d = nontrivial_[i], p = ext_[d], c = coords_[d], v = (c + p - rc[d]) % p;
      if (!below_root(d, rc)) continue;
      message_stage(d, phase::broadcast, tree_steps(p), [&](std::size_t s) {
        const std::size_t m = std::size_t(1) << s;
        if (v < m && v + m < p) send((c + m) % p, buf, n);
        else if (v >= m && v < 2 * m) recv((c + p - m) % p, buf, n);
      });
    }
  }

  // Reduce by binomial trees: along each dimension, innermost first, to the root's
  // coordinate, among the ranks whose lower coordinates are the root's. Step s:
  // relative coordinate v = 2^s mod 2^(s+1) sends its partial to v - 2^s and is
  // done; v = 0 mod 2^(s+1) receives v + 2^s's (into R0) and folds it after its own.
  // Partials: the root's recvbuf, W elsewhere. The root's last fold finalizes.
  void reduce_trees(const std::vector<std::size_t>& rc) {
    const std::size_t n = p_.count;
    const bool root = p_.rank == p_.root;
    place(n, false, 0, 0, root ? 0 : n);
    const slice acc = root ? slice{region::recv, 0, 0} : slice{region::scratch, 0, L_.w};
    bool folded = false;
    for (std::size_t d : nontrivial_) {
      const std::size_t p = ext_[d], c = coords_[d], v = (c + p - rc[d]) % p, S = tree_steps(p);
      if (!below_root(d, rc)) continue;
      message_stage(d, phase::reduce, S, [&](std::size_t s) {
        const std::size_t m = std::size_t(1) << s;
        const slice own = folded ? acc : slice{region::send, 0, 0};
        if (v % (2 * m) == m) return send((c + p - m) % p, own, n);
        if (v % (2 * m) != 0 || v + m >= p) return;
        recv((c + m) % p, R(0), n);
        fold(acc, {own, R(0)}, n, root && d == last() && s + 1 == S);
        folded = true;
      });
    }
  }

  void broadcast() {
    const std::size_t n = p_.count;
    if (nontrivial_.empty() || n == 0) return;
    const auto rg = ranges(n);
    const auto rc = root_coords();
    if (p_.trees) return broadcast_trees(rc);
    // A last dimension shared: its scatter and all-gather, which follow each other,
    // become one stage that reads the range from the root (shared_broadcast).
    const bool whole_last = dim(last()).shared;
    for (std::size_t d : nontrivial_) {
      if (!line_of_root(d, rc) || rg[d].count == 0) continue;
      if (whole_last && d == last()) {
        shared_broadcast(d, rg[d], rc[d]);
        continue;
      }
      const std::size_t p = ext_[d], c = coords_[d];
      const slice buf{region::recv, 0, rg[d].offset};
      message_stage(d, phase::scatter, 1, [&](std::size_t) {
        for (std::size_t j = 0; j < p; ++j) {
          const block_range bj = block_of(rg[d].count, p, j);
          if (c == rc[d] && j != c) send(j, buf + bj.offset, bj.count);
          if (c != rc[d] && j == c) recv(rc[d], buf + bj.offset, bj.count);
        }
      });
    }
    for (std::size_t i = nontrivial_.size(); i-- > 0;) {
      const std::size_t d = nontrivial_[i];
      if (rg[d].count && !(whole_last && d == last())) all_gather_stage(d, rg[d], {region::recv, 0, rg[d].offset});
    }
  }

  // Broadcast of range r over shared dimension d from coordinate `root`: one stage
  // and one synchronization (a scatter and an all-gather would copy each byte once
  // and a half, and synchronize three times). Ranges up to staging_bytes go through
  // the root's staging buffer. Larger ones: on two ranks, the root writes the
  // second half into its peer's recvbuf while the peer reads the first half from
  // the root's (split_broadcast: both move half, in parallel; the peer reading
  // the whole range alone took 2 to 3 x as long). From three ranks every other rank
  // copies the whole range from the root's recvbuf, or, in the pull form
  // (dim_program::streamed; plan/cost.hpp whole_streaming_pays), from the node
  // memory (`source`) the root copies its recvbuf into first, which its peers map
  // where they could reach the recvbuf only by cross-memory attach. (The split
  // generalizes, root writing block j into peer j, but on 4 processes of 2 cores
  // it measured 1.3 to 1.6 x slower than the peers reading alone at 64 KiB to
  // 1 MiB.)
  void shared_broadcast(std::size_t d, block_range r, std::size_t root) {
    const std::size_t c = coords_[d];
    const bool is_root = c == root;
    const slice buf{region::recv, 0, r.offset}, src{region::source, 0, r.offset};
    if (staged(d, r.count)) {
      stage(d, phase::broadcast, 2, staged_sync, [&](std::size_t i) {
        if (i) return;
        cur_.signature = r.count;
        if (is_root) copy({region::staging_next, 0, 0}, buf, r.count, true);
        else copy(buf, peer_slice(region::staging, root, 0), r.count);
      });
      return;
    }
    const bool pull = this->pull(d, r);
    stage(d, phase::broadcast, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      const bool nt = stream(r.count * p_.elem_size);
      if (is_root && pull) copy(src, buf, r.count, true, nt);
      publish(r.count, pull ? &src : nullptr, &buf);
      if (!split_broadcast(d)) {
        if (!is_root) copy(buf, peer_slice(pull ? region::peer_src : region::peer_dst, root, 0), r.count, false, nt);
        return;
      }
      const block_range half = block_of(r.count, 2, 1);
      if (is_root) copy(peer_slice(region::peer_dst, 1 - c, half.offset), buf + half.offset, half.count, false, nt);
      else copy(buf, peer_slice(region::peer_dst, root, 0), half.offset, false, nt);
    });
  }
  // plan/plan.hpp make_plan: the same test. (The pull form has three ranks or more:
  // plan/cost.hpp whole_streaming_pays.)
  bool split_broadcast(std::size_t d) const { return ext_[d] == 2 && !dim(d).streamed; }

  void reduce() {
    const std::size_t n = p_.count;
    if (nontrivial_.empty()) return local_copy(n, true);
    const auto rg = ranges(n);
    const auto rc = root_coords();
    if (p_.trees) return n ? reduce_trees(rc) : void();
    const bool root = p_.rank == p_.root;
    const block_range b1 = block_of(rg[first()].count, ext_[first()], coords_[first()]);
    const std::size_t w_lo = rg[first()].offset + b1.offset;
    layout_rs(rg, false, root, !root);
    const bview w{region::scratch, L_.w, w_lo}, recvv{region::recv}, sendv{region::send};
    const bool whole_last = whole_reduce(last());
    const bool split_last = !whole_last && split_reduce(last(), rg[last()].count);
    for (std::size_t d : nontrivial_) {
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      if (r.count == 0) continue;
      if ((whole_last || split_last) && d == last()) {
        const bview& src = d == first() ? sendv : root ? recvv : w;
        if (whole_last) shared_reduce(d, r, rc[d], src, (root ? recvv : w).at(r.offset));
        else shared_reduce_split(d, r, rc[d], src, (root ? recvv : w).at(r.offset));
        continue;
      }
      if (root)
        reduce_scatter_stage(
            {d, r, d == first() ? sendv : recvv, recvv.at(r.offset), recvv.at(r.offset + b.offset), d == last()});
      else if (d == first()) reduce_scatter_stage({d, r, sendv, std::nullopt, w.at(w_lo), d == last()});
      else reduce_scatter_stage({d, r, w, w.at(r.offset), w.at(r.offset + b.offset), d == last()});
    }
    for (std::size_t i = nontrivial_.size(); i-- > 0;) {
      const std::size_t d = nontrivial_[i], p = ext_[d], c = coords_[d];
      if (!line_of_root(d, rc) || rg[d].count == 0 || ((whole_last || split_last) && d == last())) continue;
      const block_range r = rg[d], b = block_of(r.count, p, c);
      const bview& buf = root ? recvv : w;
      message_stage(d, phase::gather, 1, [&](std::size_t) {
        if (c != rc[d]) return send(rc[d], buf.at(r.offset + b.offset), b.count);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) recv(j, buf.at(r.offset + block_of(r.count, p, j).offset), block_of(r.count, p, j).count);
      });
    }
  }

  // A reduce's last dimension, shared by two ranks, in a call of at most
  // tune.shared_reduce_max_bytes: its reduce-scatter and gather, which follow each
  // other, become one stage in which the rank at the root's coordinate folds the
  // whole range, reading its peer's (shared_reduce). Two ranks only: the root then
  // reads what the gather would have brought it, and the stage synchronizes once
  // instead of twice; from three, the reduce-scatter shares the folding out, as it
  // does for large calls, where two ranks folding in parallel win. (plan/plan.hpp
  // make_plan's whole_reduce: the same test.)
  bool whole_reduce(std::size_t d) const {
    return dim(d).shared && ext_[d] == 2 && p_.count * p_.elem_size <= p_.shared_reduce_max_bytes;
  }

  // Reduce of range r over shared dimension d to coordinate `root`, into `out` (the
  // root's whole range): the root folds every rank's src, in coordinate order.
  // Ranges up to staging_bytes through the staging buffers; larger ones read from
  // the peers' buffers (mapped, or by cross-memory attach), which they keep until
  // the root leaves.
  void shared_reduce(std::size_t d, block_range r, std::size_t root, const bview& src, slice out) {
    const std::size_t p = ext_[d], c = coords_[d];
    const bool is_root = c == root;
    if (staged(d, r.count)) {
      stage(d, phase::reduce, 2, staged_sync, [&](std::size_t i) {
        if (i) return;
        cur_.signature = r.count;
        pack(src, r.offset, r.count, {region::staging_next, 0, 0});
        if (is_root) fold_peers(region::staging, p, {&out, 1}, 0, r.count, true, false);
      });
      return;
    }
    const slice base = src.base(r);
    stage(d, phase::reduce, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      publish(r.count, &base, nullptr);
      if (is_root) fold_from_peers(d, src, base, r.offset, r.count, true, [&](std::size_t rel) { return out + rel; });
    });
  }

  // A reduce's last dimension, shared, whose range is not staged and that
  // whole_reduce leaves alone: its reduce-scatter and gather become one stage in
  // which rank c folds block c from every rank's src and writes it straight into
  // the root's `out` (shared_reduce_split). (plan/plan.hpp make_plan: the same test.)
  bool split_reduce(std::size_t d, std::size_t n) const {
    return p_.shared_reduce_split && dim(d).shared && !staged(d, n);
  }

  // Reduce of range r over shared dimension d to coordinate `root`: the ranks fold a
  // block each, in parallel, as a reduce-scatter, reading the peers' src, and the
  // others write theirs into the root's `out` (mapped, or by cross-memory attach)
  // instead of sending it in a gather: one synchronization and no message. Through
  // the interposer on 2 processes, heap buffers: 0.5 to 0.6 x the time of the
  // reduce-scatter and gather at 4 MiB; from 256 KiB faster than whole_reduce's one
  // rank folding all.
  void shared_reduce_split(std::size_t d, block_range r, std::size_t root, const bview& src, slice out) {
    const bool is_root = coords_[d] == root;
    const block_range bc = block_of(r.count, ext_[d], coords_[d]);
    const slice base = src.base(r);
    stage(d, phase::reduce, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      publish(r.count, &base, is_root ? &out : nullptr);
      fold_from_peers(d, src, base, r.offset + bc.offset, bc.count, true, [&](std::size_t rel) {
        return is_root ? out + (bc.offset + rel) : peer_slice(region::peer_dst, root, bc.offset + rel);
      });
    });
  }

  std::vector<std::size_t> nontrivial_;
};

}  // namespace detail

// The program of one rank's call (see the top of this file and plan/program.hpp).
inline program make_program(const program_params& p) { return detail::collective_program_builder(p).build(); }

MDRING_NAMESPACE_END
