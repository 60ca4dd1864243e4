// nccl/split.hpp: ncclCommSplit's and ncclCommShrink's arithmetic.
//
// Split: every rank of the parent gives its (color, key); the ranks of one color
// form a new communicator, ordered by key and, for equal keys, by their rank in
// the parent; a rank with NCCL_SPLIT_NOCOLOR gets none (newcomm NULL).
//
// Shrink: every rank of the parent that is not in excludeRanksList calls it with
// the same list (the excluded ones do not: they may be dead); the others form the
// new communicator in their parent order.
#pragma once

#include "errors.hpp"

#include <mdring/rendezvous/store.hpp>
#include <nccl.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

namespace mdring_nccl {

struct split_entry {
  int color;
  int key;
};

struct split_result {
  bool member = false;       // false: NCCL_SPLIT_NOCOLOR
  int rank = -1;             // in the new communicator
  std::vector<int> parents;  // the new communicator's ranks, as ranks of the parent, in new rank order
};

inline ncclResult_t check_color(const char* function, int color) {
  if (color >= 0 || color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  return fail(ncclInvalidArgument, function,
              "color " + std::to_string(color) + " is negative (expected a color >= 0, or NCCL_SPLIT_NOCOLOR)");
}

// What parent rank `me` gets, from every parent rank's entry (all[r] is rank r's).
inline split_result split_of(std::span<const split_entry> all, int me) {
  split_result out;
  const int color = all[std::size_t(me)].color;
  if (color == NCCL_SPLIT_NOCOLOR) return out;
  for (int r = 0; r < int(all.size()); ++r)
    if (all[std::size_t(r)].color == color) out.parents.push_back(r);
  std::stable_sort(out.parents.begin(), out.parents.end(),
                   [&](int a, int b) { return all[std::size_t(a)].key < all[std::size_t(b)].key; });
  out.member = true;
  out.rank = int(std::find(out.parents.begin(), out.parents.end(), me) - out.parents.begin());
  return out;
}

struct shrink_result {
  int rank = -1;             // in the new communicator
  std::vector<int> parents;  // the new communicator's ranks, as ranks of the parent, in new rank order
  std::string excluded;      // the excluded ranks in ascending order ("1 3"), which every caller must give
};

// Checks ncclCommShrink's arguments on parent rank `me` of `size` and says what it
// gets: ncclInvalidArgument naming the argument for a negative count, a NULL list
// with ranks in it, a rank out of range or repeated, this rank itself (an excluded
// rank must not call it), or flags other than NCCL_SHRINK_DEFAULT and
// NCCL_SHRINK_ABORT.
inline ncclResult_t shrink_of(const char* function, int size, int me, const int* excluded, int count, int flags,
                              shrink_result& out) {
  out = {};
  if (count < 0)
    return fail(ncclInvalidArgument, function,
                "excludeRanksCount " + std::to_string(count) + " is negative (expected 0 or more)");
  if (count > 0 && !excluded)
    return fail(ncclInvalidArgument, function,
                "excludeRanksList is NULL with excludeRanksCount " + std::to_string(count));
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return fail(ncclInvalidArgument, function,
                "shrinkFlags " + std::to_string(flags) + " is not NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)");
  std::vector<char> gone(std::size_t(size), 0);
  for (int i = 0; i < count; ++i) {
    const int r = excluded[i];
    const std::string at = "excludeRanksList[" + std::to_string(i) + "] ";
    if (r < 0 || r >= size)
      return fail(ncclInvalidArgument, function,
                  at + "is " + std::to_string(r) + ", not a rank of this communicator (expected 0 to " +
                      std::to_string(size - 1) + ")");
    if (gone[std::size_t(r)]) return fail(ncclInvalidArgument, function, at + "repeats rank " + std::to_string(r));
    if (r == me)
      return fail(ncclInvalidArgument, function,
                  at + "is this rank (" + std::to_string(me) +
                      "): the excluded ranks must not call ncclCommShrink, the others call it with the same list");
    gone[std::size_t(r)] = 1;
  }
  for (int r = 0; r < size; ++r) {
    if (gone[std::size_t(r)]) {
      out.excluded += (out.excluded.empty() ? "" : " ") + std::to_string(r);
    } else {
      if (r == me) out.rank = int(out.parents.size());
      out.parents.push_back(r);
    }
  }
  return ncclSuccess;
}

// Every caller of ncclCommShrink (parent rank `me`) puts the list it was given under
// key/<its parent rank> in the parent's store and reads the lists of the ranks its own
// list keeps: ncclInvalidUsage naming the first one that differs. Keyed by parent rank,
// so that callers with other lists never overwrite one another: every caller that reads
// another list fails, and callers with one list go on together or not at all. A rank
// the list keeps that never calls leaves the others waiting until `deadline` (the
// store's timeout_error).
inline ncclResult_t agree_on_shrink(const char* function, mdring::rendezvous::store& store, const std::string& key,
                                    int me, const shrink_result& mine, mdring::rendezvous::clock::time_point deadline) {
  store.set(key + "/" + std::to_string(me), mine.excluded);
  for (int r : mine.parents) {
    if (r == me) continue;
    const std::string theirs = store.get(key + "/" + std::to_string(r), deadline);
    if (theirs != mine.excluded)
      return fail(ncclInvalidUsage, function,
                  "rank " + std::to_string(r) + " excluded ranks {" + theirs + "} where rank " + std::to_string(me) +
                      " excluded {" + mine.excluded +
                      "}: every rank that calls ncclCommShrink must pass the same excludeRanksList");
  }
  return ncclSuccess;
}

}  // namespace mdring_nccl
