// benchmarks/bench/collectives.hpp: every --op of mdring-bench, one file each, in the
// order --help names them. A new collective: its file (like all_gather.hpp, see
// collective.hpp) and its name in the list below.
#pragma once

#include "all_gather.hpp"
#include "all_reduce.hpp"
#include "broadcast.hpp"
#include "reduce.hpp"
#include "reduce_scatter.hpp"

#include <string>

namespace mdring_bench {

template <class... C>
struct collective_list {
  // Calls f(c) with the collective named op (c: an object of its struct); none
  // when no collective has that name (parse() refuses it first).
  template <class F>
  static void with(const std::string& op, F&& f) {
    (void)((op == C::name && (f(C{}), true)) || ...);
  }
  // What the harness reads of each without instantiating it (harness.hpp).
  static constexpr collective_bench benches[] = {{C::name, C::reduces, &C::bus_factor}...};
};

using every_collective =
    collective_list<all_reduce_bench, reduce_scatter_bench, all_gather_bench, broadcast_bench, reduce_bench>;

}  // namespace mdring_bench
