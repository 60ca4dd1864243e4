// tests/gpu/common.cuh: what the GPU test programs share: device buffers, values,
// host references. Not part of the library.
#pragma once

#include "harness.hpp"
#include "../test_support.hpp"

#include <mdring/cuda/config.cuh>
#include <mdring/mdring.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace gpu_test {

namespace md = mdring;
using u64 = std::uint64_t;

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Skips the whole program when there is no GPU (exit code 77: ctest SKIP_RETURN_CODE).
inline void require_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) throw skip_all("no CUDA device");
}

// n elements of device memory, optionally one element past a 256-byte boundary.
template <class T>
class dbuf {
public:
  dbuf(std::size_t n, bool misaligned = false) : n_(n) {
    cuda_ok(cudaMalloc(&raw_, (n + 2) * sizeof(T) + 256), "cudaMalloc");
    p_ = reinterpret_cast<T*>(raw_) + (misaligned ? 1 : 0);
  }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  ~dbuf() { cudaFree(raw_); }
  T* get() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  // upload and poison return once the device memory holds the values: a pageable
  // cudaMemcpy may return before its last DMA lands and cudaMemset is
  // asynchronous, and the calls under test run on non-blocking streams, which do
  // not wait for the legacy stream.
  void upload(const std::vector<T>& h) {
    cuda_ok(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaDeviceSynchronize(), "upload: cudaDeviceSynchronize");
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void poison() {
    cuda_ok(cudaMemset(p_, 0xa5, n_ * sizeof(T)), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "poison: cudaDeviceSynchronize");
  }

private:
  void* raw_ = nullptr;
  T* p_ = nullptr;
  std::size_t n_;
};

using mdring_test::mix;

using mdring_test::name_of;
using mdring_test::opk;

template <class T>
constexpr bool is_float_like = std::is_floating_point_v<T> || md::is_16bit_float_v<T>;

// A value for (seed, rank, index): small integers, or floats in [-1, 1) ([0.5, 1.5) for prod).
template <class T>
T value(u64 seed, std::size_t rank, std::size_t i, opk k) {
  const u64 h = mix(seed ^ mix(rank * 0x9e37 + 1) ^ mix(i + 0x1234567));
  if constexpr (is_float_like<T>) {
    const double u = double(h >> 11) * 0x1.0p-53;  // [0, 1)
    return T(float(k == opk::prod ? 0.5 + u : 2 * u - 1));
  } else if constexpr (std::is_signed_v<T>) {
    return T(k == opk::prod ? std::int64_t(h % 5) - 2 : std::int64_t(h % 201) - 100);
  } else {
    return T(k == opk::prod ? h % 4 : h % 200);
  }
}

// Unit roundoff of the storage type.
template <class T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, md::half>) return 0x1.0p-11;
  else if constexpr (std::is_same_v<T, md::bfloat16>) return 0x1.0p-8;
  else if constexpr (std::is_same_v<T, float>) return 0x1.0p-24;
  else return 0x1.0p-53;
}

// Half the spacing of T's subnormals: the absolute error of one rounding to T of a
// result below T's smallest normal (a product of 64 half values in [0.5, 1.5) can be).
template <class T>
double subnormal_roundoff() {
  if constexpr (std::is_same_v<T, md::half>) return 0x1.0p-25;
  else if constexpr (std::is_same_v<T, md::bfloat16>) return 0x1.0p-134;
  else if constexpr (std::is_same_v<T, float>) return 0x1.0p-150;
  else return 0;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
double to_double(const T& x) {
  if constexpr (md::is_16bit_float_v<T>) return double(float(x));
  else return double(x);
}

template <class F>
void with_op(opk k, F&& f) {
  switch (k) {
    case opk::sum:
      return f(md::sum);
    case opk::prod:
      return f(md::prod);
    case opk::min:
      return f(md::min);
    case opk::max:
      return f(md::max);
    default:
      return f(md::avg);
  }
}

// Checks got against the float64 reduction of xs (one vector per input) for a
// float type; for integer types against the exact result (wrapping arithmetic,
// any order). `roundings`: how many times a partial result may have been rounded
// to T (1 for one fused pass, P for a ring); `later`: see the subnormal term below.
template <class T>
bool check_against_reference(const std::string& where, opk k, const std::vector<const T*>& xs, const T* got,
                             std::size_t n, double roundings, std::size_t later = 0) {
  const std::size_t P = xs.size();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n && bad < 3; ++i) {
    if constexpr (is_float_like<T>) {
      double ref = to_double(xs[0][i]), mag = std::fabs(ref);
      for (std::size_t j = 1; j < P; ++j) {
        const double x = to_double(xs[j][i]);
        switch (k) {
          case opk::prod:
            ref *= x;
            break;
          case opk::min:
            ref = x < ref ? x : ref;
            break;
          case opk::max:
            ref = ref < x ? x : ref;
            break;
          default:
            ref += x;
        }
        mag = k == opk::prod ? std::fabs(ref) : mag + std::fabs(x);
      }
      if (k == opk::avg) ref /= double(P), mag /= double(P);
      // A partial product rounded in T's subnormal range is off by an absolute
      // amount, which the factors combined after it scale. With `later` > 0 partials
      // were rounded once, after the inputs before `later` (a fold's passes): the
      // inputs from `later` on scale it. Otherwise (any order, any partial) the
      // product of every factor's magnitude above 1 bounds it.
      double grow = 1.0, tail = 1.0;
      for (std::size_t j = 0; k == opk::prod && j < P; ++j) {
        const double x = std::fabs(to_double(xs[j][i]));
        if (later == 0) grow *= std::max(1.0, x);
        else if (j >= later) tail *= x;
      }
      if (later > 0) grow = std::max(1.0, tail);
      const double g = to_double(got[i]);
      const double u = unit_roundoff<T>();
      // Accumulation in float (or double) plus the roundings to T.
      const double acc_u = std::is_same_v<T, double> ? 0x1.0p-53 : 0x1.0p-24;
      const double tol = (k == opk::min || k == opk::max) ? 0
                                                          : (double(P) * acc_u + roundings * u) * mag * 1.01 +
                                                                roundings * subnormal_roundoff<T>() * grow + 1e-300;
      if (!(std::fabs(g - ref) <= tol))
        ++bad, check(false, where, " element ", i, ": got ", g, ", float64 reference ", ref, " (bound ", tol, ")");
    } else {
      T ref = xs[0][i];
      for (std::size_t j = 1; j < P; ++j) with_op(k, [&](auto op) { ref = op(ref, xs[j][i]); });
      if (k == opk::avg) ref = md::avg.finalize(ref, P);
      if (!same_bits(got[i], ref))
        ++bad, check(false, where, " element ", i, ": got ", double(got[i]), ", expected ", double(ref));
    }
  }
  return check(bad == 0, where, ": ", bad, "+ elements differ from the reference");
}

}  // namespace gpu_test
