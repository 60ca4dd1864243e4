// mdring/cuda/reduce.cuh: the fused reduction kernels of the GPU path.
//
//   cuda::fold(dst, inputs, n, op, final, ranks, stream)
//       dst[i] = in_0[i] op in_1[i] op ... op in_{k-1}[i]   (i < n, in input order)
//   in one pass over memory:
//   - n-ary fused reduce: k inputs to one output (the direct algorithm on a fully
//     connected dimension reads its block from all k ranks at once);
//   - reduce-and-forward: k = 2, the received block and the local one, written
//     where the ring sends from next (recvbuf), so the block to forward is produced
//     by the same pass that folds;
//   - `final` applies the op's finalize in the same pass (avg: one division by
//     `ranks`, in the accumulator type, by the element's owner);
//   - k = 1: a copy (cudaMemcpyAsync), or the finalize alone;
//   - several outputs (fold(dsts, ...)): the same result written to each, from one
//     read of the inputs (the IPC transport's fused reduce-scatter and all-gather
//     writes a block into every peer's buffer, cuda/ipc.cuh).
// dst may be exactly one of the inputs (in place); partial overlap is not allowed.
//
// Arithmetic is that of the host path (reduce/host.hpp): built-in ops compute in
// accumulator_t<T>, so mdring::half and mdring::bfloat16 (layout-compatible with
// __half and __nv_bfloat16) are widened to float, all k inputs are folded in float,
// and the result is rounded once (round to nearest even). User ops see T itself
// and must be callable in device code (a __host__ __device__ operator()).
// long double has no device representation and is rejected at compile time.
//
// Memory access: each thread moves 16-byte vectors (loads with the streaming
// cache hint, ld.global.cs.v4, since every input is read exactly once; CUB's
// ThreadLoad<LOAD_CS> emits the generic-space ld.cs instead), several vectors in
// flight per thread, grid-stride over the range. benchmarks/gpu_bench.cu compares
// these kernels with cub::DeviceTransform and with a device-to-device copy. The vector path needs every
// pointer to have the same address modulo 16; the head up to the first 16-byte
// boundary and the tail go element by element. Pointers whose offsets modulo 16
// differ take the element-by-element path for the whole range (correct, slower);
// the all_reduce program places its receive slots so that this does not happen
// (plan/build_program.hpp). Up to max_fold_inputs (64) inputs go in one launch; more
// are folded in several passes, the partial result first (rounded to T in
// between, which matters only for 16-bit types), and then dst may alias only
// inputs of the first pass (invalid_argument("in") otherwise). The GPU
// communicators never run a direct stage over more than 64 ranks.
//
// Kernels are MDRING_KERNEL (hidden visibility) templates in mdring::v0::cuda.
#pragma once

#include "../reduce/ops.hpp"
#include "../reduce/types.hpp"
#include "config.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nv/target>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

MDRING_NAMESPACE_BEGIN

namespace cuda {

// `#pragma unroll` where nvcc compiles for the device; nothing in the host pass
// (fold_thread is __host__ __device__, and host compilers do not know the pragma).
#ifdef __CUDA_ARCH__
#define MDRING_UNROLL _Pragma("unroll")
#else
#define MDRING_UNROLL
#endif

/// The most inputs and outputs of one fold launch, and the threads per block of the fold kernel.
///@{
inline constexpr int max_fold_inputs = 64;
inline constexpr int max_fold_outputs = 16;
inline constexpr int fold_threads = 256;
///@}

namespace detail {

// Elements per 16-byte vector, or 1 when T does not tile 16 bytes.
template <class T>
inline constexpr int vector_elements = (sizeof(T) <= 16 && 16 % sizeof(T) == 0) ? int(16 / sizeof(T)) : 1;

// Vectors in flight per thread: 64 bytes of each input. 1-byte types keep 2 (their
// 16 elements per vector widen to 16 accumulators each). Measured on an H200
// (docs/GPU.md): 4 for 2-byte types lifts a 2-input bf16 fold from 90 to 94 % of a
// device copy at 1 GiB, 2 for fp32 lowers it from 94 to 91 %.
template <class T>
inline constexpr int unroll = sizeof(T) >= 2 ? 4 : 2;

// Loads and stores between storage T and the accumulator of op Op.
template <class T, class Op>
struct arith {
  using acc = std::conditional_t<op_traits<Op>::builtin, accumulator_t<T>, T>;
  static constexpr bool widen_half = op_traits<Op>::builtin && std::is_same_v<T, half>;
  static constexpr bool widen_bf16 = op_traits<Op>::builtin && std::is_same_v<T, bfloat16>;

  static MDRING_HOST_DEVICE __forceinline__ acc load(const T& x) {
    if constexpr (widen_half) return __half2float(__ushort_as_half(x.bits));
    else if constexpr (widen_bf16) return __bfloat162float(__ushort_as_bfloat16(x.bits));
    else return x;
  }
  static MDRING_HOST_DEVICE __forceinline__ T store(const acc& a) {
    if constexpr (widen_half) {
      T t;
      t.bits = __half_as_ushort(__float2half_rn(a));
      return t;
    } else if constexpr (widen_bf16) {
      T t;
      t.bits = __bfloat16_as_ushort(__float2bfloat16_rn(a));
      return t;
    } else {
      return a;
    }
  }
};

template <class T>
struct fold_params {
  T* dst[max_fold_outputs];
  int outs;  // outputs, 1 to max_fold_outputs: each gets the same values
  const T* in[max_fold_inputs];
  int k;
  std::size_t n;      // elements
  std::size_t head;   // elements before the first 16-byte boundary (vector path)
  std::size_t nvec;   // 16-byte vectors after the head (0: element by element)
  std::size_t ranks;  // avg divides by this
  bool final;         // apply op.finalize (uniform across the grid: one branch, no extra kernel)
};

template <class T, int V>
MDRING_HOST_DEVICE __forceinline__ void load_vector(const T* p, T (&out)[V]) {
  NV_IF_ELSE_TARGET(NV_IS_DEVICE,
                    (const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));  // ld.global.cs.v4
                     std::memcpy(out, &v, sizeof(v));),
                    (std::memcpy(out, p, sizeof(out));))
}
// Streaming stores (st.global.cs.v4, evict-first) as the loads: a fold writes its
// output once and does not read it back. On an H200 they lift a 2-input fp32 fold
// from 94 to 98.5 % of a device copy's bandwidth at 1 GiB, 4 inputs from 95 to 101 %.
template <class T, int V>
MDRING_HOST_DEVICE __forceinline__ void store_vector(T* p, const T (&in)[V]) {
  uint4 v;
  std::memcpy(&v, in, sizeof(v));
  NV_IF_ELSE_TARGET(NV_IS_DEVICE, (__stcs(reinterpret_cast<uint4*>(p), v);),  // st.global.cs.v4
                    (*reinterpret_cast<uint4*>(p) = v;))
}

// What one thread of the fold grid does: thread `tid` of `stride` threads in all.
// K > 0: exactly K inputs (compile time); K == 0: p.k inputs. Threads share
// nothing (no shared memory, no barrier) and each writes only the elements it
// read, so the grid may run in any order: tests/gpu/test_gpu_fold.cu --emulate
// runs this very function for every thread of the grid on the host, one after
// the other, where there is no GPU.
template <class T, class Op, int K>
MDRING_HOST_DEVICE __forceinline__ void fold_thread(const fold_params<T>& p, const Op& op, std::size_t tid,
                                                    std::size_t stride) {
  using A = arith<T, Op>;
  using acc = typename A::acc;
  constexpr int V = vector_elements<T>;
  const int k = K > 0 ? K : p.k;
  auto fin = [&](const acc& x) -> acc {
    if constexpr (op_traits<Op>::has_finalize) return p.final ? op.finalize(x, p.ranks) : x;
    else return x;
  };

  if constexpr (V > 1) {
    constexpr int U = unroll<T>;
    for (std::size_t base = tid; base < p.nvec; base += stride * U) {
      acc a[U][V];
      T x[U][V]{};  // zeros where v >= nvec: folded, never stored
      MDRING_UNROLL
      for (int u = 0; u < U; ++u) {
        const std::size_t v = base + std::size_t(u) * stride;
        if (v < p.nvec) load_vector(p.in[0] + p.head + v * V, x[u]);
      }
      MDRING_UNROLL
      for (int u = 0; u < U; ++u) MDRING_UNROLL
      for (int e = 0; e < V; ++e) a[u][e] = A::load(x[u][e]);
      for (int j = 1; j < k; ++j) {
        MDRING_UNROLL
        for (int u = 0; u < U; ++u) {
          const std::size_t v = base + std::size_t(u) * stride;
          if (v < p.nvec) load_vector(p.in[j] + p.head + v * V, x[u]);
        }
        MDRING_UNROLL
        for (int u = 0; u < U; ++u) MDRING_UNROLL
        for (int e = 0; e < V; ++e) a[u][e] = op(a[u][e], A::load(x[u][e]));
      }
      MDRING_UNROLL
      for (int u = 0; u < U; ++u) {
        const std::size_t v = base + std::size_t(u) * stride;
        if (v >= p.nvec) continue;
        MDRING_UNROLL
        for (int e = 0; e < V; ++e) x[u][e] = A::store(fin(a[u][e]));
        for (int o = 0; o < p.outs; ++o) store_vector(p.dst[o] + p.head + v * V, x[u]);
      }
    }
  }

  // The head, the tail, or (no common alignment) everything, element by element.
  const std::size_t tail = p.head + p.nvec * std::size_t(V);
  const std::size_t scalars = p.head + (p.n - tail);
  for (std::size_t s = tid; s < scalars; s += stride) {
    const std::size_t i = s < p.head ? s : tail + (s - p.head);
    acc a = A::load(p.in[0][i]);
    for (int j = 1; j < k; ++j) a = op(a, A::load(p.in[j][i]));
    const T r = A::store(fin(a));
    for (int o = 0; o < p.outs; ++o) p.dst[o][i] = r;
  }
}

template <class T, class Op, int K>
MDRING_KERNEL void __launch_bounds__(fold_threads) fold_kernel(const fold_params<T> p, const Op op) {
  fold_thread<T, Op, K>(p, op, std::size_t(blockIdx.x) * blockDim.x + threadIdx.x, std::size_t(gridDim.x) * blockDim.x);
}

// The parameters of one pass over k inputs into dsts (at most max_fold_outputs),
// and how many threads it can keep busy (`work`): 16-byte vectors when every
// pointer has the same address modulo 16.
template <class T>
fold_params<T> fold_pass(std::span<T* const> dsts, const T* const* in, int k, std::size_t n, std::size_t ranks,
                         bool final, std::size_t& work) {
  fold_params<T> p{};
  p.final = final;
  p.outs = int(dsts.size());
  for (int o = 0; o < p.outs; ++o) p.dst[o] = dsts[std::size_t(o)];
  T* const dst = p.dst[0];
  for (int j = 0; j < k; ++j) p.in[j] = in[j];
  p.k = k;
  p.n = n;
  p.ranks = ranks;
  constexpr int V = vector_elements<T>;
  work = n;
  if constexpr (V > 1) {
    const std::uintptr_t mis = address(dst) % 16;
    bool same = mis % sizeof(T) == 0;
    for (int j = 0; j < k && same; ++j) same = address(in[j]) % 16 == mis;
    for (int o = 1; o < p.outs && same; ++o) same = address(p.dst[o]) % 16 == mis;
    if (same) {
      const std::size_t head = (16 - mis) % 16 / sizeof(T);
      p.head = head < n ? head : n;
      p.nvec = (n - p.head) / std::size_t(V);
      const std::size_t scalars = n - p.nvec * std::size_t(V);
      const std::size_t vec_work = (p.nvec + unroll<T> - 1) / unroll<T>;
      work = vec_work > scalars ? vec_work : scalars;
    }
  }
  return p;
}
template <class T>
fold_params<T> fold_pass(T* dst, const T* const* in, int k, std::size_t n, std::size_t ranks, bool final,
                         std::size_t& work) {
  return fold_pass(std::span<T* const>(&dst, 1), in, k, n, ranks, final, work);
}

// Blocks of fold_threads for `work` threads, at least 1 and at most max_blocks.
inline unsigned fold_blocks(std::size_t work, std::size_t max_blocks) {
  const std::size_t blocks = (work + fold_threads - 1) / fold_threads;
  return unsigned(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// fold() with the two things that touch the GPU passed in: copy(dst, src) copies n
// elements, pass(dsts, inputs, k, final) folds k inputs (k >= 2, or k == 1 with
// final) into at most max_fold_outputs outputs. Everything else (when to copy,
// the passes over more than max_fold_inputs inputs or outputs, the aliasing rule)
// is here, shared by fold() and by the host emulation in tests/gpu/test_gpu_fold.cu.
template <class T, class Op, class Copy, class Pass>
void fold_with(std::span<T* const> dsts, std::span<const T* const> in, std::size_t n, bool final, std::size_t ranks,
               Copy&& copy, Pass&& pass) {
  if (n == 0 || in.empty() || dsts.empty()) return;
  const bool fin = final && op_traits<Op>::has_finalize && ranks > 1;
  if (in.size() == 1 && !fin) {
    for (T* d : dsts)
      if (d != in[0]) copy(d, in[0]);
    return;
  }
  T* const dst = dsts[0];
  // More outputs than one launch writes: the result into the first, copied to the rest.
  auto rest = [&] {
    for (std::size_t o = max_fold_outputs; o < dsts.size(); ++o) copy(dsts[o], dst);
  };
  const std::span<T* const> first_outs =
      dsts.first(dsts.size() < std::size_t(max_fold_outputs) ? dsts.size() : std::size_t(max_fold_outputs));
  // More inputs than one launch takes: fold them in passes, the partial result
  // first. A later pass must not read an input that the first one overwrote.
  for (std::size_t j = max_fold_inputs; j < in.size(); ++j)
    if (in[j] == dst)
      throw invalid_argument("in", "mdring::cuda::fold: dst is input " + std::to_string(j) + " of " +
                                       std::to_string(in.size()) + "; with more than " +
                                       std::to_string(max_fold_inputs) + " inputs dst may only be one of the first " +
                                       std::to_string(max_fold_inputs));
  const T* chunk[max_fold_inputs];
  std::size_t next = 0;
  bool first = true;
  while (next < in.size()) {
    int k = 0;
    if (!first) chunk[k++] = dst;
    while (k < max_fold_inputs && next < in.size()) chunk[k++] = in[next++];
    const bool last = next == in.size();
    pass(last ? first_outs : dsts.first(1), static_cast<const T* const*>(chunk), k, last && fin);
    first = false;
  }
  rest();
}
template <class T, class Op, class Copy, class Pass>
void fold_with(T* dst, std::span<const T* const> in, std::size_t n, bool final, std::size_t ranks, Copy&& copy,
               Pass&& pass) {
  fold_with<T, Op>(std::span<T* const>(&dst, 1), in, n, final, ranks, copy, pass);
}

template <class T, class Op>
void launch_fold(std::span<T* const> dsts, const T* const* in, int k, std::size_t n, const Op& op, std::size_t ranks,
                 bool final, cudaStream_t s) {
  std::size_t work = 0;
  const fold_params<T> p = fold_pass(dsts, in, k, n, ranks, final, work);
  const unsigned blocks = fold_blocks(work, std::size_t(sm_count(current_device())) * 8);
  if (k == 2) fold_kernel<T, Op, 2><<<blocks, fold_threads, 0, s>>>(p, op);
  else fold_kernel<T, Op, 0><<<blocks, fold_threads, 0, s>>>(p, op);
  check(cudaGetLastError(), "launching mdring::cuda::fold_kernel");
}

}  // namespace detail

/// See the top of this file. Enqueued on `stream`; returns at once. Every dst of
/// dsts gets the result.
template <class T, class Op>
void fold(std::span<T* const> dsts, std::span<const T* const> in, std::size_t n, const Op& op, bool final,
          std::size_t ranks, cudaStream_t stream) {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, long double>,
                "mdring::cuda::fold: long double has no device representation; use double");
  static_assert(reduction_for<Op, T>, "mdring::cuda::fold: the op cannot reduce this element type");
  detail::fold_with<T, Op>(
      dsts, in, n, final, ranks,
      [&](T* d, const T* src) {
        detail::check(cudaMemcpyAsync(d, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
      },
      [&](std::span<T* const> d, const T* const* chunk, int k, bool fin) {
        detail::launch_fold<T, Op>(d, chunk, k, n, op, ranks, fin, stream);
      });
}
/// The fold into one dst.
template <class T, class Op>
void fold(T* dst, std::span<const T* const> in, std::size_t n, const Op& op, bool final, std::size_t ranks,
          cudaStream_t stream) {
  fold(std::span<T* const>(&dst, 1), in, n, op, final, ranks, stream);
}

/// The fold into one dst, of a list of inputs.
template <class T, class Op>
void fold(T* dst, std::initializer_list<const T*> in, std::size_t n, const Op& op, bool final, std::size_t ranks,
          cudaStream_t stream) {
  fold(dst, std::span<const T* const>(in.begin(), in.size()), n, op, final, ranks, stream);
}

}  // namespace cuda

MDRING_NAMESPACE_END
