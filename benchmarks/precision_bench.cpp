// mdring-precision: how far a 16-bit sum lands from the exact one, per mode.
//
//   mdring-precision [--count N] [--dtype bfloat16|half] [--topology "shm:8 x ethernet:8"]...
//
// Every rank (a thread) holds N values uniform in [0, 1) (seeded by rank); the
// all_reduce's result is compared with the exact sum (float64 of the same 16-bit
// inputs) as a mean relative error over the elements, next to the floor that any
// 16-bit result has: the exact sum rounded once to the type. Modes: the default
// (rings round at each of their p - 1 hops; direct stages fold in float and round
// once per dimension), options.reproducible (direct on every dimension: one
// rounding per dimension) and options.accumulation = float32 (the call widened to
// float32, rounded once at the end). Prints one row per topology and mode, and the
// ratio to the floor. Default topologies: shm:8, shm:8 x ethernet:8, shm:8 x ethernet:32
// (8, 64 and 256 ranks).
#include <mdring/mdring.hpp>

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
};

template <class T>
row measure(const md::runtime_topology& topo, std::size_t n, const md::options& o, double& floor_err) {
  const std::size_t P = topo.size();
  std::vector<T> out(n);
  md::threads::run(P, [&](md::threads::endpoint ep) {
    auto comm = md::bind(topo, ep, o);
    std::vector<T> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = input<T>(comm.rank(), i);
    md::all_reduce(comm, x.data(), n, md::sum);
    if (comm.rank() == 0) out = x;
  });
  double err = 0, fl = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (std::size_t r = 0; r < P; ++r) exact += double(float(input<T>(r, i)));
    err += std::fabs(double(float(out[i])) - exact) / exact;
    fl += std::fabs(double(float(T(float(exact)))) - exact) / exact;
  }
  floor_err = fl / double(n);
  return {err / double(n)};
}

template <class T>
void run(const std::vector<std::string>& topos, std::size_t n, const char* type) {
  std::printf("# mdring-precision: all_reduce sum of %zu x %s per rank, inputs uniform in [0, 1); mean relative error "
              "against the exact sum, and its ratio to the floor (the exact sum rounded once to %s)\n",
              n, type, type);
  std::printf("%-28s %6s %-13s %12s %12s %8s\n", "topology", "ranks", "mode", "error", "floor", "ratio");
  for (const auto& t : topos) {
    const auto topo = md::parse_topology(t).resolve(md::parse_topology(t).size());
    for (const char* mode : {"default", "reproducible", "float32"}) {
      md::options o;
      o.reproducible = std::string(mode) == "reproducible";
      o.accumulation = std::string(mode) == "float32" ? md::accumulation::float32 : md::accumulation::element;
      double fl = 0;
      const row r = measure<T>(topo, n, o, fl);
      std::printf("%-28s %6zu %-13s %12.4e %12.4e %8.3f\n", t.c_str(), topo.size(), mode, r.err, fl, r.err / fl);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 16384;
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
    else if (a == "--dtype") dtype = next();
    else if (a == "--topology") topos.push_back(next());
    else {
      std::fprintf(stderr, "usage: mdring-precision [--count N] [--dtype bfloat16|half] [--topology T]...\n");
      return 2;
    }
  }
  if (topos.empty()) topos = {"shm:8", "shm:8 x ethernet:8", "shm:8 x ethernet:32"};
  if (dtype == "bfloat16") run<md::bfloat16>(topos, n, "bfloat16");
  else if (dtype == "half") run<md::half>(topos, n, "half");
  else {
    std::fprintf(stderr, "mdring-precision: --dtype takes bfloat16 or half, not %s\n", dtype.c_str());
    return 2;
  }
  return 0;
}
