// mdring/executor/host/engine.hpp: the five collectives of the host executor (see core.hpp).
#pragma once

#include "../../plan/plan.hpp"
#include "segments.hpp"

#include <cstring>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class engine : public segment_executor<T, Op, Comm> {
public:
  using B = segment_executor<T, Op, Comm>;
  using B::B;
  using pipeline = typename B::pipeline;
  using segment = typename B::segment;
  using B::c_, B::red_, B::ext_, B::coords_, B::w_lo_, B::W_, B::ranges, B::root_coords, B::line_of_root;
  using B::first_dim, B::last_dim, B::nontrivial_dims, B::sizes_rs, B::sizes_ag, B::total_bytes, B::reserve;
  using B::reduce_scatter_stage, B::all_gather_stage, B::all_gather_unpack_stage, B::scatter_stage, B::gather_stage;
  using B::all_reduce_scatter_into, B::pipeline_of, B::pipeline_scratch_bytes, B::reserve_pipeline, B::run_pipeline;

  // ---- the five collectives (arguments already checked) ---------------------

  // all_reduce: the reduce-scatter stages inwards-out, then the all-gathers back,
  // run by the segment executor below (one segment: the stages one after another).
  void all_reduce(const T* send, T* recv, std::size_t n) {
    if (first_dim() < 0) return red_.finalize(recv, send, n, true);
    pipeline pl = pipeline_of(n);
    reserve_pipeline(pl);
    run_pipeline(pl, send, recv);
  }

  void reduce_scatter(const T* send, T* recv, std::size_t rc) {
    const std::size_t n = rc * c_.size();
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (first < 0) return red_.finalize(recv, send, rc, true);
    const bool permuted = nontrivial_dims() > 1;
    reserve(n, sizes_rs(n, permuted, false, first != last));
    view<const T> src{send, 0, rc, permuted, ext_};
    const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
    const std::size_t w_lo = r1.offset + b1.offset;
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
      if (ext_[d] == 1) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      const bool is_last = int(d) == last;
      if (int(d) == first) {
        reduce_scatter_stage(d, r, src, nullptr, is_last ? recv : W_, is_last);
      } else {
        T* mid = W_ + (r.offset - w_lo);
        reduce_scatter_stage(d, r, view<const T>{W_, w_lo}, mid, is_last ? recv : mid + b.offset, is_last);
      }
    }
  }

  void all_gather(const T* send, T* recv, std::size_t sc) {
    const std::size_t n = sc * c_.size();
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (sc == 0) return;
    T* own = recv + c_.rank() * sc;
    if (first < 0) {
      if (send != recv) std::memmove(recv, send, sc * sizeof(T));
      return;
    }
    if (first == last) {  // one ring: nested order is rank order
      if (send != own) std::memcpy(own, send, sc * sizeof(T));
      reserve(n, sizes_ag(n, false));
      all_gather_stage(std::size_t(first), rg[first], recv);
      return;
    }
    reserve(n, sizes_ag(n, true));
    const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
    const std::size_t w_lo = r1.offset + b1.offset;
    const std::size_t q = nested_index(ext_, coords_);
    std::memcpy(W_ + (q * sc - w_lo), send, sc * sizeof(T));
    for (std::size_t d = std::size_t(last); d > std::size_t(first); --d)
      if (ext_[d] > 1) all_gather_stage(d, rg[d], W_ + (rg[d].offset - w_lo));
    all_gather_unpack_stage(std::size_t(first), r1, W_, view<T>{recv, 0, sc, true, ext_});
  }

  void broadcast(T* buf, std::size_t n, std::size_t root) {
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    if (first < 0) return;
    auto& rc = root_coords(root);
    for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d)
      if (ext_[d] > 1 && line_of_root(d, rc)) scatter_stage(d, rg[d], buf + rg[d].offset, rc[d]);
    for (std::size_t d = std::size_t(last) + 1; d-- > std::size_t(first);)
      if (ext_[d] > 1) all_gather_stage(d, rg[d], buf + rg[d].offset);
  }

  void reduce(const T* send, T* recv, std::size_t n, std::size_t root) {
    auto& rg = ranges(n);
    const int first = first_dim(), last = last_dim();
    const bool is_root = c_.rank() == root;
    if (first < 0) return red_.finalize(recv, send, n, true);
    auto& rc = root_coords(root);
    if (is_root) {
      all_reduce_scatter_into(send, recv, n, first, last);
    } else {
      reserve(n, sizes_rs(n, false, false, true));
      const block_range r1 = rg[first], b1 = block_of(r1.count, ext_[first], coords_[first]);
      const std::size_t w_lo = r1.offset + b1.offset;
      for (std::size_t d = std::size_t(first); d <= std::size_t(last); ++d) {
        if (ext_[d] == 1) continue;
        const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
        if (int(d) == first) {
          reduce_scatter_stage(d, r, view<const T>{send}, nullptr, W_, int(d) == last);
        } else {
          T* mid = W_ + (r.offset - w_lo);
          reduce_scatter_stage(d, r, view<const T>{W_, w_lo}, mid, mid + b.offset, int(d) == last);
        }
      }
      w_lo_ = w_lo;
    }
    for (std::size_t d = std::size_t(last) + 1; d-- > std::size_t(first);) {
      if (ext_[d] == 1 || !line_of_root(d, rc)) continue;
      const block_range r = rg[d], b = block_of(r.count, ext_[d], coords_[d]);
      T* whole = is_root ? recv + r.offset : (coords_[d] == rc[d] ? W_ + (r.offset - w_lo_) : nullptr);
      const T* own = is_root ? recv + r.offset + b.offset : W_ + (r.offset + b.offset - w_lo_);
      gather_stage(d, r, whole, own, rc[d]);
    }
  }

  // Scratch bytes a call of this kind and count needs (for communicator::reserve).
  std::size_t scratch_bytes(collective kind, std::size_t count) {
    const std::size_t n = (kind == collective::reduce_scatter || kind == collective::all_gather) ? count * c_.size() : count;
    ranges(n);
    const bool multi = nontrivial_dims() > 1;
    scratch_sizes s;
    switch (kind) {
      case collective::all_reduce: return pipeline_scratch_bytes(pipeline_of(n));
      case collective::reduce_scatter: s = sizes_rs(n, multi, false, multi); break;
      case collective::all_gather: s = sizes_ag(n, multi); break;
      case collective::reduce: s = sizes_rs(n, false, false, true); break;  // a non-root rank
      default: break;
    }
    return total_bytes(s);
  }
};

}  // namespace detail

MDRING_NAMESPACE_END
