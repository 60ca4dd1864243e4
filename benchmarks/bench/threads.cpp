// benchmarks/bench/threads.cpp: mdring-bench --threads N: the ranks are threads of
// this process (mdring::threads), with no baseline. Every collective is compiled
// here for the threads transport.
#include "collectives.hpp"

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mdring_bench {

int run_threads(const config& cfg, const collective_bench& coll) {
  if (cfg.baseline != "none") usage("--baseline mpi needs MPI processes, not --threads");
  const auto topo = md::parse_topology(cfg.topology);
  const std::size_t n = std::size_t(cfg.threads);
  std::barrier sync{std::ptrdiff_t(n)};
  std::vector<double> slot(n);
  std::vector<int> islot(n);
  std::vector<result_row> rows;
  std::string resolved;
  md::threads::run(n, [&](md::threads::endpoint ep) {
    auto comm = md::bind(topo, ep, make_options(cfg));
    world_ops w;
    w.rank = ep.rank;
    w.size = n;
    w.barrier = [&] { sync.arrive_and_wait(); };
    w.max = [&](double x) {
      slot[ep.rank] = x;
      sync.arrive_and_wait();
      const double m = *std::max_element(slot.begin(), slot.end());
      sync.arrive_and_wait();
      return m;
    };
    w.sum_int = [&](int x) {
      islot[ep.rank] = x;
      sync.arrive_and_wait();
      int s = 0;
      for (int v : islot) s += v;
      sync.arrive_and_wait();
      return s;
    };
    std::vector<result_row> r;
    every_collective::with(cfg.op, [&](auto c) {
      r = run_collective<decltype(c)>(cfg, comm, w, [](auto, auto t, auto) { return baseline_lib<decltype(t)>{}; });
    });
    if (ep.rank == 0) {
      rows = std::move(r);
      resolved = comm.topology().to_string();
    }
  });
  print_rows(cfg, rows, resolved, n, "threads", coll.bus_factor(n));
  return exit_status(rows);
}

}  // namespace mdring_bench
