// cluster_probe: run by tests/cluster/cluster_smoke.sh on every rank of a job that
// mdring-run --hosts starts across the namespaces of scripts/cluster.sh (UCX world).
//
//   cluster_probe check            detect the topology, all_reduce 5 sizes (sum of
//                                  int64, exact), rank 0 prints "ok TOPOLOGY BYTES"
//   cluster_probe loop SECONDS     all_reduce 1 MiB until SECONDS pass or a call
//                                  fails: then prints "failed: WHAT" on stderr, exit 3
//   cluster_probe shrink CALLS [grow]   CALLS all_reduce calls of 1 MiB of int64 (exact
//                                  sums); a failed call: mdring::shrink, then with "grow" a
//                                  rank left out joins again and the members grow back for
//                                  10 s (a process that mdring-run --replace starts joins
//                                  too). Prints "shrunk:
//                                  TOPOLOGY (SIZE ranks, MS ms)" and "grown: ..." on stderr,
//                                  and at the end "ok TOPOLOGY SIZE calls N" on the final
//                                  rank 0 ("left out" where it could not join again)
#include <mdring/ucx.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace md = mdring;

namespace {
using namespace std::chrono_literals;

// "shrink": calls [at, total) of all_reduce on c, exact sums. A failed call: shrink;
// a rank left out joins again (w: its world), the members offer to grow back to
// `size` for 10 s (the joiners: a left-out rank, a replacement of mdring-run
// --replace), and rank 0 hands the survivors, and after a growth the joiners, the
// call to go on from.
template <class Comm>
int shrink_loop(Comm c, const md::ucx::world* w, std::size_t size, std::int64_t at, std::int64_t total, bool grow) {
  const std::string me = std::getenv("RANK") ? std::getenv("RANK") : "?";  // this process in the job as started
  auto ms = [](auto t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<std::int64_t> v(1 << 17);
  bool shrunk = false;  // the next call is the shrunk communicator's first
  while (at < total) {
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = std::int64_t(c.rank() + 1) * std::int64_t(j % 100 + 1);
    try {
      md::all_reduce(c, v.data(), v.size(), md::sum);
      if (std::exchange(shrunk, false))  // wall-clock ms, which the script compares with the failure's time
        std::fprintf(stderr, "cluster_probe: process %s resumed at %lld\n", me.c_str(),
                     (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());
    } catch (const md::error& e) {
      std::fprintf(stderr, "cluster_probe: process %s: %.200s\n", me.c_str(), e.what());
      const auto t0 = std::chrono::steady_clock::now();
      c = md::shrink(c);
      shrunk = true;
      if (c.size() == 0) {
        if (!w || !grow) return std::printf("left out\n"), 0;
        try {
          c = md::ucx::join(*w, c.get_options(), 10s);
        } catch (const md::error& j) {
          return std::printf("left out (%.120s)\n", j.what()), 0;
        }
      } else {
        // A failure need not end the same call on every survivor (one may fail in
        // call k while the others finished it and fail in k + 1): all go on from rank 0's
        // (another failure meanwhile: the next call fails and they shrink again).
        try {
          md::broadcast(c, &at, 1, 0);
        } catch (const md::error&) {
          continue;
        }
        std::fprintf(stderr, "cluster_probe: process %s shrunk: %s (%zu ranks, %.0f ms)\n", me.c_str(),
                     c.topology().to_string().c_str(), c.size(), ms(t0));
        if (!grow || c.size() >= size) continue;
        try {
          c = md::grow(c, {.size = size, .timeout = 10s});
        } catch (const md::error& g) {
          std::fprintf(stderr, "cluster_probe: process %s: not grown: %.160s\n", me.c_str(), g.what());
          continue;
        }
      }
      md::broadcast(c, &at, 1, 0);  // where the members are
      std::fprintf(stderr, "cluster_probe: process %s grown: %s (%zu ranks, %.0f ms after the failure)\n", me.c_str(),
                   c.topology().to_string().c_str(), c.size(), ms(t0));
      continue;
    }
    const std::size_t P = c.size();
    for (std::size_t j = 0; j < v.size(); ++j)
      if (v[j] != std::int64_t(P * (P + 1) / 2) * std::int64_t(j % 100 + 1)) {
        std::fprintf(stderr, "cluster_probe: process %s: element %zu is %lld\n", me.c_str(), j, (long long)v[j]);
        return 1;
      }
    ++at;
  }
  if (c.rank() == 0) std::printf("ok %s %zu calls %lld\n", c.topology().to_string().c_str(), c.size(), (long long)at);
  return 0;
}

int probe(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  const std::int64_t total = argc > 2 ? std::atoll(argv[2]) : 1000;
  if (mode == "shrink" && std::getenv("MDRING_JOIN")) {  // started in a killed rank's place (--replace)
    auto c = md::ucx::join_from_env({}, 60s);
    std::int64_t at = 0;
    md::broadcast(c, &at, 1, 0);
    std::fprintf(stderr, "cluster_probe: process %s (a replacement) joined: %s\n", std::getenv("RANK"),
                 c.topology().to_string().c_str());
    const std::size_t n = c.size();
    return shrink_loop(std::move(c), nullptr, n, at, total, true);
  }
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
  if (mode == "shrink")
    return shrink_loop(std::move(comm), &w, P, 0, total, argc > 3 && std::string(argv[3]) == "grow");
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
