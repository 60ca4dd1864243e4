// mdring::non_commutative(f) where f cannot reduce the element type must be caught at
// the public boundary like any other op, not deep inside the engine.
// (Compiles with [](point a, point b) { return point{a.x + b.x, a.y + b.y}; } as f.)
// The function is never called: only its instantiation matters.
// expect: the op cannot reduce this element type
#include <mdring/mdring.hpp>
struct point {
  int x, y;
};
void combine_points(mdring::threads::endpoint ep) {
  constexpr auto topo = mdring::ring<mdring::shm, 2>;
  auto comm = mdring::bind(topo, ep);
  point p[2] = {};
  mdring::all_reduce(comm, p, 2, mdring::non_commutative([](int a, int b) { return a + b; }));
}
int main() {}
