// hang_probe: run by tests/ucx/hang_report.sh under mdring-run (UCX world, one
// machine), to show the hang report end to end.
//
//   hang_probe stop     rank 1 stops itself (SIGSTOP) before its all_reduce; the
//                       others fail at their deadline (MDRING_TIMEOUT) naming it,
//                       write their line, and exit 3
//   hang_probe late S   rank 1 comes S seconds late to the second all_reduce; the
//                       others wait; every rank exits 0 once it comes
// Every rank first runs one all_reduce of 1000 floats (call 1) and checks it.
#include <mdring/ucx.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace md = mdring;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "late";
  auto w = md::ucx::world::from_env();
  const std::size_t P = w.size(), r = w.rank();
  md::options o;
  o.checks = md::check_level::local;
  auto comm = md::bind(md::parse_topology("ethernet:*"), w, o);
  std::vector<float> v(1000, float(r + 1));
  md::all_reduce(comm, v.data(), v.size());
  if (v[999] != float(P * (P + 1) / 2)) {
    std::fprintf(stderr, "hang_probe: rank %zu: wrong sum %g\n", r, double(v[999]));
    return 1;
  }
  try {
    if (mode == "stop" && r == 1) std::raise(SIGSTOP);
    if (mode == "late" && r == 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(argc > 2 ? std::atof(argv[2]) : 3));
    md::all_reduce(comm, v.data(), v.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hang_probe: rank %zu failed: %s\n", r, e.what());
    return 3;
  }
  md::ucx::wait_to_leave(w);
  return 0;
}
