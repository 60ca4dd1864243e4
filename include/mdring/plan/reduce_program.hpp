// mdring/plan/reduce_program.hpp: reduce as a program.
//
//   make_reduce_program(params)   the program of one rank's reduce
//
// A reduce-scatter stage in dimensions 0..k-1 (the root's partials in its recvbuf,
// the others' in scratch W), then a gather to the root in k-1..0 among the ranks
// whose coordinates above d are the root's. A shared last dimension: its
// reduce-scatter and gather in one stage, one rank folding the whole range
// (shared_reduce, two ranks, small calls) or every rank writing its block into the
// root's buffer (shared_reduce_split). Small calls (program_params::trees):
// binomial trees to the root in 0..k-1 (reduce_trees). Example: 4 ranks as 2 x 2
// rings, root 0, 8 elements, by messages: dimension 0 leaves rank 0's half [0, 4)
// reduced over ranks 0 and 1 in its recvbuf (rank 1's half [4, 8) in its W),
// dimension 1 halves those again (rings {0, 2} and {1, 3}), and the gathers bring the
// quarters to ranks 0 and 1 (dimension 1), then the halves to rank 0 (dimension 0).
#pragma once

#include "../config.hpp"
#include "blocks.hpp"
#include "build_program.hpp"
#include "build_stages.hpp"
#include "cost.hpp"
#include "program.hpp"
#include "program_writer.hpp"

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Writes a reduce through the parts of plan/build_stages.hpp builder_parts.
class reduce_builder {
public:
  explicit reduce_builder(builder_parts& x) : c_(x.c), L_(x.L), w_(x.w), st_(x.st) {}

  void write() {
    w_.begin_segment(0);
    const program_params& prm = c_.params();
    const std::size_t n = prm.count;
    if (c_.nontrivial().empty()) return w_.local_copy(n, true);
    const auto rg = c_.ranges(n);
    const auto rc = c_.root_coords();
    if (prm.trees) return n ? reduce_trees(rc) : void();
    const bool root = prm.rank == prm.root;
    const std::size_t first = c_.first(), last = c_.last();
    const block_range b1 = block_of(rg[first].count, c_.extent(first), c_.coord(first));
    const std::size_t w_lo = rg[first].offset + b1.offset;
    L_.place_rs(rg, false, root, !root);
    const bview w{region::scratch, L_.W(), w_lo}, recvv{region::recv}, sendv{region::send};
    const bool whole_last = whole_reduce(last);
    const bool split_last = !whole_last && split_reduce(last, rg[last].count);
    for (std::size_t d : c_.nontrivial()) {
      const block_range r = rg[d], b = block_of(r.count, c_.extent(d), c_.coord(d));
      if (r.count == 0) continue;
      if ((whole_last || split_last) && d == last) {
        const bview& src = d == first ? sendv : root ? recvv : w;
        if (whole_last) shared_reduce(d, r, rc[d], src, (root ? recvv : w).at(r.offset));
        else shared_reduce_split(d, r, rc[d], src, (root ? recvv : w).at(r.offset));
        continue;
      }
      if (root)
        st_.reduce_scatter_stage(
            {d, r, d == first ? sendv : recvv, recvv.at(r.offset), recvv.at(r.offset + b.offset), d == last});
      else if (d == first) st_.reduce_scatter_stage({d, r, sendv, std::nullopt, w.at(w_lo), d == last});
      else st_.reduce_scatter_stage({d, r, w, w.at(r.offset), w.at(r.offset + b.offset), d == last});
    }
    const auto nt = c_.nontrivial();
    for (std::size_t i = nt.size(); i-- > 0;) {
      const std::size_t d = nt[i], p = c_.extent(d), c = c_.coord(d);
      if (!c_.line_of_root(d, rc) || rg[d].count == 0 || ((whole_last || split_last) && d == last)) continue;
      const block_range r = rg[d], b = block_of(r.count, p, c);
      const bview& buf = root ? recvv : w;
      w_.message_stage(d, phase::gather, 1, [&](std::size_t) {
        if (c != rc[d]) return w_.send(rc[d], buf.at(r.offset + b.offset), b.count);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) w_.recv(j, buf.at(r.offset + block_of(r.count, p, j).offset), block_of(r.count, p, j).count);
      });
    }
  }

private:
  // Reduce by binomial trees: along each dimension, innermost first, to the root's
  // coordinate, among the ranks whose lower coordinates are the root's. Step s:
  // relative coordinate v = 2^s mod 2^(s+1) sends its partial to v - 2^s and is
  // done; v = 0 mod 2^(s+1) receives v + 2^s's (into R0) and folds it after its own.
  // Partials: the root's recvbuf, W elsewhere. The root's last fold finalizes.
  void reduce_trees(const std::vector<std::size_t>& rc) {
    const std::size_t n = c_.params().count;
    const bool root = c_.params().rank == c_.params().root;
    L_.place(n, false, 0, 0, root ? 0 : n);
    const slice acc = root ? slice{region::recv, 0, 0} : slice{region::scratch, 0, L_.W()};
    bool folded = false;
    for (std::size_t d : c_.nontrivial()) {
      const std::size_t p = c_.extent(d), c = c_.coord(d), v = (c + p - rc[d]) % p, S = tree_steps(p);
      if (!c_.below_root(d, rc)) continue;
      w_.message_stage(d, phase::reduce, S, [&](std::size_t s) {
        const std::size_t m = std::size_t(1) << s;
        const slice own = folded ? acc : slice{region::send, 0, 0};
        if (v % (2 * m) == m) return w_.send((c + p - m) % p, own, n);
        if (v % (2 * m) != 0 || v + m >= p) return;
        w_.recv((c + m) % p, L_.R(0), n);
        w_.fold(acc, {own, L_.R(0)}, n, root && d == c_.last() && s + 1 == S);
        folded = true;
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
    const program_params& p = c_.params();
    return c_.dim(d).shared && c_.extent(d) == 2 && p.count * p.elem_size <= p.shared_reduce_max_bytes;
  }

  // Reduce of range r over shared dimension d to coordinate `root`, into `out` (the
  // root's whole range): the root folds every rank's src, in coordinate order.
  // Ranges up to staging_bytes through the staging buffers; larger ones read from
  // the peers' buffers (mapped, or by cross-memory attach), which they keep until
  // the root leaves.
  void shared_reduce(std::size_t d, block_range r, std::size_t root, const bview& src, slice out) {
    const std::size_t p = c_.extent(d), c = c_.coord(d);
    const bool is_root = c == root;
    if (c_.staged(d, r.count)) {
      w_.stage(d, phase::reduce, 2, staged_sync, [&](std::size_t i) {
        if (i) return;
        w_.sign(r.count);
        st_.pack(src, r.offset, r.count, {region::staging_next, 0, 0});
        if (is_root) st_.fold_peers(region::staging, p, {&out, 1}, 0, r.count, true, false);
      });
      return;
    }
    const slice base = src.base(r);
    w_.stage(d, phase::reduce, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      w_.publish(r.count, &base, nullptr);
      if (is_root)
        st_.fold_from_peers(d, src, base, r.offset, r.count, true, [&](std::size_t rel) { return out + rel; });
    });
  }

  // A reduce's last dimension, shared, whose range is not staged and that
  // whole_reduce leaves alone: its reduce-scatter and gather become one stage in
  // which rank c folds block c from every rank's src and writes it straight into
  // the root's `out` (shared_reduce_split). (plan/plan.hpp make_plan: the same test.)
  bool split_reduce(std::size_t d, std::size_t n) const {
    return c_.params().shared_reduce_split && c_.dim(d).shared && !c_.staged(d, n);
  }

  // Reduce of range r over shared dimension d to coordinate `root`: the ranks fold a
  // block each, in parallel, as a reduce-scatter, reading the peers' src, and the
  // others write theirs into the root's `out` (mapped, or by cross-memory attach)
  // instead of sending it in a gather: one synchronization and no message. Through
  // the interposer on 2 processes, heap buffers: 0.5 to 0.6 x the time of the
  // reduce-scatter and gather at 4 MiB; from 256 KiB faster than whole_reduce's one
  // rank folding all.
  void shared_reduce_split(std::size_t d, block_range r, std::size_t root, const bview& src, slice out) {
    const bool is_root = c_.coord(d) == root;
    const block_range bc = block_of(r.count, c_.extent(d), c_.coord(d));
    const slice base = src.base(r);
    w_.stage(d, phase::reduce, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      w_.publish(r.count, &base, is_root ? &out : nullptr);
      st_.fold_from_peers(d, src, base, r.offset + bc.offset, bc.count, true, [&](std::size_t rel) {
        return is_root ? out + (bc.offset + rel) : peer_slice(region::peer_dst, root, bc.offset + rel);
      });
    });
  }

  const call_context& c_;
  buffer_layout& L_;
  program_writer& w_;
  stage_emitter& st_;
};

}  // namespace detail

/// The program of one rank's reduce (the result in the root's recvbuf; p.kind is not read).
inline program make_reduce_program(const program_params& p) {
  detail::builder_parts x(p, collective::reduce);
  detail::reduce_builder(x).write();
  return std::move(x).finish();
}

MDRING_NAMESPACE_END
