#include <mdring/mdring.hpp>

#include <cstdio>
#include <string_view>
#include <vector>

int main() {
  constexpr auto topo = mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm, 3>;
  static_assert(decltype(topo)::size() == 6);
  std::vector<int> result(6);
  mdring::threads::run(6, [&](mdring::threads::endpoint ep) {
    auto comm = mdring::bind(topo, ep);
    int v = int(ep.rank) + 1;
    mdring::all_reduce(comm, &v, 1, mdring::sum);
    result[ep.rank] = v;
  });
  for (int v : result)
    if (v != 21) return std::printf("consumer_threads: got %d, expected 21\n", v), 1;
#ifdef MDRING_EXPECT_VERSION
  if (std::string_view(mdring::version_string()) != MDRING_EXPECT_VERSION)
    return std::printf("consumer_threads: the headers are %s, the CMake package %s\n", mdring::version_string(),
                       MDRING_EXPECT_VERSION),
           1;
#endif
  std::printf("consumer_threads: ok\n");
  return 0;
}
