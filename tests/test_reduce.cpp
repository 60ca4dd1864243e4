// tests/test_reduce.cpp: the host reducer's loops (reduce/host.hpp) at run time:
// every built-in op on every type, in place and out of place, k = 1..9 inputs;
// 16-bit accumulation, avg's fused division, user ops in order. The rest of the
// reduce room's tests: test_reduce_types.cpp (half, bfloat16) and test_reduce_ops.cpp
// (the ops and their traits at compile time).
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>
#include "test_support.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace m = mdring;

namespace {

// ---- helpers for the run-time tests ------------------------------------------------------------

using mdring_test::hex;

template <class T>
T make(long long v) {
  if constexpr (m::is_16bit_float_v<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);  // integers: modulo 2^bits (C++20)
}

template <class T>
bool same(const T& x, const T& y) {
  if constexpr (m::is_16bit_float_v<T>) return x.bits == y.bits;
  else return x == y;
}

template <class T>
std::string show(const T& x) {
  std::ostringstream os;
  if constexpr (m::is_16bit_float_v<T>) os << float(x) << " (" << hex(x.bits) << ")";
  else if constexpr (sizeof(T) == 1) os << int(x);
  else os << x;
  return os.str();
}

enum class kind { sum, prod, min, max, avg };

const char* kind_name(kind k) {
  switch (k) {
    case kind::sum:
      return "sum";
    case kind::prod:
      return "prod";
    case kind::min:
      return "min";
    case kind::max:
      return "max";
    default:
      return "avg";
  }
}

// Input j, element i: values whose results are exact in every type (sums <= 45,
// products of 1s and 2s <= 512, which wrap in int8 exactly as modulo arithmetic says).
long long value(kind k, std::size_t j, std::size_t i) {
  if (k == kind::prod) return 1 + static_cast<long long>((i + j + i / 5) % 2);
  return static_cast<long long>((i * 7 + j * 13 + 5) % 6);
}

// The documented result of reducing xs (rank order) with op k, over `ranks` ranks.
template <class T>
T expected(kind k, const std::vector<long long>& xs, std::size_t ranks, bool final) {
  long long s = 0, p = 1, lo = xs[0], hi = xs[0];
  for (auto x : xs) {
    s += x;
    p *= x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  switch (k) {
    case kind::sum:
      return make<T>(s);
    case kind::prod:
      return make<T>(p);
    case kind::min:
      return make<T>(lo);
    case kind::max:
      return make<T>(hi);
    default:
      if (!final || ranks <= 1) return make<T>(s);
      if constexpr (std::is_integral_v<T>) {
        return make<T>(s / static_cast<long long>(ranks));  // s >= 0: truncation
      } else {
        using A = m::accumulator_t<T>;
        return static_cast<T>(static_cast<A>(s) / static_cast<A>(ranks));
      }
  }
}

// First index where got and want differ, or npos.
template <class T>
std::size_t mismatch(const T* got, const std::vector<T>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!same(got[i], want[i])) return i;
  return std::string::npos;
}

constexpr std::size_t lengths[] = {0, 1, 63, 64, 65, 511, 513, 2049, 5000};

// The harness below is type-erased: the per-(T, op) code is a handful of small
// functions, and the loops, buffers and doctest macros are compiled once. (Written
// as a template over T and op, this file took minutes to build.)
struct erased_type {
  std::string name;
  std::size_t size;
  void (*make)(void* dst, long long v);
  bool (*same)(const void* x, const void* y);
  std::string (*show)(const void* x);
  void (*expected)(void* dst, kind k, const std::vector<long long>& xs, std::size_t ranks, bool final);
};

template <class T>
erased_type erase_type() {
  return {m::type_name<T>(),
          sizeof(T),
          [](void* dst, long long v) { *static_cast<T*>(dst) = make<T>(v); },
          [](const void* x, const void* y) { return same(*static_cast<const T*>(x), *static_cast<const T*>(y)); },
          [](const void* x) { return show(*static_cast<const T*>(x)); },
          [](void* dst, kind k, const std::vector<long long>& xs, std::size_t ranks, bool final) {
            *static_cast<T*>(dst) = expected<T>(k, xs, ranks, final);
          }};
}

struct erased_reducer {
  std::function<void(void*, const void*, const void*, std::size_t, bool)> combine;
  std::function<void(void*, const std::vector<const void*>&, std::size_t, bool)> combine_n;
  std::function<void(void*, const void*, std::size_t, bool)> finalize;
  std::function<void(const std::vector<void*>&, const std::vector<const void*>&, std::size_t, bool, bool)> combine_n_to;
};

template <class T, class Op>
erased_reducer erase_reducer(Op op, std::size_t ranks) {
  const m::host_reducer<T, Op> r(op, ranks);
  return {[r](void* d, const void* a, const void* b, std::size_t n, bool f) {
            r.combine(static_cast<T*>(d), static_cast<const T*>(a), static_cast<const T*>(b), n, f);
          },
          [r](void* d, const std::vector<const void*>& in, std::size_t n, bool f) {
            std::vector<const T*> p(in.size());
            for (std::size_t j = 0; j < in.size(); ++j) p[j] = static_cast<const T*>(in[j]);
            r.combine_n(static_cast<T*>(d), p.data(), p.size(), n, f);
          },
          [r](void* d, const void* s, std::size_t n, bool f) {
            r.finalize(static_cast<T*>(d), static_cast<const T*>(s), n, f);
          },
          [r](const std::vector<void*>& out, const std::vector<const void*>& in, std::size_t n, bool f, bool nt) {
            std::vector<T*> o(out.size());
            for (std::size_t j = 0; j < out.size(); ++j) o[j] = static_cast<T*>(out[j]);
            std::vector<const T*> p(in.size());
            for (std::size_t j = 0; j < in.size(); ++j) p[j] = static_cast<const T*>(in[j]);
            r.combine_n_to(o.data(), o.size(), p.data(), p.size(), n, f, nt);
          }};
}

// n elements of a type-erased T, suitably aligned, plus one guard element on each side.
class buffer {
public:
  buffer(const erased_type& t, std::size_t n, long long guard)
      : t_(&t), n_(n), store_((n + 2) * t.size / sizeof(std::max_align_t) + 1) {
    for (std::size_t i = 0; i < n + 2; ++i) t.make(raw() + i * t.size, guard);
  }
  unsigned char* raw() { return reinterpret_cast<unsigned char*>(store_.data()); }
  const unsigned char* raw() const { return reinterpret_cast<const unsigned char*>(store_.data()); }
  void* at(std::size_t i) { return raw() + (i + 1) * t_->size; }  // i may be n (the guard) or size_t(-1)
  const void* at(std::size_t i) const { return raw() + (i + 1) * t_->size; }
  void* data() { return at(0); }
  // First index in [-1, n] (guards included) where the two differ, as a message; empty if equal.
  std::string diff(const buffer& want) const {
    for (std::size_t i = 0; i < n_ + 2; ++i) {
      const void* x = raw() + i * t_->size;
      const void* y = want.raw() + i * t_->size;
      if (!t_->same(x, y))
        return i == 0 || i == n_ + 1
                   ? "wrote outside [0, n)"
                   : "element " + std::to_string(i - 1) + ": got " + t_->show(x) + ", want " + t_->show(y);
    }
    return {};
  }

private:
  const erased_type* t_;
  std::size_t n_;
  std::vector<std::max_align_t> store_;
};

void verdict(const std::string& diff, const std::string& context) { CHECK_MESSAGE(diff.empty(), context, ": ", diff); }

constexpr long long guard_value = 9;

void check_reducer(const erased_type& t, kind k, const erased_reducer& r, std::size_t ranks) {
  const std::string name = t.name + " " + kind_name(k);
  for (std::size_t n : lengths) {
    for (bool final : {false, true}) {
      const std::string cfg = " n=" + std::to_string(n) + " final=" + (final ? "true" : "false");
      // ---- combine: out of place, dst == a, dst == b ----
      {
        buffer a(t, n, guard_value), b(t, n, guard_value), want(t, n, guard_value);
        for (std::size_t i = 0; i < n; ++i) {
          t.make(a.at(i), value(k, 0, i));
          t.make(b.at(i), value(k, 1, i));
          t.expected(want.at(i), k, {value(k, 0, i), value(k, 1, i)}, ranks, final);
        }
        for (int mode = 0; mode < 3; ++mode) {
          buffer aa = a, bb = b, out(t, n, guard_value);
          buffer& dst = mode == 0 ? out : mode == 1 ? aa : bb;
          r.combine(dst.data(), aa.data(), bb.data(), n, final);
          const std::string ctx = name + " combine" + cfg +
                                  (mode == 0   ? " out of place"
                                   : mode == 1 ? " dst == a"
                                               : " dst == b");
          verdict(dst.diff(want), ctx);
          if (mode != 1) verdict(aa.diff(a), ctx + " (input a)");
          if (mode != 2) verdict(bb.diff(b), ctx + " (input b)");
        }
      }
      // ---- combine_n: k = 1 .. 9 inputs, out of place and dst == in[j] ----
      for (std::size_t kk = 1; kk <= 9; ++kk) {
        std::vector<buffer> in(kk, buffer(t, n, guard_value));
        buffer want(t, n, guard_value);
        std::vector<long long> xs(kk);
        for (std::size_t i = 0; i < n; ++i) {
          for (std::size_t j = 0; j < kk; ++j) {
            xs[j] = value(k, j, i);
            t.make(in[j].at(i), xs[j]);
          }
          t.expected(want.at(i), k, xs, ranks, final);
        }
        std::vector<int> where = {-1, 0};  // -1: out of place
        if (kk > 2) where.push_back(int(kk / 2));
        if (kk > 1) where.push_back(int(kk - 1));
        for (int w : where) {
          auto copy = in;
          std::vector<const void*> ptrs(kk);
          for (std::size_t j = 0; j < kk; ++j) ptrs[j] = copy[j].data();
          buffer out(t, n, guard_value);
          buffer& dst = w < 0 ? out : copy[std::size_t(w)];
          r.combine_n(dst.data(), ptrs, n, final);
          const std::string ctx = name + " combine_n k=" + std::to_string(kk) + cfg +
                                  (w < 0 ? std::string(" out of place") : " dst == in[" + std::to_string(w) + "]");
          verdict(dst.diff(want), ctx);
          for (std::size_t j = 0; j < kk; ++j)
            if (int(j) != w) verdict(copy[j].diff(in[j]), ctx + " (input " + std::to_string(j) + ")");
        }
      }
      // ---- combine_n_to: the same fold written to 1..3 outputs, plain or
      // non-temporal stores (buffers start one element past an aligned address,
      // so the streamed middle has a head and a tail), out[0] == in[0] or not ----
      for (std::size_t kk : {std::size_t(1), std::size_t(2), std::size_t(5)})
        for (std::size_t nout : {std::size_t(1), std::size_t(3)})
          for (bool nt : {false, true})
            for (bool in_place : {false, true}) {
              std::vector<buffer> in(kk, buffer(t, n, guard_value));
              buffer want(t, n, guard_value);
              std::vector<long long> xs(kk);
              for (std::size_t i = 0; i < n; ++i) {
                for (std::size_t j = 0; j < kk; ++j) t.make(in[j].at(i), xs[j] = value(k, j, i));
                t.expected(want.at(i), k, xs, ranks, final);
              }
              auto copy = in;
              std::vector<buffer> outs(nout, buffer(t, n, guard_value));
              std::vector<const void*> ptrs(kk);
              for (std::size_t j = 0; j < kk; ++j) ptrs[j] = copy[j].data();
              std::vector<void*> optrs(nout);
              for (std::size_t o = 0; o < nout; ++o) optrs[o] = o == 0 && in_place ? copy[0].data() : outs[o].data();
              r.combine_n_to(optrs, ptrs, n, final, nt);
              const std::string ctx = name + " combine_n_to k=" + std::to_string(kk) +
                                      " outputs=" + std::to_string(nout) + (nt ? " streamed" : "") +
                                      (in_place ? " in place" : "") + cfg;
              for (std::size_t o = 0; o < nout; ++o)
                verdict((o == 0 && in_place ? copy[0] : outs[o]).diff(want),
                        ctx + " (output " + std::to_string(o) + ")");
              for (std::size_t j = in_place ? 1 : 0; j < kk; ++j)
                verdict(copy[j].diff(in[j]), ctx + " (input " + std::to_string(j) + ")");
            }
      // ---- finalize: dst = fin(src) (avg) or a copy, out of place and in place ----
      {
        buffer src(t, n, guard_value), want(t, n, guard_value);
        for (std::size_t i = 0; i < n; ++i) {
          t.make(src.at(i), value(k, 4, i));
          if (k == kind::avg) t.expected(want.at(i), k, {value(k, 4, i)}, ranks, final);
          else t.make(want.at(i), value(k, 4, i));
        }
        buffer out(t, n, guard_value);
        r.finalize(out.data(), src.data(), n, final);
        verdict(out.diff(want), name + " finalize" + cfg + " out of place");
        buffer in_place = src;
        r.finalize(in_place.data(), in_place.data(), n, final);
        verdict(in_place.diff(want), name + " finalize" + cfg + " in place");
      }
    }
  }
  // length 0 touches nothing, not even null pointers
  r.combine(nullptr, nullptr, nullptr, 0, true);
  r.combine_n(nullptr, {}, 0, true);
  r.combine_n_to({}, {}, 0, true, true);
  r.finalize(nullptr, nullptr, 0, true);
}

template <class T>
void check_all_builtin_ops() {
  const std::size_t ranks = 3;
  const erased_type t = erase_type<T>();
  check_reducer(t, kind::sum, erase_reducer<T>(m::sum, ranks), ranks);
  check_reducer(t, kind::prod, erase_reducer<T>(m::prod, ranks), ranks);
  check_reducer(t, kind::min, erase_reducer<T>(m::min, ranks), ranks);
  check_reducer(t, kind::max, erase_reducer<T>(m::max, ranks), ranks);
  check_reducer(t, kind::avg, erase_reducer<T>(m::avg, ranks), ranks);
}

// Affine maps x -> a x + b under composition: associative, not commutative.
// (f op g) = "f, then g": (g.a f.a, g.a f.b + g.b).
struct affine {
  std::int64_t a, b;
  friend bool operator==(const affine&, const affine&) = default;
};
struct compose {
  constexpr affine operator()(const affine& f, const affine& g) const { return {g.a * f.a, g.a * f.b + g.b}; }
};

}  // namespace

TEST_CASE_TEMPLATE("host_reducer: every built-in op, in place and out of place, k = 1..9", T, std::int8_t, std::uint8_t,
                   std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t, std::uint64_t, char, float,
                   double, long double, m::half, m::bfloat16) {
  check_all_builtin_ops<T>();
}

TEST_CASE("16-bit types: combine_n accumulates in float, a chain of combines rounds every step") {
  SUBCASE("half: 2048 + 1 + 1") {
    // 2049 is a tie between 2048 and 2050 in half: each step rounds it back to 2048.
    const m::half x[3] = {m::half(2048.0f), m::half(1.0f), m::half(1.0f)};
    const m::half* in[3] = {&x[0], &x[1], &x[2]};
    const m::host_reducer<m::half, m::sum_t> r(m::sum, 3);
    m::half once{}, stepwise{};
    r.combine_n(&once, in, 3, 1, false);
    CHECK(float(once) == 2050.0f);  // one rounding of the float sum 2050
    r.combine(&stepwise, &x[0], &x[1], 1, false);
    r.combine(&stepwise, &stepwise, &x[2], 1, false);
    CHECK(float(stepwise) == 2048.0f);  // two roundings
  }
  SUBCASE("bfloat16: 256 + 1 + 1") {
    const m::bfloat16 x[3] = {m::bfloat16(256.0f), m::bfloat16(1.0f), m::bfloat16(1.0f)};
    const m::bfloat16* in[3] = {&x[0], &x[1], &x[2]};
    const m::host_reducer<m::bfloat16, m::sum_t> r(m::sum, 3);
    m::bfloat16 once{}, stepwise{};
    r.combine_n(&once, in, 3, 1, false);
    CHECK(float(once) == 258.0f);
    r.combine(&stepwise, &x[0], &x[1], 1, false);
    r.combine(&stepwise, &stepwise, &x[2], 1, false);
    CHECK(float(stepwise) == 256.0f);
  }
  SUBCASE("a user op sees the 16-bit type itself, so it rounds every step") {
    auto add = [](m::half a, m::half b) { return m::half(float(a) + float(b)); };
    const m::half x[3] = {m::half(2048.0f), m::half(1.0f), m::half(1.0f)};
    const m::half* in[3] = {&x[0], &x[1], &x[2]};
    const m::host_reducer<m::half, decltype(add)> r(add, 3);
    m::half out{};
    r.combine_n(&out, in, 3, 1, false);
    CHECK(float(out) == 2048.0f);
  }
}

TEST_CASE("avg: the division is fused into the last pass (final = true) or left out") {
  SUBCASE("half: fused divides the float sum before the only rounding") {
    // (2048 + 1) / 3 = 683 exactly; rounding the sum to half first gives 2048 / 3 -> 682.5
    const m::half a[1] = {m::half(2048.0f)}, b[1] = {m::half(1.0f)};
    const m::host_reducer<m::half, m::avg_t> r(m::avg, 3);
    m::half fused{}, sum_only{}, later{};
    r.combine(&fused, a, b, 1, true);
    CHECK(float(fused) == 683.0f);
    r.combine(&sum_only, a, b, 1, false);
    CHECK(float(sum_only) == 2048.0f);
    r.finalize(&later, &sum_only, 1, true);
    CHECK(float(later) == 682.5f);
    const m::half* in[2] = {a, b};
    m::half n_fused{};
    r.combine_n(&n_fused, in, 2, 1, true);
    CHECK(float(n_fused) == 683.0f);
  }
  SUBCASE("integers: fused or not, one truncating division") {
    const int a[3] = {-7, 7, 100}, b[3] = {0, 0, 1};
    const m::host_reducer<int, m::avg_t> r(m::avg, 2);
    int out[3] = {};
    r.combine(out, a, b, 3, true);
    CHECK(out[0] == -3);  // toward zero
    CHECK(out[1] == 3);
    CHECK(out[2] == 50);
    r.combine(out, a, b, 3, false);
    CHECK(out[0] == -7);
    CHECK(out[2] == 101);
    r.finalize(out, out, 3, true);
    CHECK(out[2] == 50);
  }
  SUBCASE("one rank: avg is the identity") {
    const float a[2] = {3.0f, 5.0f};
    const m::host_reducer<float, m::avg_t> r(m::avg, 1);
    float out[2] = {};
    r.finalize(out, a, 2, true);
    CHECK(out[0] == 3.0f);
    CHECK(out[1] == 5.0f);
  }
  SUBCASE("other ops ignore final") {
    const int a[1] = {7}, b[1] = {8};
    const m::host_reducer<int, m::sum_t> r(m::sum, 4);
    int out[1] = {};
    r.combine(out, a, b, 1, true);
    CHECK(out[0] == 15);
  }
}

TEST_CASE("avg on narrow integers divides by the true number of ranks") {
  // The sum wraps in the element type (documented), but the division must be by P:
  // for P = 300 every uint8 average is 0, and for P = 128 an int8 sum of -128 averages to -1.
  CHECK(int(m::avg.finalize(std::uint8_t(200), 300)) == 0);
  CHECK(int(m::avg.finalize(std::int8_t(-128), 128)) == -1);
  CHECK(int(m::avg.finalize(std::int16_t(-32768), 40000)) == 0);
  const std::uint8_t a[1] = {200}, b[1] = {0};
  const m::host_reducer<std::uint8_t, m::avg_t> r(m::avg, 300);
  std::uint8_t out[1] = {};
  r.combine(out, a, b, 1, true);
  CHECK(int(out[0]) == 0);
}

TEST_CASE("user ops: commutative functors and the non-commutative order") {
  SUBCASE("a plain functor") {
    const int a[4] = {1, 2, 4, 8}, b[4] = {16, 2, 0, 1};
    struct plain_or {  // (test_reduce_ops.cpp checks the traits of one like it)
      int operator()(int x, int y) const { return x | y; }
    };
    const m::host_reducer<int, plain_or> r(plain_or{}, 2);
    int out[4] = {};
    r.combine(out, a, b, 4, true);  // no finalize for user ops
    CHECK(out[0] == 17);
    CHECK(out[1] == 2);
    CHECK(out[3] == 9);
  }
  SUBCASE("non_commutative: combine and combine_n fold strictly left to right") {
    const auto op = m::non_commutative(compose{});
    using R = m::host_reducer<affine, std::remove_const_t<decltype(op)>>;
    const R r(op, 9);
    for (std::size_t n : {std::size_t(1), std::size_t(127), std::size_t(129), std::size_t(1000)}) {
      for (std::size_t k = 1; k <= 9; ++k) {
        std::vector<std::vector<affine>> in(k, std::vector<affine>(n));
        std::vector<affine> want(n);
        for (std::size_t i = 0; i < n; ++i) {
          affine acc{1, 0};
          for (std::size_t j = 0; j < k; ++j) {
            in[j][i] = {std::int64_t(2 + (i + j) % 3), std::int64_t(j + 1)};
            acc = j == 0 ? in[j][i] : compose{}(acc, in[j][i]);
          }
          want[i] = acc;
        }
        for (int w = -1; w < int(k); ++w) {
          auto copy = in;
          std::vector<const affine*> ptrs(k);
          for (std::size_t j = 0; j < k; ++j) ptrs[j] = copy[j].data();
          std::vector<affine> out(n);
          affine* dst = w < 0 ? out.data() : copy[std::size_t(w)].data();
          r.combine_n(dst, ptrs.data(), k, n, true);
          INFO("n=", n, " k=", k, " dst=", w);
          CHECK(mismatch(dst, want) == std::string::npos);
        }
      }
      // combine keeps a before b, also when dst == b
      std::vector<affine> a(n, affine{2, 1}), b(n, affine{3, 5}), out(n);
      const affine ab = compose{}(affine{2, 1}, affine{3, 5});  // (6, 8); b then a would be (6, 7)
      r.combine(out.data(), a.data(), b.data(), n, false);
      CHECK(out[n - 1] == ab);
      auto a2 = a;
      r.combine(a2.data(), a2.data(), b.data(), n, false);
      CHECK(a2[0] == ab);
      auto b2 = b;
      r.combine(b2.data(), a.data(), b2.data(), n, false);
      CHECK(b2[0] == ab);
      CHECK(b2[n - 1] == ab);
    }
  }
}
