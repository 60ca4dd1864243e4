// mdring/executor/host/local_ops.hpp: a step's folds and copies (see core.hpp).
//
// An op's inputs and outputs may be peers' buffers (shared access: the ranks of a
// node read and write each other's memory). A peer's buffer is reached by
// pointer between threads and when it lies in a mapped node_alloc segment
// (transport's local_address); otherwise by cross-memory attach, piece by piece
// (256 KiB per peer, small enough that the p-1 pieces and the output stay in L2
// while they are folded), writing peers' outputs back the same way.
#pragma once

#include "core.hpp"

#include <algorithm>
#include <cstring>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class local_ops {
public:
  using state = engine_state<T, Op, Comm>;
  using transport_t = typename state::transport_t;
  static constexpr bool has_shared_access = state::has_shared_access;
  explicit local_ops(state& s) noexcept : s_(s) {}

  // Elements per piece when peers' data must be copied in (processes).
  static constexpr std::size_t piece = (std::size_t(256) << 10) / sizeof(T);

  void run_ops(const program& pr, std::span<const local_op> ops, std::size_t d, std::size_t slot) {
    for (const auto& o : ops) {
      if (o.kind == local_op::copy) copy(pr, o, d, slot);
      else fold(pr, o, d, slot);
    }
  }

  // Peer j's published address, `off` elements further (in the peer's address space).
  const T* remote(slice s, std::size_t d) const {
    if constexpr (has_shared_access) {
      auto& g = s_.tr_.group(s_.dims_[d].ch);
      const void* base = s.where == region::peer_src ? g.peer_src(s.peer) : g.peer_dst(s.peer);
      return static_cast<const T*>(base) + s.offset;
    } else {
      return (void)s, (void)d, nullptr;
    }
  }
  // A pointer this rank can use for n elements of slice s, or nullptr for a peer's
  // buffer that only cross-memory attach reaches.
  T* reach(slice s, std::size_t d, std::size_t slot, std::size_t n) {
    if (s.where != region::peer_src && s.where != region::peer_dst) return s_.local(s, d, slot);
    T* r = const_cast<T*>(remote(s, d));
    if constexpr (transport_t::same_address_space) {
      return (void)n, r;
    } else if constexpr (maps_peer_memory<transport_t>) {
      return static_cast<T*>(s_.tr_.local_address(s_.dims_[d].ch, s.peer, r, n * sizeof(T)));
    } else {
      return (void)n, nullptr;
    }
  }

  // Every output = the fold of the inputs (coordinate order). Outputs that are one
  // place (a streamed dimension's recv and result, when result is recv) are written once.
  void fold(const program& pr, const local_op& o, std::size_t d, std::size_t slot) {
    const auto ins = pr.inputs_of(o), outs = pr.outputs_of(o);
    auto& ptrs = s_.in_.pointer_slots();
    T* to[access_group::max_ranks];
    std::size_t nout = 0;
    bool direct = outs.size() <= access_group::max_ranks;
    for (std::size_t j = 0; j < ins.size() && direct; ++j) direct = (ptrs[j] = reach(ins[j], d, slot, o.count));
    for (std::size_t k = 0; k < outs.size() && direct; ++k) {
      T* t = reach(outs[k], d, slot, o.count);
      direct = t != nullptr;
      if (direct && std::find(to, to + nout, t) == to + nout) to[nout++] = t;
    }
    const T* const* in = reinterpret_cast<const T* const*>(ptrs.data());
    const auto& nest = s_.dims_[d].nest;  // options.reproducible, merged dimensions
    if (direct && !nest.empty())
      return s_.red_.combine_nested(to, nout, in, ins.size(), o.count, o.final, o.nontemporal, nest);
    if (direct) {
      if (nout == 1 && !o.nontemporal) {
        if (ins.size() == 2) return s_.red_.combine(to[0], in[0], in[1], o.count, o.final);
        return s_.red_.combine_n(to[0], in, ins.size(), o.count, o.final);
      }
      return s_.red_.combine_n_to(to, nout, in, ins.size(), o.count, o.final, o.nontemporal);
    }
    if constexpr (has_shared_access) fold_by_pieces(pr, o, d, slot);
  }

  // The fold through cross-memory attach: piece by piece, the peers' inputs read
  // into scratch, folded into this rank's output, and written to the peers' outputs.
  void fold_by_pieces(const program& pr, const local_op& o, std::size_t d, std::size_t slot) {
    const auto ins = pr.inputs_of(o), outs = pr.outputs_of(o);
    auto& ch = s_.dims_[d].ch;
    auto& ptrs = s_.in_.pointer_slots();
    const std::size_t c = s_.coords_[d];
    T* mine = nullptr;  // the output in this rank's memory (none: each piece folds into the last piece)
    T* also = nullptr;  // a second one (a streamed dimension's result, when it is not recv)
    for (const auto& s : outs)
      if (!s.remote()) {
        T* t = s_.local(s, d, slot);
        if (!mine) mine = t;
        else if (t != mine) also = t;
      }
    for (std::size_t done = 0; done < o.count; done += piece) {
      const std::size_t m = o.count - done < piece ? o.count - done : piece;
      for (std::size_t j = 0; j < ins.size(); ++j) {
        if (T* p = reach(ins[j], d, slot, o.count)) {
          ptrs[j] = p + done;
          continue;
        }
        T* at = s_.buf_.pieces + (j < c ? j : j - 1) * piece;
        s_.tr_.read(ch, ins[j].peer, remote(ins[j], d) + done, at, m * sizeof(T));
        ptrs[j] = at;
      }
      const T* const* in = reinterpret_cast<const T* const*>(ptrs.data());
      T* at = mine ? mine + done : s_.buf_.pieces + (s_.ext_[d] - 1) * piece;
      if (s_.dims_[d].nest.empty()) s_.red_.combine_n(at, in, ins.size(), m, o.final);
      else s_.red_.combine_nested(&at, 1, in, ins.size(), m, o.final, false, s_.dims_[d].nest);
      if (also) std::memcpy(also + done, at, m * sizeof(T));
      for (const auto& s : outs)
        if (s.remote()) s_.tr_.write(ch, s.peer, at, const_cast<T*>(remote(s, d)) + done, m * sizeof(T));
    }
  }

  // Every output = the input (an output that is the input is left alone).
  void copy(const program& pr, const local_op& o, std::size_t d, std::size_t slot) {
    const slice in = pr.inputs_of(o)[0];
    const T* from = reach(in, d, slot, o.count);
    const std::size_t bytes = o.count * sizeof(T);
    for (const auto& s : pr.outputs_of(o)) {
      T* to = reach(s, d, slot, o.count);
      if constexpr (has_shared_access) {
        if (!from) {
          s_.tr_.read(s_.dims_[d].ch, in.peer, remote(in, d), to, bytes);
          continue;
        }
        if (!to) {
          s_.tr_.write(s_.dims_[d].ch, s.peer, from, const_cast<T*>(remote(s, d)), bytes);
          continue;
        }
      }
      if (to == from) continue;
      if (o.nontemporal) detail::stream_copy(to, from, bytes), detail::stream_fence();
      else std::memcpy(to, from, bytes);
    }
  }

private:
  state& s_;
};

}  // namespace detail

MDRING_NAMESPACE_END
