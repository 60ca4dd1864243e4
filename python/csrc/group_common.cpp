// python/csrc/group_common.cpp: what every build of mdring_torch has, whatever
// transports it was built with.
#include "group.hpp"

#include <mdring/memory.hpp>

namespace mdring_torch {

std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f16:
    case dtype::bf16:
    case dtype::i16:
      return 2;
    default:
      return 1;
  }
}

void* node_alloc(std::size_t bytes) { return mdring::node_alloc(bytes); }
void node_free(void* p) noexcept { mdring::node_free(p); }

}  // namespace mdring_torch
