// A link tag without a link_traits specialization cannot name a ring.
// (Compiles once mdring::link_traits<my_link> has name, bandwidth, latency,
// fully_connected and space.)
// expect: mdring::ring: the link tag has no complete mdring::link_traits
#include <mdring/mdring.hpp>
struct my_link {};
constexpr auto topo = mdring::ring<my_link, 4>;
int main() { return int(decltype(topo)::size()); }
