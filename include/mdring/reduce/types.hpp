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
// Branch-free (all three cases computed, then selected) so that loops over it vectorize.
constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t u = bits & 0x7fffffffu;
  // >= 65536 (or 65520, which rounds up to it): inf, or NaN made quiet.
  const std::uint32_t inf_nan = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Subnormal or zero: adding a magic value aligns the 10 mantissa bits at the bottom
  // of the float, and the FPU's round-to-nearest-even does the rounding.
  const std::uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(u & 0x3fffffffu) + std::bit_cast<float>(magic)) - magic;
  // Normal: rebias the exponent and round to nearest even by hand.
  const std::uint32_t normal = (u + (std::uint32_t(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  const std::uint32_t o = u >= (127u + 16u) << 23 ? inf_nan : (u < (113u << 23) ? sub : normal);
  return static_cast<std::uint16_t>(o | sign);
}

constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t shifted_exp = 0x7c00u << 13;
  const std::uint32_t o = (std::uint32_t(h & 0x7fffu) << 13) + ((127u - 15u) << 23);
  const std::uint32_t exp = (std::uint32_t(h & 0x7fffu) << 13) & shifted_exp;
  const std::uint32_t inf_nan = o + ((128u - 16u) << 23);
  // zero or subnormal: renormalize through the FPU
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(o + (1u << 23)) - std::bit_cast<float>(113u << 23));
  const std::uint32_t r = exp == shifted_exp ? inf_nan : (exp == 0 ? sub : o);
  return std::bit_cast<float>(r | (std::uint32_t(h & 0x8000u) << 16));
}

// float -> bfloat16, round to nearest even; NaN stays NaN (quiet). Branch-free.
constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}

}  // namespace detail

/// IEEE binary16, a storage type (see above).
struct half {
  std::uint16_t bits = 0;  ///< the 16 bits

  half() = default;
  /// The float rounded to nearest-even.
  constexpr half(float f) noexcept : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit by design
  /// The half with these bits.
  static constexpr half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }
  constexpr operator float() const noexcept { return detail::half_bits_to_float(bits); }  ///< the value as a float
  friend constexpr bool operator==(half a, half b) noexcept { return a.bits == b.bits; }
};

/// bfloat16 (a float's upper 16 bits), a storage type (see above).
struct bfloat16 {
  std::uint16_t bits = 0;  ///< the 16 bits

  bfloat16() = default;
  /// The float rounded to nearest-even.
  constexpr bfloat16(float f) noexcept : bits(detail::float_to_bfloat16_bits(f)) {}  // NOLINT
  /// The bfloat16 with these bits.
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(bits); }  ///< the value as a float
  friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept { return a.bits == b.bits; }
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

/// True for half and bfloat16.
template <class T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// The type arithmetic happens in: float for the 16-bit storage types, T otherwise.
template <class T>
using accumulator_t = std::conditional_t<is_16bit_float_v<T>, float, T>;

/// The element types the built-in ops accept.
template <class T>
concept builtin_element = (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) || is_16bit_float_v<T>;

/// A short name for messages and explain(): "float", "int32", "bfloat16", ...
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
