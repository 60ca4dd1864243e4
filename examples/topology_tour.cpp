// A tour of compile-time topologies: what the type knows, what the plan does.
//
//   ./topology_tour
#include <mdring/mdring.hpp>

#include <cstdio>

namespace md = mdring;

// Four GPUs on NVLink inside each node, times 64 nodes on InfiniBand.
constexpr auto dgx = md::ring<md::nvlink, 4> * md::ring<md::infiniband, 64>;
using dgx_t = decltype(dgx);
static_assert(dgx_t::size() == 256);
static_assert(dgx_t::ndims() == 2 && dgx_t::extent(0) == 4 && dgx_t::extent(1) == 64);

// Products flatten, so they are associative.
constexpr auto a = md::ring<md::shm, 2>;
constexpr auto b = md::ring<md::pcie, 3>;
constexpr auto c = md::ring<md::ethernet, 5>;
static_assert((a * b) * c == a * (b * c));
static_assert(decltype(a * b * c)::size() == 30);

// Ranks are mixed-radix numbers, dimension 0 fastest: rank 5 of 4 x 64 is (1, 1).
static_assert(dgx_t::coordinates(5)[0] == 1 && dgx_t::coordinates(5)[1] == 1);
static_assert(dgx_t::rank_of({3, 10}) == 43);
// Its ring partners: in dimension 0 the node's GPUs 4..7, in dimension 1 ranks 1, 5, 9, ...
static_assert(dgx_t::peer(5, 0, 3) == 7 && dgx_t::peer(5, 1, 2) == 9);

// One extent may come from the communicator at run time.
constexpr auto nodes = md::ring<md::shm, 2> * md::ring<md::infiniband>;
static_assert(!decltype(nodes)::is_static() && decltype(nodes)::dynamic_index() == 1);

// A link of your own: give it traits, and it works everywhere a built-in one does.
struct slingshot {};
template <>
struct mdring::link_traits<slingshot> {
  static constexpr std::string_view name = "slingshot";
  static constexpr double bandwidth = 25e9;
  static constexpr double latency = 2e-6;
  static constexpr bool fully_connected = false;
  static constexpr mdring::memory_space space = mdring::memory_space::host;
};
constexpr auto frontier = md::ring<md::nvlink, 8> * md::ring<slingshot, 128>;

int main() {
  std::printf("%s has %zu ranks in %zu dimensions\n\n", md::to_string(dgx).c_str(), dgx_t::size(), dgx_t::ndims());
  // What rank 5 does in an all-reduce of 25.6 M floats (ResNet-50's gradients):
  std::printf("%s\n", md::explain<float>(dgx, 25'600'000, md::collective::all_reduce, 5).c_str());
  // The same on a flat ring of 256 GPUs, for comparison:
  md::options flat;
  flat.algorithms = {md::algorithm::ring};
  std::printf("%s\n", md::explain<float>(md::ring<md::infiniband, 256>, 25'600'000, md::collective::all_reduce, 5,
                                         md::sum, flat)
                          .c_str());
  // Runtime topologies, e.g. from a command line flag; the dynamic extent is resolved with the size.
  auto rt = md::parse_topology("shm:2 x infiniband:*").resolve(16);
  std::printf("parsed and resolved: %s (%zu ranks)\n", rt.to_string().c_str(), rt.size());
  md::register_link<slingshot>();
  std::printf("a user link in a string: %s\n", md::parse_topology("nvlink:8 x slingshot:128").to_string().c_str());
  std::printf("and in a type: %s\n", md::to_string(frontier).c_str());
  try {
    md::parse_topology("nvlink:4 x infinband:64");
  } catch (const md::topology_error& e) {
    std::printf("a typo is caught: %s\n", e.what());
  }
  return 0;
}
