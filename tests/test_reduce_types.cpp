// tests/test_reduce_types.cpp: mdring's 16-bit storage types (reduce/types.hpp):
// half and bfloat16 conversions, exact values and bit patterns at compile time, every
// bit pattern's round trip, round to nearest even against a reference.
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

using mdring_test::hex;

constexpr float f_inf = std::numeric_limits<float>::infinity();
constexpr float f_nan = std::numeric_limits<float>::quiet_NaN();

constexpr std::uint16_t hbits(float f) { return m::half(f).bits; }
constexpr float hval(std::uint16_t b) { return float(m::half::from_bits(b)); }
constexpr std::uint16_t bbits(float f) { return m::bfloat16(f).bits; }
constexpr float bval(std::uint16_t b) { return float(m::bfloat16::from_bits(b)); }
constexpr float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// ---- half: float -> binary16, exact values and bit patterns ---------------------

// 1.0 is 0x3C00
static_assert(hbits(1.0f) == 0x3C00);
// -2.0 is 0xC000
static_assert(hbits(-2.0f) == 0xC000);
// +0 and -0 keep their sign
static_assert(hbits(0.0f) == 0x0000);
static_assert(hbits(-0.0f) == 0x8000);
// the largest finite half
static_assert(hbits(65504.0f) == 0x7BFF);
// below the midpoint to 65536 it still rounds to 65504
static_assert(hbits(65519.0f) == 0x7BFF);
// 65520 is the midpoint between 65504 and 65536: ties to even gives inf
static_assert(hbits(65520.0f) == 0x7C00);
// overflow goes to inf, with the sign
static_assert(hbits(1e10f) == 0x7C00);
static_assert(hbits(-1e10f) == 0xFC00);
static_assert(hbits(f_inf) == 0x7C00);
static_assert(hbits(-f_inf) == 0xFC00);
// NaN stays NaN (quiet), with the sign
static_assert(hbits(f_nan) == 0x7E00);
static_assert(hbits(-f_nan) == 0xFE00);
// a signalling NaN with only low payload bits does not become inf
static_assert((hbits(from_bits(0x7F800001u)) & 0x7C00) == 0x7C00 && (hbits(from_bits(0x7F800001u)) & 0x03FF) != 0);
// the smallest normal, 2^-14
static_assert(hbits(0x1p-14f) == 0x0400);
// the smallest subnormal, 2^-24
static_assert(hbits(0x1p-24f) == 0x0001);
// the largest subnormal, 1023 * 2^-24
static_assert(hbits(1023 * 0x1p-24f) == 0x03FF);
// 2^-25 is the midpoint between 0 and 2^-24: ties to even gives 0
static_assert(hbits(0x1p-25f) == 0x0000);
// just above that midpoint rounds up
static_assert(hbits(0x1.000002p-25f) == 0x0001);
// 1.5 * 2^-24 is the midpoint between subnormals 1 and 2: ties to even gives 2
static_assert(hbits(1.5f * 0x1p-24f) == 0x0002);
// 2.5 * 2^-24: ties to even gives 2
static_assert(hbits(2.5f * 0x1p-24f) == 0x0002);
// far below the smallest subnormal: zero, with the sign
static_assert(hbits(0x1p-30f) == 0x0000);
static_assert(hbits(-0x1p-30f) == 0x8000);
// a subnormal that rounds up into the smallest normal
static_assert(hbits(0x1.fffp-15f) == 0x0400);
// 1 + 2^-11 is the midpoint between 1 and 1 + 2^-10: ties to even gives 1
static_assert(hbits(1.0f + 0x1p-11f) == 0x3C00);
// 1 + 3 * 2^-11 is the midpoint between mantissas 1 and 2: ties to even gives 2
static_assert(hbits(1.0f + 3 * 0x1p-11f) == 0x3C02);
// just above a midpoint rounds up
static_assert(hbits(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);
// 2049 is the midpoint between 2048 and 2050 (spacing 2): ties to even gives 2048
static_assert(hbits(2049.0f) == 0x6800);
// 2051: ties to even gives 2052
static_assert(float(m::half(2051.0f)) == 2052.0f);
// 0.1 rounds to the nearest half, 0x2E66
static_assert(hbits(0.1f) == 0x2E66);

// ---- half: binary16 -> float ---------------------------------------------------------

// exact values
static_assert(hval(0x3C00) == 1.0f);
static_assert(hval(0x7BFF) == 65504.0f);
static_assert(hval(0x0001) == 0x1p-24f);
static_assert(hval(0x03FF) == 1023 * 0x1p-24f);
static_assert(hval(0x0400) == 0x1p-14f);
static_assert(hval(0xC000) == -2.0f);
// -0 stays -0
static_assert(std::bit_cast<std::uint32_t>(hval(0x8000)) == 0x80000000u);
// inf
static_assert(hval(0x7C00) == f_inf);
static_assert(hval(0xFC00) == -f_inf);
// NaN (x != x)
static_assert(hval(0x7E00) != hval(0x7E00));
static_assert(hval(0x7C01) != hval(0x7C01));

// ---- bfloat16 -------------------------------------------------------------------------

// 1.0 is 0x3F80
static_assert(bbits(1.0f) == 0x3F80);
static_assert(bbits(-1.0f) == 0xBF80);
// 0x3F808000 is the midpoint between 0x3F80 and 0x3F81: ties to even gives 0x3F80
static_assert(bbits(from_bits(0x3F808000u)) == 0x3F80);
// 0x3F818000 is the midpoint between 0x3F81 and 0x3F82: ties to even gives 0x3F82
static_assert(bbits(from_bits(0x3F818000u)) == 0x3F82);
// off the midpoint: nearest
static_assert(bbits(from_bits(0x3F808001u)) == 0x3F81);
static_assert(bbits(from_bits(0x3F807FFFu)) == 0x3F80);
// inf and overflow to inf
static_assert(bbits(f_inf) == 0x7F80);
static_assert(bbits(-f_inf) == 0xFF80);
static_assert(bbits(std::numeric_limits<float>::max()) == 0x7F80);
static_assert(bbits(from_bits(0x7F7F7FFFu)) == 0x7F7F);
// NaN stays NaN, also a NaN whose payload is only in the low 16 bits
static_assert((bbits(f_nan) & 0x7FFF) > 0x7F80);
static_assert((bbits(from_bits(0x7F800001u)) & 0x7FFF) > 0x7F80);
static_assert((bbits(from_bits(0xFF800001u)) & 0x7FFF) > 0x7F80);
// subnormals round to nearest even too
static_assert(bbits(from_bits(0x00018000u)) == 0x0002);
static_assert(bbits(from_bits(0x00008000u)) == 0x0000);
// signed zeros
static_assert(bbits(-0.0f) == 0x8000);
// bfloat16 -> float is exact
static_assert(bval(0x3F80) == 1.0f);
static_assert(bval(0x4049) == 3.140625f);
static_assert(bval(0x0001) == from_bits(0x00010000u));
static_assert(bval(0x7F80) == f_inf);
static_assert(bval(0x7FC0) != bval(0x7FC0));

// storage types: 2 bytes, trivially copyable, equal by bits
static_assert(sizeof(m::half) == 2 && sizeof(m::bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<m::half> && std::is_trivially_copyable_v<m::bfloat16>);
static_assert(m::half::from_bits(0x3C00) == m::half(1.0f));
static_assert(!(m::half::from_bits(0x0000) == m::half::from_bits(0x8000)));  // equality is by bits
// arithmetic happens in float for the 16-bit types, in T otherwise
static_assert(std::is_same_v<m::accumulator_t<m::half>, float>);
static_assert(std::is_same_v<m::accumulator_t<m::bfloat16>, float>);
static_assert(std::is_same_v<m::accumulator_t<std::int8_t>, std::int8_t>);
static_assert(std::is_same_v<m::accumulator_t<double>, double>);
// type names
static_assert(std::string_view(m::type_name<m::half>()) == "half");
static_assert(std::string_view(m::type_name<m::bfloat16>()) == "bfloat16");
static_assert(std::string_view(m::type_name<std::int32_t>()) == "int32");
static_assert(std::string_view(m::type_name<std::uint8_t>()) == "uint8");
static_assert(std::string_view(m::type_name<std::int64_t>()) == "int64");
static_assert(std::string_view(m::type_name<double>()) == "double");

}  // namespace

TEST_CASE("half: every bit pattern round-trips through float") {
  for (std::uint32_t u = 0; u < 0x10000; ++u) {
    const auto h = static_cast<std::uint16_t>(u);
    const float f = hval(h);
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    if (is_nan) {
      CHECK(std::isnan(f));
      CHECK(std::isnan(hval(hbits(f))));  // NaN stays NaN
      CHECK((hbits(f) & 0x8000) == (h & 0x8000));
    } else if (hbits(f) != h) {
      FAIL_CHECK("half ", hex(u), " -> ", f, " -> ", hex(hbits(f)));
    }
  }
}

TEST_CASE("bfloat16: every bit pattern round-trips through float") {
  for (std::uint32_t u = 0; u < 0x10000; ++u) {
    const auto h = static_cast<std::uint16_t>(u);
    const float f = bval(h);
    const bool is_nan = (h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0;
    if (is_nan) {
      CHECK(std::isnan(bval(bbits(f))));
      CHECK((bbits(f) & 0x8000) == (h & 0x8000));
    } else if (bbits(f) != h) {
      FAIL_CHECK("bfloat16 ", hex(u), " -> ", f, " -> ", hex(bbits(f)));
    }
  }
}

namespace {
// The reference: the nearest representable value, ties to the even bit pattern;
// values at or beyond the midpoint above the largest finite one go to inf.
// table[i] = the value of bit pattern i for the positive finite patterns, in order.
std::uint16_t nearest(const std::vector<double>& table, std::uint16_t inf_bits, double next_after_max, double x) {
  auto it = std::upper_bound(table.begin(), table.end(), x);  // first > x
  const std::size_t i = std::size_t(it - table.begin()) - 1;  // table[i] <= x
  const double lo = table[i];
  const double hi = i + 1 < table.size() ? table[i + 1] : next_after_max;
  const auto lo_bits = static_cast<std::uint16_t>(i);
  const auto hi_bits = i + 1 < table.size() ? static_cast<std::uint16_t>(i + 1) : inf_bits;
  if (x - lo < hi - x) return lo_bits;
  if (x - lo > hi - x) return hi_bits;
  return (lo_bits & 1) ? hi_bits : lo_bits;
}

template <class Bits, class Val>
void check_against_reference(Bits to_bits, Val to_val, std::uint16_t max_finite, std::uint16_t inf_bits,
                             double next_after_max, const char* what) {
  std::vector<double> table;
  for (std::uint32_t b = 0; b <= max_finite; ++b) table.push_back(double(to_val(static_cast<std::uint16_t>(b))));
  std::size_t failures = 0, checked = 0;
  auto check_one = [&](float f) {
    if (!(f >= 0) || std::isinf(f)) return;
    ++checked;
    const std::uint16_t want = nearest(table, inf_bits, next_after_max, double(f));
    const std::uint16_t got = to_bits(f);
    if (got != want && failures++ < 10)
      FAIL_CHECK(what, "(", f, " = float ", hex(std::bit_cast<std::uint32_t>(f)), ") = ", hex(got), ", want ",
                 hex(want));
    const std::uint16_t neg = to_bits(-f);
    if (neg != (want | 0x8000) && failures++ < 10)
      FAIL_CHECK(what, "(", -f, ") = ", hex(neg), ", want ", hex(want | 0x8000));
  };
  // every midpoint between neighbours, and the floats right next to it
  for (std::size_t i = 0; i < table.size(); ++i) {
    const double hi = i + 1 < table.size() ? table[i + 1] : next_after_max;
    const float mid = static_cast<float>((table[i] + hi) / 2);
    REQUIRE(double(mid) == (table[i] + hi) / 2);  // exact in float
    check_one(mid);
    check_one(std::nextafter(mid, 0.0f));
    check_one(std::nextafter(mid, f_inf));
    check_one(static_cast<float>(table[i]));
  }
  // a sweep through the float bit patterns
  for (std::uint32_t u = 0; u < 0x7F800000u; u += 997) check_one(from_bits(u));
  CHECK(failures == 0);
  CHECK(checked > 2000000);
}
}  // namespace

TEST_CASE("half: float -> half is round to nearest even, against a reference") {
  check_against_reference(hbits, hval, 0x7BFF, 0x7C00, 65536.0, "half");
}

TEST_CASE("bfloat16: float -> bfloat16 is round to nearest even, against a reference") {
  check_against_reference(bbits, bval, 0x7F7F, 0x7F80, std::ldexp(1.0, 128), "bfloat16");
}
