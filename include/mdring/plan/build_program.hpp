// mdring/plan/build_program.hpp: writing program steps (plan/program.hpp).
//
// What the stage emitters (plan/build_stages.hpp) and the collectives
// (plan/collective_programs.hpp) write programs with: the parameters of a call,
// views of buffers, and a builder that opens and closes steps and appends
// messages and ops to them.
//
// A stage works on a range r of the nested order (plan/blocks.hpp: stage d cuts
// the range the rank owns after stages 0..d-1 into p_d blocks; the rank keeps
// block c_d). Buffers are views: element x of the nested order lives at
// pos + (x - origin) of a region, or, for reduce_scatter's sendbuf and
// all_gather's recvbuf with two or more non-trivial dimensions, at the position
// of rank rank_of_nested(x / blk)'s block (MPI puts block r at rank r; the stages
// produce nested order). A view yields contiguous runs, so the executors never
// see the permutation: a fold or copy over a permuted range is one op per run.
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
  // shared, all_reduce with this dimension the only one of more than one rank, ranges
  // above staging_bytes: the pull form (build_stages.hpp streamed_rs). Peers read a
  // rank's `source` and `result` (plan/program.hpp), which each rank places alone: a
  // rank whose buffers its peers cannot map streams them through node memory while
  // its peers read theirs in place (executor/host/engine.hpp stream_in).
  bool streamed = false;
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
  std::size_t segment_length = 0;     // all_reduce: 0 or >= count for one segment
  std::size_t vector_elements = 1;    // receive slots aligned like their fold's destination
  std::size_t recv_misalignment = 0;  // (address of recvbuf / elem_size) % vector_elements
  std::size_t nontemporal_bytes = std::numeric_limits<std::size_t>::max();  // tuning::nontemporal_bytes
  std::size_t shared_reduce_max_bytes = 0;  // tuning::shared_reduce_max_bytes (0: the two stages)
  // reduce: a shared last dimension's reduce-scatter and gather as one stage, the
  // ranks writing their blocks into the root's buffer (collective_programs.hpp
  // shared_reduce_split; the host engine; the GPU path keeps the two stages).
  bool shared_reduce_split = false;
  bool trees = false;  // broadcast, reduce: binomial trees of the whole buffer (trees_for_call)
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
  // Recursive doubling is an all-reduce: other collectives run halving-doubling there.
  explicit program_builder(const program_params& p)
      : p_(p), V_(p.vector_elements ? p.vector_elements : 1), dims_(p.dims.begin(), p.dims.end()) {
    for (auto& d : dims_) {
      ext_.push_back(d.extent), coords_.push_back(d.coord);
      if (d.algo == algorithm::recursive_doubling && p.kind != collective::all_reduce)
        d.algo = algorithm::halving_doubling;
    }
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

  const dim_program& dim(std::size_t d) const { return dims_[d]; }
  bool slots_region() const noexcept { return p_.kind == collective::all_reduce; }
  bool staged(std::size_t d, std::size_t n) const { return n * p_.elem_size <= dim(d).staging_bytes; }
  bool stream(std::size_t bytes) const noexcept { return bytes >= p_.nontemporal_bytes; }
  std::size_t steps_of(std::size_t d) const {
    if (dim(d).algo == algorithm::direct) return dim(d).shared ? 2 : 1;
    const algorithm a = dim(d).algo;
    return a == algorithm::halving_doubling || a == algorithm::recursive_doubling ? hd_shape_of(ext_[d]).steps()
                                                                                  : ext_[d] - 1;
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
    stage(
        d, ph, n, [](std::size_t) { return sync_kind::messages; }, f);
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
  void copy(slice dst, slice src, std::size_t n, bool pre = false, bool nt = false) {
    op(local_op::copy, {&dst, 1}, {&src, 1}, n, false, nt, pre);
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
    stage(
        d, ph, n, [](std::size_t) { return sync_kind::none; }, [](std::size_t) {});
  }

  const program_params& p_;
  std::size_t V_;
  std::vector<dim_program> dims_;
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
