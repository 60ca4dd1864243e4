// A built-in op on an element type it cannot reduce (a struct).
// (Compiles with a user op [](point a, point b) { return point{a.x + b.x, a.y + b.y}; }.)
// The function is never called: only its instantiation matters.
// expect: the op cannot reduce this element type
#include <mdring/mdring.hpp>
struct point {
  int x, y;
};
void sum_points(mdring::threads::endpoint ep) {
  constexpr auto topo = mdring::ring<mdring::shm, 2>;
  auto comm = mdring::bind(topo, ep);
  point p[2] = {};
  mdring::all_reduce(comm, p, 2, mdring::sum);
}
int main() {}
