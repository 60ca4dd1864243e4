// tests/test_reduce_ops.cpp: the ops (reduce/ops.hpp) at compile time: their
// semantics, op_traits, the reduction_for concept and the host reducer's accumulator
// type; the non_commutative wrapper; a bulk op's calls.
#include <doctest/doctest.h>
#include <mdring/mdring.hpp>

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

constexpr float f_inf = std::numeric_limits<float>::infinity();

// ---- ops: semantics, at compile time (constant evaluation rejects UB) ------------------

// integer sum wraps modulo 2^bits
static_assert(m::sum(std::int8_t(127), std::int8_t(1)) == std::int8_t(-128));
static_assert(m::sum(std::uint8_t(255), std::uint8_t(1)) == std::uint8_t(0));
static_assert(m::sum(std::int16_t(32767), std::int16_t(1)) == std::int16_t(-32768));
static_assert(m::sum(std::numeric_limits<int>::max(), 1) == std::numeric_limits<int>::min());
static_assert(m::sum(std::numeric_limits<std::int64_t>::max(), std::int64_t(1)) ==
              std::numeric_limits<std::int64_t>::min());
static_assert(m::sum(std::numeric_limits<std::uint64_t>::max(), std::uint64_t(2)) == 1u);
static_assert(m::sum(std::numeric_limits<int>::min(), -1) == std::numeric_limits<int>::max());
// integer prod wraps likewise
static_assert(m::prod(std::int8_t(16), std::int8_t(8)) == std::int8_t(-128));
static_assert(m::prod(std::int8_t(-128), std::int8_t(-1)) == std::int8_t(-128));
static_assert(m::prod(std::uint16_t(65535), std::uint16_t(65535)) == std::uint16_t(1));  // no int promotion UB
static_assert(m::prod(std::int16_t(256), std::int16_t(256)) == std::int16_t(0));
static_assert(m::prod(65536, 65536) == 0);
static_assert(m::prod(std::numeric_limits<int>::min(), -1) == std::numeric_limits<int>::min());
static_assert(m::prod(std::numeric_limits<std::int64_t>::max(), std::int64_t(2)) == std::int64_t(-2));
static_assert(m::prod(std::numeric_limits<std::uint64_t>::max(), std::numeric_limits<std::uint64_t>::max()) == 1u);
static_assert(m::prod(3.0, 0.5) == 1.5);
// sum of floats is plain +
static_assert(m::sum(0.5f, 0.25f) == 0.75f);
// min and max
static_assert(m::min(3, -2) == -2);
static_assert(m::max(3, -2) == 3);
static_assert(m::min(std::uint8_t(200), std::uint8_t(7)) == 7);
static_assert(m::max(-0.5, 0.25) == 0.25);
static_assert(m::min(-f_inf, 1.0f) == -f_inf);
// avg is a sum until finalize divides once
static_assert(m::avg(3, 4) == 7);
static_assert(m::avg.finalize(7, 2) == 3);    // integers truncate
static_assert(m::avg.finalize(-7, 2) == -3);  // toward zero, not -4
static_assert(m::avg.finalize(7u, 2) == 3u);
static_assert(m::avg.finalize(std::int64_t(-9), 4) == -2);
static_assert(m::avg.finalize(7.0f, 2) == 3.5f);
static_assert(m::avg.finalize(1.0, 3) == 1.0 / 3.0);
static_assert(m::avg.finalize(std::int8_t(-100), 3) == std::int8_t(-33));
static_assert(m::avg.finalize(std::uint8_t(250), 100) == std::uint8_t(2));
// names
static_assert(std::string_view(m::sum_t::name) == "sum");
static_assert(std::string_view(m::avg_t::name) == "avg");

// ---- op_traits -----------------------------------------------------------------------------

struct first_op {  // associative, not commutative: keeps the left operand
  template <class T>
  constexpr T operator()(const T& a, const T&) const {
    return a;
  }
};
struct declared_nc {
  static constexpr bool is_commutative = false;
  int operator()(int a, int b) const { return a - b; }
};
struct declared_c {
  static constexpr bool is_commutative = true;
  int operator()(int a, int b) const { return a ^ b; }
};
struct named_xor {
  static constexpr const char* name = "xor";
  int operator()(int a, int b) const { return a ^ b; }
};
struct plain_or {
  int operator()(int a, int b) const { return a | b; }
};
using nc_first = m::non_commutative_op<first_op>;
static_assert(std::is_same_v<decltype(m::non_commutative(first_op{})), nc_first>);

// the five built-in ops are builtin and commutative
static_assert(m::op_traits<m::sum_t>::builtin && m::op_traits<m::sum_t>::commutative);
static_assert(m::op_traits<m::prod_t>::builtin && m::op_traits<m::prod_t>::commutative);
static_assert(m::op_traits<m::min_t>::builtin && m::op_traits<m::min_t>::commutative);
static_assert(m::op_traits<m::max_t>::builtin && m::op_traits<m::max_t>::commutative);
static_assert(m::op_traits<m::avg_t>::builtin && m::op_traits<m::avg_t>::commutative);
// only avg has a finalize
static_assert(m::op_traits<m::avg_t>::has_finalize);
static_assert(!m::op_traits<m::sum_t>::has_finalize && !m::op_traits<m::prod_t>::has_finalize);
static_assert(!m::op_traits<m::min_t>::has_finalize && !m::op_traits<m::max_t>::has_finalize);
static_assert(!m::op_traits<plain_or>::has_finalize);
// a user functor is not builtin and is taken as commutative
static_assert(!m::op_traits<plain_or>::builtin);
static_assert(m::op_traits<plain_or>::commutative);
// the non_commutative wrapper is not commutative
static_assert(!m::op_traits<nc_first>::commutative);
static_assert(!m::op_traits<nc_first>::builtin);
// a functor can declare itself non-commutative
static_assert(!m::op_traits<declared_nc>::commutative);
// or commutative
static_assert(m::op_traits<declared_c>::commutative);
// names: the op's own, or "user op"
static_assert(std::string_view(m::op_traits<m::sum_t>::name()) == "sum");
static_assert(std::string_view(m::op_traits<m::max_t>::name()) == "max");
static_assert(std::string_view(m::op_traits<named_xor>::name()) == "xor");
static_assert(std::string_view(m::op_traits<plain_or>::name()) == "user op");
static_assert(std::string_view(m::op_traits<nc_first>::name()) == "user op");

// ---- reduction_for ----------------------------------------------------------------------------

struct pod {
  int v;
};
struct pod_sum {
  pod operator()(pod a, pod b) const { return {a.v + b.v}; }
};
struct int_only {
  int operator()(int a, int b) const { return a + b; }
};
struct returns_void {
  void operator()(int, int) const {}
};
struct string_cat {
  std::string operator()(const std::string& a, const std::string& b) const { return a + b; }
};

// built-in ops on every built-in element type
static_assert(m::reduction_for<m::sum_t, float>);
static_assert(m::reduction_for<m::sum_t, double>);
static_assert(m::reduction_for<m::sum_t, long double>);
static_assert(m::reduction_for<m::prod_t, std::int8_t>);
static_assert(m::reduction_for<m::min_t, std::uint64_t>);
static_assert(m::reduction_for<m::max_t, char>);
static_assert(m::reduction_for<m::avg_t, m::half>);
static_assert(m::reduction_for<m::sum_t, m::bfloat16>);
// not on bool, pointers or structs
static_assert(!m::reduction_for<m::sum_t, bool>);
static_assert(!m::reduction_for<m::sum_t, int*>);
static_assert(!m::reduction_for<m::sum_t, pod>);
// a user op that takes (T, T) and returns T
static_assert(m::reduction_for<pod_sum, pod>);
static_assert(m::reduction_for<int_only, int>);
static_assert(m::reduction_for<plain_or, int>);
static_assert(m::reduction_for<nc_first, pod>);
// a user op for another type
static_assert(!m::reduction_for<int_only, pod>);
static_assert(!m::reduction_for<pod_sum, int>);
// a user op returning nothing
static_assert(!m::reduction_for<returns_void, int>);
// not trivially copyable elements
static_assert(!m::reduction_for<string_cat, std::string>);

// a bulk op: reduce_local(in, inout, n); not when declared non-commutative
struct bulk_xor {
  void reduce_local(const std::uint32_t* in, std::uint32_t* inout, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) inout[i] ^= in[i];
  }
};
struct bulk_nc {
  static constexpr bool is_commutative = false;
  void reduce_local(const int* in, int* inout, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) inout[i] = in[i];
  }
};
static_assert(m::bulk_reduction<bulk_xor, std::uint32_t>);
static_assert(m::reduction_for<bulk_xor, std::uint32_t>);
static_assert(!m::reduction_for<bulk_xor, int>);
static_assert(!m::bulk_reduction<bulk_nc, int>);
static_assert(!m::reduction_for<bulk_nc, int>);

// ---- host_reducer's accumulator -----------------------------------------------------------------

// built-in ops accumulate 16-bit types in float
static_assert(std::is_same_v<m::host_reducer<m::half, m::sum_t>::acc, float>);
static_assert(std::is_same_v<m::host_reducer<m::bfloat16, m::avg_t>::acc, float>);
static_assert(std::is_same_v<m::host_reducer<int, m::sum_t>::acc, int>);
// user ops see T itself
static_assert(std::is_same_v<m::host_reducer<m::half, first_op>::acc, m::half>);

}  // namespace

TEST_CASE("reduction_for: the non_commutative wrapper only reduces what the wrapped op can") {
  // non_commutative_op::operator() is declared for every T, so the concept cannot see
  // that int_only cannot combine two pods; static_checks then lets the call through and
  // the error surfaces deep inside the engine instead of at the public boundary.
  using nc_int = m::non_commutative_op<int_only>;
  CHECK(m::reduction_for<nc_int, int>);
  CHECK_FALSE(m::reduction_for<nc_int, pod>);
}

namespace {
// A bulk op that records the length of every call.
struct bulk_sum_logged {
  std::vector<std::size_t>* lengths;
  void reduce_local(const std::int64_t* in, std::int64_t* inout, std::size_t n) const {
    lengths->push_back(n);
    for (std::size_t i = 0; i < n; ++i) inout[i] += in[i];
  }
};
}  // namespace

TEST_CASE("a bulk op: one reduce_local per array (combine) or per 16 KiB tile (combine_n), in place too") {
  std::vector<std::size_t> lengths;
  m::host_reducer<std::int64_t, bulk_sum_logged> red(bulk_sum_logged{&lengths}, 4);
  const std::size_t n = 5000;  // 2048 elements of int64 per tile: tiles of 2048, 2048, 904
  std::vector<std::int64_t> a(n), b(n), c(n), d(n, -1);
  for (std::size_t i = 0; i < n; ++i) a[i] = std::int64_t(i), b[i] = std::int64_t(10 * i), c[i] = std::int64_t(100 * i);
  red.combine(d.data(), a.data(), b.data(), n, true);
  CHECK(lengths == std::vector<std::size_t>{n});
  for (std::size_t i = 0; i < n; ++i) REQUIRE(d[i] == std::int64_t(11 * i));
  red.combine(a.data(), a.data(), b.data(), n, false);  // dst == a
  red.combine(b.data(), c.data(), b.data(), n, false);  // dst == b
  for (std::size_t i = 0; i < n; ++i) REQUIRE((a[i] == std::int64_t(11 * i) && b[i] == std::int64_t(110 * i)));
  lengths.clear();
  const std::int64_t* in[3] = {c.data(), a.data(), b.data()};  // c + a + b = 221 i, written over c
  red.combine_n(c.data(), in, 3, n, true);
  CHECK(lengths == std::vector<std::size_t>{2048, 2048, 2048, 2048, 904, 904});
  for (std::size_t i = 0; i < n; ++i) REQUIRE(c[i] == std::int64_t(221 * i));
  std::vector<std::int64_t> o1(n, -1), o2(n, -1);
  std::int64_t* outs[2] = {o1.data(), o2.data()};
  const std::int64_t* in2[2] = {a.data(), b.data()};
  red.combine_n_to(outs, 2, in2, 2, n, true, true);
  for (std::size_t i = 0; i < n; ++i) REQUIRE((o1[i] == std::int64_t(121 * i) && o2[i] == o1[i]));
  red.finalize(o1.data(), a.data(), n, true);  // no finalize: a copy
  CHECK(o1 == a);
}
