// examples/ucx_shrink.cpp: a loop of all_reduce calls that loses a process and
// goes on without it, in the same processes (mdring::shrink).
//
//   mdring-run -n 6 --on-failure shrink ./ucx_shrink          # rank 5 dies at step 5
//   mdring-run -n 6 --on-failure shrink ./ucx_shrink 0 3      # rank 0 (the store's host) at step 3
//
// The job is "shm:2 x ethernet:*" (pairs of processes as nodes). When a call
// fails, every survivor calls shrink: they agree on who failed, the dead rank's
// node is dropped ("shm:2 x ethernet:3" becomes "shm:2 x ethernet:2"), and the
// step is done again on the survivors. The dead rank's node-mate is left out
// (size() == 0) and leaves. Without --on-failure shrink, mdring-run would stop
// the others after the first death.
#include <mdring/ucx.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  auto world = mdring::ucx::world::from_env();
  const std::size_t victim = argc > 1 ? std::size_t(std::atol(argv[1])) : world.size() - 1;
  const int dies_at = argc > 2 ? std::atoi(argv[2]) : 5;
  mdring::options o;
  o.timeout = std::chrono::seconds(10);
  auto comm = mdring::bind(mdring::parse_topology("shm:2 x ethernet:*"), world, o);
  const std::size_t me = world.rank();  // this process's rank in the job (comm.rank() changes)
  for (int step = 0; step < 10; ++step) {
    if (me == victim && step == dies_at) std::raise(SIGKILL);
    std::vector<double> grad(1000, 1.0);
    try {
      mdring::all_reduce(comm, grad.data(), grad.size());
    } catch (const mdring::error& e) {
      std::fprintf(stderr, "process %zu, step %d: %s\n", me, step, e.what());
      comm = mdring::shrink(comm);
      if (comm.size() == 0) {
        std::printf("process %zu: left out (%s)\n", me, comm.failure().c_str());
        return 0;
      }
      if (comm.rank() == 0) std::printf("step %d: shrunk to %s\n", step, comm.topology().to_string().c_str());
      --step;  // do the step again, on the survivors
      continue;
    }
    if (grad[0] != double(comm.size())) {
      std::fprintf(stderr, "process %zu, step %d: got %g, not %zu\n", me, step, grad[0], comm.size());
      return 1;
    }
    if (comm.rank() == 0) std::printf("step %d: %zu ranks, sum %g\n", step, comm.size(), grad[0]);
  }
  return 0;
}
