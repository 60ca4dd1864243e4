// A ring of zero ranks is rejected.
// expect: mdring::ring: the extent must be at least 1
#include <mdring/mdring.hpp>
constexpr auto topo = mdring::ring<mdring::shm, 0>;
int main() { return int(decltype(topo)::size()); }
