// mdring/fnv.hpp: the one string hash of the library (64-bit FNV-1a), for the
// fingerprints that ranks compare at bind and the ids of types and ops that they
// compare under check_level::collective.
//
//   static_assert(mdring::detail::fnv1a("") == 14695981039346656037ull);
#pragma once

#include "config.hpp"

#include <cstdint>
#include <string_view>

MDRING_NAMESPACE_BEGIN

namespace detail {

constexpr std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

static_assert(fnv1a("") == 14695981039346656037ull && fnv1a("a") == 0xaf63dc4c8601ec8cull);

}  // namespace detail

MDRING_NAMESPACE_END
