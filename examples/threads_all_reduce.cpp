// All-reduce across the threads of one process, shaped 2 x 4.
//
//   ./threads_all_reduce
#include <mdring/mdring.hpp>

#include <cstdio>
#include <vector>

int main() {
  constexpr auto topo = mdring::ring<mdring::shm, 2> * mdring::ring<mdring::shm, 4>;
  constexpr std::size_t n = 1'000'003;  // not divisible by 2, 4 or 8: blocks are uneven, no padding
  std::vector<std::vector<float>> grads(8, std::vector<float>(n));

  mdring::threads::run(8, [&](mdring::threads::endpoint ep) {
    auto comm = mdring::bind(topo, ep);  // once
    auto& g = grads[ep.rank];
    for (std::size_t i = 0; i < n; ++i) g[i] = float(ep.rank + 1) * 0.5f;
    mdring::all_reduce(comm, g.data(), g.size(), mdring::avg);  // as often as you like
  });

  // avg of 0.5, 1.0, ..., 4.0 is 2.25 on every rank, bitwise the same.
  for (auto& g : grads)
    for (float x : g)
      if (x != 2.25f) return std::printf("wrong: %g\n", double(x)), 1;
  std::printf("8 threads averaged %zu floats: every element is 2.25\n", n);
  return 0;
}
