// mdring/vocabulary.hpp: the words every room uses to name what a call does.
//
//   mdring::collective::all_reduce   the call (explain(), the programs, the cost of a call)
//   mdring::phase::reduce_scatter    what one stage of it does to its range
//
// Plain enums and their names, nothing else: the programs (plan/program.hpp),
// the cost model (plan/cost.hpp), explain() and separate compilation
// (separate/api.hpp) name them without including each other.
#pragma once

#include "config.hpp"

#include <string_view>

MDRING_NAMESPACE_BEGIN

/// The collective a call runs (explain(), the programs, the cost of a call).
enum class collective { all_reduce, reduce_scatter, all_gather, broadcast, reduce };

/// The collective's name, as written in code ("all_reduce").
constexpr std::string_view to_string(collective c) noexcept {
  switch (c) {
    case collective::all_reduce:
      return "all_reduce";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::all_gather:
      return "all_gather";
    case collective::broadcast:
      return "broadcast";
    default:
      return "reduce";
  }
}

/// What a stage does to its range. all_reduce: recursive doubling of the whole range;
/// broadcast and reduce: a binomial tree of the whole range.
enum class phase { reduce_scatter, all_gather, scatter, gather, all_reduce, broadcast, reduce };

/// The phase's name, as explain() prints it ("reduce-scatter").
constexpr std::string_view to_string(phase p) noexcept {
  switch (p) {
    case phase::reduce_scatter:
      return "reduce-scatter";
    case phase::all_gather:
      return "all-gather";
    case phase::scatter:
      return "scatter";
    case phase::gather:
      return "gather";
    case phase::all_reduce:
      return "all-reduce";
    case phase::broadcast:
      return "broadcast";
    default:
      return "reduce";
  }
}

MDRING_NAMESPACE_END
