// mdring/version.hpp: the library's version, at compile time and at run time.
//
// MDRING_VERSION_MAJOR/MINOR/PATCH (config.hpp) are the one source of the version:
// CMake's package (mdringConfigVersion.cmake), the pkg-config files and the Python
// package (mdring_torch.__version__) read them from config.hpp when they are built.
// mdring::version() answers with the numbers of the headers a file was compiled
// against; compare it with MDRING_VERSION_* to see which headers a library that
// vendors mdring used.
#pragma once

#include "config.hpp"

#include <compare>

MDRING_NAMESPACE_BEGIN

/// A library version: major.minor.patch (Semantic Versioning; before 1.0 a minor
/// release may change the API, as CHANGELOG.md records).
struct version_info {
  int major;  ///< MDRING_VERSION_MAJOR
  int minor;  ///< MDRING_VERSION_MINOR
  int patch;  ///< MDRING_VERSION_PATCH
  friend constexpr bool operator==(version_info, version_info) = default;
  friend constexpr auto operator<=>(version_info, version_info) = default;
};

/// The version of the mdring headers this file was compiled against.
constexpr version_info version() noexcept { return {MDRING_VERSION_MAJOR, MDRING_VERSION_MINOR, MDRING_VERSION_PATCH}; }

namespace detail {
#define MDRING_DETAIL_STR2(x) #x
#define MDRING_DETAIL_STR(x) MDRING_DETAIL_STR2(x)
inline constexpr char version_text[] = MDRING_DETAIL_STR(MDRING_VERSION_MAJOR) "." MDRING_DETAIL_STR(
    MDRING_VERSION_MINOR) "." MDRING_DETAIL_STR(MDRING_VERSION_PATCH);
#undef MDRING_DETAIL_STR
#undef MDRING_DETAIL_STR2
}  // namespace detail

/// The version as text, "major.minor.patch" (for logs and reports).
constexpr const char* version_string() noexcept { return detail::version_text; }

MDRING_NAMESPACE_END
