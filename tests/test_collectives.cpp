// tests/test_collectives.cpp: the five collectives over the threads transport.
//
// MPICH coll-test style: every input is a closed-form function of (rank, index), so
// every expected value is exact (sums of rank-dependent integers, products of 1, 2
// and -1, min/max of known patterns, averages that truncate); random floats are
// compared with a float64 reference within a stated bound. Each rank records what
// it found in its own vector; the main thread turns that into doctest assertions
// (doctest's assertions are not used from the rank threads).
//
// Coverage, as a subset cross-product (so that it compiles in about two minutes and
// runs in a few seconds):
//   shapes   1, 1 x p, p x 1, 2, 5, 7, 9, 11, 2 x 3, 3 x 5, 4 x 4, 2 x 2 x 2, 2 x 1 x 3,
//            2 x 2 x 2 x 2, dynamic extents (compile-time ring<shm,2> * ring<shm> and
//            runtime "shm:2 x shm:*"), parsed runtime topologies; shm (direct by default
//            for 3..8), ethernet and infiniband (ring; halving-doubling for small
//            calls); algorithms forced to ring / direct / halving_doubling on every
//            dimension position, powers of two and not
//   counts   0, 1, fewer than the ranks, primes 13, 97, 1009, and 4099; per-rank counts
//            0, 1, 2, 13, 97, 1009 for reduce_scatter / all_gather
//   calls    all_reduce, reduce_scatter, all_gather, broadcast (every root), reduce
//            (every root; null or untouched recvbuf elsewhere), in and out of place,
//            64-byte aligned and misaligned by one element
//   ops      sum, prod, min, max, avg on int32, int64, uint8, float, double, half,
//            bfloat16 through all_reduce (and reduce_scatter / reduce: every op on
//            int32 and float, sum on the others); bitwise xor (user op); non-commutative
//            2x2 matrix product mod 65521, "keep the left operand" (non_commutative())
//            and "keep the right operand" (is_commutative = false), on shm only
//   also     bitwise identity across ranks and runs, poison (sentinel) checks, many
//            consecutive collectives on one communicator, two communicators in one
//            world, scratch allocations (repeated calls, reserve()),
//            check_level::collective, explain().
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

std::string where_of(const char* call, const char* type, const std::string& op, const std::string& count,
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
      default: return from_int<T>((J * 31 + R * 17) % 101 - (uns ? 0 : 50));
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
        case opk::sum: return static_cast<T>(s);
        case opk::prod: return static_cast<T>(p);
        case opk::min: return mn;
        case opk::max: return mx;
        default: return static_cast<T>(static_cast<T>(s) / static_cast<T>(P));  // truncates toward 0
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
        case opk::sum: return T(s);
        case opk::prod: return T(p);
        case opk::min: return T(mn);
        case opk::max: return T(mx);
        default: return T(s / static_cast<A>(P));  // one division, then one rounding to T
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
  std::int32_t fold(std::size_t, X&& x) const { return x(0); }
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
  std::int32_t fold(std::size_t P, X&& x) const { return x(P - 1); }
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

// ---- the collectives, checked ----------------------------------------------------------
//
// Inputs and expected values are computed by functions templated on the element type
// and spec only (not on the communicator), kept out of line to keep the test quick to
// compile; the do_* wrappers only allocate, call and compare.

template <class Spec>
const typename Spec::values& values_of(const Spec& sp) {
  return sp;
}

template <class T, class Spec>
[[gnu::noinline]] std::vector<T> make_inputs(const Spec& sp, std::size_t r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t j = 0; j < n; ++j) v[j] = sp.in(r, j);
  return v;
}

// fold over ranks q of sp.in(q, off + i), for i in [0, n).
template <class T, class Spec>
[[gnu::noinline]] std::vector<T> make_expected(const Spec& sp, std::size_t P, std::size_t off, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = sp.fold(P, [&](std::size_t q) { return sp.in(q, off + i); });
  return v;
}

template <class T>
[[gnu::noinline]] std::vector<T> make_bits(std::size_t r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = bits_value<T>(hash3(r, i, 11));
  return v;
}

// got[0..n) must equal want[0..n) bitwise.
template <class T>
[[gnu::noinline]] void expect_eq(rank_ctx& cx, const char* what, const T* got, const T* want, std::size_t n) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ++cx.checks;
    if (!same(got[i], want[i])) {
      if (!bad) first = i;
      ++bad;
    }
  }
  if (bad)
    cx.fail(std::string(what) + ": " + std::to_string(bad) + " of " + std::to_string(n) + " elements wrong; first [" +
            std::to_string(first) + "]: got " + show(got[first]) + ", expected " + show(want[first]) +
            (same(got[first], poison<T>()) ? " (never written: still the sentinel)" : ""));
}
template <class T>
void expect_eq(rank_ctx& cx, const char* what, const T* got, const std::vector<T>& want) {
  expect_eq(cx, what, got, want.data(), want.size());
}

template <class T>
[[gnu::noinline]] void copy_to(T* dst, const std::vector<T>& src) {
  if (!src.empty()) std::memcpy(dst, src.data(), src.size() * sizeof(T));
}

template <class T, class Spec, class Comm>
void do_all_reduce(Comm& c, rank_ctx& cx, const Spec& sp, std::size_t n, bool in_place) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("all_reduce", md::type_name<T>(), sp.name(), "n=" + std::to_string(n),
                      in_place ? "in place" : "out of place", cx.misaligned);
  const auto x = make_inputs<T>(values_of(sp), r, n);
  const auto want = make_expected<T>(values_of(sp), P, 0, n);
  buffer<T> s(n, cx.misaligned), d(n, cx.misaligned);
  copy_to(s.data(), x);
  if (in_place) {
    md::all_reduce(c, s.data(), n, sp.op);
    expect_eq(cx, "buf", s.data(), want);
  } else {
    fill_poison(d.data(), n);
    md::all_reduce(c, static_cast<const T*>(s.data()), d.data(), n, sp.op);
    expect_eq(cx, "recvbuf", d.data(), want);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
  }
}

// MPI_Reduce_scatter_block: rank r gets block r of the element-wise reduction.
template <class T, class Spec, class Comm>
void do_reduce_scatter(Comm& c, rank_ctx& cx, const Spec& sp, std::size_t rc, bool in_place) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("reduce_scatter", md::type_name<T>(), sp.name(), "recvcount=" + std::to_string(rc),
                      in_place ? "in place" : "out of place", cx.misaligned);
  const auto x = make_inputs<T>(values_of(sp), r, P * rc);
  const auto want = make_expected<T>(values_of(sp), P, r * rc, rc);
  buffer<T> s(P * rc, cx.misaligned), d(rc, cx.misaligned);
  copy_to(s.data(), x);
  if (in_place) {
    md::reduce_scatter(c, static_cast<const T*>(s.data()), s.data() + r * rc, rc, sp.op);
    expect_eq(cx, "sendbuf + rank * recvcount", s.data() + r * rc, want);
  } else {
    fill_poison(d.data(), rc);
    md::reduce_scatter(c, static_cast<const T*>(s.data()), d.data(), rc, sp.op);
    expect_eq(cx, "recvbuf", d.data(), want);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
  }
}

template <class T, class Comm>
void do_all_gather(Comm& c, rank_ctx& cx, std::size_t sc, bool in_place) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("all_gather", md::type_name<T>(), "", "sendcount=" + std::to_string(sc),
                      in_place ? "in place" : "out of place", cx.misaligned);
  std::vector<T> want;
  for (std::size_t q = 0; q < P; ++q) {
    const auto b = make_bits<T>(q, sc);
    want.insert(want.end(), b.begin(), b.end());
  }
  const auto mine = make_bits<T>(r, sc);
  buffer<T> s(sc, cx.misaligned), d(P * sc, cx.misaligned);
  fill_poison(d.data(), P * sc);
  if (in_place) {
    copy_to(d.data() + r * sc, mine);
    md::all_gather(c, static_cast<const T*>(d.data() + r * sc), d.data(), sc);
  } else {
    copy_to(s.data(), mine);
    md::all_gather(c, static_cast<const T*>(s.data()), d.data(), sc);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), mine);
  }
  expect_eq(cx, "recvbuf", d.data(), want);
}

template <class T, class Comm>
void do_broadcast(Comm& c, rank_ctx& cx, std::size_t n, std::size_t root) {
  const std::size_t r = c.rank();
  cx.where = where_of("broadcast", md::type_name<T>(), "", "n=" + std::to_string(n) + " root=" + std::to_string(root),
                      "", cx.misaligned);
  const auto want = make_bits<T>(root + 1000, n);
  buffer<T> b(n, cx.misaligned);
  if (r == root) copy_to(b.data(), want);
  else fill_poison(b.data(), n);
  md::broadcast(c, b.data(), n, root);
  expect_eq(cx, "buf", b.data(), want);
}

// On the root: in place (sendbuf == recvbuf) or not. Elsewhere: recvbuf null, or a
// buffer that must stay untouched.
template <class T, class Spec, class Comm>
void do_reduce(Comm& c, rank_ctx& cx, const Spec& sp, std::size_t n, std::size_t root, bool in_place,
               bool null_elsewhere) {
  const std::size_t r = c.rank(), P = c.size();
  cx.where = where_of("reduce", md::type_name<T>(), sp.name(), "n=" + std::to_string(n) + " root=" + std::to_string(root),
                      in_place ? "in place on root" : "out of place", cx.misaligned) +
             (null_elsewhere ? ", recvbuf null elsewhere" : "");
  const auto x = make_inputs<T>(values_of(sp), r, n);
  buffer<T> s(n, cx.misaligned), d(n, cx.misaligned);
  copy_to(s.data(), x);
  fill_poison(d.data(), n);
  if (r == root) {
    const auto want = make_expected<T>(values_of(sp), P, 0, n);
    if (in_place) {
      md::reduce(c, static_cast<const T*>(s.data()), s.data(), n, root, sp.op);
      expect_eq(cx, "buf on root", s.data(), want);
    } else {
      md::reduce(c, static_cast<const T*>(s.data()), d.data(), n, root, sp.op);
      expect_eq(cx, "recvbuf on root", d.data(), want);
      expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
    }
  } else {
    md::reduce(c, static_cast<const T*>(s.data()), null_elsewhere ? static_cast<T*>(nullptr) : d.data(), n, root, sp.op);
    expect_eq(cx, "sendbuf (must be unchanged)", s.data(), x);
    if (!null_elsewhere) {
      const std::vector<T> untouched(n, poison<T>());
      expect_eq(cx, "recvbuf off the root (must be untouched)", d.data(), untouched);
    }
  }
}

// ---- running a world ----------------------------------------------------------------------

md::options opts_with(std::vector<algorithm> algos = {}) {
  md::options o;
  o.algorithms = std::move(algos);
  o.timeout = std::chrono::seconds(20);  // a hang fails with timeout_error naming the wait
  return o;
}

std::string algos_string(const std::vector<algorithm>& a) {
  if (a.empty()) return "automatic";
  std::string s;
  for (auto x : a) s += (s.empty() ? "" : ",") + std::string(md::to_string(x));
  return s;
}

// Binds topo on each of n threads, runs body(comm, ctx) on every rank, and reports
// each rank's failures (and any exception) in the main thread.
template <class Topo, class Body>
void in_world(const std::string& label, std::size_t n, const Topo& topo, const md::options& o, Body&& body) {
  std::vector<std::vector<std::string>> fails(n);
  std::vector<std::size_t> checks(n, 0);
  std::string error;
  try {
    md::threads::run(n, [&](md::threads::endpoint ep) {
      auto comm = md::bind(topo, ep, o);
      rank_ctx cx;
      cx.rank = comm.rank();
      cx.P = comm.size();
      cx.fails = &fails[ep.rank];
      body(comm, cx);
      checks[ep.rank] = cx.checks;
    });
  } catch (const std::exception& e) {
    error = e.what();
  }
  INFO(label);
  if (!error.empty()) FAIL_CHECK(label << ": exception: " << error);
  std::size_t nfail = 0, nchecks = 0;
  for (std::size_t r = 0; r < n; ++r) {
    nchecks += checks[r];
    for (auto& f : fails[r]) {
      ++nfail;
      FAIL_CHECK(label << ": " << f);
    }
  }
  CHECK(nfail == 0);
  if (error.empty()) CHECK(nchecks > 0);
}

struct shape {
  std::string topo;  // parsed with mdring::parse_topology
  std::vector<algorithm> algos;
  std::size_t threads;
};

std::string label_of(const shape& s) {
  return "topology \"" + s.topo + "\", algorithms " + algos_string(s.algos);
}

// ---- suites ----------------------------------------------------------------------------------

// Every collective at every count, int32 sum and float sum (quarters: exact), plus
// byte-sized and double data movement; every root for broadcast and reduce.
template <class Comm>
void shape_suite(Comm& c, rank_ctx& cx) {
  const std::size_t P = c.size();
  std::vector<std::size_t> counts = {0, 1, 13, 97, 1009, 4099};
  if (P > 2) counts.push_back(P - 1);  // fewer elements than ranks
  const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
  const auto fsum = bspec<float>(md::sum, opk::sum);
  bool mis = false;
  for (std::size_t n : counts) {
    cx.misaligned = mis;
    do_all_reduce<std::int32_t>(c, cx, isum, n, false);
    do_all_reduce<std::int32_t>(c, cx, isum, n, true);
    cx.misaligned = !mis;
    do_all_reduce<float>(c, cx, fsum, n, mis);
    for (std::size_t root = 0; root < P; ++root) {
      cx.misaligned = (root + n) % 3 == 1;
      do_broadcast<std::int32_t>(c, cx, n, root);
      do_reduce<std::int32_t>(c, cx, isum, n, root, root % 2 == 0, (root / 2) % 2 == 1);
    }
    cx.misaligned = mis;
    do_broadcast<double>(c, cx, n, P / 2);
    do_reduce<float>(c, cx, fsum, n, P - 1, false, true);
    mis = !mis;
  }
  for (std::size_t rc : {0, 1, 2, 13, 97, 1009}) {
    cx.misaligned = mis;
    do_reduce_scatter<std::int32_t>(c, cx, isum, rc, false);
    do_reduce_scatter<std::int32_t>(c, cx, isum, rc, true);
    do_all_gather<std::int32_t>(c, cx, rc, false);
    do_all_gather<std::int32_t>(c, cx, rc, true);
    cx.misaligned = !mis;
    do_reduce_scatter<float>(c, cx, fsum, rc, !mis);
    do_all_gather<std::uint8_t>(c, cx, rc, mis);
    mis = !mis;
  }
}

// One type, every built-in op through all_reduce; through reduce_scatter and reduce
// too when Full, else only for sum.
template <class T, bool Full, class Comm>
void type_suite(Comm& c, rank_ctx& cx) {
  const std::size_t P = c.size();
  auto run = [&](auto op, opk k) {
    const auto sp = bspec<T>(op, k);
    cx.misaligned = false;
    do_all_reduce<T>(c, cx, sp, 1, false);
    do_all_reduce<T>(c, cx, sp, 13, true);
    cx.misaligned = true;
    do_all_reduce<T>(c, cx, sp, 1009, false);
    do_all_reduce<T>(c, cx, sp, 97, true);
    using O = decltype(op);
    if constexpr (Full || std::is_same_v<O, md::sum_t>) {
      do_reduce_scatter<T>(c, cx, sp, 13, false);
      cx.misaligned = false;
      do_reduce_scatter<T>(c, cx, sp, 1, true);
      do_reduce_scatter<T>(c, cx, sp, 97, true);
      do_reduce<T>(c, cx, sp, 97, 0, true, false);
      cx.misaligned = true;
      do_reduce<T>(c, cx, sp, 13, P - 1, false, true);
      do_reduce<T>(c, cx, sp, 1, P / 2, false, false);
    }
  };
  run(md::sum, opk::sum);
  run(md::prod, opk::prod);
  run(md::min, opk::min);
  run(md::max, opk::max);
  run(md::avg, opk::avg);
  cx.misaligned = true;
  do_all_gather<T>(c, cx, 13, true);
  do_broadcast<T>(c, cx, 97, P - 1);
}

// The reducing collectives with a user spec (xor, matrix product, keep-left).
template <class T, class Spec, class Comm>
void user_suite(Comm& c, rank_ctx& cx, const Spec& sp) {
  const std::size_t P = c.size();
  for (std::size_t n : {std::size_t(0), std::size_t(1), P > 1 ? P - 1 : 2, std::size_t(13), std::size_t(1009)}) {
    cx.misaligned = n % 2 == 1;
    do_all_reduce<T>(c, cx, sp, n, false);
    do_all_reduce<T>(c, cx, sp, n, true);
    do_reduce_scatter<T>(c, cx, sp, n % 50, false);
    do_reduce_scatter<T>(c, cx, sp, n % 50, true);
    for (std::size_t root = 0; root < P; ++root) do_reduce<T>(c, cx, sp, n, root, (root + n) % 2 == 0, root % 3 == 1);
  }
}

// int32 sum through all five collectives at a few counts (for compile-time topologies).
template <class Comm>
void basic_suite(Comm& c, rank_ctx& cx) {
  const std::size_t P = c.size();
  const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
  for (std::size_t n : {std::size_t(0), std::size_t(1), P > 1 ? P - 1 : 3, std::size_t(97), std::size_t(1009)}) {
    cx.misaligned = n % 2 == 1;
    do_all_reduce<std::int32_t>(c, cx, isum, n, false);
    do_all_reduce<std::int32_t>(c, cx, isum, n, true);
    do_reduce_scatter<std::int32_t>(c, cx, isum, n % 100, false);
    do_reduce_scatter<std::int32_t>(c, cx, isum, n % 100, true);
    do_all_gather<std::int32_t>(c, cx, n % 100, false);
    do_all_gather<std::int32_t>(c, cx, n % 100, true);
    for (std::size_t root = 0; root < P; ++root) {
      do_broadcast<std::int32_t>(c, cx, n, root);
      do_reduce<std::int32_t>(c, cx, isum, n, root, root % 2 == 1, root % 3 == 0);
    }
  }
}

// The shape suite on every shape, and every op and type on a few of them.
void run_shapes(const std::vector<shape>& shapes, std::initializer_list<shape> typed) {
  for (const auto& s : shapes) {
    const auto topo = md::parse_topology(s.topo);
    in_world(label_of(s), s.threads, topo, opts_with(s.algos), [](auto& c, rank_ctx& cx) { shape_suite(c, cx); });
  }
  for (const auto& s : typed) {
    in_world(label_of(s) + ", every op and type", s.threads, md::parse_topology(s.topo), opts_with(s.algos),
             [](auto& c, rank_ctx& cx) {
               type_suite<std::int32_t, true>(c, cx);
               type_suite<std::int64_t, false>(c, cx);
               type_suite<float, true>(c, cx);
               type_suite<double, false>(c, cx);
               type_suite<md::bfloat16, false>(c, cx);
             });
  }
}

}  // namespace

// ==== test cases =================================================================================

TEST_CASE("collectives: every shape and algorithm, all five, counts 0..4099, int32 and float sums") {
  const std::vector<shape> shapes = {
      {"shm:1", {}, 1},
      {"shm:1 x shm:4", {}, 4},                   // 1 x p (direct)
      {"shm:1 x shm:4", {RING, RING}, 4},
      {"ethernet:4 x shm:1", {}, 4},              // p x 1 (ring)
      {"shm:6 x shm:1", {DIRECT, RING}, 6},
      {"shm:2", {}, 2},
      {"shm:2", {DIRECT}, 2},
      {"shm:2 x shm:3", {}, 6},                   // merged: one direct stage over 6
      {"shm:2 x shm:3", {DIRECT, RING}, 6},
      {"shm:2 x shm:3", {RING, RING}, 6},
      {"shm:2 x shm:3", {DIRECT, DIRECT}, 6},
      {"shm:3 x ethernet:5", {}, 15},             // direct, ring
      {"shm:3 x ethernet:5", {RING, DIRECT}, 15},
      {"shm:2 x shm:2 x shm:2", {}, 8},
      {"shm:2 x shm:2 x shm:2", {DIRECT, RING, DIRECT}, 8},
      {"shm:2 x shm:2 x shm:2", {RING, DIRECT, RING}, 8},
      {"shm:5", {}, 5},
      {"shm:5", {RING}, 5},
      {"ethernet:7", {}, 7},
      {"infiniband:7", {DIRECT}, 7},
      {"shm:9", {}, 9},                           // above direct_max_extent: ring
      {"shm:9", {DIRECT}, 9},
      {"shm:2 x shm:1 x infiniband:3", {}, 6},    // trivial middle dimension
      {"shm:2 x shm:1 x infiniband:3", {DIRECT, RING, DIRECT}, 6},
      {"infiniband:3 x shm:2", {RING, DIRECT}, 6},
      {"shm:2 x shm:*", {}, 6},                   // runtime dynamic extent
      {"ethernet:* x shm:3", {RING, RING}, 6},
      {"ethernet:11", {}, 11},
      {"shm:4 x shm:4", {DIRECT, DIRECT}, 16},
      {"shm:2 x ethernet:2 x shm:2 x infiniband:2", {}, 16},  // four dimensions
      {"ethernet:16", {}, 16},                    // split: runs as ethernet:4 x ethernet:4
      {"ethernet:16", {RING}, 16},                // one ring of 16
      {"shm:2 x infiniband:18", {}, 36},          // split: shm:2 x infiniband:3 x infiniband:6
  };
  for (const auto& s : shapes) {
    const auto topo = md::parse_topology(s.topo);
    in_world(label_of(s), s.threads, topo, opts_with(s.algos), [](auto& c, rank_ctx& cx) { shape_suite(c, cx); });
  }
}

TEST_CASE("collectives: halving-doubling on every extent 2..12 and in products, all five, exact") {
  // plan/halving_doubling.hpp: powers of two, and extents with 1 to 5 pairs folded
  // in and handed out; in the first, middle and last dimension; next to direct and
  // ring stages; forced, and chosen by automatic for the small counts of the suite.
  const std::vector<shape> shapes = {
      {"ethernet:2", {HD}, 2},
      {"ethernet:3", {HD}, 3},
      {"ethernet:4", {HD}, 4},
      {"infiniband:5", {HD}, 5},
      {"ethernet:6", {HD}, 6},
      {"ethernet:7", {HD}, 7},
      {"ethernet:8", {HD}, 8},
      {"infiniband:11", {HD}, 11},
      {"ethernet:12", {HD}, 12},
      {"shm:2 x ethernet:6", {DIRECT, HD}, 12},
      {"shm:2 x ethernet:5", {}, 10},            // direct, then automatic: halving-doubling when small
      {"ethernet:5 x shm:2", {HD, DIRECT}, 10},
      {"ethernet:3 x ethernet:4", {HD, RING}, 12},
      {"ethernet:3 x ethernet:4", {RING, HD}, 12},
      {"shm:2 x infiniband:3 x ethernet:2", {RING, HD, HD}, 12},
      {"infiniband:6 x shm:1", {HD, RING}, 6},
  };
  run_shapes(shapes, {shape{"ethernet:6", {HD}, 6}, shape{"shm:2 x infiniband:5", {DIRECT, HD}, 10}});
}

TEST_CASE("collectives: recursive doubling and trees on every extent 2..12 and in products, all five, exact") {
  // Recursive doubling (all_reduce; the other collectives run halving-doubling
  // there): powers of two and extents with pairs folded in and handed out, in the
  // last dimensions (where automatic puts it) and asked for in the first (the
  // dimensions after it cut its whole range). Broadcast and reduce of the suite's
  // small counts run binomial trees where the model says (automatic), and the
  // rest their blocks: both are checked against the exact values.
  const std::vector<shape> shapes = {
      {"ethernet:2", {RD}, 2},
      {"ethernet:3", {RD}, 3},
      {"infiniband:5", {RD}, 5},
      {"ethernet:6", {RD}, 6},
      {"ethernet:8", {RD}, 8},
      {"infiniband:11", {RD}, 11},
      {"shm:2 x ethernet:6", {DIRECT, RD}, 12},
      {"ethernet:3 x ethernet:4", {RING, RD}, 12},
      {"ethernet:3 x ethernet:4", {RD, RING}, 12},
      {"shm:2 x infiniband:3 x ethernet:2", {HD, RD, RD}, 12},
      {"shm:2 x infiniband:5", {}, 10},  // automatic: direct, then recursive doubling or trees when small
      {"infiniband:12", {}, 12},
      {"shm:3 x ethernet:4", {}, 12},
  };
  run_shapes(shapes, {shape{"ethernet:6", {RD}, 6}, shape{"shm:2 x infiniband:5", {}, 10}});
}

TEST_CASE("collectives: automatic runs recursive doubling and trees for tiny calls only") {
  // infiniband:8 (2 us latency, 2 us overhead per message by default): 8 floats
  // all-reduce in 3 whole-vector exchanges rather than halving-doubling's 6 steps;
  // 100000 floats (over tune.recursive_doubling_max_bytes) keep halving-doubling or
  // rings. Broadcast and reduce of 8 floats run trees (3 steps), of 100000 floats
  // scatter/all-gather and reduce-scatter/gather. tune.recursive_doubling_max_bytes
  // = 0 turns both off.
  for (std::size_t cap : {std::size_t(64) << 10, std::size_t(0)}) {
    md::options o = opts_with();
    o.tune.recursive_doubling_max_bytes = cap;
    std::vector<std::vector<md::phase>> small(8), bcast(8), red(8), large(8);
    std::vector<float> got(8), b(8), r(8);
    md::threads::run(8, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("infiniband:8"), ep, o);
      for (auto& st : comm.make_plan<float>(8).stages) small[ep.rank].push_back(st.ph);
      for (auto& st : comm.make_plan<float>(8, md::collective::broadcast).stages) bcast[ep.rank].push_back(st.ph);
      for (auto& st : comm.make_plan<float>(8, md::collective::reduce, md::sum, 5).stages) red[ep.rank].push_back(st.ph);
      for (auto& st : comm.make_plan<float>(100000).stages) large[ep.rank].push_back(st.ph);
      std::vector<float> x(100000, float(ep.rank)), y(100000);
      md::all_reduce(comm, x.data(), y.data(), 100000, md::sum);
      md::all_reduce(comm, x.data(), y.data(), 8, md::sum);
      got[ep.rank] = y[7] + y[99999];  // 28 + 28
      std::vector<float> v(8, ep.rank == 3 ? 2.5f : 0.0f), w(8, -1.0f);
      md::broadcast(comm, v.data(), 8, 3);
      b[ep.rank] = v[7];
      md::reduce(comm, x.data(), w.data(), 8, 5, md::avg);
      r[ep.rank] = w[0];
    });
    INFO("cap " << cap);
    using ph = md::phase;
    for (std::size_t k = 0; k < 8; ++k) {
      CHECK(small[k] == (cap ? std::vector<ph>{ph::all_reduce} : std::vector<ph>{ph::reduce_scatter, ph::all_gather}));
      CHECK(bcast[k] == (cap ? std::vector<ph>{ph::broadcast} : std::vector<ph>{ph::scatter, ph::all_gather}));
      CHECK(red[k] == (cap ? std::vector<ph>{ph::reduce} : std::vector<ph>{ph::reduce_scatter, ph::gather}));
      CHECK(large[k] == std::vector<ph>{ph::reduce_scatter, ph::all_gather});
      CHECK(got[k] == 56.0f);
      CHECK(b[k] == 2.5f);
      CHECK(r[k] == (k == 5 ? 3.5f : -1.0f));  // avg of 0..7 on the root; recvbuf untouched elsewhere
    }
  }
}

TEST_CASE("collectives: automatic runs halving-doubling for small calls and rings for large ones") {
  // infiniband:8 (its default traits: 2 us latency and overhead per message): 8
  // floats are latency-bound, 3 exchanges beat 7 ring steps; so are 1000 floats
  // (for the model, a power of two never loses), unless tune.halving_doubling_max_bytes
  // caps it below their 4000 bytes.
  for (std::size_t cap : {SIZE_MAX, std::size_t(64)}) {
    md::options o = opts_with();
    o.tune.halving_doubling_max_bytes = cap;
    o.tune.recursive_doubling_max_bytes = 0;  // (recursive doubling: the test above)
    std::vector<std::vector<algorithm>> small(8), large(8);
    std::vector<std::size_t> steps(8);
    std::vector<float> got(8);
    md::threads::run(8, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("infiniband:8"), ep, o);
      for (auto& st : comm.make_plan<float>(8).stages) small[ep.rank].push_back(st.algo);
      for (auto& st : comm.make_plan<float>(1000).stages) large[ep.rank].push_back(st.algo);
      steps[ep.rank] = comm.make_plan<float>(8).stages.at(0).steps;
      std::vector<float> x(1000, float(ep.rank)), y(1000);
      md::all_reduce(comm, x.data(), y.data(), 1000, md::sum);
      md::all_reduce(comm, x.data(), y.data(), 8, md::sum);
      got[ep.rank] = y[7] + y[999];  // 28 + 28
    });
    INFO("cap " << cap);
    for (std::size_t r = 0; r < 8; ++r) {
      CHECK(small[r] == std::vector<algorithm>{HD, HD});
      CHECK(steps[r] == 3);
      CHECK(large[r] == std::vector<algorithm>(2, cap == SIZE_MAX ? HD : RING));
      CHECK(got[r] == 56.0f);
    }
  }
}

TEST_CASE("calibrate: the same profile on every rank; bind plans with it; ranks that disagree fail at bind") {
  const std::string path = "test_collectives_calibrate.profile";
  std::vector<std::string> text(6);
  md::calibration how;
  how.bytes = {8, 4096, 65536, 262144};
  how.trials = 2;
  md::threads::run(6, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, opts_with());
    const md::profile p = md::calibrate(comm, how);
    text[ep.rank] = p.to_string();
    if (ep.rank == 0) p.save(path);
    // the communicator still works afterwards
    std::int32_t x = std::int32_t(ep.rank);
    md::all_reduce(comm, &x, 1, md::sum);
    if (x != 15) text[ep.rank] = "all_reduce after calibrate: " + std::to_string(x);
  });
  for (auto& t : text) CHECK(t == text[0]);
  const md::profile p = md::profile::parse(text[0]);
  CHECK(p.topology == "shm:2 x ethernet:3");
  CHECK(p.ranks == 6);
  REQUIRE(p.links.size() == 2);
  CHECK(p.points.size() == 8);  // 4 sizes in each of 2 dimensions
  REQUIRE(p.trains.size() == 8);  // each size is at most how.train_max_bytes: also a train of how.train
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(p.trains[i].link == p.points[i].link);
    CHECK(p.trains[i].bytes == p.points[i].bytes);
    CHECK(p.trains[i].messages == 4);
    CHECK(p.trains[i].seconds > 0);
  }
  for (auto& l : p.links) {
    INFO(l.name);
    CHECK(l.bandwidth > 0);
    CHECK(l.latency + l.overhead > 0);
    CHECK(l.ports == md::find_link(l.name)->ports);
  }
  // bind with it: the executed links carry the profile's figures (its measured
  // points as their curves: 4 each), on every rank
  md::options o = opts_with();
  o.profile = path;
  std::vector<int> same(6, 0);
  md::threads::run(6, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, o);
    const auto& ex = comm.executed_topology();
    same[ep.rank] = ex.dim(0).link == p.with_curve(*p.find("shm")) &&
                    ex.dim(1).link == p.with_curve(*p.find("ethernet")) && ex.dim(1).link.curve.points == 4;
  });
  CHECK(same == std::vector<int>(6, 1));
  // rank 2 without the profile: a rank that binds after one that disagrees gets
  // topology_error naming the profile (threads compare with the first to bind; MPI
  // and UCX compare everywhere at once), the others remote_error at their first
  // call: nobody computes with other figures, nobody hangs
  std::vector<std::string> caught(6);
  try {
    md::threads::run(6, [&](md::threads::endpoint ep) {
      md::options oo = opts_with();
      if (ep.rank != 2) oo.profile = path;
      try {
        auto comm = md::bind(md::parse_topology("shm:2 x ethernet:3"), ep, oo);
        std::int32_t x = 1;
        md::all_reduce(comm, &x, 1, md::sum);
        caught[ep.rank] = "no error";
      } catch (const md::topology_error& e) {
        caught[ep.rank] = std::string(e.what()).find("|profile") != std::string::npos ? "names the profile" : e.what();
      } catch (const md::remote_error&) {
        caught[ep.rank] = "remote_error";
      } catch (const std::exception& e) {
        caught[ep.rank] = std::string("other: ") + e.what();
      }
    });
  } catch (const std::exception&) {
  }
  std::size_t named = 0;
  for (auto& c : caught) {
    CHECK((c == "names the profile" || c == "remote_error"));
    named += c == "names the profile";
  }
  CHECK(named >= 1);
  // a profile that no rank can read: invalid_argument naming options.profile, everywhere
  std::remove(path.c_str());
  std::vector<std::string> missing(3);
  try {
    md::threads::run(3, [&](md::threads::endpoint ep) {
      try {
        auto comm = md::bind(md::parse_topology("ethernet:3"), ep, o);
        missing[ep.rank] = "bound";
      } catch (const md::invalid_argument& e) {
        missing[ep.rank] = e.argument();
      }
    });
  } catch (const std::exception&) {
  }
  for (auto& m : missing) CHECK(m == "options.profile");
  // bad arguments
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("ethernet:2"), ep, opts_with());
    md::calibration bad;
    bad.bytes = {8, 8, 64};
    try {
      md::calibrate(comm, bad);
      text[ep.rank] = "accepted";
    } catch (const md::invalid_argument& e) {
      text[ep.rank] = e.argument();
    }
  });
  CHECK(text[0] == "how.bytes");
  CHECK(text[1] == "how.bytes");
  // more sizes than a curve holds; a "train" of one message
  std::vector<std::string> more(2), one(2);
  md::threads::run(2, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("ethernet:2"), ep, opts_with());
    auto argument_of = [&](const md::calibration& c) -> std::string {
      try {
        md::calibrate(comm, c);
        return "accepted";
      } catch (const md::invalid_argument& e) {
        return e.argument();
      }
    };
    md::calibration nine;
    nine.bytes = {8, 16, 32, 64, 128, 256, 512, 1024, 2048};
    more[ep.rank] = argument_of(nine);
    md::calibration single;
    single.bytes = {8, 64, 512};
    single.train = 1;
    one[ep.rank] = argument_of(single);
  });
  CHECK(more == std::vector<std::string>(2, "how.bytes"));
  CHECK(one == std::vector<std::string>(2, "how.train"));
}

// Measured planning with a wisdom file at `path`, which is removed first.
md::options measure_opts(const std::string& path) {
  std::remove(path.c_str());
  md::options o = opts_with();
  o.planning = md::planning::measure;
  o.wisdom = path;
  return o;
}

TEST_CASE("planning = measure: exact results, one choice on every rank, kept in a wisdom file") {
  // The first all_reduce of each size class times the candidates; explain() then
  // names the measured plan, the same on every rank. A second bind with the same
  // wisdom file starts from those plans (explain says so before any call).
  const std::string path = "test_collectives_measure.wisdom";
  const md::options o = measure_opts(path);
  const auto topo = md::parse_topology("shm:2 x ethernet:5");
  in_world("measure shm:2 x ethernet:5", 10, topo, o, [&](auto& c, rank_ctx& cx) {
    const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
    const auto davg = bspec<double>(md::avg, opk::avg);
    for (std::size_t n : {std::size_t(1), std::size_t(97), std::size_t(4099), std::size_t(70001)}) {
      do_all_reduce<std::int32_t>(c, cx, isum, n, false);
      do_all_reduce<std::int32_t>(c, cx, isum, n, true);  // the same class: measured already
      do_all_reduce<double>(c, cx, davg, n, false);
      const std::string plan = c.template explain<std::int32_t>(n);
      if (plan.find("plan: measured (options.planning = measure): ") == std::string::npos)
        cx.fail("explain does not name the measured plan:\n" + plan);
    }
    do_reduce_scatter<std::int32_t>(c, cx, isum, 13, false);  // the other collectives are unchanged
  });
  const md::wisdom w = md::wisdom::load(path);
  CHECK(w.all_reduce.size() == 4 * 2);  // 4 classes of int32 and of double; agree() adds none (local checks)
  for (auto& [k, m] : w.all_reduce) {
    CHECK(m.candidates >= 2);  // the estimate, ethernet flipped between ring and halving-doubling
    CHECK(m.algos.size() == 2);
    CHECK(m.algos[0] == DIRECT);
  }
  std::vector<std::string> plans(10);
  md::threads::run(10, [&](md::threads::endpoint ep) {
    auto comm = md::bind(topo, ep, o);
    plans[ep.rank] = comm.explain<std::int32_t>(4099);
  });
  for (auto& p : plans) {  // the same measured plan on every rank (explain's last line)
    REQUIRE(p.find("\nplan: measured") != std::string::npos);
    CHECK(p.substr(p.find("\nplan: ")) == plans[0].substr(plans[0].find("\nplan: ")));
  }
  // a rank that estimates while the others measure: topology_error naming it (on
  // the ranks that bind after a disagreeing one), remote_error on the others
  std::vector<std::string> caught(4);
  try {
    md::threads::run(4, [&](md::threads::endpoint ep) {
      md::options oo = opts_with();
      if (ep.rank != 3) oo.planning = md::planning::measure;
      try {
        auto comm = md::bind(md::parse_topology("ethernet:4"), ep, oo);
        std::int32_t x = 1;
        md::all_reduce(comm, &x, 1, md::sum);
        caught[ep.rank] = "no error";
      } catch (const md::topology_error& e) {
        caught[ep.rank] = std::string(e.what()).find("|measure") != std::string::npos ? "names measure" : e.what();
      } catch (const md::remote_error&) {
        caught[ep.rank] = "remote_error";
      }
    });
  } catch (const std::exception&) {
  }
  std::size_t named = 0;
  for (auto& c : caught) {
    CHECK((c == "names measure" || c == "remote_error"));
    named += c == "names measure";
  }
  CHECK(named >= 1);
  // a wisdom file that cannot be parsed: invalid_argument naming options.wisdom
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("not wisdom\n", f);
    std::fclose(f);
  }
  std::vector<std::string> bad(2);
  try {
    md::threads::run(2, [&](md::threads::endpoint ep) {
      try {
        auto comm = md::bind(md::parse_topology("ethernet:2"), ep, o);
        bad[ep.rank] = "bound";
      } catch (const md::invalid_argument& e) {
        bad[ep.rank] = e.argument();
      }
    });
  } catch (const std::exception&) {
  }
  for (auto& b : bad) CHECK(b == "options.wisdom");
  std::remove(path.c_str());
}

TEST_CASE("planning = measure: a direct dimension of 3 ranks or more is timed as a ring and halving-doubling too") {
  // shm:4 x ethernet:2, 4099 int32 (16 KiB). Candidates: the estimate (direct in the
  // node, recursive doubling between nodes: below its cap, and then nothing is
  // pipelined), ethernet as halving-doubling, and shm as a ring and as
  // halving-doubling: 4, where before there were 2 (shm:2 gets no such pair: with
  // two ranks direct and a ring are one exchange).
  const std::string path = "test_collectives_measure_direct.wisdom";
  const md::options o = measure_opts(path);
  const auto topo = md::parse_topology("shm:4 x ethernet:2");
  const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
  in_world("measure shm:4 x ethernet:2", 8, topo, o,
           [&](auto& c, rank_ctx& cx) { do_all_reduce<std::int32_t>(c, cx, isum, 4099, false); });
  md::wisdom w = md::wisdom::load(path);
  REQUIRE(w.all_reduce.size() == 1);
  CHECK(w.all_reduce.begin()->second.candidates == 4);
  // Whatever was picked, the shm dimension can run any of them from the wisdom file:
  // exact results, and the plan it runs is the wisdom's.
  for (algorithm a : {RING, HD, DIRECT}) {
    w.all_reduce.begin()->second.algos = {a, RING};
    w.save(path);
    in_world("wisdom shm as " + std::string(md::to_string(a)), 8, topo, o, [&](auto& c, rank_ctx& cx) {
      for (bool in_place : {false, true}) do_all_reduce<std::int32_t>(c, cx, isum, 4099, in_place);
      do_all_reduce<std::int32_t>(c, cx, isum, 4000, false);  // the same size class
      const md::plan pl = c.template make_plan<std::int32_t>(4099);
      bool ran = pl.chosen_by.find("measured") == 0;
      for (auto& st : pl.stages) ran = ran && (st.dim != 0 || st.algo == a);
      if (!ran) cx.fail("the plan is not the wisdom's:\n" + pl.to_string());
    });
  }
  std::remove(path.c_str());
}

TEST_CASE("collectives: all_reduce cut into segments that overlap across dimensions") {
  // plan/pipeline.hpp: segments of about tune.segment_bytes move through the stages
  // one behind the other, up to tune.pipeline_depth in flight. Message stages (ring
  // and direct), shared stages, the fused last stage, short last segments and
  // empty blocks all meet here; every result is checked exactly.
  struct pshape {
    std::string topo;
    std::vector<algorithm> algos;
    std::size_t threads;
    bool shared;
  };
  const std::vector<pshape> shapes = {
      {"shm:2 x ethernet:3", {}, 6, true},             // shared direct, then a message ring
      {"shm:2 x ethernet:3", {}, 6, false},            // direct by messages, ring
      {"ethernet:3 x shm:2", {}, 6, true},             // ring, then the fused shared stage
      {"shm:3 x shm:2", {RING, DIRECT}, 6, true},      // message ring, fused shared direct
      {"shm:2 x infiniband:2 x shm:2", {DIRECT, RING, DIRECT}, 8, false},
      {"infiniband:2 x shm:1 x ethernet:3", {}, 6, true},  // a trivial dimension in between
      {"shm:2 x ethernet:5", {DIRECT, HD}, 10, false},   // halving-doubling with pairs, last
      {"ethernet:4 x shm:2", {HD, DIRECT}, 8, true},     // halving-doubling first
  };
  // Shared stages of such small segments go through the staging buffers; with
  // staging off they publish their buffers, and the segments in flight must not
  // publish over each other (one arrive-read-leave per dimension at a time).
  for (const auto& sh : shapes)
    for (std::size_t seg_bytes : {std::size_t(40), std::size_t(256)})
      for (std::size_t depth : {std::size_t(1), std::size_t(2), std::size_t(8)})
        for (bool staging : {true, false}) {
        if (!staging && (!sh.shared || depth == 1)) continue;
        md::options o = opts_with(sh.algos);
        o.shared_memory = sh.shared;
        o.tune.segment_bytes = seg_bytes;
        o.tune.pipeline_depth = depth;
        if (!staging) o.tune.shared_staging_bytes = 0;
        const std::string label = sh.topo + " algorithms " + algos_string(sh.algos) + (sh.shared ? ", shared" : ", messages") +
                                  (staging ? "" : " (no staging)") + ", segments of " + std::to_string(seg_bytes) +
                                  " B, depth " + std::to_string(depth);
        in_world(label, sh.threads, md::parse_topology(sh.topo), o, [&](auto& c, rank_ctx& cx) {
          const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
          const auto davg = bspec<double>(md::avg, opk::avg);
          for (std::size_t n : {std::size_t(1), std::size_t(5), std::size_t(10), std::size_t(97), std::size_t(1000),
                                std::size_t(4099)}) {
            cx.misaligned = n % 2 == 1;
            do_all_reduce<std::int32_t>(c, cx, isum, n, n % 3 == 0);
            do_all_reduce<double>(c, cx, davg, n, n % 3 == 1);
          }
          // the plan says how many segments: 4099 int32 in segments of 40 bytes,
          // rounded up to a cache line (16 elements), or of 256 bytes (64 elements)
          const std::string plan = c.template explain<std::int32_t>(4099);
          const std::size_t want = seg_bytes == 40 ? 257 : 65;
          if (plan.find("pipelined: " + std::to_string(want) + " segments") == std::string::npos)
            cx.fail("explain does not say " + std::to_string(want) + " segments:\n" + plan);
        });
      }
}

TEST_CASE("collectives: every built-in op on every element type, exact") {
  const std::vector<shape> shapes = {
      {"shm:1", {}, 1},
      {"shm:2 x shm:3", {RING, DIRECT}, 6},
      {"shm:2 x shm:3", {DIRECT, RING}, 6},
      {"ethernet:5", {}, 5},
      {"shm:3 x infiniband:2", {}, 6},
      {"shm:2 x shm:2 x shm:2", {DIRECT, DIRECT, DIRECT}, 8},
      {"shm:3 x shm:1 x ethernet:2", {RING, RING, RING}, 6},
  };
  for (const auto& s : shapes) {
    const auto topo = md::parse_topology(s.topo);
    in_world(label_of(s), s.threads, topo, opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      type_suite<std::int32_t, true>(c, cx);
      type_suite<std::int64_t, false>(c, cx);
      type_suite<std::uint8_t, false>(c, cx);
      type_suite<float, true>(c, cx);
      type_suite<double, false>(c, cx);
      type_suite<md::half, false>(c, cx);
      type_suite<md::bfloat16, false>(c, cx);
    });
  }
}

TEST_CASE("collectives: 16-bit floats: the direct algorithm accumulates in float and rounds once") {
  // types.hpp: "a reduction that combines k inputs in one pass (the direct algorithm)
  // accumulates all k in float and rounds once". Rank 0 adds a large value and the
  // others add 1, so rounding each partial to 16 bits would lose the ones:
  // half: 2048 + 1 + 1 + 1 = 2051 -> 2052; bfloat16: 256 + 3 = 259 -> 260.
  in_world("shm:4 direct, 16-bit", 4, md::parse_topology("shm:4"), opts_with({DIRECT}), [](auto& c, rank_ctx& cx) {
    const bool r0 = c.rank() == 0;
    md::half h[3] = {r0 ? 2048.0f : 1.0f, r0 ? 2048.0f : 1.0f, r0 ? -2048.0f : -1.0f};
    md::bfloat16 b[2] = {r0 ? 256.0f : 1.0f, r0 ? 256.0f : 1.0f};
    md::all_reduce(c, h, 3, md::sum);
    md::all_reduce(c, b, 1, md::sum);
    md::all_reduce(c, b + 1, 1, md::avg);
    cx.where = "all_reduce<half> sum, direct";
    expect(cx, "buf", h, 3, [](std::size_t i) { return md::half(i == 2 ? -2051.0f : 2051.0f); });
    cx.where = "all_reduce<bfloat16> sum / avg, direct";
    expect(cx, "buf", b, 2, [](std::size_t i) { return md::bfloat16(i == 0 ? 259.0f : 259.0f / 4.0f); });
    ++cx.checks;
  });
}

TEST_CASE("collectives: uint8 sum wraps modulo 256") {
  // 200 + 100 on two ranks, 3 x 100 + ... : the exact answers are taken mod 256.
  in_world("shm:2 x shm:3 uint8 wrap", 6, md::parse_topology("shm:2 x shm:3"), opts_with(), [](auto& c, rank_ctx& cx) {
    buffer<std::uint8_t> b(5, false);
    for (std::size_t i = 0; i < 5; ++i) b[i] = static_cast<std::uint8_t>(200 + i);
    cx.where = "all_reduce<uint8> sum of 200+i on 6 ranks";
    md::all_reduce(c, b.data(), 5, md::sum);
    expect(cx, "buf", b.data(), 5, [](std::size_t i) { return static_cast<std::uint8_t>((6 * (200 + i)) % 256); });
  });
}

TEST_CASE("collectives: user op xor (commutative) on ring and direct dimensions") {
  const std::vector<shape> shapes = {
      {"ethernet:7", {}, 7},
      {"shm:2 x infiniband:3", {}, 6},
      {"shm:3 x shm:5", {RING, DIRECT}, 15},
      {"shm:1", {}, 1},
  };
  for (const auto& s : shapes) {
    in_world(label_of(s), s.threads, md::parse_topology(s.topo), opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      user_suite<std::int32_t>(c, cx, xor_spec<std::int32_t>{});
      user_suite<std::uint8_t>(c, cx, xor_spec<std::uint8_t>{});
    });
  }
}

TEST_CASE("collectives: non-commutative ops fold in rank order on fully connected links") {
  // The result must be x_0 op x_1 op ... op x_{P-1}, with rank = c0 + p0 (c1 + p1 c2 ...).
  const std::vector<shape> shapes = {
      {"shm:1", {}, 1},
      {"shm:2", {}, 2},
      {"shm:5", {}, 5},
      {"shm:9", {}, 9},  // automatic would be ring for commutative ops
      {"shm:2 x shm:3", {}, 6},
      {"shm:3 x shm:2", {DIRECT, DIRECT}, 6},
      {"shm:3 x shm:1 x shm:2", {}, 6},
      {"shm:2 x shm:2 x shm:2", {}, 8},
      {"shm:3 x shm:5", {}, 15},
  };
  for (const auto& s : shapes) {
    in_world(label_of(s), s.threads, md::parse_topology(s.topo), opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      user_suite<mat2>(c, cx, mat_spec{});
      user_suite<std::int32_t>(c, cx, keep_left_spec{});
      user_suite<std::int32_t>(c, cx, keep_right_spec{});
    });
  }
  // A compile-time topology of fully connected links accepts them too.
  in_world("ring<shm,2> * ring<shm> on 6, matmul", 6, md::ring<md::shm, 2> * md::ring<md::shm>, opts_with(),
           [](auto& c, rank_ctx& cx) { user_suite<mat2>(c, cx, mat_spec{}); });
}

TEST_CASE("collectives: a non-commutative op with a forced ring is rejected on every rank") {
  for (algorithm forced : {RING, HD}) {
  INFO("forced " << md::to_string(forced));
  std::vector<std::string> caught(4);
  try {
    md::threads::run(4, [&](md::threads::endpoint ep) {
      auto comm = md::bind(md::parse_topology("shm:4"), ep, opts_with({forced}));
      std::int32_t x[3] = {1, 2, 3};
      try {
        md::all_reduce(comm, x, 3, keep_left_spec{}.op);
        caught[ep.rank] = "no exception";
      } catch (const md::invalid_argument& e) {
        caught[ep.rank] = "invalid_argument " + e.argument();
      } catch (const std::exception& e) {
        caught[ep.rank] = std::string("other exception: ") + e.what();
      }
    });
  } catch (const std::exception& e) {
    FAIL_CHECK("run threw: " << e.what());
  }
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(caught[r] == "invalid_argument op");
  }
  }
}

namespace {
// Random floats: inputs uniform in [-1, 1) (mt19937, fixed seed, generated once).
struct random_case {
  std::vector<std::vector<float>> in;  // per rank
  std::vector<std::vector<float>> ar, ar2, ar_in, rs, red;
};

void run_random(const shape& s, std::size_t n, random_case& rc, std::vector<std::vector<float>>& out_first) {
  const std::size_t P = s.threads;
  rc.ar.assign(P, {});
  rc.ar2.assign(P, {});
  rc.ar_in.assign(P, {});
  rc.rs.assign(P, {});
  rc.red.assign(P, {});
  const auto topo = md::parse_topology(s.topo);
  in_world(label_of(s) + " random floats n=" + std::to_string(n), P, topo, opts_with(s.algos),
           [&](auto& c, rank_ctx& cx) {
             const std::size_t r = c.rank();
             const auto& x = rc.in[r];
             std::vector<float> out(n);
             md::all_reduce(c, x.data(), out.data(), n, md::sum);
             rc.ar[r] = out;
             md::all_reduce(c, x.data(), out.data(), n, md::sum);  // the same call again
             rc.ar2[r] = out;
             std::vector<float> inplace = x;
             md::all_reduce(c, inplace.data(), n, md::sum);
             rc.ar_in[r] = inplace;
             const std::size_t blk = n / P;
             std::vector<float> rsout(blk);
             md::reduce_scatter(c, x.data(), rsout.data(), blk, md::sum);
             rc.rs[r] = rsout;
             std::vector<float> red(n);
             md::reduce(c, x.data(), red.data(), n, P - 1, md::sum);
             if (r == P - 1) rc.red[r] = red;
             ++cx.checks;
           });
  out_first = rc.ar;
}
}  // namespace

TEST_CASE("collectives: random floats within the float64 bound, bitwise identical on all ranks and runs") {
  // Bound: a float sum of P terms, combined in any order (ring partials, direct
  // n-ary folds, stage by stage), is within (P-1) * u * sum_r |x_r| of the exact sum
  // (u = eps/2; we allow eps). So |got - ref| <= (P-1) * FLT_EPSILON * sum_r |x_r| + 1e-30,
  // where ref is the sum in double of the same float inputs.
  const std::vector<shape> shapes = {
      {"shm:2 x shm:3", {RING, DIRECT}, 6},
      {"shm:2 x shm:3", {DIRECT, RING}, 6},
      {"ethernet:7", {}, 7},
      {"ethernet:7", {HD}, 7},
      {"shm:2 x infiniband:6", {DIRECT, HD}, 12},
      {"shm:3 x shm:5", {RING, RING}, 15},
      {"shm:3 x shm:5", {DIRECT, DIRECT}, 15},
      {"shm:2 x shm:1 x shm:2 x ethernet:2", {}, 8},
  };
  const float eps = std::numeric_limits<float>::epsilon();
  for (const auto& s : shapes) {
    for (std::size_t n : {std::size_t(4099), std::size_t(10007)}) {
      INFO(label_of(s) << " n=" << n);
      const std::size_t P = s.threads;
      random_case rc;
      rc.in.resize(P);
      for (std::size_t r = 0; r < P; ++r) {
        std::mt19937 gen(static_cast<unsigned>(12345 + 101 * r + n));
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        rc.in[r].resize(n);
        for (auto& v : rc.in[r]) v = dist(gen);
      }
      std::vector<std::vector<float>> first;
      run_random(s, n, rc, first);
      std::vector<std::vector<float>> second_world;
      random_case rc2;
      rc2.in = rc.in;
      run_random(s, n, rc2, second_world);

      auto ref = [&](std::size_t i, double& abs_sum) {
        double sref = 0;
        abs_sum = 0;
        for (std::size_t r = 0; r < P; ++r) sref += double(rc.in[r][i]), abs_sum += std::fabs(double(rc.in[r][i]));
        return sref;
      };
      auto within = [&](float got, std::size_t i) {
        double a = 0;
        const double sref = ref(i, a);
        return std::fabs(double(got) - sref) <= double(P - 1) * double(eps) * a + 1e-30;
      };
      std::size_t bad_bound = 0, bad_ident = 0, bad_rerun = 0, bad_world = 0, bad_inplace = 0, bad_rs = 0, bad_red = 0;
      for (std::size_t r = 0; r < P; ++r) {
        if (rc.ar[r].size() != n || rc.ar_in[r].size() != n || second_world[r].size() != n) {
          FAIL_CHECK("rank " << r << " recorded no result");
          continue;
        }
        bad_ident += std::memcmp(rc.ar[r].data(), rc.ar[0].data(), n * sizeof(float)) != 0;
        bad_rerun += std::memcmp(rc.ar[r].data(), rc.ar2[r].data(), n * sizeof(float)) != 0;
        bad_world += std::memcmp(rc.ar[r].data(), second_world[r].data(), n * sizeof(float)) != 0;
        bad_inplace += std::memcmp(rc.ar[r].data(), rc.ar_in[r].data(), n * sizeof(float)) != 0;
        const std::size_t blk = n / P;
        for (std::size_t i = 0; i < blk && rc.rs[r].size() == blk; ++i) bad_rs += !within(rc.rs[r][i], r * blk + i);
      }
      for (std::size_t i = 0; i < n; ++i) {
        bad_bound += !within(rc.ar[0][i], i);
        bad_red += rc.red[P - 1].size() != n || !within(rc.red[P - 1][i], i);
      }
      CHECK(bad_ident == 0);    // all ranks hold the same bits
      CHECK(bad_rerun == 0);    // the same call twice on one communicator
      CHECK(bad_world == 0);    // a fresh world and communicator
      CHECK(bad_inplace == 0);  // in place runs the same schedule
      CHECK(bad_bound == 0);
      CHECK(bad_rs == 0);
      CHECK(bad_red == 0);
    }
  }
}

TEST_CASE("collectives: compile-time topologies, including a dynamic extent") {
  // One type only: each compile-time topology is a new communicator type to compile,
  // and the runtime topologies above run the same engine on every other shape.
  constexpr auto topo = md::ring<md::shm, 2> * md::ring<md::shm>;
  std::vector<std::string> seen(6);
  in_world("ring<shm,2> * ring<shm> on 6", 6, topo, opts_with(), [&](auto& c, rank_ctx& cx) {
    seen[c.rank()] =
        c.topology().to_string() + " " + std::to_string(c.extents()[0]) + "," + std::to_string(c.extents()[1]);
    basic_suite(c, cx);
  });
  for (auto& s : seen) CHECK(s == "shm:2 x shm:3 2,3");
  in_world("ring<shm,2> * ring<shm> on 6, ring,ring", 6, topo, opts_with({RING, RING}),
           [](auto& c, rank_ctx& cx) { basic_suite(c, cx); });
  in_world("ring<shm,2> * ring<shm> on 2 (extent 1)", 2, topo, opts_with({DIRECT, RING}),
           [](auto& c, rank_ctx& cx) { basic_suite(c, cx); });
}

TEST_CASE("collectives: consecutive calls of different kinds and sizes; every element written") {
  // The sentinel is a NaN for float/double (no legitimate result), 0xA5 bytes otherwise;
  // do_* report "never written" when an element still holds it.
  for (const shape& s : {shape{"shm:2 x shm:3", {RING, DIRECT}, 6}, shape{"shm:3 x ethernet:5", {}, 15},
                         shape{"shm:2 x shm:1 x shm:2", {DIRECT, DIRECT, RING}, 4}}) {
    in_world(label_of(s), s.threads, md::parse_topology(s.topo), opts_with(s.algos), [](auto& c, rank_ctx& cx) {
      const std::size_t P = c.size();
      const auto fsum = bspec<float>(md::sum, opk::sum);
      const auto dmax = bspec<double>(md::max, opk::max);
      const auto lsum = bspec<std::int64_t>(md::sum, opk::sum);
      const auto iavg = bspec<std::int32_t>(md::avg, opk::avg);
      for (int rep = 0; rep < 2; ++rep) {
        cx.misaligned = rep == 1;
        do_all_reduce<float>(c, cx, fsum, 1009, false);
        do_reduce_scatter<std::int64_t>(c, cx, lsum, 13, false);
        do_all_gather<std::uint8_t>(c, cx, 97, false);
        do_broadcast<double>(c, cx, 5, 4 % P);
        do_reduce<std::int32_t>(c, cx, iavg, 4099, 2 % P, false, false);
        do_all_reduce<std::int32_t>(c, cx, iavg, 1, false);
        do_all_reduce<double>(c, cx, dmax, 4099, false);
        do_reduce_scatter<float>(c, cx, fsum, 1, false);
        do_all_gather<double>(c, cx, 1009, false);
        do_broadcast<std::int64_t>(c, cx, 4099, P - 1);
        do_all_reduce<float>(c, cx, fsum, 0, false);
        do_reduce<double>(c, cx, dmax, 13, 0, false, false);
      }
      // The span overloads.
      std::vector<std::int32_t> a(P * 3), b(P * 3), g(P * 3);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i + c.rank());
      md::all_reduce(c, std::span<const std::int32_t>(a), std::span<std::int32_t>(b));
      cx.where = "all_reduce(span, span)";
      expect(cx, "recvbuf", b.data(), b.size(), [&](std::size_t i) { return static_cast<std::int32_t>(P * i + P * (P - 1) / 2); });
      std::vector<std::int32_t> blk(3);
      md::reduce_scatter(c, std::span<const std::int32_t>(a), std::span<std::int32_t>(blk));
      cx.where = "reduce_scatter(span, span)";
      expect(cx, "recvbuf", blk.data(), 3, [&](std::size_t i) {
        return static_cast<std::int32_t>(P * (c.rank() * 3 + i) + P * (P - 1) / 2);
      });
      md::all_gather(c, std::span<const std::int32_t>(blk), std::span<std::int32_t>(g));
      cx.where = "all_gather(span, span)";
      expect(cx, "recvbuf", g.data(), g.size(), [&](std::size_t i) { return b[i]; });
      md::broadcast(c, std::span<std::int32_t>(a), 0);
      cx.where = "broadcast(span)";
      expect(cx, "buf", a.data(), a.size(), [&](std::size_t i) { return static_cast<std::int32_t>(i); });
    });
  }
}

TEST_CASE("collectives: two communicators in one world do not mix their messages") {
  in_world("two communicators", 6, md::parse_topology("shm:2 x shm:3"), opts_with({RING, RING}),
           [](auto& c, rank_ctx& cx) {
             md::threads::endpoint ep{&c.get_transport().get_world(), c.rank()};
             auto other = md::bind(md::parse_topology("shm:3 x ethernet:2"), ep, opts_with());
             const auto isum = bspec<std::int32_t>(md::sum, opk::sum);
             const auto imax = bspec<std::int32_t>(md::max, opk::max);
             for (std::size_t n : {1, 13, 1009}) {
               do_all_reduce<std::int32_t>(c, cx, isum, n, false);
               do_all_reduce<std::int32_t>(other, cx, imax, n, false);
               do_reduce_scatter<std::int32_t>(other, cx, isum, n, true);
               do_reduce_scatter<std::int32_t>(c, cx, imax, n, true);
               do_all_gather<std::int32_t>(c, cx, n, false);
               do_all_gather<std::int32_t>(other, cx, n, false);
             }
           });
}

namespace {
// Counts what the communicator's scratch takes from options.memory.
class counting_resource : public std::pmr::memory_resource {
public:
  std::size_t allocations = 0;

private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    ++allocations;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
}  // namespace

TEST_CASE("collectives: scratch comes from options.memory; repeated and reserved calls allocate nothing") {
  // communicator.hpp: "Calls then allocate nothing except scratch that grows to the
  // largest call (reserve() pre-sizes it)", and reserve<T>(count): "calls up to `count`
  // elements of T allocate nothing" (checked here for all_reduce, broadcast and reduce,
  // whose count is the whole buffer).
  const std::size_t n = 4099;
  for (const shape& s : {shape{"ethernet:4 x shm:2", {}, 8}, shape{"shm:8", {}, 8}, shape{"shm:4 x ethernet:2", {}, 8}}) {
    std::vector<std::size_t> used(s.threads, 0), repeat(s.threads, 99), reserved(s.threads, 99);
    in_world(label_of(s) + " memory", s.threads, md::parse_topology(s.topo), opts_with(s.algos),
             [&](auto& c0, rank_ctx& cx) {
               counting_resource mem;
               auto o = opts_with(s.algos);
               o.memory = &mem;
               md::threads::endpoint ep{&c0.get_transport().get_world(), c0.rank()};
               const auto fsum = bspec<float>(md::sum, opk::sum);
               {
                 auto c = md::bind(md::parse_topology(s.topo), ep, o);
                 do_all_reduce<float>(c, cx, fsum, n, false);
                 do_reduce<float>(c, cx, fsum, n, 1, false, false);
                 const std::size_t before = mem.allocations;
                 used[c.rank()] = before;
                 do_all_reduce<float>(c, cx, fsum, n, false);
                 do_reduce<float>(c, cx, fsum, n, 1, false, false);
                 do_all_reduce<float>(c, cx, fsum, n / 2, true);
                 repeat[c.rank()] = mem.allocations - before;
               }
               {
                 auto c = md::bind(md::parse_topology(s.topo), ep, o);
                 c.template reserve<float>(n);
                 const std::size_t before = mem.allocations;
                 do_all_reduce<float>(c, cx, fsum, n, false);
                 do_broadcast<float>(c, cx, n, 2);
                 do_reduce<float>(c, cx, fsum, n, 0, false, false);
                 do_reduce<float>(c, cx, fsum, n, 1, true, true);
                 reserved[c.rank()] = mem.allocations - before;
               }
             });
    for (std::size_t r = 0; r < s.threads; ++r) {
      INFO(label_of(s) << ", rank " << r);
      if (std::string(s.topo) == "shm:8")
        // One direct dimension of threads reads its peers in place: all_reduce needs no
        // scratch; reduce's non-roots keep their reduced block in W (the root, rank 1, in recvbuf).
        CHECK(used[r] == (r == 1 ? 0u : 1u));
      else
        CHECK(used[r] > 0);     // the scratch came from options.memory
      CHECK(repeat[r] == 0);    // scratch grew on the first calls and is reused
      CHECK(reserved[r] == 0);  // reserve<float>(n) covers calls of n floats
    }
  }
}

TEST_CASE("collectives: check_level::collective gives the same exact results") {
  auto o = opts_with({DIRECT, RING});
  o.checks = md::check_level::collective;
  in_world("shm:3 x infiniband:2, checks collective", 6, md::parse_topology("shm:3 x infiniband:2"), o,
           [](auto& c, rank_ctx& cx) { basic_suite(c, cx); });
}

TEST_CASE("collectives: explain names the stages") {
  std::vector<std::string> text(6);
  md::threads::run(6, [&](md::threads::endpoint ep) {
    auto comm = md::bind(md::parse_topology("shm:2 x shm:3"), ep, opts_with());
    text[ep.rank] = comm.explain<float>(1000);
  });
  for (auto& t : text) {
    CHECK(!t.empty());
    CHECK(t.find("reduce-scatter") != std::string::npos);
    CHECK(t.find("all-gather") != std::string::npos);
  }
}
