// mdring-precision: how far a 16-bit sum lands from the exact one, per mode.
//
//   mdring-precision [--count N] [--time-count N] [--rounds R] [--dtype bfloat16|half] [--topology "shm:8 x
//   ethernet:8"]...
//
// Every rank (a thread) holds N values uniform in [0, 1) (seeded by rank); the
// all_reduce's result is compared with the exact sum (float64 of the same 16-bit
// inputs) as a mean relative error over the elements, next to the floor that any
// 16-bit result has: the exact sum rounded once to the type. Modes: the default
// (rings round at each of their p - 1 hops; direct stages fold in float and round
// once per dimension), options.reproducible (direct on every dimension: one
// rounding per dimension), float32 on the outer dimensions only
// (options.dimension_accumulation = {element, float32, ...}: they run direct, one
// rounding each, 16-bit bytes) and options.accumulation = float32 (the call widened
// to float32, rounded once at the end). Prints one row per topology and mode: the
// error, its ratio to the floor, and the time of one all_reduce of --time-count
// elements per rank (median of --rounds calls after one warm-up, rank 0's clock)
// with its ratio to the default's, measured in the same world one mode after the
// other. The ranks are threads of this process: with more ranks than cores the
// times are oversubscribed, and only the ratios mean something. Default
// topologies: shm:8, shm:8 x ethernet:8, shm:8 x ethernet:32 (8, 64 and 256 ranks).
#include <mdring/mdring.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace md = mdring;

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
T input(std::size_t r, std::size_t i) {
  return T(float(mix(r * 1000003ull + i) >> 40) / float(1ull << 24));
}

struct row {
  double err = 0;  // mean relative error against the exact sum
  double ms = 0;   // median time of one all_reduce of the timing count
};

template <class T>
row measure(const md::runtime_topology& topo, std::size_t n, std::size_t tn, int rounds, const md::options& o,
            double& floor_err) {
  const std::size_t P = topo.size();
  std::vector<T> out(n);
  double ms = 0;
  md::threads::run(P, [&](md::threads::endpoint ep) {
    auto comm = md::bind(topo, ep, o);
    std::vector<T> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = input<T>(comm.rank(), i);
    md::all_reduce(comm, x.data(), n, md::sum);
    if (comm.rank() == 0) out = x;
    if (tn == 0) return;
    std::vector<T> y(tn, T(0.5f));
    std::vector<double> t;
    for (int k = 0; k <= rounds; ++k) {
      int go = 0;
      md::all_reduce(comm, &go, 1, md::max);  // a barrier
      const auto t0 = std::chrono::steady_clock::now();
      md::all_reduce(comm, y.data(), tn, md::sum);
      if (k > 0) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (comm.rank() == 0) {
      std::sort(t.begin(), t.end());
      ms = t[t.size() / 2];
    }
  });
  double err = 0, fl = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (std::size_t r = 0; r < P; ++r) exact += double(float(input<T>(r, i)));
    err += std::fabs(double(float(out[i])) - exact) / exact;
    fl += std::fabs(double(float(T(float(exact)))) - exact) / exact;
  }
  floor_err = fl / double(n);
  return {err / double(n), ms};
}

template <class T>
void run(const std::vector<std::string>& topos, std::size_t n, std::size_t tn, int rounds, const char* type) {
  std::printf(
      "# mdring-precision: all_reduce sum of %zu x %s per rank, inputs uniform in [0, 1); mean relative error "
      "against the exact sum, and its ratio to the floor (the exact sum rounded once to %s); time of one "
      "all_reduce of %zu x %s per rank (threads, median of %d), and its ratio to the default's\n",
      n, type, type, tn, type, rounds);
  std::printf("%-28s %6s %-13s %12s %12s %8s %10s %8s\n", "topology", "ranks", "mode", "error", "floor", "ratio",
              "time ms", "x default");
  for (const auto& t : topos) {
    const auto topo = md::parse_topology(t).resolve(md::parse_topology(t).size());
    double base_ms = 0;
    for (std::string mode : {"default", "reproducible", "float32-outer", "float32"}) {
      if (mode == "float32-outer" && topo.ndims() < 2) continue;
      md::options o;
      o.reproducible = mode == "reproducible";
      o.accumulation = mode == "float32" ? md::accumulation::float32 : md::accumulation::element;
      if (mode == "float32-outer") {  // element on dimension 0, float32 on the others
        o.dimension_accumulation.assign(topo.ndims(), md::accumulation::float32);
        o.dimension_accumulation[0] = md::accumulation::element;
      }
      double fl = 0;
      const row r = measure<T>(topo, n, tn, rounds, o, fl);
      if (mode == "default") base_ms = r.ms;
      std::printf("%-28s %6zu %-13s %12.4e %12.4e %8.3f %10.3f %8.3f\n", t.c_str(), topo.size(), mode.c_str(), r.err,
                  fl, r.err / fl, r.ms, base_ms > 0 ? r.ms / base_ms : 0.0);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 16384, tn = 262144;
  int rounds = 5;
  std::string dtype = "bfloat16";
  std::vector<std::string> topos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mdring-precision: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--count") n = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--time-count") tn = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--rounds") rounds = std::max(1, std::atoi(next().c_str()));
    else if (a == "--dtype") dtype = next();
    else if (a == "--topology") topos.push_back(next());
    else {
      std::fprintf(stderr,
                   "usage: mdring-precision [--count N] [--time-count N (0: no timing)] [--rounds R] "
                   "[--dtype bfloat16|half] [--topology T]...\n");
      return 2;
    }
  }
  if (topos.empty()) topos = {"shm:8", "shm:8 x ethernet:8", "shm:8 x ethernet:32"};
  if (dtype == "bfloat16") run<md::bfloat16>(topos, n, tn, rounds, "bfloat16");
  else if (dtype == "half") run<md::half>(topos, n, tn, rounds, "half");
  else {
    std::fprintf(stderr, "mdring-precision: --dtype takes bfloat16 or half, not %s\n", dtype.c_str());
    return 2;
  }
  return 0;
}
