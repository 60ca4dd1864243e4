// The quick-start demo (scripts/demo.sh runs it, then the MPI comparison):
//   1. explain() of a compile-time topology: what one rank does, stage by stage;
//   2. an all_reduce on 8 in-process ranks shaped shm:2 x shm:4, checked exactly.
#include <mdring/mdring.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

namespace md = mdring;

int main() {
  // 1. Four GPUs on NVLink inside each node, times 64 nodes on InfiniBand.
  constexpr auto cluster = md::ring<md::nvlink, 4> * md::ring<md::infiniband, 64>;
  static_assert(decltype(cluster)::size() == 256);
  std::printf("== 1. the plan of an all_reduce of 25.6 M floats on %s, as rank 5 runs it\n\n",
              md::to_string(cluster).c_str());
  std::printf("%s\n", md::explain<float>(cluster, 25'600'000, md::collective::all_reduce, 5).c_str());

  // 2. Eight ranks as threads, two "sockets" of four.
  constexpr auto node = md::ring<md::shm, 2> * md::ring<md::shm, 4>;
  constexpr std::size_t n = (std::size_t(16) << 20) / sizeof(float) + 5;  // 16 MiB and a ragged end
  std::printf("== 2. all_reduce (sum) of %zu floats on 8 threads shaped %s\n\n", n, md::to_string(node).c_str());
  std::vector<std::vector<float>> data(8, std::vector<float>(n));
  std::vector<double> seconds(8);
  md::threads::run(8, [&](md::threads::endpoint ep) {
    auto comm = md::bind(node, ep);
    if (ep.rank == 0) std::printf("%s\n", comm.explain<float>(n).c_str());
    auto& v = data[ep.rank];
    for (std::size_t i = 0; i < n; ++i) v[i] = float((i % 1000) + ep.rank);
    const auto t0 = std::chrono::steady_clock::now();
    md::all_reduce(comm, v.data(), n, md::sum);
    seconds[ep.rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  // Rank r contributed (i % 1000) + r, so every element is 8 (i % 1000) + 28, exactly.
  std::size_t wrong = 0;
  for (std::size_t r = 0; r < 8; ++r)
    for (std::size_t i = 0; i < n; ++i) wrong += data[r][i] != float(8 * (i % 1000) + 28);
  double slowest = 0;
  for (double s : seconds) slowest = s > slowest ? s : slowest;
  std::printf("result: %s (%zu of %zu elements on 8 ranks checked), %.2f ms on the slowest thread\n",
              wrong ? "WRONG" : "correct", 8 * n - wrong, 8 * n, slowest * 1e3);
  return wrong ? 1 : 0;
}
