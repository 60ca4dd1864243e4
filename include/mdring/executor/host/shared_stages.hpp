// mdring/executor/host/shared_stages.hpp: the direct stages by shared access (see core.hpp).
//
// Ranks of a node publish their buffers (access_group, transport/shared_access.hpp)
// and fold their block straight from the peers' buffers: by pointer between
// threads and for mapped node_alloc memory, piece by piece by cross-memory attach
// otherwise, and through per-rank staging buffers for small ranges.
#pragma once

#include "core.hpp"

#include <cstdint>
#include <cstring>

MDRING_NAMESPACE_BEGIN

namespace detail {

template <class T, class Op, class Comm>
class shared_stages : public engine_core<T, Op, Comm> {
public:
  using B = engine_core<T, Op, Comm>;
  using B::B;
  using transport_t = typename B::transport_t;
  using B::c_, B::tr_, B::red_, B::name_, B::dims_, B::ext_, B::coords_, B::Q_, B::raise, B::deadline;
  using B::has_shared_access, B::shared, B::piece;

  // Publishes this rank's buffers for the stage on a range of n elements and waits
  // for every peer's. Ranks whose ranges differ passed different counts (or types,
  // or roots): every rank of the ring sees that, and throws.
  void shared_arrive(std::size_t d, phase ph, std::size_t n, const void* src, void* dst) {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      g.arrive(src, dst, std::uint64_t(n) * 64 + sizeof(T) % 64);
      auto failed = [&] { return tr_.shared_failure(); };
      const wait_status st = wait_or_yield(
          deadline(), [&](deadline_clock::time_point dl) { return g.wait_arrived(dl, failed); },
          [&] { return g.test_arrived(failed); });
      if (st.kind != wait_status::done)
        raise(st, ph, d, 0, dims_[d].members[st.index], " to publish its buffers to rank ");
      if (const std::size_t j = g.mismatch(); j < g.size())
        throw transport_error(std::string("mdring::") + name_ + ": rank " + std::to_string(dims_[d].members[j]) +
                                  " works on " + std::to_string(g.signature(j) / 64) + " elements of " +
                                  std::to_string(g.signature(j) % 64) + " bytes in dimension " + std::to_string(d) +
                                  " where rank " + std::to_string(c_.rank()) + " works on " + std::to_string(n) +
                                  " of " + std::to_string(sizeof(T) % 64) +
                                  ": the ranks passed different counts, types or roots to the same collective",
                              0);
    }
  }
  // Says this rank is done with its peers' buffers and waits until they are done with its own.
  void shared_leave(std::size_t d, phase ph) {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      g.leave();
      auto failed = [&] { return tr_.shared_failure(); };
      const wait_status st = wait_or_yield(
          deadline(), [&](deadline_clock::time_point dl) { return g.wait_left(dl, failed); },
          [&] { return g.test_left(failed); });
      if (st.kind != wait_status::done)
        raise(st, ph, d, 1, dims_[d].members[st.index], " to finish with the buffers of rank ");
    }
  }

  // Peer j's `remote` range of n elements as a pointer this rank can use: the
  // address itself for threads, the mapped node_alloc segment between processes
  // (transport's local_address), else nullptr (then: cross-memory attach).
  template <class P>
  P* reach(std::size_t d, std::size_t j, P* remote, std::size_t n) {
    if constexpr (transport_t::same_address_space) {
      return remote;
    } else if constexpr (maps_peer_memory<transport_t>) {
      return static_cast<P*>(tr_.local_address(dims_[d].ch, j, remote, n * sizeof(T)));
    } else {
      (void)d, (void)j, (void)remote, (void)n;
      return nullptr;
    }
  }
  // Peer j's published source, `off` bytes further (in the peer's address space).
  static const T* peer_src_at(const detail::access_group& g, std::size_t j, std::uintptr_t off) {
    return reinterpret_cast<const T*>(reinterpret_cast<std::uintptr_t>(g.peer_src(j)) + off);
  }
  // Stage results of this many bytes are written with non-temporal stores.
  bool stream(std::size_t bytes) const noexcept { return bytes >= c_.get_options().tune.nontemporal_bytes; }

  // out[i] = fold over the ring of src[i] for the elements [lo, lo+n) of the
  // nested order, reading the peers' src through the published bases: in place
  // where they are reachable by pointer, else piece by piece through scratch.
  void shared_fold(std::size_t d, const view<const T>& src, std::size_t lo, std::size_t n, T* out, bool final) {
    if constexpr (has_shared_access) {
      const std::size_t p = ext_[d], c = coords_[d];
      auto& ch = dims_[d].ch;
      auto& g = tr_.group(ch);
      auto& ptrs = c_.pointer_slots();
      const std::uintptr_t base = src.base_address();
      const bool nt = stream(n * sizeof(T));
      src.runs(lo, n, [&](const T* own, std::size_t rel, std::size_t len) {
        // The same byte offset from the base in every rank's view.
        const std::uintptr_t off = reinterpret_cast<std::uintptr_t>(own) - base;
        auto peer = [&](std::size_t j) { return peer_src_at(g, j, off); };
        bool direct = true;
        for (std::size_t j = 0; j < p && direct; ++j) direct = (ptrs[j] = j == c ? own : reach(d, j, peer(j), len));
        if (direct) {
          T* o = out + rel;
          return red_.combine_n_to(&o, 1, reinterpret_cast<const T* const*>(ptrs.data()), p, len, final, nt);
        }
        for (std::size_t done = 0; done < len; done += piece) {
          const std::size_t m = len - done < piece ? len - done : piece;
          for (std::size_t j = 0; j < p; ++j) {
            if (j == c) {
              ptrs[j] = own + done;
              continue;
            }
            T* slot = Q_ + (j < c ? j : j - 1) * piece;
            tr_.read(ch, j, peer(j) + done, slot, m * sizeof(T));
            ptrs[j] = slot;
          }
          red_.combine_n(out + rel + done, reinterpret_cast<const T* const*>(ptrs.data()), p, m, final);
        }
      });
    }
  }

  // The fused stage when every peer's source and destination are reachable by
  // pointer: one pass reads the p inputs of block c and writes the result into all
  // p buffers. False (nothing done) when some peer's are not.
  bool shared_all_reduce_direct(std::size_t d, block_range r, block_range bc, const view<const T>& src, T* buf,
                                bool final) {
    const std::size_t p = ext_[d], c = coords_[d];
    auto& g = tr_.group(dims_[d].ch);
    auto& ptrs = c_.pointer_slots();
    T* outs[detail::access_group::max_ranks];
    const std::uintptr_t base = src.base_address();
    const bool nt = stream(bc.count * sizeof(T) * p);
    bool direct = p <= detail::access_group::max_ranks;
    auto gather = [&](const T* own, std::size_t rel, std::size_t len) {
      const std::uintptr_t off = reinterpret_cast<std::uintptr_t>(own) - base;
      for (std::size_t j = 0; j < p && direct; ++j) {
        const std::size_t at = bc.offset + rel;
        if (j == c) {
          ptrs[j] = own;
          outs[j] = buf + at;
          continue;
        }
        ptrs[j] = reach(d, j, peer_src_at(g, j, off), len);
        outs[j] = reach(d, j, static_cast<T*>(g.peer_dst(j)) + at, len);
        direct = ptrs[j] && outs[j];
      }
    };
    src.runs(r.offset + bc.offset, bc.count, gather);  // every run reachable?
    if (!direct) return false;
    src.runs(r.offset + bc.offset, bc.count, [&](const T* own, std::size_t rel, std::size_t len) {
      gather(own, rel, len);
      red_.combine_n_to(outs, p, reinterpret_cast<const T* const*>(ptrs.data()), p, len, final, nt);
    });
    return true;
  }

  // A stage of n elements on dimension d goes through the staging buffers.
  bool staged(std::size_t d, std::size_t n) {
    if constexpr (has_shared_access) return n * sizeof(T) <= tr_.group(dims_[d].ch).staging_bytes();
    else return false;
  }
  static void copy_bytes(void* to, const void* from, std::size_t elems) {
    if (elems) std::memcpy(to, from, elems * sizeof(T));
  }
  // Copies this rank's contribution to range r into its next staging buffer.
  void stage_in(std::size_t d, const view<const T>& src, block_range r) {
    if constexpr (has_shared_access) {
      T* mine = static_cast<T*>(tr_.group(dims_[d].ch).next_staging(coords_[d]));
      src.runs(r.offset, r.count, [&](const T* from, std::size_t rel, std::size_t len) { copy_bytes(mine + rel, from, len); });
    }
  }
  // out = the fold, in coordinate order, of elements [off, off+n) of every rank's staging.
  void fold_staging(std::size_t d, std::size_t off, std::size_t n, T* out, bool final) {
    if constexpr (has_shared_access) {
      auto& g = tr_.group(dims_[d].ch);
      auto& ptrs = c_.pointer_slots();
      for (std::size_t j = 0; j < ext_[d]; ++j) ptrs[j] = static_cast<const T*>(g.staging(j)) + off;
      red_.combine_n(out, reinterpret_cast<const T* const*>(ptrs.data()), ext_[d], n, final);
    }
  }

  // Reduce-scatter of dimension d by shared access: rank c folds block c straight
  // from its peers' sources into out.
  void shared_reduce_scatter_stage(std::size_t d, block_range r, const view<const T>& src, T* out, bool final) {
    const std::size_t p = ext_[d], c = coords_[d];
    const block_range bc = block_of(r.count, p, c);
    if (staged(d, r.count)) {
      stage_in(d, src, r);
      shared_arrive(d, phase::reduce_scatter, r.count, nullptr, nullptr);
      fold_staging(d, bc.offset, bc.count, out, final);
      return;
    }
    shared_arrive(d, phase::reduce_scatter, r.count, reinterpret_cast<const void*>(src.base_address()), nullptr);
    shared_fold(d, src, r.offset + bc.offset, bc.count, out, final);
    shared_leave(d, phase::reduce_scatter);
  }

  // All-gather of dimension d by shared access: copy every peer's block from its
  // buffer (buf holds the stage's range on every rank) into this rank's.
  void shared_all_gather_stage(std::size_t d, block_range r, T* buf) {
    if constexpr (has_shared_access) {
      const std::size_t p = ext_[d], c = coords_[d];
      auto& ch = dims_[d].ch;
      auto& g = tr_.group(ch);
      if (staged(d, r.count)) {
        const block_range bc = block_of(r.count, p, c);
        copy_bytes(g.next_staging(c), buf + bc.offset, bc.count);
        shared_arrive(d, phase::all_gather, r.count, nullptr, nullptr);
        for (std::size_t j = 0; j < p; ++j) {
          if (j == c) continue;
          const block_range bj = block_of(r.count, p, j);
          copy_bytes(buf + bj.offset, g.staging(j), bj.count);
        }
        return;
      }
      shared_arrive(d, phase::all_gather, r.count, nullptr, buf);
      for (std::size_t j = 0; j < p; ++j) {
        if (j == c) continue;
        const block_range bj = block_of(r.count, p, j);
        tr_.read(ch, j, static_cast<const T*>(g.peer_dst(j)) + bj.offset, buf + bj.offset, bj.count * sizeof(T));
      }
      shared_leave(d, phase::all_gather);
    }
  }

  // The last dimension's reduce-scatter and all-gather in one pass: rank c folds
  // block c from every peer's source and writes the result into every peer's
  // buffer (directly, or piece by piece while it is in cache). No block is read twice.
  void shared_all_reduce_stage(std::size_t d, block_range r, const view<const T>& src, T* buf, bool final) {
    if constexpr (has_shared_access) {
      const std::size_t p = ext_[d], c = coords_[d];
      const block_range bc = block_of(r.count, p, c);
      auto& ch = dims_[d].ch;
      auto& g = tr_.group(ch);
      if (staged(d, r.count)) {
        // Small: every rank folds the whole range from the staging buffers, in
        // coordinate order, so all get the same bits with one synchronization.
        stage_in(d, src, r);
        shared_arrive(d, phase::reduce_scatter, r.count, nullptr, nullptr);
        fold_staging(d, 0, r.count, buf, final);
        return;
      }
      shared_arrive(d, phase::reduce_scatter, r.count, reinterpret_cast<const void*>(src.base_address()), buf);
      if (shared_all_reduce_direct(d, r, bc, src, buf, final)) return shared_leave(d, phase::all_gather);
      for (std::size_t done = 0; done < bc.count; done += piece) {
        const std::size_t m = bc.count - done < piece ? bc.count - done : piece;
        T* mine = buf + bc.offset + done;
        shared_fold(d, src, r.offset + bc.offset + done, m, mine, final);
        for (std::size_t j = 0; j < p; ++j)
          if (j != c) tr_.write(ch, j, mine, static_cast<T*>(g.peer_dst(j)) + bc.offset + done, m * sizeof(T));
      }
      shared_leave(d, phase::all_gather);
    }
  }
};

}  // namespace detail

MDRING_NAMESPACE_END
