// mdring/reduce/host.hpp: the reduction loops of the host path.
//
// Three loops, each a single pass that the compiler vectorizes (restrict-qualified
// pointers, no calls, no branches inside the loop):
//   combine     dst[i] = a[i] op b[i]                   (ring step: fold a received block)
//   combine_n   dst[i] = in0[i] op in1[i] op ... op ink[i]   (direct: k inputs at once)
//   finalize    dst[i] = fin(src[i])                    (avg on one rank: the copy)
// `final` applies the op's finalize (avg's division by the number of ranks) in the
// same pass. dst may be exactly a or b (in place); partial overlap is not allowed.
// A bulk op (ops.hpp) has its own reducer below: it is called on whole arrays, or
// on tiles of 16 KiB.
#pragma once

#include "../config.hpp"
#include "ops.hpp"
#include "types.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// A loop over [0, n) as blocks of a compile-time width plus a scalar tail: GCC's
// -O2 vectorizer (cost model "very cheap") only takes loops whose trip count it
// knows, so the blocks vectorize at -O2 as well as at -O3.
#define MDRING_VECTOR_LOOP(n, i, ...)                                      \
  do {                                                                     \
    std::size_t i##_block = 0;                                             \
    for (; i##_block + vector_width <= (n); i##_block += vector_width)     \
      for (std::size_t i = i##_block; i < i##_block + vector_width; ++i) { \
        __VA_ARGS__;                                                       \
      }                                                                    \
    for (std::size_t i = i##_block; i < (n); ++i) {                        \
      __VA_ARGS__;                                                         \
    }                                                                      \
  } while (0)

MDRING_NAMESPACE_BEGIN

namespace detail {
// memcpy with non-temporal stores for the aligned middle: the destination lines are
// written without being read first and do not displace the cache. Call
// stream_fence() before another thread or process may read what was written.
inline void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept {
#if defined(__SSE2__)
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
  if (bytes < head + 64) return void(std::memcpy(d, s, bytes));
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}
inline void stream_fence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}
}  // namespace detail

/// The host's reduction loops for elements T and op Op (the table above).
template <class T, class Op>
class host_reducer {
public:
  /// Built-in ops compute in accumulator_t<T>; user ops see T itself.
  using acc = std::conditional_t<op_traits<Op>::builtin, accumulator_t<T>, T>;

  /// A reducer of `op` over `ranks` ranks (avg divides by it).
  host_reducer(Op op, std::size_t ranks) : op_(op), ranks_(ranks) {}

  const Op& op() const noexcept { return op_; }          ///< the op
  std::size_t ranks() const noexcept { return ranks_; }  ///< the ranks avg divides by

  /// dst = a op b, optionally finalized. dst may equal a or b.
  void combine(T* dst, const T* a, const T* b, std::size_t n, bool final) const {
    if (n == 0) return;
    if (final && needs_finalize()) return combine_loop<true>(dst, a, b, n);
    combine_loop<false>(dst, a, b, n);
  }

  /// dst = in[0] op in[1] op ... op in[k-1], accumulated in acc, finalized if asked.
  /// Any in[j] may equal dst (it is read tile by tile before the tile is written).
  void combine_n(T* dst, const T* const* in, std::size_t k, std::size_t n, bool final) const {
    if (n == 0) return;
    if (k == 1) return finalize(dst, in[0], n, final);
    if (final && needs_finalize()) return combine_n_loop<true>(dst, in, k, n);
    combine_n_loop<false>(dst, in, k, n);
  }

  /// The fold of combine_n written to every out[o], o < nout, in one pass over the
  /// inputs (the fused shared stage: this rank's buffer and its peers'). An out[o]
  /// may equal an in[j] exactly; no other overlap. stream: non-temporal stores
  /// (see detail::stream_copy), fenced before returning.
  void combine_n_to(T* const* out, std::size_t nout, const T* const* in, std::size_t k, std::size_t n, bool final,
                    bool stream) const {
    if (n == 0) return;
    const bool fin_now = final && needs_finalize();
    acc buf[tile];
    alignas(64) T res[tile];
    for (std::size_t base = 0; base < n; base += tile) {
      const std::size_t m = n - base < tile ? n - base : tile;
      load_tile(buf, in[0] + base, m);
      for (std::size_t j = 1; j < k; ++j) fold_tile(buf, in[j] + base, m);
      fin_now ? store_tile<true>(res, buf, m) : store_tile<false>(res, buf, m);
      for (std::size_t o = 0; o < nout; ++o)
        stream ? detail::stream_copy(out[o] + base, res, m * sizeof(T))
               : void(std::memcpy(out[o] + base, res, m * sizeof(T)));
    }
    if (stream) detail::stream_fence();
  }

  /// combine_n_to folded nested (options.reproducible on merged dimensions): the k
  /// inputs are a grid of extents nest[0] x nest[1] x ... (innermost first, each
  /// above 1, product k, at most max_nest levels); each run of nest[0] inputs is
  /// folded and rounded to T, then each run of nest[1] of those, and so on: the
  /// result of the separate stages the merged dimension replaces.
  static constexpr std::size_t max_nest = 8;
  /// Writes the nested fold described above to every out[o].
  void combine_nested(T* const* out, std::size_t nout, const T* const* in, std::size_t k, std::size_t n, bool final,
                      bool stream, std::span<const std::size_t> nest) const {
    if (n == 0) return;
    const bool fin_now = final && needs_finalize();
    acc lvl[max_nest][tile];
    acc buf[tile];
    alignas(64) T res[tile];
    for (std::size_t base = 0; base < n; base += tile) {
      const std::size_t m = n - base < tile ? n - base : tile;
      nested_tile(buf, lvl, nest, nest.size() - 1, in, k, base, m);
      fin_now ? store_tile<true>(res, buf, m) : store_tile<false>(res, buf, m);
      for (std::size_t o = 0; o < nout; ++o)
        stream ? detail::stream_copy(out[o] + base, res, m * sizeof(T))
               : void(std::memcpy(out[o] + base, res, m * sizeof(T)));
    }
    if (stream) detail::stream_fence();
  }

  /// dst = fin(src) when final (and the op has a finalize), else a copy.
  void finalize(T* dst, const T* src, std::size_t n, bool final) const {
    if (n == 0) return;
    if (final && needs_finalize()) {
      if (dst == src) return finalize_inplace(dst, n);
      return finalize_loop(dst, src, n);
    }
    if (dst != src) std::memmove(dst, src, n * sizeof(T));
  }

private:
  // 64 bytes of accumulators per block: one cache line, four SSE or two AVX vectors.
  static constexpr std::size_t vector_width = 64 / sizeof(acc) < 1 ? 1 : 64 / sizeof(acc);

  bool needs_finalize() const noexcept { return op_traits<Op>::has_finalize && ranks_ > 1; }

  static acc load(const T& x) noexcept { return static_cast<acc>(x); }
  static T store(const acc& x) noexcept { return static_cast<T>(x); }

  template <bool Final>
  acc fin(acc x) const noexcept {
    if constexpr (Final && op_traits<Op>::has_finalize) return op_.finalize(x, ranks_);
    else return x;
  }

  template <bool Final>
  void combine_loop(T* dst, const T* a, const T* b, std::size_t n) const {
    if (dst == a) return inplace_left<Final>(dst, b, n);
    if (dst == b) return inplace_right<Final>(a, dst, n);
    outofplace<Final>(dst, a, b, n);
  }

  template <bool Final>
  void outofplace(T* MDRING_RESTRICT dst, const T* MDRING_RESTRICT a, const T* MDRING_RESTRICT b, std::size_t n) const {
    const Op op = op_;
    MDRING_VECTOR_LOOP(n, i, dst[i] = store(fin<Final>(op(load(a[i]), load(b[i])))));
  }
  // d = d op b
  template <bool Final>
  void inplace_left(T* MDRING_RESTRICT d, const T* MDRING_RESTRICT b, std::size_t n) const {
    const Op op = op_;
    MDRING_VECTOR_LOOP(n, i, d[i] = store(fin<Final>(op(load(d[i]), load(b[i])))));
  }
  // d = a op d
  template <bool Final>
  void inplace_right(const T* MDRING_RESTRICT a, T* MDRING_RESTRICT d, std::size_t n) const {
    const Op op = op_;
    MDRING_VECTOR_LOOP(n, i, d[i] = store(fin<Final>(op(load(a[i]), load(d[i])))));
  }

  void finalize_loop(T* MDRING_RESTRICT dst, const T* MDRING_RESTRICT src, std::size_t n) const {
    MDRING_VECTOR_LOOP(n, i, dst[i] = store(fin<true>(load(src[i]))));
  }
  void finalize_inplace(T* MDRING_RESTRICT d, std::size_t n) const {
    MDRING_VECTOR_LOOP(n, i, d[i] = store(fin<true>(load(d[i]))));
  }

  // Tiles small enough that the accumulator stays in L1 while k inputs stream by.
  static constexpr std::size_t tile = 2048 / sizeof(acc) < 64 ? 64 : 2048 / sizeof(acc);

  template <bool Final>
  void combine_n_loop(T* dst, const T* const* in, std::size_t k, std::size_t n) const {
    acc buf[tile];
    for (std::size_t base = 0; base < n; base += tile) {
      const std::size_t m = n - base < tile ? n - base : tile;
      load_tile(buf, in[0] + base, m);
      for (std::size_t j = 1; j < k; ++j) fold_tile(buf, in[j] + base, m);
      store_tile<Final>(dst + base, buf, m);
    }
  }
  static void load_tile(acc* MDRING_RESTRICT buf, const T* MDRING_RESTRICT x, std::size_t m) {
    MDRING_VECTOR_LOOP(m, i, buf[i] = load(x[i]));
  }
  void fold_tile(acc* MDRING_RESTRICT buf, const T* MDRING_RESTRICT x, std::size_t m) const {
    const Op op = op_;
    MDRING_VECTOR_LOOP(m, i, buf[i] = op(buf[i], load(x[i])));
  }
  template <bool Final>
  void store_tile(T* MDRING_RESTRICT d, const acc* MDRING_RESTRICT buf, std::size_t m) const {
    MDRING_VECTOR_LOOP(m, i, d[i] = store(fin<Final>(buf[i])));
  }
  // dst = the fold of level l over the `span` inputs from in[0] (see combine_nested),
  // in the accumulator, each level-(l-1) result rounded to T before it is folded;
  // lvl[j] holds level j's partial results below it. Pairs of inputs at the lowest
  // level fold and join dst in one pass (shm:2 x shm:2: three passes over a tile,
  // one fewer than the flat fold's four).
  void nested_tile(acc* dst, acc (*lvl)[tile], std::span<const std::size_t> nest, std::size_t l, const T* const* in,
                   std::size_t span, std::size_t base, std::size_t m) const {
    if (l == 0) {
      load_tile(dst, in[0] + base, m);
      for (std::size_t j = 1; j < nest[0]; ++j) fold_tile(dst, in[j] + base, m);
      return;
    }
    const std::size_t sub = span / nest[l];
    nested_tile(dst, lvl, nest, l - 1, in, sub, base, m);
    if constexpr (!std::is_same_v<acc, T>) round_tile(dst, m);
    for (std::size_t c = 1; c < nest[l]; ++c) {
      if (l == 1 && nest[0] == 2) {
        fold_pair_rounded(dst, in[c * sub] + base, in[c * sub + 1] + base, m);
      } else {
        nested_tile(lvl[l - 1], lvl, nest, l - 1, in + c * sub, sub, base, m);
        fold_rounded(dst, lvl[l - 1], m);
      }
    }
  }
  // to = to op round(from); round: to T and back.
  void fold_rounded(acc* MDRING_RESTRICT to, const acc* MDRING_RESTRICT from, std::size_t m) const {
    const Op op = op_;
    MDRING_VECTOR_LOOP(m, i, to[i] = op(to[i], load(store(from[i]))));
  }
  // to = to op round(a op b).
  void fold_pair_rounded(acc* MDRING_RESTRICT to, const T* MDRING_RESTRICT a, const T* MDRING_RESTRICT b,
                         std::size_t m) const {
    const Op op = op_;
    MDRING_VECTOR_LOOP(m, i, to[i] = op(to[i], load(store(op(load(a[i]), load(b[i]))))));
  }
  static void round_tile(acc* MDRING_RESTRICT x, std::size_t m) { MDRING_VECTOR_LOOP(m, i, x[i] = load(store(x[i]))); }

  Op op_;
  std::size_t ranks_;
};

/// The reducer of a bulk op: the same interface, each loop one reduce_local call
/// per array (combine) or per tile (the k-input folds). A bulk op is commutative
/// and has no finalize, so `final` changes nothing.
template <class T, class Op>
  requires bulk_reduction<Op, T>
class host_reducer<T, Op> {
public:
  /// A reducer of `op` over `ranks` ranks.
  host_reducer(Op op, std::size_t ranks) : op_(op), ranks_(ranks) {}

  const Op& op() const noexcept { return op_; }          ///< the op
  std::size_t ranks() const noexcept { return ranks_; }  ///< the ranks

  /// dst = a op b (reduce_local). dst may equal a or b.
  void combine(T* dst, const T* a, const T* b, std::size_t n, bool /*final*/) const {
    if (n == 0) return;
    if (dst == b) return op_.reduce_local(a, dst, n);  // dst = a op dst
    if (dst != a) std::memcpy(dst, a, n * sizeof(T));
    op_.reduce_local(b, dst, n);  // dst = b op a (commutative)
  }
  /// combine_n_to with one output.
  void combine_n(T* dst, const T* const* in, std::size_t k, std::size_t n, bool final) const {
    combine_n_to(&dst, 1, in, k, n, final, false);
  }
  /// Each tile is folded in a buffer before any out[o] is written, so an out[o] may
  /// be one of the inputs.
  void combine_n_to(T* const* out, std::size_t nout, const T* const* in, std::size_t k, std::size_t n, bool /*final*/,
                    bool stream) const {
    if (n == 0) return;
    alignas(64) T buf[tile];
    for (std::size_t base = 0; base < n; base += tile) {
      const std::size_t m = n - base < tile ? n - base : tile;
      std::memcpy(buf, in[0] + base, m * sizeof(T));
      for (std::size_t j = 1; j < k; ++j) op_.reduce_local(in[j] + base, buf, m);
      for (std::size_t o = 0; o < nout; ++o)
        stream ? detail::stream_copy(out[o] + base, buf, m * sizeof(T))
               : void(std::memcpy(out[o] + base, buf, m * sizeof(T)));
    }
    if (stream) detail::stream_fence();
  }
  /// The nested fold of the generic reducer's combine_nested, in T (a bulk op has no
  /// accumulator of its own), one level's tile after the other.
  static constexpr std::size_t max_nest = 8;
  /// Writes the nested fold to every out[o].
  void combine_nested(T* const* out, std::size_t nout, const T* const* in, std::size_t k, std::size_t n, bool /*final*/,
                      bool stream, std::span<const std::size_t> nest) const {
    if (n == 0) return;
    constexpr std::size_t m_tile = tile / max_nest < 1 ? 1 : tile / max_nest;
    alignas(64) T lvl[m_tile * max_nest];
    for (std::size_t base = 0; base < n; base += m_tile) {
      const std::size_t m = n - base < m_tile ? n - base : m_tile;
      nested_tile(lvl, m_tile, nest, nest.size() - 1, in, k, base, m);
      const T* res = lvl + (nest.size() - 1) * m_tile;
      for (std::size_t o = 0; o < nout; ++o)
        stream ? detail::stream_copy(out[o] + base, res, m * sizeof(T))
               : void(std::memcpy(out[o] + base, res, m * sizeof(T)));
    }
    if (stream) detail::stream_fence();
  }
  /// A copy (a bulk op has no finalize).
  void finalize(T* dst, const T* src, std::size_t n, bool /*final*/) const {
    if (n != 0 && dst != src) std::memmove(dst, src, n * sizeof(T));
  }

private:
  void nested_tile(T* lvl, std::size_t stride, std::span<const std::size_t> nest, std::size_t l, const T* const* in,
                   std::size_t span, std::size_t base, std::size_t m) const {
    T* to = lvl + l * stride;
    if (l == 0) {
      std::memcpy(to, in[0] + base, m * sizeof(T));
      for (std::size_t j = 1; j < nest[0]; ++j) op_.reduce_local(in[j] + base, to, m);
      return;
    }
    const std::size_t sub = span / nest[l];
    for (std::size_t c = 0; c < nest[l]; ++c) {
      nested_tile(lvl, stride, nest, l - 1, in + c * sub, sub, base, m);
      if (c == 0) std::memcpy(to, lvl + (l - 1) * stride, m * sizeof(T));
      else op_.reduce_local(lvl + (l - 1) * stride, to, m);
    }
  }

  static constexpr std::size_t tile = (std::size_t(16) << 10) / sizeof(T) < 1 ? 1 : (std::size_t(16) << 10) / sizeof(T);
  Op op_;
  std::size_t ranks_;
};

MDRING_NAMESPACE_END

#undef MDRING_VECTOR_LOOP
