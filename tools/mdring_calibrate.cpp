// mdring-calibrate: measures this machine's links and writes a profile that bind()
// plans with (options.profile or MDRING_PROFILE; collective/calibrate.hpp).
//
//   mpirun -np 8 mdring-calibrate --topology "shm:4 x ethernet:*" --out machine.profile
//   mdring-run -n 4 mdring-calibrate --transport ucx --out machine.profile
//   MDRING_PROFILE=machine.profile mpirun -np 8 ./app
//
// Without --topology it uses mdring::detect_topology (MPI: shm:L x <net>:N from the
// nodes the ranks are on) or "shm:*" (UCX, one node). Rank 0 writes the file and
// prints, for all_reduce at a few sizes, what the cost model predicts with the
// links' traits and with the profile, beside the measured time.
#include <mdring/mdring.hpp>
#if MDRING_CALIBRATE_WITH_MPI
#include <mdring/mpi.hpp>
#endif
#if MDRING_CALIBRATE_WITH_UCX
#include <mdring/ucx.hpp>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <string>
#include <vector>

namespace md = mdring;

namespace {

#if MDRING_SMPI
// Under SimGrid SMPI: every simulated rank's buffers in the same shared pages, so
// that 4096 ranks fit (calibrate's buffers and the all_reduce's scratch).
std::pmr::memory_resource* memory() { return md::mpi::smpi_shared_memory(); }
#else
std::pmr::memory_resource* memory() { return std::pmr::get_default_resource(); }
#endif

struct args {
  std::string transport =
#if MDRING_CALIBRATE_WITH_MPI
      "mpi";
#else
      "ucx";
#endif
  std::string topology;  // empty: detected
  std::string out = "mdring.profile";
  md::calibration how;
  bool check = true;  // time all_reduce against the predictions
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s%smdring-calibrate [--transport mpi|ucx] [--topology T] [--out FILE] [--bytes B1,B2,B3,...]\n"
               "                 [--trials K] [--train N] [--train-max-bytes B] [--no-check]\n"
               "  measures every dimension's links (all rings of a dimension at once) and writes the profile\n"
               "  that bind() reads from options.profile or MDRING_PROFILE (default FILE: mdring.profile);\n"
               "  sizes up to --train-max-bytes (default 1M) are also timed as trains of N messages in flight\n"
               "  (default 4; 0: none)\n",
               why.c_str(), why.empty() ? "" : "\n");
  std::exit(why == "help" ? 0 : 2);
}

std::size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double m = 1;
  if (*end == 'K' || *end == 'k') m = 1024, ++end;
  else if (*end == 'M' || *end == 'm') m = 1024.0 * 1024, ++end;
  if (end == s.c_str() || *end || !(v > 0)) usage("--bytes: not a size: " + s);
  return std::size_t(v * m);
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(k + " needs a value");
      return argv[++i];
    };
    if (k == "--transport") a.transport = next();
    else if (k == "--topology") a.topology = next();
    else if (k == "--out") a.out = next();
    else if (k == "--trials") a.how.trials = std::size_t(std::atol(next().c_str()));
    else if (k == "--train") a.how.train = std::size_t(std::atol(next().c_str()));
    else if (k == "--train-max-bytes") a.how.train_max_bytes = parse_bytes(next());
    else if (k == "--no-check") a.check = false;
    else if (k == "--bytes") {
      a.how.bytes.clear();
      const std::string v = next();
      for (std::size_t pos = 0; pos <= v.size();) {
        const std::size_t c = std::min(v.find(',', pos), v.size());
        a.how.bytes.push_back(parse_bytes(v.substr(pos, c - pos)));
        pos = c + 1;
      }
    } else if (k == "-h" || k == "--help") usage("help");
    else usage("unknown argument: " + k);
  }
  if (a.transport != "mpi" && a.transport != "ucx") usage("--transport takes mpi or ucx");
  return a;
}

// Median seconds of an all_reduce of n floats (the slowest rank's, 5 runs).
template <class Comm>
double time_all_reduce(Comm& comm, std::size_t n) {
  std::pmr::vector<float> x(n, 1.0f, memory()), y(n, memory());
  std::vector<double> t;
  for (int r = 0; r < 6; ++r) {
    int go = 0;
    md::all_reduce(comm, &go, 1, md::max);
    const double t0 = md::seconds_on(comm.get_transport());  // simulated seconds under SMPI
    md::all_reduce(comm, x.data(), y.data(), n, md::sum);
    double s = md::seconds_on(comm.get_transport()) - t0;
    md::all_reduce(comm, &s, 1, md::max);
    if (r) t.push_back(s);  // the first is a warm-up
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class BindFn>
int run(const args& a, BindFn&& bind_with) {
  md::options plain;
  plain.memory = memory();
  auto comm = bind_with(plain);
  const md::profile p = md::calibrate(comm, a.how);
  const bool root = comm.rank() == 0;
  if (root) {
    p.save(a.out);
    std::printf("# mdring-calibrate: %zu ranks, executed topology %s; wrote %s\n%s", comm.size(), p.topology.c_str(),
                a.out.c_str(), p.to_string().c_str());
  }
  if (!a.check) return 0;
  int go = 0;
  md::all_reduce(comm, &go, 1, md::max);  // the file is written
  md::options o;
  o.profile = a.out;
  o.memory = memory();
  auto calibrated = bind_with(o);
  if (root)
    std::printf(
        "# all_reduce, float sum: measured, and predicted with the links' traits and with the profile\n"
        "# %12s %14s %14s %8s %14s %8s\n",
        "bytes", "measured_us", "traits_us", "ratio", "profile_us", "ratio");
  for (std::size_t bytes : {std::size_t(4) << 10, std::size_t(64) << 10, std::size_t(1) << 20, std::size_t(16) << 20}) {
    const std::size_t n = bytes / sizeof(float);
    const double traits = comm.template make_plan<float>(n).seconds();
    const double prof = calibrated.template make_plan<float>(n).seconds();
    const double t = time_all_reduce(calibrated, n);
    if (root)
      std::printf("  %12zu %14.1f %14.1f %8.2f %14.1f %8.2f\n", bytes, t * 1e6, traits * 1e6, traits / t, prof * 1e6,
                  prof / t);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  try {
#if MDRING_CALIBRATE_WITH_UCX
    if (a.transport == "ucx") {
      auto world = md::ucx::world::from_env();
      const auto topo = md::parse_topology(a.topology.empty() ? "shm:*" : a.topology);
      return run(a, [&](const md::options& o) { return md::bind(topo, world, o); });
    }
#endif
#if MDRING_CALIBRATE_WITH_MPI
    if (a.transport == "mpi") {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
      int rc = 0;
      try {
        const auto topo = a.topology.empty() ? md::detect_topology(MPI_COMM_WORLD) : md::parse_topology(a.topology);
        rc = run(a, [&](const md::options& o) { return md::bind(topo, MPI_COMM_WORLD, o); });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mdring-calibrate: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      MPI_Finalize();
      return rc;
    }
#endif
    usage("--transport " + a.transport + ": not built in");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mdring-calibrate: %s\n", e.what());
    return 1;
  }
}
