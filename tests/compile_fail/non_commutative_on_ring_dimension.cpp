// A non-commutative op on a topology with a ring-only dimension (infiniband is not
// fully connected): a ring folds blocks in rotated order, so this is rejected at
// compile time. (Compiles with mdring::shm, fully connected, as the second dimension.)
// The function is never called: only its instantiation matters.
// expect: this op is not commutative
// expect: ring-only dimension
#include <mdring/mdring.hpp>
void reduce_in_rank_order(mdring::threads::endpoint ep) {
  constexpr auto topo = mdring::ring<mdring::shm, 2> * mdring::ring<mdring::infiniband, 2>;
  auto comm = mdring::bind(topo, ep);
  float x[4] = {};
  mdring::all_reduce(comm, x, 4, mdring::non_commutative([](float a, float b) { return a - b; }));
}
int main() {}
