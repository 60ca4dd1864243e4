// mdring/reduce/types.hpp: 16-bit floating-point storage types.
//
// mdring::half (IEEE binary16) and mdring::bfloat16 are storage types: 2 bytes in
// memory, converted to float for arithmetic and rounded back to nearest-even.
// How they accumulate:
//   - a reduction that combines k inputs in one pass (the direct algorithm)
//     accumulates all k in float and rounds once;
//   - the ring algorithm sends partial results between ranks in 16 bits, so each
//     step of a ring rounds once (p - 1 roundings along a ring of p ranks);
//   - avg divides the float value before the final rounding.
// Both are layout-compatible with CUDA's __half and __nv_bfloat16.
#pragma once

#include "../config.hpp"

#include <bit>
#include <cstdint>
#include <type_traits>

MDRING_NAMESPACE_BEGIN

namespace detail {

// float -> binary16, round to nearest even; NaN stays NaN (quiet), overflow -> inf.
constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint16_t o = 0;
  if (u >= (127u + 16u) << 23) {  // >= 65536: inf, or NaN
    o = u > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (u < (113u << 23)) {  // result is subnormal or zero
    // Adding a magic value aligns the 10 mantissa bits at the bottom of the float;
    // the FPU's round-to-nearest-even does the rounding.
    const float magic = std::bit_cast<float>(((127u - 15u) + (23u - 10u) + 1u) << 23);
    const float sum = std::bit_cast<float>(u) + magic;
    o = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(sum) - std::bit_cast<std::uint32_t>(magic));
  } else {
    const std::uint32_t mant_odd = (u >> 13) & 1u;
    u += (std::uint32_t(15 - 127) << 23) + 0xfffu;  // rebias exponent, rounding bias part 1
    u += mant_odd;                                  // rounding bias part 2 (ties to even)
    o = static_cast<std::uint16_t>(u >> 13);
  }
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t shifted_exp = 0x7c00u << 13;
  std::uint32_t o = std::uint32_t(h & 0x7fffu) << 13;
  const std::uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {  // inf or NaN
    o += (128u - 16u) << 23;
  } else if (exp == 0) {  // zero or subnormal: renormalize through the FPU
    o += 1u << 23;
    o = std::bit_cast<std::uint32_t>(std::bit_cast<float>(o) - std::bit_cast<float>(113u << 23));
  }
  return std::bit_cast<float>(o | (std::uint32_t(h & 0x8000u) << 16));
}

// float -> bfloat16, round to nearest even; NaN stays NaN (quiet).
constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  const std::uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + bias) >> 16);
}

constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}

}  // namespace detail

struct half {
  std::uint16_t bits = 0;

  half() = default;
  constexpr half(float f) noexcept : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit by design
  static constexpr half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }
  constexpr operator float() const noexcept { return detail::half_bits_to_float(bits); }
  friend constexpr bool operator==(half a, half b) noexcept { return a.bits == b.bits; }
};

struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  constexpr bfloat16(float f) noexcept : bits(detail::float_to_bfloat16_bits(f)) {}  // NOLINT
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(bits); }
  friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept { return a.bits == b.bits; }
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

template <class T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// The type arithmetic happens in: float for the 16-bit storage types, T otherwise.
template <class T>
using accumulator_t = std::conditional_t<is_16bit_float_v<T>, float, T>;

// The element types the built-in ops accept.
template <class T>
concept builtin_element = (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || is_16bit_float_v<T>;

// A short name for messages and explain(): "float", "int32", "bfloat16", ...
template <class T>
constexpr const char* type_name() noexcept {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, half>) return "half";
  else if constexpr (std::is_same_v<T, bfloat16>) return "bfloat16";
  else if constexpr (std::is_same_v<T, long double>) return "long double";
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1) return "int8";
    else if constexpr (sizeof(T) == 2) return "int16";
    else if constexpr (sizeof(T) == 4) return "int32";
    else return "int64";
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (sizeof(T) == 1) return "uint8";
    else if constexpr (sizeof(T) == 2) return "uint16";
    else if constexpr (sizeof(T) == 4) return "uint32";
    else return "uint64";
  } else return "user type";
}

MDRING_NAMESPACE_END
