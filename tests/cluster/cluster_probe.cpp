// cluster_probe: run by tests/cluster/cluster_smoke.sh on every rank of a job that
// mdring-run --hosts starts across the namespaces of scripts/cluster.sh (UCX world).
//
//   cluster_probe check            detect the topology, all_reduce 5 sizes (sum of
//                                  int64, exact), rank 0 prints "ok TOPOLOGY BYTES"
//   cluster_probe loop SECONDS     all_reduce 1 MiB until SECONDS pass or a call
//                                  fails: then prints "failed: WHAT" on stderr, exit 3
//   cluster_probe shrink SECONDS   all_reduce 1 MiB of int64 (exact sums) until SECONDS
//                                  pass; a failed call: mdring::shrink and on. Prints
//                                  "shrunk: TOPOLOGY (SIZE ranks, MS ms)" on stderr at each
//                                  shrink, and at the end "ok TOPOLOGY SIZE calls N" on the
//                                  final rank 0 ("left out" where shrink left it out)
#include <mdring/ucx.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace md = mdring;

namespace {
template <class Comm, class Until>
int shrink_loop(Comm& comm, std::size_t me, Until until) {
  auto c = md::shrink(comm);  // nothing failed: the same ranks, as a communicator<runtime_topology, ...>
  std::size_t calls = 0;
  std::vector<std::int64_t> v(1 << 17);
  while (std::chrono::steady_clock::now() < until) {
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = std::int64_t(c.rank() + 1) * std::int64_t(j % 100 + 1);
    try {
      md::all_reduce(c, v.data(), v.size(), md::sum);
    } catch (const md::error& e) {
      std::fprintf(stderr, "cluster_probe: process %zu: %.200s\n", me, e.what());
      const auto t0 = std::chrono::steady_clock::now();
      c = md::shrink(c);
      if (c.size() == 0) return std::printf("left out\n"), 0;
      std::fprintf(stderr, "cluster_probe: process %zu shrunk: %s (%zu ranks, %.0f ms)\n", me,
                   c.topology().to_string().c_str(), c.size(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      continue;
    }
    const std::size_t P = c.size();
    for (std::size_t j = 0; j < v.size(); ++j)
      if (v[j] != std::int64_t(P * (P + 1) / 2) * std::int64_t(j % 100 + 1)) {
        std::fprintf(stderr, "cluster_probe: process %zu: element %zu is %lld\n", me, j, (long long)v[j]);
        return 1;
      }
    ++calls;
  }
  if (c.rank() == 0) std::printf("ok %s %zu calls %zu\n", c.topology().to_string().c_str(), c.size(), calls);
  return 0;
}

int probe(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  auto w = md::ucx::world::from_env();
  const std::size_t P = w.size(), r = w.rank();
  auto comm = md::bind(w.topology(), w);
  if (mode == "check") {
    std::size_t bytes = 0;
    for (std::size_t n :
         {std::size_t(1), std::size_t(1000), std::size_t(65536), std::size_t(262147), std::size_t(1) << 20}) {
      std::vector<std::int64_t> v(n);
      for (std::size_t j = 0; j < n; ++j) v[j] = std::int64_t(r + 1) * std::int64_t(j % 1000 + 1);
      md::all_reduce(comm, v.data(), n, md::sum);
      for (std::size_t j = 0; j < n; ++j)
        if (v[j] != std::int64_t(P * (P + 1) / 2) * std::int64_t(j % 1000 + 1)) {
          std::fprintf(stderr, "cluster_probe: rank %zu: element %zu of %zu is %lld\n", r, j, n, (long long)v[j]);
          return 1;
        }
      bytes += n * sizeof(std::int64_t);
    }
    if (r == 0) std::printf("ok %s %zu\n", w.topology().to_string().c_str(), bytes);
    md::ucx::wait_to_leave(w);
    return 0;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 10;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  if (mode == "shrink") return shrink_loop(comm, r, until);
  std::vector<float> v(1 << 18, 1.0f);
  try {
    while (std::chrono::steady_clock::now() < until) md::all_reduce(comm, v.data(), v.size(), md::sum);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster_probe: rank %zu failed: %s\n", r, e.what());
    return 3;
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return probe(argc, argv);
  } catch (const std::exception& e) {  // the rendezvous, or a check's call
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "cluster_probe: rank %s failed: %s\n", rank ? rank : "?", e.what());
    return 3;
  }
}
