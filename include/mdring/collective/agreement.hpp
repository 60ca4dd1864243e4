// mdring/collective/agreement.hpp: step 3 of a call under check_level::collective:
// the ranks agree on count, type, op and root before any data moves.
//
//   agreement_values v = agreement_of(rank, err, count, type_id<T>(), type_id<Op>(), root);
//   // ... one all-reduce (max) of v.v over every rank ...
//   agreement("all_reduce", err, v);  // throws the same invalid_argument on every rank, or nothing
//
// A disagreement, or any rank's bad argument, makes every rank throw the same
// invalid_argument naming it, and the communicator survives (no data was moved).
// The host executor runs the all-reduce as a program of its own
// (collective/launch.hpp); any executor with an all-reduce of 9 int64 can.
#pragma once

#include "../config.hpp"
#include "../error.hpp"
#include "checks.hpp"

#include <cstdint>
#include <optional>
#include <string>

MDRING_NAMESPACE_BEGIN

namespace detail {

// The arguments every rank must agree on under check_level::collective, as one
// small all-reduce (max) of pairs (x, -x), which gives the maximum and minus the
// minimum of each; afterwards every rank knows whether all agree and who had a bad
// argument (agreement() throws what that means).
struct agreement_values {
  std::int64_t v[9] = {};
};
inline agreement_values agreement_of(std::size_t rank, const std::optional<arg_error>& err, std::int64_t count,
                                     std::int64_t type_id, std::int64_t op_id, std::int64_t root) {
  return {{err ? std::int64_t(rank + 1) * 16 + argument_code(err->argument) : 0, count, -count, type_id, -type_id,
           op_id, -op_id, root, -root}};
}

inline void agreement(const char* name, const std::optional<arg_error>& err, const agreement_values& a) {
  const std::int64_t* v = a.v;
  const std::string fn = std::string("mdring::") + name + ": ";
  if (err) throw invalid_argument(err->argument, err->what);
  if (v[0] > 0) {
    const std::size_t who = std::size_t(v[0] / 16 - 1);
    const char* arg = argument_names[std::size_t(v[0] % 16) - 1];
    throw invalid_argument(arg, fn + "rank " + std::to_string(who) + " passed an invalid " + arg +
                                    " (its own exception says what); no data was moved");
  }
  auto differ = [&](int i, const char* arg, const char* what) {
    if (v[i] != -v[i + 1])
      throw invalid_argument(arg, fn + "the ranks passed different " + what + " (from " + std::to_string(-v[i + 1]) +
                                      " to " + std::to_string(v[i]) + "); no data was moved");
  };
  differ(1, "count", "counts");
  if (v[3] != -v[4]) throw invalid_argument("T", fn + "the ranks passed different element types; no data was moved");
  if (v[5] != -v[6]) throw invalid_argument("op", fn + "the ranks passed different ops; no data was moved");
  differ(7, "root", "roots");
}

}  // namespace detail

MDRING_NAMESPACE_END
