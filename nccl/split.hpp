// nccl/split.hpp: ncclCommSplit's arithmetic. Every rank of the parent gives its
// (color, key); the ranks of one color form a new communicator, ordered by key
// and, for equal keys, by their rank in the parent; a rank with
// NCCL_SPLIT_NOCOLOR gets none (newcomm NULL).
#pragma once

#include "errors.hpp"

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

}  // namespace mdring_nccl
