// mdring/config.hpp: the one place that defines the library's macros.
//
// Host headers (.hpp) include only this and the standard library; CUDA headers
// (.cuh, in mdring/cuda/) add what they need on top. MDRING_HOST_DEVICE marks the
// few functions (reduction operators, 16-bit conversions) that CUDA kernels share
// with the host loops.
#pragma once

// A compiler in C++17 mode (g++ 12's default) fails in a hundred places: say why once.
#if __cplusplus < 202002L && !defined(_MSVC_LANG)
#error "mdring needs C++20: compile with -std=c++20 or later"
#endif

#define MDRING_VERSION_MAJOR 0
#define MDRING_VERSION_MINOR 1
#define MDRING_VERSION_PATCH 0

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MDRING_HOST_DEVICE __host__ __device__
#else
#define MDRING_HOST_DEVICE
#endif

// Everything lives in a versioned inline namespace, so that two shared objects that
// vendor different mdring versions never exchange template instances by accident.
// What runs once per bind, per new call shape or on an error path (parsing the
// profile and wisdom files, binding, building a program, naming a failure): the
// compiler optimizes it for size and keeps it out of the hot paths, which also
// makes the header-only user's file cheaper to compile (docs/perf/compile.md).
#ifndef MDRING_COLD
#if defined(__GNUC__)
#define MDRING_COLD __attribute__((cold))
#else
#define MDRING_COLD
#endif
#endif
#define MDRING_NAMESPACE_BEGIN \
  namespace mdring {           \
  inline namespace v0 {
#define MDRING_NAMESPACE_END \
  }                          \
  }
/// \namespace mdring
/// The public API: every name outside the nested `detail` namespaces (which are the
/// internals). It is declared in the versioned inline namespace mdring::v0.

// Hidden visibility for symbols that must not leak across shared objects (kernels).
#if defined(__GNUC__) || defined(__clang__)
#define MDRING_HIDDEN __attribute__((visibility("hidden")))
#else
#define MDRING_HIDDEN
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MDRING_RESTRICT __restrict__
#else
#define MDRING_RESTRICT
#endif
