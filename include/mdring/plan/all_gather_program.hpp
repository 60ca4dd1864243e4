// mdring/plan/all_gather_program.hpp: all_gather as a program.
//
//   make_all_gather_program(params)   the program of one rank's all_gather
//
// One ring: the block is copied to its place in recvbuf (nested order is rank
// order) and dimension 0 gathers in place. Two or more non-trivial dimensions:
// the block copied into scratch W at its nested position, all-gather stages in
// k-1..1 there, then dimension 0's stage gathers its range and unpacks every
// block into recvbuf in MPI's block order (unpack: recvbuf is a permuted view,
// plan/build_program.hpp bview). Example: 4 ranks as 2 x 2 rings, sendcount 3,
// rank 1 (coordinates 1, 0): its block goes to W at nested block 2
// (plan/blocks.hpp nested_index: coordinate 0 most significant), dimension 1
// gathers nested blocks 2 and 3 (ranks 1 and 3) there, and dimension 0's stage
// writes recvbuf's blocks 1 and 3 from W and blocks 0 and 2 (ranks 0 and 2) from
// what rank 0 sends.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "blocks.hpp"
#include "build_program.hpp"
#include "build_stages.hpp"
#include "halving_doubling.hpp"
#include "program.hpp"
#include "program_writer.hpp"

#include <cstddef>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Writes an all_gather through the parts of plan/build_stages.hpp builder_parts.
class all_gather_builder {
public:
  explicit all_gather_builder(builder_parts& x) : c_(x.c), L_(x.L), w_(x.w), st_(x.st) {}

  void write() {
    w_.begin_segment(0);
    const std::size_t sc = c_.params().count, n = sc * c_.ranks();
    if (sc == 0) return;
    if (c_.nontrivial().empty()) return w_.local_copy(sc, false);
    const auto rg = c_.ranges(n);
    const std::size_t first = c_.first();
    const slice own_at{region::recv, 0, c_.params().rank * sc};
    if (first == c_.last()) {  // one ring: nested order is rank order
      // The pull form: the block into `source` too (node memory where recvbuf cannot
      // be mapped; executor/host/engine.hpp stream_in), from which the peers read it.
      // Its peers read that copy at once, while it may still sit dirty in this
      // core's cache (2 to 3 x slower for blocks of 1 MiB here): from a block of
      // tune.nontemporal_bytes it goes around the cache. (The copy into recvbuf, read
      // by peers only without the pull form, stays cached: going around the cache
      // there cost node memory 10 % at 8 MiB, measured.)
      const bool stream = c_.pull(first, rg[first]);
      local_step([&] {
        w_.copy(own_at, {region::send, 0, 0}, sc, true);
        if (stream)
          w_.copy({region::source, 0, own_at.offset}, {region::send, 0, 0}, sc, true,
                  c_.stream(sc * c_.params().elem_size));
      });
      return st_.all_gather_stage(first, rg[first], {region::recv, 0, rg[first].offset}, stream);
    }
    const std::size_t p1 = c_.extent(first), c1 = c_.coord(first), mb1 = max_block(rg[first].count, p1);
    std::size_t r = 0, q = 0;
    if (c_.dim(first).algo == algorithm::halving_doubling) r = rg[first].count;  // gathered before unpacking
    else if (c_.dim(first).algo != algorithm::direct) r = mb1;
    else if (!c_.dim(first).shared) q = (p1 - 1) * mb1;
    L_.place(r, true, q, 0, mb1);
    const block_range b1 = block_of(rg[first].count, p1, c1);
    const std::size_t w_lo = rg[first].offset + b1.offset;
    const bview w{region::scratch, L_.W(), w_lo};
    local_step([&] { w_.copy(w.at(nested_index(c_.extents(), c_.coords()) * sc), {region::send, 0, 0}, sc, true); });
    const auto nt = c_.nontrivial();
    for (std::size_t i = nt.size(); i-- > 1;) {
      const std::size_t d = nt[i];
      if (rg[d].count) st_.all_gather_stage(d, rg[d], w.at(rg[d].offset));
    }
    bview outv{region::recv};
    outv.blk = sc, outv.extents = c_.extents();
    unpack(first, rg[first], w.at(w_lo), outv);
  }

private:
  // A stage of one local step, f() its ops.
  template <class F>
  void local_step(F&& f) {
    w_.stage(0, phase::all_gather, 1, no_sync, [&](std::size_t) { f(); });
  }

  // All-gather of dimension d whose blocks land in `out` through the permutation;
  // `own` holds this rank's block c of the range, contiguous.
  void unpack(std::size_t d, block_range r, slice own, const bview& outv) {
    const std::size_t p = c_.extent(d), c = c_.coord(d), n = r.count;
    const block_range bc = block_of(n, p, c);
    auto put = [&](slice from, const block_range& b, bool pre) {
      outv.runs(r.offset + b.offset, b.count,
                [&](slice to, std::size_t rel, std::size_t len) { w_.copy(to, from + rel, len, pre); });
    };
    auto put_all = [&](auto&& from) {  // every peer's block, from(j)
      for (std::size_t j = 0; j < p; ++j)
        if (j != c) put(from(j), block_of(n, p, j), false);
    };
    if (c_.dim(d).shared) {
      const bool small = c_.staged(d, n);
      return w_.stage(d, phase::all_gather, 2, small ? staged_sync : shared_sync, [&](std::size_t i) {
        if (i) return;
        put(own, bc, true);
        if (small) {
          w_.sign(n);
          w_.copy({region::staging_next, 0, 0}, own, bc.count, true);
          return put_all([](std::size_t j) { return peer_slice(region::staging, j, 0); });
        }
        w_.publish(n, nullptr, &own);
        put_all([](std::size_t j) { return peer_slice(region::peer_dst, j, 0); });
      });
    }
    if (c_.dim(d).algo == algorithm::halving_doubling) {  // gathered in block order into R0, then unpacked
      const hd_shape h = hd_shape_of(p);
      return w_.message_stage(d, phase::all_gather, h.steps(), [&](std::size_t i) {
        if (i == 0) put(own, bc, true), w_.copy(L_.R(0) + bc.offset, own, bc.count, true);
        const hd_step st = hd_ag_step(h, n, c, i);
        if (st.receives) w_.recv(st.partner, L_.R(0) + st.recv.offset, st.recv.count);
        if (st.sends) w_.send(st.partner, L_.R(0) + st.send.offset, st.send.count);
        if (i + 1 == h.steps()) put_all([&](std::size_t j) { return L_.R(0) + block_of(n, p, j).offset; });
      });
    }
    if (c_.dim(d).algo == algorithm::direct) {
      const std::size_t mb = max_block(n, p);
      auto q = [&](std::size_t j) { return L_.Q(j < c ? j : j - 1, mb); };
      return w_.message_stage(d, phase::all_gather, 1, [&](std::size_t) {
        put(own, bc, true);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) w_.recv(j, q(j), block_of(n, p, j).count);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) w_.send(j, own, bc.count);
        put_all(q);
      });
    }
    w_.message_stage(d, phase::all_gather, p - 1, [&](std::size_t i) {
      if (i == 0) put(own, bc, true);
      const block_range bs = block_of(n, p, ring_ag_send_block(c, i, p));
      const block_range br = block_of(n, p, ring_ag_recv_block(c, i, p));
      w_.recv((c + p - 1) % p, L_.R(i % 2), br.count);
      w_.send((c + 1) % p, i == 0 ? own : L_.R((i - 1) % 2), bs.count);
      put(L_.R(i % 2), br, false);
    });
  }

  const call_context& c_;
  buffer_layout& L_;
  program_writer& w_;
  stage_emitter& st_;
};

}  // namespace detail

/// The program of one rank's all_gather (p.count: sendcount; p.kind is not read).
inline program make_all_gather_program(const program_params& p) {
  detail::builder_parts x(p, collective::all_gather);
  detail::all_gather_builder(x).write();
  return std::move(x).finish();
}

MDRING_NAMESPACE_END
