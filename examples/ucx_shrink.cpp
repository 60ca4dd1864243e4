// examples/ucx_shrink.cpp: a loop of all_reduce calls that loses a process, goes
// on without it in the same processes (mdring::shrink), and grows back when a
// replacement joins (mdring::grow).
//
//   mdring-run -n 6 --on-failure shrink --replace ./ucx_shrink   # rank 5 dies at step 5, is replaced
//   mdring-run -n 6 --on-failure shrink ./ucx_shrink             # no replacement: 4 ranks go on
//   mdring-run -n 6 --on-failure shrink --replace ./ucx_shrink 0 3   # rank 0 dies at step 3, is replaced
//
// The job is "shm:2 x ethernet:*" (pairs of processes as nodes). When a call
// fails, every survivor calls shrink: they agree on who failed, and the dead
// rank's node is dropped ("shm:2 x ethernet:3" becomes "shm:2 x ethernet:2").
// Then the members offer to grow back for 3 s: the dead rank's node-mate, left
// out by the shrink, joins again (ucx::join), and so does the process mdring-run
// --replace starts in the dead rank's place (MDRING_JOIN=1, ucx::join_from_env).
// Rank 0 hands the other survivors, then the joiners, the step to redo (a
// trainer would hand them its weights the same way), and the step is done again:
// a failure need not end the same call everywhere (a survivor can fail in step 4
// while the others, to whom the dead rank had given its part, finished it and
// fail in step 5), so the survivors take rank 0's. Without --on-failure shrink,
// mdring-run would stop the others after the first death. Growing needs the
// job's store, which mdring-run hosts in a process of its own: the job grows back
// after losing rank 0 too (with MDRING_RUN_STORE=rank0, rank 0 hosts it, and the
// survivors of its death go on smaller).
#include <mdring/ucx.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  mdring::options o;
  o.timeout = 10s;
  const bool joining = std::getenv("MDRING_JOIN") != nullptr;  // started by mdring-run --replace
  std::optional<mdring::ucx::world> world;
  if (!joining) world.emplace(mdring::ucx::world::from_env());
  const std::size_t victim = argc > 1 ? std::size_t(std::atol(argv[1])) : (world ? world->size() - 1 : 0);
  const long dies_at = argc > 2 ? std::atol(argv[2]) : 5;
  auto comm =
      joining ? mdring::ucx::join_from_env(o) : mdring::bind(mdring::parse_topology("shm:2 x ethernet:*"), *world, o);
  long step = 0;
  if (joining) mdring::broadcast(comm, &step, 1, 0);  // where the others are
  for (; step < 10; ++step) {
    if (!joining && world->rank() == victim && step == dies_at) std::raise(SIGKILL);
    std::vector<double> grad(1000, 1.0);
    try {
      mdring::all_reduce(comm, grad.data(), grad.size());
    } catch (const mdring::error& e) {
      std::fprintf(stderr, "step %ld: %s\n", step, e.what());
      auto ms = [t0 = std::chrono::steady_clock::now()] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      };
      comm = mdring::shrink(comm);
      while (comm.size() != 0) {  // every survivor on rank 0's step
        try {
          mdring::broadcast(comm, &step, 1, 0);
          break;
        } catch (const mdring::error&) {  // another rank lost meanwhile: shrink again
          comm = mdring::shrink(comm);
        }
      }
      const bool out = comm.size() == 0;
      if (!out && comm.rank() == 0)
        std::printf("step %ld: shrunk to %s (%.1f ms)\n", step, comm.topology().to_string().c_str(), ms());
      try {
        if (out) comm = mdring::ucx::join(*world, o, 3s);  // the node-mate of the dead rank
        else comm = mdring::grow(comm, {.size = world->size(), .timeout = 3s});
        if (comm.rank() == 0)
          std::printf("step %ld: grown to %s (%.1f ms after the failure)\n", step, comm.topology().to_string().c_str(),
                      ms());
        mdring::broadcast(comm, &step, 1, 0);
      } catch (const mdring::error& g) {
        if (out) return std::printf("left out: %s\n", g.what()), 0;
        if (comm.rank() == 0) std::printf("step %ld: not grown (%s)\n", step, g.what());
      }
      --step;  // do the step again
      continue;
    }
    if (grad[0] != double(comm.size())) return std::fprintf(stderr, "step %ld: got %g\n", step, grad[0]), 1;
    if (comm.rank() == 0) std::printf("step %ld: %zu ranks, sum %g\n", step, comm.size(), grad[0]);
  }
  return 0;
}
