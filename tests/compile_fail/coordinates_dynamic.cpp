// topology::coordinates() needs every extent; a dynamic one is known only once bound.
// (Compiles with mdring::ring<mdring::shm, 3> as the second factor.)
// expect: mdring::topology::coordinates: the topology has a dynamic extent
#include <mdring/mdring.hpp>
constexpr auto topo = mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm>;
int main() { return int(decltype(topo)::coordinates(3)[0]); }
