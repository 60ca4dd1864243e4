// Two dynamic extents: the communicator's size cannot be split between them.
// (Compiles with mdring::ring<mdring::shm, 2> as the first factor.)
// expect: at most one dimension (of a topology )?may have dynamic_extent
#include <mdring/mdring.hpp>
constexpr auto topo = mdring::ring<mdring::shm> * mdring::ring<mdring::shm>;
int main() { return int(decltype(topo)::ndims()); }
