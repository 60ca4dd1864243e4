// tests/test_support.hpp: small helpers that the host tests (the test_collectives and
// test_reduce files) and the GPU tests (tests/gpu/common.cuh) share. Plain C++,
// compiled by g++ and nvcc.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace mdring_test {

constexpr std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// "0x..." (the test_reduce files' bit patterns).
inline std::string hex(unsigned long long x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

// The built-in reduction ops, as the tests enumerate them.
enum class opk { sum, prod, min, max, avg };
inline const char* name_of(opk k) {
  switch (k) {
    case opk::sum:
      return "sum";
    case opk::prod:
      return "prod";
    case opk::min:
      return "min";
    case opk::max:
      return "max";
    default:
      return "avg";
  }
}

}  // namespace mdring_test
