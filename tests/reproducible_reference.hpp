// tests/reproducible_reference.hpp: the reproducible mode's contract as a plain loop
// (docs/USAGE.md, "Reproducible reductions"), and inputs whose sums depend on the order.
//
// For element i of ranks laid out on extents p_0 x p_1 x ... (rank = c_0 + p_0 (c_1 +
// p_1 (c_2 ...))): dimension 0 first, the p_0 values along it folded left to right
// in coordinate order in the accumulator type, rounded to T; then dimension 1 over
// those partial results; and so on. A finalizing op (avg) applies its finalize to
// the accumulator of the last dimension of more than one rank, before its rounding.
#pragma once

#include <mdring/mdring.hpp>

#include "test_support.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mdring_test {

// values[r] is rank r's input element; returns the contract's result.
template <class T, class Op>
T contract_result(std::vector<T> values, const std::vector<std::size_t>& extents, Op op) {
  using acc = mdring::accumulator_t<T>;
  const std::size_t ranks = values.size();
  std::size_t last = 0;  // the last dimension of more than one rank finalizes
  for (std::size_t d = 0; d < extents.size(); ++d) last = extents[d] > 1 ? d : last;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    const std::size_t p = extents[d];
    std::vector<T> next(values.size() / p);
    // The values left are laid out as (c_d, c_{d+1}, ...), c_d fastest.
    for (std::size_t g = 0; g < next.size(); ++g) {
      acc a = static_cast<acc>(values[g * p]);
      for (std::size_t c = 1; c < p; ++c) a = op(a, static_cast<acc>(values[g * p + c]));
      if constexpr (mdring::op_traits<Op>::has_finalize)
        if (d == last && ranks > 1) a = op.finalize(a, ranks);
      next[g] = static_cast<T>(a);
    }
    values = std::move(next);
  }
  return values[0];
}

// Rank r's element i: a float with a random sign, mantissa and an exponent in
// [-spread, spread], so that sums depend on the order of their terms.
inline float wide_value(std::uint64_t seed, std::size_t rank, std::size_t i, int spread) {
  const std::uint64_t h = mix(seed ^ mix(rank * 0x100000001b3ull + i));
  const float mant = 1.0f + float(h & 0xffffff) / float(1 << 24);
  const int e = int((h >> 24) % std::uint64_t(2 * spread + 1)) - spread;
  return ((h >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(mant, e);
}

}  // namespace mdring_test
