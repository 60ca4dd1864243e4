// mdring/plan/broadcast_program.hpp: broadcast as a program.
//
//   make_broadcast_program(params)   the program of one rank's broadcast
//
// The buffer is recv on every rank. A scatter from the root in dimensions 0..k-1
// (the ranks whose coordinates above d are the root's: the root's line), then an
// all-gather back in k-1..0 (plan/build_stages.hpp all_gather_stage). A shared
// last dimension: its scatter and all-gather become one stage that reads the
// range from the root, or halves on two ranks (shared_broadcast). Small calls
// (program_params::trees): binomial trees of the whole buffer in k-1..0
// (broadcast_trees). Example: 4 ranks as 2 x 2 rings, root 0, 8 elements, by
// messages: rank 0 sends [4, 8) to rank 1 (dimension 0), each of ranks 0 and 1
// sends half of its 4 to its peer of dimension 1, and the all-gathers of
// dimension 1 and then 0 give every rank the 8.
#pragma once

#include "../config.hpp"
#include "blocks.hpp"
#include "build_program.hpp"
#include "build_stages.hpp"
#include "cost.hpp"
#include "program.hpp"
#include "program_writer.hpp"

#include <cstddef>
#include <utility>
#include <vector>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Writes a broadcast through the parts of plan/build_stages.hpp builder_parts.
class broadcast_builder {
public:
  explicit broadcast_builder(builder_parts& x) : c_(x.c), w_(x.w), st_(x.st) {}

  void write() {
    w_.begin_segment(0);
    const std::size_t n = c_.params().count;
    if (c_.nontrivial().empty() || n == 0) return;
    const auto rg = c_.ranges(n);
    const auto rc = c_.root_coords();
    if (c_.params().trees) return broadcast_trees(rc);
    // A last dimension shared: its scatter and all-gather, which follow each other,
    // become one stage that reads the range from the root (shared_broadcast).
    const std::size_t last = c_.last();
    const bool whole_last = c_.dim(last).shared;
    for (std::size_t d : c_.nontrivial()) {
      if (!c_.line_of_root(d, rc) || rg[d].count == 0) continue;
      if (whole_last && d == last) {
        shared_broadcast(d, rg[d], rc[d]);
        continue;
      }
      const std::size_t p = c_.extent(d), c = c_.coord(d);
      const slice buf{region::recv, 0, rg[d].offset};
      w_.message_stage(d, phase::scatter, 1, [&](std::size_t) {
        for (std::size_t j = 0; j < p; ++j) {
          const block_range bj = block_of(rg[d].count, p, j);
          if (c == rc[d] && j != c) w_.send(j, buf + bj.offset, bj.count);
          if (c != rc[d] && j == c) w_.recv(rc[d], buf + bj.offset, bj.count);
        }
      });
    }
    const auto nt = c_.nontrivial();
    for (std::size_t i = nt.size(); i-- > 0;) {
      const std::size_t d = nt[i];
      if (rg[d].count && !(whole_last && d == last)) st_.all_gather_stage(d, rg[d], {region::recv, 0, rg[d].offset});
    }
  }

private:
  // Broadcast by binomial trees (program_params::trees): the whole buffer from the
  // root's coordinate along each dimension, outermost first, among the ranks whose
  // lower coordinates are the root's. Step s: relative coordinate v < 2^s sends to
  // v + 2^s.
  void broadcast_trees(const std::vector<std::size_t>& rc) {
    const std::size_t n = c_.params().count;
    const slice buf{region::recv, 0, 0};
    const auto nt = c_.nontrivial();
    for (std::size_t i = nt.size(); i-- > 0;) {
      const std::size_t d = nt[i], p = c_.extent(d), c = c_.coord(d), v = (c + p - rc[d]) % p;
      if (!c_.below_root(d, rc)) continue;
      w_.message_stage(d, phase::broadcast, tree_steps(p), [&](std::size_t s) {
        const std::size_t m = std::size_t(1) << s;
        if (v < m && v + m < p) w_.send((c + m) % p, buf, n);
        else if (v >= m && v < 2 * m) w_.recv((c + p - m) % p, buf, n);
      });
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
    const std::size_t c = c_.coord(d);
    const bool is_root = c == root;
    const slice buf{region::recv, 0, r.offset}, src{region::source, 0, r.offset};
    if (c_.staged(d, r.count)) {
      w_.stage(d, phase::broadcast, 2, staged_sync, [&](std::size_t i) {
        if (i) return;
        w_.sign(r.count);
        if (is_root) w_.copy({region::staging_next, 0, 0}, buf, r.count, true);
        else w_.copy(buf, peer_slice(region::staging, root, 0), r.count);
      });
      return;
    }
    const bool pull = c_.pull(d, r);
    w_.stage(d, phase::broadcast, 2, shared_sync, [&](std::size_t i) {
      if (i) return;
      const bool nt = c_.stream(r.count * c_.params().elem_size);
      if (is_root && pull) w_.copy(src, buf, r.count, true, nt);
      w_.publish(r.count, pull ? &src : nullptr, &buf);
      if (!split_broadcast(d)) {
        if (!is_root) w_.copy(buf, peer_slice(pull ? region::peer_src : region::peer_dst, root, 0), r.count, false, nt);
        return;
      }
      const block_range half = block_of(r.count, 2, 1);
      if (is_root) w_.copy(peer_slice(region::peer_dst, 1 - c, half.offset), buf + half.offset, half.count, false, nt);
      else w_.copy(buf, peer_slice(region::peer_dst, root, 0), half.offset, false, nt);
    });
  }
  // plan/plan.hpp make_plan: the same test. (The pull form has three ranks or more:
  // plan/cost.hpp whole_streaming_pays.)
  bool split_broadcast(std::size_t d) const { return c_.extent(d) == 2 && !c_.dim(d).streamed; }

  const call_context& c_;  // no scratch: the buffer is recv
  program_writer& w_;
  stage_emitter& st_;
};

}  // namespace detail

/// The program of one rank's broadcast (the buffer is recv; p.kind is not read).
inline program make_broadcast_program(const program_params& p) {
  detail::builder_parts x(p, collective::broadcast);
  detail::broadcast_builder(x).write();
  return std::move(x).finish();
}

MDRING_NAMESPACE_END
