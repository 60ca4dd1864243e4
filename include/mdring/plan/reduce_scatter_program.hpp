// mdring/plan/reduce_scatter_program.hpp: reduce_scatter as a program.
//
//   make_reduce_scatter_program(params)   the program of one rank's reduce_scatter
//
// A reduce-scatter stage in dimensions 0..k-1 of the whole buffer (count per rank
// times the ranks). sendbuf is read in MPI's block order (block r for rank r: a
// permuted view, plan/build_program.hpp bview, with two or more non-trivial
// dimensions); the first stage's partials go through R0/R1 (no recvbuf holds
// them), the rank's share after it sits in scratch W, and the last stage writes
// recvbuf. The only ring of a streamed dimension runs the pull form
// (plan/build_stages.hpp streamed_rs). Example: 4 ranks as 2 x 2 rings, recvcount
// 3, so 12 elements: the first stage (dimension 0) leaves block c0 of them, 6
// elements reduced over dimension 0, in W; the second (dimension 1) reduces block
// c1 of those, 3 elements, into recvbuf.
#pragma once

#include "../config.hpp"
#include "blocks.hpp"
#include "build_program.hpp"
#include "build_stages.hpp"
#include "program.hpp"
#include "program_writer.hpp"

#include <cstddef>
#include <optional>
#include <utility>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Writes a reduce_scatter through the parts of plan/build_stages.hpp builder_parts.
class reduce_scatter_builder {
public:
  explicit reduce_scatter_builder(builder_parts& x) : c_(x.c), L_(x.L), w_(x.w), st_(x.st) {}

  void write() {
    w_.begin_segment(0);
    const std::size_t rc = c_.params().count, n = rc * c_.ranks();
    if (c_.nontrivial().empty()) return w_.local_copy(rc, true);
    const auto rg = c_.ranges(n);
    const std::size_t first = c_.first(), last = c_.last();
    const bool permuted = c_.nontrivial().size() > 1;
    L_.place_rs(rg, permuted, false, first != last);
    bview src{region::send};
    if (permuted) src.blk = rc, src.extents = c_.extents();
    const block_range b1 = block_of(rg[first].count, c_.extent(first), c_.coord(first));
    const std::size_t w_lo = rg[first].offset + b1.offset;
    const bview w{region::scratch, L_.W(), w_lo};
    for (std::size_t d : c_.nontrivial()) {
      const block_range r = rg[d], b = block_of(r.count, c_.extent(d), c_.coord(d));
      if (r.count == 0) continue;
      const bool is_last = d == last;
      if (c_.pull(d, r)) {  // the only ring: the pull form (a rank's blocks for its peers in `source`)
        const slice out{region::recv, 0, 0};
        st_.streamed_rs(d, r, {&out, 1}, 2);
      } else if (d == first) {
        st_.reduce_scatter_stage({d, r, src, std::nullopt, is_last ? slice{region::recv, 0, 0} : w.at(w_lo), is_last});
      } else {
        const slice mid = w.at(r.offset);
        st_.reduce_scatter_stage({d, r, w, mid, is_last ? slice{region::recv, 0, 0} : mid + b.offset, is_last});
      }
    }
  }

private:
  const call_context& c_;
  buffer_layout& L_;
  program_writer& w_;
  stage_emitter& st_;
};

}  // namespace detail

/// The program of one rank's reduce_scatter (p.count: recvcount; p.kind is not read).
inline program make_reduce_scatter_program(const program_params& p) {
  detail::builder_parts x(p, collective::reduce_scatter);
  detail::reduce_scatter_builder(x).write();
  return std::move(x).finish();
}

MDRING_NAMESPACE_END
