// mdring/executor/host/local_ops.hpp: a step's folds and copies (see core.hpp).
//
// The only part of the host executor written per element type and op: step_ops is
// what the cursor calls (one virtual call per step), local_ops<T, Op> the
// arithmetic (reduce/host.hpp's host_reducer) and the copies.
//
// An op's inputs and outputs may be peers' buffers (shared access: the ranks of a
// node read and write each other's memory). A peer's buffer is reached by
// pointer between threads and when it lies in a mapped node_alloc segment
// (transport's local_address); otherwise by cross-memory attach, piece by piece
// (256 KiB per peer, small enough that the p-1 pieces and the output stay in L2
// while they are folded), writing peers' outputs back the same way.
#pragma once

#include "../../reduce/host.hpp"
#include "core.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>

MDRING_NAMESPACE_BEGIN

namespace detail {

// Bytes per piece when peers' data must be copied in (processes).
inline constexpr std::size_t piece_bytes = std::size_t(256) << 10;

// The ops of one step, of the call's element type and op.
template <transport Transport>
class step_ops {
public:
  virtual void run_ops(engine_state<Transport>& s, const program& pr, std::span<const local_op> ops, std::size_t d,
                       std::size_t slot) = 0;
  // The one-shot path's fold (one_shot.hpp): out = in[0] op ... op in[k-1], n
  // elements, finalized; folded nested over `nest` (innermost first) when it has
  // two entries or more (options.reproducible), else flat. out may equal an in[j].
  virtual void fold_all(void* out, const void* const* in, std::size_t k, std::size_t n,
                        std::span<const std::size_t> nest) = 0;

protected:
  ~step_ops() = default;
};

// The one-shot path's fold (one_shot.hpp) of n elements of elem bytes from k inputs,
// in[self] this rank's own and the others its peers' data in node memory. From 1 KiB,
// with at most fold_near_ranks inputs, the peers' data are first copied into this
// rank's cache, a chunk at a time: the fold's loads from lines in another core's
// cache stall where memcpy moves them at full speed (on a 2-core AMD EPYC VM a 4 KiB
// reduce of 2 processes took 1.09 us folding in place and 0.71 us copying first, a
// 64 KiB streamed one 13.8 and 12.7 us). Element by element the same fold: the bits
// do not change.
inline constexpr std::size_t fold_near_ranks = 8, fold_near_chunk = 2048, fold_near_min_bytes = 1024;
template <transport Transport>
void fold_all_near(step_ops<Transport>& ops, void* out, const void* const* in, std::size_t k, std::size_t self,
                   std::size_t n, std::size_t elem, std::span<const std::size_t> nest) {
  if (k > fold_near_ranks || elem > fold_near_chunk || n * elem < fold_near_min_bytes)
    return ops.fold_all(out, in, k, n, nest);
  alignas(64) unsigned char near[fold_near_ranks - 1][fold_near_chunk];
  const void* part[fold_near_ranks];
  const std::size_t step = fold_near_chunk / elem;
  for (std::size_t at = 0; at < n; at += step) {
    const std::size_t m = n - at < step ? n - at : step;
    for (std::size_t j = 0, c = 0; j < k; ++j) {
      const unsigned char* src = static_cast<const unsigned char*>(in[j]) + at * elem;
      if (j == self) {
        part[j] = src;  // (this rank's own: its sendbuf, or what it just wrote)
      } else {
        std::memcpy(near[c], src, m * elem);
        part[j] = near[c++];
      }
    }
    ops.fold_all(static_cast<unsigned char*>(out) + at * elem, part, k, m, nest);
  }
}

template <class T, class Op, transport Transport>
class local_ops final : public step_ops<Transport> {
public:
  using state = engine_state<Transport>;
  static constexpr bool has_shared_access = state::has_shared_access;
  static constexpr std::size_t piece = piece_bytes / sizeof(T);

  local_ops(const Op& op, std::size_t ranks) : red_(op, ranks) {}

  void run_ops(state& s, const program& pr, std::span<const local_op> ops, std::size_t d, std::size_t slot) override {
    for (const auto& o : ops) {
      if (o.kind == local_op::copy) copy(s, pr, o, d, slot);
      else fold(s, pr, o, d, slot);
    }
  }

  void fold_all(void* out, const void* const* in, std::size_t k, std::size_t n,
                std::span<const std::size_t> nest) override {
    T* o = static_cast<T*>(out);
    const T* const* i = reinterpret_cast<const T* const*>(in);
    if (nest.size() >= 2) return red_.combine_nested(&o, 1, i, k, n, true, false, nest);
    red_.combine_n(o, i, k, n, true);
  }

private:
  // Peer j's published address, `off` elements further (in the peer's address space).
  static const T* remote(const state& s, slice sl, std::size_t d) {
    if constexpr (has_shared_access) {
      auto& g = s.transport().group(s.channel(d));
      const void* base = sl.where == region::peer_src ? g.peer_src(sl.peer) : g.peer_dst(sl.peer);
      return static_cast<const T*>(base) + sl.offset;
    } else {
      return (void)s, (void)sl, (void)d, nullptr;
    }
  }
  // A pointer this rank can use for n elements of slice sl, or nullptr for a peer's
  // buffer that only cross-memory attach reaches.
  static T* reach(const state& s, slice sl, std::size_t d, std::size_t slot, std::size_t n) {
    if (sl.where != region::peer_src && sl.where != region::peer_dst) return static_cast<T*>(s.local(sl, d, slot));
    T* r = const_cast<T*>(remote(s, sl, d));
    if constexpr (Transport::same_address_space) {
      return (void)n, r;
    } else if constexpr (maps_peer_memory<Transport>) {
      return static_cast<T*>(s.transport().local_address(s.channel(d), sl.peer, r, n * sizeof(T)));
    } else {
      return (void)n, nullptr;
    }
  }

  // Every output = the fold of the inputs (coordinate order). Outputs that are one
  // place (a streamed dimension's recv and result, when result is recv) are written once.
  void fold(state& s, const program& pr, const local_op& o, std::size_t d, std::size_t slot) {
    const auto ins = pr.inputs_of(o), outs = pr.outputs_of(o);
    const void** ptrs = s.ws().pointers();
    T* to[access_group::max_ranks];
    std::size_t nout = 0;
    bool direct = outs.size() <= access_group::max_ranks;
    for (std::size_t j = 0; j < ins.size() && direct; ++j) direct = (ptrs[j] = reach(s, ins[j], d, slot, o.count));
    for (std::size_t k = 0; k < outs.size() && direct; ++k) {
      T* t = reach(s, outs[k], d, slot, o.count);
      direct = t != nullptr;
      if (direct && std::find(to, to + nout, t) == to + nout) to[nout++] = t;
    }
    const T* const* in = reinterpret_cast<const T* const*>(ptrs);
    const auto& nest = s.layout().dims[d].nest;  // options.reproducible, merged dimensions
    if (direct && !nest.empty())
      return red_.combine_nested(to, nout, in, ins.size(), o.count, o.final, o.nontemporal, nest);
    if (direct) {
      if (nout == 1 && !o.nontemporal) {
        if (ins.size() == 2) return red_.combine(to[0], in[0], in[1], o.count, o.final);
        return red_.combine_n(to[0], in, ins.size(), o.count, o.final);
      }
      return red_.combine_n_to(to, nout, in, ins.size(), o.count, o.final, o.nontemporal);
    }
    if constexpr (has_shared_access) fold_by_pieces(s, pr, o, d, slot);
  }

  // The fold through cross-memory attach: piece by piece, the peers' inputs read
  // into scratch, folded into this rank's output, and written to the peers' outputs.
  void fold_by_pieces(state& s, const program& pr, const local_op& o, std::size_t d, std::size_t slot) {
    const auto ins = pr.inputs_of(o), outs = pr.outputs_of(o);
    auto& ch = s.channel(d);
    const void** ptrs = s.ws().pointers();
    const std::size_t c = s.layout().coords[d];
    T* const pieces = static_cast<T*>(s.buffers().pieces);
    const auto& nest = s.layout().dims[d].nest;
    T* mine = nullptr;  // the output in this rank's memory (none: each piece folds into the last piece)
    T* also = nullptr;  // a second one (a streamed dimension's result, when it is not recv)
    for (const auto& sl : outs)
      if (!sl.remote()) {
        T* t = static_cast<T*>(s.local(sl, d, slot));
        if (!mine) mine = t;
        else if (t != mine) also = t;
      }
    for (std::size_t done = 0; done < o.count; done += piece) {
      const std::size_t m = o.count - done < piece ? o.count - done : piece;
      for (std::size_t j = 0; j < ins.size(); ++j) {
        if (T* p = reach(s, ins[j], d, slot, o.count)) {
          ptrs[j] = p + done;
          continue;
        }
        T* at = pieces + (j < c ? j : j - 1) * piece;
        s.transport().read(ch, ins[j].peer, remote(s, ins[j], d) + done, at, m * sizeof(T));
        ptrs[j] = at;
      }
      const T* const* in = reinterpret_cast<const T* const*>(ptrs);
      T* at = mine ? mine + done : pieces + (s.layout().extents[d] - 1) * piece;
      if (nest.empty()) red_.combine_n(at, in, ins.size(), m, o.final);
      else red_.combine_nested(&at, 1, in, ins.size(), m, o.final, false, nest);
      if (also) std::memcpy(also + done, at, m * sizeof(T));
      for (const auto& sl : outs)
        if (sl.remote()) s.transport().write(ch, sl.peer, at, const_cast<T*>(remote(s, sl, d)) + done, m * sizeof(T));
    }
  }

  // Every output = the input (an output that is the input is left alone).
  void copy(state& s, const program& pr, const local_op& o, std::size_t d, std::size_t slot) {
    const slice in = pr.inputs_of(o)[0];
    const T* from = reach(s, in, d, slot, o.count);
    const std::size_t bytes = o.count * sizeof(T);
    for (const auto& sl : pr.outputs_of(o)) {
      T* to = reach(s, sl, d, slot, o.count);
      if constexpr (has_shared_access) {
        if (!from) {
          s.transport().read(s.channel(d), in.peer, remote(s, in, d), to, bytes);
          continue;
        }
        if (!to) {
          s.transport().write(s.channel(d), sl.peer, from, const_cast<T*>(remote(s, sl, d)), bytes);
          continue;
        }
      }
      if (to == from) continue;
      if (o.nontemporal) detail::stream_copy(to, from, bytes), detail::stream_fence();
      else std::memcpy(to, from, bytes);
    }
  }

  host_reducer<T, Op> red_;
};

}  // namespace detail

MDRING_NAMESPACE_END
