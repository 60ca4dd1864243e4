// mdring/plan/build_program.hpp: a call, as the program builders see it.
//
//   program_params   the parameters of one rank's call (what make_program takes)
//   dim_program      what the call runs in one executed dimension
//   detail::call_context
//                    the parameters with this rank's place: extents, coordinates,
//                    the non-trivial dimensions, the root's coordinates, and the
//                    tests the collectives share (staged, pull, ...)
//   detail::bview    a buffer, as a view of the nested order (below)
//   detail::buffer_layout
//                    where a stage receives: all_reduce's receive slots, or the
//                    parts of the scratch region (below)
//
// The builders compose these with the step writer (plan/program_writer.hpp) and
// the stage emitters (plan/build_stages.hpp); plan/collective_programs.hpp names
// them.
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
// Scratch (one region, 64-byte aligned parts; all_reduce uses receive slots per
// segment instead), with m the largest block of the first non-trivial dimension:
//   R0, R1  a received block (R1: the partial being sent when no recvbuf holds
//           partials; halving-doubling: the whole stage range)
//   Q       p-1 receive blocks of a direct stage by messages; P: packed sends
//   W       m elements: the rank's share after the first stage
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../topology/coordinates.hpp"
#include "../vocabulary.hpp"
#include "blocks.hpp"
#include "program.hpp"

#include <cstddef>
#include <limits>
#include <span>
#include <vector>

MDRING_NAMESPACE_BEGIN

/// What a call runs in one executed dimension.
struct dim_program {
  /// The dimension's extent, and this rank's coordinate in it.
  ///@{
  std::size_t extent = 1, coord = 0;
  ///@}
  algorithm algo = algorithm::ring;  ///< ring, direct or halving_doubling
  bool shared = false;               ///< direct stages by shared access (ranks of a node)
  std::size_t staging_bytes = 0;     ///< shared: ranges of at most this many bytes are staged
  /// shared, all_reduce with this dimension the only one of more than one rank, ranges
  /// above staging_bytes: the pull form (build_stages.hpp streamed_rs). Peers read a
  /// rank's `source` and `result` (plan/program.hpp), which each rank places alone: a
  /// rank whose buffers its peers cannot map streams them through node memory while
  /// its peers read theirs in place (executor/host/engine.hpp stream_in).
  bool streamed = false;
  friend constexpr bool operator==(const dim_program&, const dim_program&) = default;
};

/// What a program is built or looked up with (plan/program_cache.hpp): the call and its executed dimensions.
struct program_params {
  collective kind = collective::all_reduce;  ///< the collective
  std::span<const dim_program> dims;         ///< per executed dimension (call_program::dims)
  /// The collective's count argument: elements (all_reduce, broadcast, reduce), or
  /// per rank (reduce_scatter: recvcount, all_gather: sendcount).
  std::size_t count = 0;
  /// This rank, and the root of broadcast and reduce.
  ///@{
  std::size_t rank = 0, root = 0;
  ///@}
  std::size_t elem_size = 4;          ///< bytes per element
  std::size_t segment_length = 0;     ///< all_reduce: 0 or >= count for one segment
  std::size_t vector_elements = 1;    ///< receive slots aligned like their fold's destination
  std::size_t recv_misalignment = 0;  ///< (address of recvbuf / elem_size) % vector_elements
  std::size_t nontemporal_bytes = std::numeric_limits<std::size_t>::max();  ///< tuning::nontemporal_bytes
  std::size_t shared_reduce_max_bytes = 0;  ///< tuning::shared_reduce_max_bytes (0: the two stages)
  /// reduce: a shared last dimension's reduce-scatter and gather as one stage, the
  /// ranks writing their blocks into the root's buffer (plan/reduce_program.hpp
  /// shared_reduce_split; the host engine; the GPU path keeps the two stages).
  bool shared_reduce_split = false;
  bool trees = false;  ///< broadcast, reduce: binomial trees of the whole buffer (trees_for_call)
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

// Scratch elements, 64-byte aligned.
inline std::size_t aligned_elements(std::size_t elems, std::size_t elem_size) {
  const std::size_t bytes = (elems * elem_size + 63) / 64 * 64;
  return bytes / elem_size;
}

// One rank's call of one collective: the parameters, and this rank's place in the
// executed dimensions. Holds a reference to the parameters (and so lives no longer).
class call_context {
public:
  // Recursive doubling is an all-reduce: other collectives run halving-doubling there.
  call_context(const program_params& p, collective kind) : p_(p), dims_(p.dims.begin(), p.dims.end()) {
    for (auto& d : dims_) {
      ext_.push_back(d.extent), coords_.push_back(d.coord);
      if (d.algo == algorithm::recursive_doubling && kind != collective::all_reduce)
        d.algo = algorithm::halving_doubling;
    }
    for (std::size_t d = 0; d < ext_.size(); ++d)
      if (ext_[d] > 1) nontrivial_.push_back(d);
  }

  const program_params& params() const noexcept { return p_; }
  const dim_program& dim(std::size_t d) const { return dims_[d]; }
  std::size_t extent(std::size_t d) const { return ext_[d]; }
  std::size_t coord(std::size_t d) const { return coords_[d]; }
  std::span<const std::size_t> extents() const noexcept { return ext_; }
  std::span<const std::size_t> coords() const noexcept { return coords_; }
  // The dimensions of more than one rank, in order; first() and last() need one.
  std::span<const std::size_t> nontrivial() const noexcept { return nontrivial_; }
  std::size_t first() const { return nontrivial_.front(); }
  std::size_t last() const { return nontrivial_.back(); }
  std::size_t ranks() const {
    std::size_t n = 1;
    for (auto e : ext_) n *= e;
    return n;
  }
  // This rank's stage ranges of a buffer of n elements (plan/blocks.hpp stage_ranges).
  std::vector<block_range> ranges(std::size_t n) const {
    std::vector<block_range> rg(ext_.size());
    stage_ranges(n, ext_, coords_, rg);
    return rg;
  }

  // A shared stage on a range of n elements goes through the staging buffers.
  bool staged(std::size_t d, std::size_t n) const { return n * p_.elem_size <= dim(d).staging_bytes; }
  // A copy or fold writing this many bytes goes around the cache.
  bool stream(std::size_t bytes) const noexcept { return bytes >= p_.nontemporal_bytes; }
  // The pull form (dim_program::streamed): the only ring, and the range is not
  // staged (on every rank of the ring alike: they share the range).
  bool pull(std::size_t d, block_range r) const { return dim(d).streamed && first() == last() && !staged(d, r.count); }

  // ---- broadcast and reduce --------------------------------------------------------
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

private:
  const program_params& p_;
  std::vector<dim_program> dims_;
  std::vector<std::size_t> ext_, coords_, nontrivial_;
};

// Where the stages of a call receive (see the top of this file): all_reduce's
// receive slots (slots()), or the parts of the scratch region (place, place_rs).
// Sized once before the first stage; the stage emitters read it.
class buffer_layout {
public:
  buffer_layout(const call_context& c, collective kind)
      : c_(c),
        slots_(kind == collective::all_reduce),
        V_(c.params().vector_elements ? c.params().vector_elements : 1),
        stride_(c.extents().size(), 0) {}

  // ---- all_reduce: the segment's receive slots ----------------------------------------
  // The receive buffers are slots (all_reduce), not parts of the scratch region.
  bool slots() const noexcept { return slots_; }
  // Dimension d needs `slots` slots of `need` elements each: the stride is rounded
  // up to vector_elements, with room to shift the slot (see slot()).
  void size_slots(std::size_t d, std::size_t slots, std::size_t need) {
    stride_[d] = (need + (V_ > 1 ? V_ : 0) + V_ - 1) / V_ * V_;
    slot_elements_ = slots * stride_[d] > slot_elements_ ? slots * stride_[d] : slot_elements_;
  }
  // Receive slot j of dimension d, shifted so that the slot and a fold destination
  // at recv offset dst are alike modulo vector_elements.
  slice slot(std::size_t d, std::size_t j, std::size_t dst) const {
    return {region::slot, 0, j * stride_[d] + (c_.params().recv_misalignment + dst) % V_};
  }

  // ---- the other collectives: the scratch region --------------------------------------
  // R0 or R1 (i), Q's and P's k-th block of mb elements, W's offset.
  slice R(std::size_t i) const { return {region::scratch, 0, i ? r1_ : r0_}; }
  slice Q(std::size_t k, std::size_t mb) const { return {region::scratch, 0, q_ + k * mb}; }
  slice P(std::size_t k, std::size_t mb) const { return {region::scratch, 0, pack_ + k * mb}; }
  std::size_t W() const noexcept { return w_; }
  // Elements of each part: R0 and R1 (two_r) of r, Q of q, P of pack, W of w.
  void place(std::size_t r, bool two_r, std::size_t q, std::size_t pack, std::size_t w) {
    r0_ = 0;
    r1_ = al(r);
    q_ = r1_ + (two_r ? al(r) : 0);
    pack_ = q_ + al(q);
    w_ = pack_ + al(pack);
    scratch_elements_ = w_ + al(w);
  }
  // The reduce-scatter half (stage ranges rg): no recvbuf for the first stage's
  // partials unless first_has_mid; W when need_w; packing when the source is permuted.
  void place_rs(const std::vector<block_range>& rg, bool permuted, bool first_has_mid, bool need_w) {
    std::size_t r = 0, q = 0, pack = 0;
    bool two_r = !first_has_mid || permuted;
    for (std::size_t d : c_.nontrivial()) {
      const std::size_t p = c_.extent(d), mb = max_block(rg[d].count, p);
      if (c_.dim(d).algo == algorithm::direct) {
        if (c_.dim(d).shared) continue;
        q = (p - 1) * mb > q ? (p - 1) * mb : q;
        if (permuted && d == c_.first()) pack = (p - 1) * mb;
      } else if (c_.dim(d).algo == algorithm::halving_doubling) {
        r = rg[d].count > r ? rg[d].count : r;
        two_r = true;
      } else {
        r = mb > r ? mb : r;
      }
    }
    place(r, two_r, q, pack, need_w ? max_block(rg[c_.first()].count, c_.extent(c_.first())) : 0);
  }

  std::size_t scratch_elements() const noexcept { return scratch_elements_; }
  std::size_t slot_elements() const noexcept { return slot_elements_; }

private:
  std::size_t al(std::size_t elems) const { return aligned_elements(elems, c_.params().elem_size); }

  const call_context& c_;
  bool slots_;
  std::size_t V_;
  std::vector<std::size_t> stride_;  // all_reduce: receive slot stride per dimension
  std::size_t r0_ = 0, r1_ = 0, q_ = 0, pack_ = 0, w_ = 0;
  std::size_t scratch_elements_ = 0, slot_elements_ = 0;
};

}  // namespace detail

MDRING_NAMESPACE_END
