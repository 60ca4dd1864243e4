// mdring/plan/all_reduce_program.hpp: all_reduce as a program.
//
//   make_all_reduce_program(params)   the program of one rank's all_reduce
//
// Per segment (plan/pipeline.hpp make_segmentation): a reduce-scatter stage in
// dimensions 0..k-1, partials in recvbuf, then an all-gather stage in k-1..0. A
// shared last dimension fuses the two (plan/build_stages.hpp fused_rs and
// fused_ag, or in the pull form streamed_rs and streamed_ag). A
// recursive_doubling dimension all-reduces its whole range in one stage (no
// all-gather); the dimensions after it cut that range as usual. Dimensions of
// extent 1 have no stage. Received blocks land in the segment's receive slots,
// sized here for the largest stage (buffer_layout::size_slots). Example, 2 ranks
// ("shm:2", direct, by messages), 10 elements: plan/program.hpp's worked example.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "blocks.hpp"
#include "build_program.hpp"
#include "build_stages.hpp"
#include "pipeline.hpp"
#include "program.hpp"
#include "program_writer.hpp"

#include <cstddef>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Writes an all_reduce through the parts of plan/build_stages.hpp builder_parts
// (the call, its receive slots, the writer and the stage emitters).
class all_reduce_builder {
public:
  explicit all_reduce_builder(builder_parts& x) : c_(x.c), L_(x.L), w_(x.w), st_(x.st) {}

  void write() {
    const std::size_t n = c_.params().count;
    const auto nt = c_.nontrivial();
    for (std::size_t d : nt) w_.add_stage(d, rd(d) ? phase::all_reduce : phase::reduce_scatter);
    for (std::size_t i = nt.size(); i-- > 0;)
      if (!rd(nt[i])) w_.add_stage(nt[i], phase::all_gather);
    if (n == 0 || nt.empty()) w_.begin_segment(0);
    if (n == 0) return;
    if (nt.empty()) return w_.local_copy(n, true);
    // Recursive doubling keeps its range whole (plan/pipeline.hpp cut_shape_of).
    std::vector<algorithm> algos(c_.extents().size());
    for (std::size_t d = 0; d < algos.size(); ++d) algos[d] = c_.dim(d).algo;
    const cut_shape cut = cut_shape_of(c_.extents(), c_.coords(), algos);
    const segmentation sg = make_segmentation(n, c_.params().segment_length, cut.extents, cut.coords);
    w_.segments(sg.segments, sg.length);
    // Receive slots of one segment: the most any stage needs (a full segment is the largest).
    for (std::size_t d : nt) {
      if (c_.dim(d).shared) continue;
      const std::size_t range = sg.full[d].count, mb = max_block(range, c_.extent(d));
      const std::size_t slots = c_.dim(d).algo == algorithm::direct ? c_.extent(d) - 1 : 1;
      const std::size_t need = c_.dim(d).algo == algorithm::halving_doubling ? st_.hd_receive_elements(d, range)
                               : rd(d)                                       ? range
                                                                             : mb;
      L_.size_slots(d, slots, need);
    }
    for (std::size_t s = 0; s < sg.segments; ++s) segment(sg, s);
  }

private:
  bool rd(std::size_t d) const { return c_.dim(d).algo == algorithm::recursive_doubling; }

  // Segment s: its reduce-scatter (or recursive doubling) stages, then its all-gathers.
  void segment(const segmentation& sg, std::size_t s) {
    const auto nt = c_.nontrivial();
    const std::size_t last = c_.last();
    const bool fuse = c_.dim(last).shared;
    w_.begin_segment(s);
    const auto& rg = sg.ranges(s);
    auto range = [&](std::size_t d) { return block_range{sg.first(s) + rg[d].offset, rg[d].count}; };
    for (std::size_t d : nt) {
      const block_range r = range(d);
      const bview src{d == c_.first() ? region::send : region::recv};
      if (rd(d)) {
        st_.rd_stage(d, r, src, d == last);
        continue;
      }
      if (fuse && d == last) {
        if (c_.pull(d, r)) {
          const std::size_t at = r.offset + block_of(r.count, c_.extent(d), c_.coord(d)).offset;
          const slice outs[] = {{region::recv, 0, at}, {region::result, 0, at}};
          st_.streamed_rs(d, r, outs, 1);
        } else {
          st_.fused_rs(d, r, src);
        }
        continue;
      }
      const slice mid{region::recv, 0, r.offset};
      st_.reduce_scatter_stage({d, r, src, mid, mid + block_of(r.count, c_.extent(d), c_.coord(d)).offset, d == last});
    }
    for (std::size_t i = nt.size(); i-- > 0;) {
      const std::size_t d = nt[i];
      if (rd(d)) continue;
      if (fuse && d == last) c_.pull(d, range(d)) ? st_.streamed_ag(d, range(d)) : st_.fused_ag(d, range(d));
      else st_.all_gather_stage(d, range(d), {region::recv, 0, range(d).offset});
    }
  }

  const call_context& c_;
  buffer_layout& L_;
  program_writer& w_;
  stage_emitter& st_;
};

}  // namespace detail

/// The program of one rank's all_reduce (p.kind is not read: the program is an
/// all_reduce's whatever it says; make_program dispatches on it).
MDRING_COLD inline program make_all_reduce_program(const program_params& p) {
  detail::builder_parts x(p, collective::all_reduce);
  detail::all_reduce_builder(x).write();
  return std::move(x).finish();
}

MDRING_NAMESPACE_END
