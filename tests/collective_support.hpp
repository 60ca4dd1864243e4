// tests/collective_support.hpp: the values and exact expectations of the
// collectives' tests (test_collectives*.cpp): aligned and misaligned buffers, inputs
// as closed-form functions of (rank, index), per-rank bookkeeping, and the specs of
// each op (its inputs and their exact reduction). The checks and suites built on
// them: collective_suites.hpp.
#pragma once

#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include "test_support.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <memory_resource>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace md = mdring;

namespace {

using u64 = std::uint64_t;
using md::algorithm;
constexpr algorithm RING = algorithm::ring;
constexpr algorithm DIRECT = algorithm::direct;
constexpr algorithm HD = algorithm::halving_doubling;
constexpr algorithm RD = algorithm::recursive_doubling;

// ---- buffers: 64-byte aligned, or misaligned by exactly one element ------------

template <class T>
class buffer {
public:
  buffer(std::size_t n, bool misaligned) : n_(n), raw_(new unsigned char[(n + 1) * sizeof(T) + 128]) {
    const auto base = (reinterpret_cast<std::uintptr_t>(raw_.get()) + 63) / 64 * 64;
    p_ = reinterpret_cast<T*>(base) + (misaligned ? 1 : 0);
  }
  T* data() noexcept { return p_; }
  const T* data() const noexcept { return p_; }
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_[i]; }
  std::size_t size() const noexcept { return n_; }

private:
  std::size_t n_;
  std::unique_ptr<unsigned char[]> raw_;
  T* p_ = nullptr;
};

// ---- values ---------------------------------------------------------------------

using mdring_test::mix;
constexpr u64 hash3(u64 a, u64 b, u64 c) noexcept { return mix(mix(mix(a) ^ b) ^ c); }

// Arbitrary bits (for the data-movement collectives, which must copy bits exactly).
template <class T>
T bits_value(u64 h) {
  unsigned char bytes[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    if (i % 8 == 0 && i) h = mix(h);
    bytes[i] = static_cast<unsigned char>(h >> (8 * (i % 8)));
  }
  T v;
  std::memcpy(&v, bytes, sizeof(T));
  return v;
}

template <class T>
bool same(const T& a, const T& b) noexcept {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The sentinel a receive buffer holds before a call: a quiet NaN with a payload for
// the floating types (no legitimate result is a NaN), 0xA5 bytes otherwise.
template <class T>
T poison() {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<float>(std::uint32_t(0x7fc5a5a5u));
  else if constexpr (std::is_same_v<T, double>) return std::bit_cast<double>(u64(0x7ff8a5a5a5a5a5a5ull));
  else if constexpr (std::is_same_v<T, md::half>) return md::half::from_bits(0x7e5a);
  else if constexpr (std::is_same_v<T, md::bfloat16>) return md::bfloat16::from_bits(0x7fe5);
  else {
    unsigned char bytes[sizeof(T)];
    std::memset(bytes, 0xa5, sizeof bytes);
    T v;
    std::memcpy(&v, bytes, sizeof(T));
    return v;
  }
}

template <class T>
void fill_poison(T* p, std::size_t n) {
  const T s = poison<T>();
  for (std::size_t i = 0; i < n; ++i) p[i] = s;
}

template <class T>
std::string show(const T& v) {
  char buf[96];
  if constexpr (std::is_floating_point_v<T>) {
    std::snprintf(buf, sizeof buf, "%.17g", double(v));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if constexpr (std::is_integral_v<T>) {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
  } else if constexpr (md::is_16bit_float_v<T>) {
    std::snprintf(buf, sizeof buf, "%.9g (bits 0x%04x)", double(float(v)), unsigned(v.bits));
  } else {
    std::string s = "bytes ";
    const auto* b = reinterpret_cast<const unsigned char*>(&v);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      std::snprintf(buf, sizeof buf, "%02x", unsigned(b[i]));
      s += buf;
    }
    return s;
  }
  return buf;
}

// ---- per-rank bookkeeping ----------------------------------------------------------

struct rank_ctx {
  std::size_t rank = 0, P = 1;
  std::vector<std::string>* fails = nullptr;
  std::size_t checks = 0;
  bool misaligned = false;
  std::string where;

  void fail(const std::string& m) {
    if (fails->size() < 8) fails->push_back("rank " + std::to_string(rank) + ": " + where + ": " + m);
    else if (fails->size() == 8) fails->push_back("rank " + std::to_string(rank) + ": (more failures not shown)");
  }
};

// got[0..n) must equal expected(i) bitwise.
template <class T, class E>
void expect(rank_ctx& cx, const char* what, const T* got, std::size_t n, E&& expected) {
  std::size_t bad = 0, first = 0;
  T g{}, e{};
  for (std::size_t i = 0; i < n; ++i) {
    const T ex = expected(i);
    ++cx.checks;
    if (!same(got[i], ex)) {
      if (!bad) first = i, g = got[i], e = ex;
      ++bad;
    }
  }
  if (bad)
    cx.fail(std::string(what) + ": " + std::to_string(bad) + " of " + std::to_string(n) + " elements wrong; first [" +
            std::to_string(first) + "]: got " + show(g) + ", expected " + show(e) +
            (same(g, poison<T>()) ? " (never written: still the sentinel)" : ""));
}

inline std::string where_of(const char* call, const char* type, const std::string& op, const std::string& count,
                            const char* mode, bool misaligned) {
  return std::string(call) + "<" + type + ">" + (op.empty() ? "" : " op " + op) + " " + count + " " + mode +
         (misaligned ? ", misaligned" : "");
}

// ---- specs: the inputs of an op and their exact reduction -------------------------------

using mdring_test::name_of;
using mdring_test::opk;

template <class T>
T from_int(long long v) {
  if constexpr (md::is_16bit_float_v<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);  // integers: modulo 2^bits (C++20)
}

// Built-in ops on arithmetic types and half/bfloat16. Inputs are small integers (or
// quarters for float/double sums), so every partial result is exact in T and the
// order of combination cannot matter:
//   sum   x_r[j] = 7j + r   (int64: + 2^40; float/double: times 0.25; uint8 wraps mod
//                 256; 16-bit: j%8 + r%8, sums <= 210, exact in bfloat16's 8 bits)
//   avg   x_r[j] = (7j + r) % 23 - 11 (signed: negative sums truncate toward 0),
//                 (7j + r) % 17 for uint8, j%8 + r%8 - 7 for 16-bit
//   prod  x_r[j] in {1, 2, -1} ({1, 2, 3} for uint8, which wraps); |prod| <= 2^15
//   min / max  x_r[j] = (31j + 17r) % 101 - 50 (no -50 for unsigned)
template <class T>
struct builtin_values {
  opk k;

  std::string name() const { return name_of(k); }

  T in(std::size_t r, std::size_t j) const {
    const long long R = static_cast<long long>(r), J = static_cast<long long>(j);
    constexpr bool fp = std::is_floating_point_v<T>, h16 = md::is_16bit_float_v<T>, uns = std::is_unsigned_v<T>;
    switch (k) {
      case opk::sum:
        if constexpr (h16) return from_int<T>(J % 8 + R % 8);
        else if constexpr (fp) return static_cast<T>(static_cast<double>(J * 7 + R) * 0.25);
        else if constexpr (sizeof(T) == 8) return static_cast<T>(J * 7 + R + (1LL << 40));
        else return from_int<T>(J * 7 + R);
      case opk::avg:
        if constexpr (h16) return from_int<T>(J % 8 + R % 8 - 7);
        else if constexpr (fp) return static_cast<T>(static_cast<double>((J * 7 + R) % 23 - 11) * 0.25);
        else if constexpr (uns) return from_int<T>((J * 7 + R) % 17);
        else return from_int<T>((J * 7 + R) % 23 - 11);
      case opk::prod: {
        const long long h = (J + 2 * R + (J / 5) * (R + 1)) % 3;
        if constexpr (uns) return from_int<T>(h + 1);
        else return from_int<T>(h == 0 ? 1 : h == 1 ? 2 : -1);
      }
      default:
        return from_int<T>((J * 31 + R * 17) % 101 - (uns ? 0 : 50));
    }
  }

  // The reduction of x(0), ..., x(P-1), computed independently of the library.
  template <class X>
  T fold(std::size_t P, X&& x) const {
    if constexpr (std::is_integral_v<T>) {
      u64 s = 0, p = 1;  // sum and product modulo 2^64, then modulo 2^bits
      T mn = x(0), mx = x(0);
      for (std::size_t q = 0; q < P; ++q) {
        const T v = x(q);
        const u64 u = static_cast<u64>(static_cast<long long>(v));
        s += u;
        p *= u;
        mn = v < mn ? v : mn;
        mx = mx < v ? v : mx;
      }
      switch (k) {
        case opk::sum:
          return static_cast<T>(s);
        case opk::prod:
          return static_cast<T>(p);
        case opk::min:
          return mn;
        case opk::max:
          return mx;
        default:
          return static_cast<T>(static_cast<T>(s) / static_cast<T>(P));  // truncates toward 0
      }
    } else {
      using A = md::accumulator_t<T>;  // exact: the inputs are small integers or quarters
      A s = 0, p = 1, mn = static_cast<A>(x(0)), mx = mn;
      for (std::size_t q = 0; q < P; ++q) {
        const A v = static_cast<A>(x(q));
        s += v;
        p *= v;
        mn = v < mn ? v : mn;
        mx = mx < v ? v : mx;
      }
      switch (k) {
        case opk::sum:
          return T(s);
        case opk::prod:
          return T(p);
        case opk::min:
          return T(mn);
        case opk::max:
          return T(mx);
        default:
          return T(s / static_cast<A>(P));  // one division, then one rounding to T
      }
    }
  }
};
template <class T, class Op>
struct builtin_spec : builtin_values<T> {
  using values = builtin_values<T>;  // what make_inputs / make_expected see: not the op
  Op op;
};

// A user functor (commutative by default): bitwise xor.
struct xor_op {
  template <class T>
  T operator()(T a, T b) const noexcept {
    return static_cast<T>(a ^ b);
  }
};
template <class T>
struct xor_spec {
  using values = xor_spec<T>;
  xor_op op;
  std::string name() const { return "xor"; }
  T in(std::size_t r, std::size_t j) const { return static_cast<T>(hash3(r, j, 77)); }
  template <class X>
  T fold(std::size_t P, X&& x) const {
    T acc = x(0);
    for (std::size_t q = 1; q < P; ++q) acc = static_cast<T>(acc ^ x(q));
    return acc;
  }
};

// Non-commutative, associative: 2x2 matrices over Z_65521 multiplied in rank order.
struct mat2 {
  std::uint32_t a, b, c, d;
};
constexpr std::uint32_t MOD = 65521;
inline mat2 matmul(const mat2& x, const mat2& y) {
  auto m = [](std::uint32_t p, std::uint32_t q, std::uint32_t r, std::uint32_t s) {
    return static_cast<std::uint32_t>((u64(p) * q + u64(r) * s) % MOD);
  };
  return {m(x.a, y.a, x.b, y.c), m(x.a, y.b, x.b, y.d), m(x.c, y.a, x.d, y.c), m(x.c, y.b, x.d, y.d)};
}
struct matmul_fn {
  mat2 operator()(const mat2& x, const mat2& y) const { return matmul(x, y); }
};
using matmul_op = decltype(md::non_commutative(matmul_fn{}));
struct mat_spec {
  using values = mat_spec;
  matmul_op op = md::non_commutative(matmul_fn{});
  std::string name() const { return "non_commutative(matmul)"; }
  mat2 in(std::size_t r, std::size_t j) const {
    const u64 h = hash3(r, j, 5);
    return {std::uint32_t(h % MOD), std::uint32_t((h >> 16) % MOD), std::uint32_t((h >> 32) % MOD),
            std::uint32_t((h >> 48) % MOD)};
  }
  template <class X>
  mat2 fold(std::size_t P, X&& x) const {  // x_0 * x_1 * ... * x_{P-1}
    mat2 acc = x(0);
    for (std::size_t q = 1; q < P; ++q) acc = matmul(acc, x(q));
    return acc;
  }
};

// Non-commutative, associative: keep the left operand, so the result is x_0.
struct keep_left_fn {
  std::int32_t operator()(std::int32_t a, std::int32_t) const { return a; }
};
using keep_left_op = decltype(md::non_commutative(keep_left_fn{}));
struct keep_left_spec {
  using values = keep_left_spec;
  keep_left_op op = md::non_commutative(keep_left_fn{});
  std::string name() const { return "non_commutative(keep left)"; }
  std::int32_t in(std::size_t r, std::size_t j) const { return static_cast<std::int32_t>(1000 * r + j); }
  template <class X>
  std::int32_t fold(std::size_t, X&& x) const {
    return x(0);
  }
};

// A functor that declares itself non-commutative (op_traits reads is_commutative):
// keep the right operand, so the result is x_{P-1}.
struct keep_right_op {
  static constexpr bool is_commutative = false;
  std::int32_t operator()(std::int32_t, std::int32_t b) const { return b; }
};
struct keep_right_spec {
  using values = keep_right_spec;
  keep_right_op op;
  std::string name() const { return "keep right (is_commutative = false)"; }
  std::int32_t in(std::size_t r, std::size_t j) const { return static_cast<std::int32_t>(1000 * r + j); }
  template <class X>
  std::int32_t fold(std::size_t P, X&& x) const {
    return x(P - 1);
  }
};
static_assert(!md::op_traits<keep_right_op>::commutative && !md::op_traits<keep_left_op>::commutative);
static_assert(md::op_traits<xor_op>::commutative);

template <class T, class Op>
builtin_spec<T, Op> bspec(Op op, opk k) {
  builtin_spec<T, Op> sp;
  sp.k = k;
  sp.op = op;
  return sp;
}

}  // namespace
