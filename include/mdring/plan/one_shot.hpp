// mdring/plan/one_shot.hpp: when a small call runs in one step over node memory.
//
//   if (one_shot_applies({collective::all_reduce, count, sizeof(float), ranks, 0}, o, staging))
//     ... the host executor's one-shot path (executor/host/one_shot.hpp) ...
//
// The one-shot path serves calls whose ranks all share one node (the transport
// opened a node window over the whole communicator at bind): each rank that has
// data to give copies it into its staging buffer in node memory and arrives; each
// rank that needs data waits for the ranks it needs and reads their staging
// buffers directly, folding in rank order. One synchronization and no program:
//
//   all_reduce      every rank publishes its sendbuf, every rank folds all of them
//   reduce          the non-roots publish, the root folds (its own sendbuf in place)
//   broadcast       the root publishes, the others copy it out
//   all_gather      every rank publishes its block, every rank copies all of them
//   reduce_scatter  every rank publishes its whole sendbuf, every rank folds its block
//
// A broadcast or reduce above the cap, up to tune.one_shot_stream_max_bytes, is
// streamed: it runs as consecutive steps of the cap, each one such synchronization,
// the givers writing a step into one data buffer while the others read the last one
// from the other (one_shot_streamed).
//
// It runs where every dimension's algorithm is automatic (a requested algorithm
// is run as asked), the call has elements, and what a rank publishes fits in
// tuning::one_shot_max_bytes and in a data buffer of the executor's layout of the
// staging buffers (tuning::shared_staging_bytes x 2, less its ring of slots, halved:
// `staging` below; executor/host/one_shot.hpp). The fold is the reproducible mode's order (the ranks left to right,
// nested over the topology's dimensions under options.reproducible), so every
// rank's result is bitwise the same. A 16-bit call some but not all of whose
// dimensions accumulate in float32 runs its program (its rounding is per
// dimension). Every rank decides the same: the inputs are the call's arguments
// and the options every rank agreed on at bind.
#pragma once

#include "../config.hpp"
#include "../options.hpp"
#include "../vocabulary.hpp"

#include <cstddef>
#include <span>
#include <string>

MDRING_NAMESPACE_BEGIN

/// A call as the one-shot decision sees it.
struct one_shot_call {
  collective kind = collective::all_reduce;  ///< the collective
  std::size_t count = 0;                     ///< its count argument (per rank for reduce_scatter, all_gather)
  std::size_t elem_size = 4;                 ///< bytes per element
  std::size_t ranks = 1;                     ///< ranks in the communicator
  std::size_t root = 0;                      ///< broadcast, reduce
};

/// The bytes each rank publishes in the one-shot form of call c (reduce_scatter: the
/// whole sendbuf; the others: the count).
constexpr std::size_t one_shot_bytes(const one_shot_call& c) noexcept {
  return (c.kind == collective::reduce_scatter ? c.count * c.ranks : c.count) * c.elem_size;
}

/// The bytes one step of the one-shot path can publish per rank under options o,
/// with data buffers of `staging` bytes: tune.one_shot_max_bytes, capped by them.
constexpr std::size_t one_shot_cap(const options& o, std::size_t staging) noexcept {
  return o.tune.one_shot_max_bytes < staging ? o.tune.one_shot_max_bytes : staging;
}

/// The streamed calls' limit in the functions below: tune.one_shot_stream_max_bytes
/// (stream_limit_of_options), or the bytes given (plan/stream_choice.hpp: a
/// communicator whose calls time both ways asks with the limit as bound).
inline constexpr std::size_t stream_limit_of_options = std::size_t(-1);

/// Whether call c, a broadcast or reduce too large for one step of the one-shot
/// path but within the streamed limit (tune.one_shot_stream_max_bytes), runs over it
/// streamed, in steps of the cap (one_shot_steps); only where one_shot_applies.
constexpr bool one_shot_streamed(const one_shot_call& c, const options& o, std::size_t staging,
                                 std::size_t stream_limit = stream_limit_of_options) noexcept {
  if (c.kind != collective::broadcast && c.kind != collective::reduce) return false;
  const std::size_t cap = one_shot_cap(o, staging);
  if (c.elem_size == 0 || cap < c.elem_size || c.count <= cap / c.elem_size) return false;
  const std::size_t limit = stream_limit == stream_limit_of_options ? o.tune.one_shot_stream_max_bytes : stream_limit;
  return c.count <= limit / c.elem_size;
}

/// Whether call c runs by the one-shot path under options o, where the whole
/// communicator shares a node window whose staging buffers hold `staging` bytes of
/// data; `written`: the topology's extents as written (under options.reproducible
/// the fold nests over those of more than one rank, at most 8 of them).
constexpr bool one_shot_applies(const one_shot_call& c, const options& o, std::size_t staging,
                                std::span<const std::size_t> written = {},
                                std::size_t stream_limit = stream_limit_of_options) noexcept {
  if (c.count == 0 || c.ranks < 2 || staging == 0) return false;
  std::size_t nested = 0;
  for (std::size_t e : written) nested += e > 1;
  if (o.reproducible && nested > 8) return false;
  for (algorithm a : o.algorithms)
    if (a != algorithm::automatic) return false;
  if (c.elem_size == 2 && o.accumulation != accumulation::float32)
    for (accumulation a : o.dimension_accumulation)
      if (a == accumulation::float32) return false;
  const std::size_t cap = one_shot_cap(o, staging);
  if (one_shot_streamed(c, o, staging, stream_limit)) return true;
  // one_shot_bytes(c) <= cap, without a product that could overflow
  if (c.elem_size == 0 || c.count > cap / c.elem_size) return false;
  const std::size_t bytes = c.count * c.elem_size;
  return c.kind != collective::reduce_scatter || bytes <= cap / c.ranks;
}

/// The elements of call c that one step of the one-shot path carries: all of them,
/// or when streamed, as many as the cap holds (the last step the rest).
constexpr std::size_t one_shot_step_count(const one_shot_call& c, const options& o, std::size_t staging,
                                          std::size_t stream_limit = stream_limit_of_options) noexcept {
  return one_shot_streamed(c, o, staging, stream_limit) ? one_shot_cap(o, staging) / c.elem_size : c.count;
}

/// What explain() says of a call that runs one-shot (plan::one_shot); `staging`
/// as for one_shot_applies.
inline std::string one_shot_text(const one_shot_call& c, const options& o, std::size_t staging,
                                 std::size_t stream_limit = stream_limit_of_options) {
  const std::string b = std::to_string(one_shot_bytes(c)) + " B";
  const char* what =
      c.kind == collective::broadcast ? "the root copies its buffer into its staging buffer, the others copy it out"
      : c.kind == collective::reduce
          ? "the others copy their sendbuf into their staging buffers, the root folds them with its own"
      : c.kind == collective::all_gather
          ? "each rank copies its block into its staging buffer and every rank copies all of them out"
      : c.kind == collective::reduce_scatter
          ? "each rank copies its whole sendbuf into its staging buffer and folds its block from all of them"
          : "each rank copies its sendbuf into its staging buffer and every rank folds all of them";
  const std::string ranks = "all " + std::to_string(c.ranks) + " ranks share a node; ";
  if (one_shot_streamed(c, o, staging, stream_limit)) {
    const std::size_t step = one_shot_step_count(c, o, staging, stream_limit), steps = (c.count + step - 1) / step;
    const std::size_t limit = stream_limit == stream_limit_of_options ? o.tune.one_shot_stream_max_bytes : stream_limit;
    return "this call runs over node memory in " + std::to_string(steps) + " steps of at most " +
           std::to_string(step * c.elem_size) + " B instead of the stages below (" + ranks + b +
           ", above the one-shot cap and at most tune.one_shot_stream_max_bytes = " + std::to_string(limit) +
           " B): in each, " + what +
           ", in rank order, while the next step is written into the other buffer; no messages";
  }
  return "this call runs in one step over node memory instead of the stages below (" + ranks + b +
         " per rank, at most tune.one_shot_max_bytes = " + std::to_string(o.tune.one_shot_max_bytes) + " B): " + what +
         ", in rank order; no messages";
}

MDRING_NAMESPACE_END
