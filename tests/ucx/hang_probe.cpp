// hang_probe: run by tests/ucx/hang_report.sh under mdring-run (UCX world, one
// machine), to show the hang report end to end.
//
//   hang_probe stop     rank 1 stops itself (SIGSTOP) before its all_reduce; the
//                       others fail at their deadline (HANG_PROBE_TIMEOUT s) naming it,
//                       write their line, and exit 3
//   hang_probe late DIR every rank writes DIR/ready.RANK after the first all_reduce;
//                       rank 1 then waits for DIR/go (at most 60 s) before the
//                       second, which the others wait in; every rank exits 0
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
  // The collectives' deadline (the rendezvous keeps MDRING_TIMEOUT's, so that a
  // slow start under load is not taken for the fault).
  if (const char* t = std::getenv("HANG_PROBE_TIMEOUT"))
    o.timeout = std::chrono::milliseconds(static_cast<long long>(std::atof(t) * 1000));
  auto comm = md::bind(md::parse_topology("ethernet:*"), w, o);
  std::vector<float> v(1000, float(r + 1));
  md::all_reduce(comm, v.data(), v.size());
  if (v[999] != float(P * (P + 1) / 2)) {
    std::fprintf(stderr, "hang_probe: rank %zu: wrong sum %g\n", r, double(v[999]));
    return 1;
  }
  try {
    if (mode == "stop" && r == 1) std::raise(SIGSTOP);
    if (mode == "late") {
      const std::string dir = argc > 2 ? argv[2] : ".";
      std::fclose(std::fopen((dir + "/ready." + std::to_string(r)).c_str(), "w"));
      for (int i = 0; r == 1 && i < 6000; ++i) {
        if (FILE* f = std::fopen((dir + "/go").c_str(), "r")) {
          std::fclose(f);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    md::all_reduce(comm, v.data(), v.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hang_probe: rank %zu failed: %s\n", r, e.what());
    return 3;
  }
  md::ucx::wait_to_leave(w);
  return 0;
}
