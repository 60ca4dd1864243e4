// mdring-bench: mdring's counterpart of nccl-tests' all_reduce_perf.
//
//   mpirun -n 4 mdring-bench --topology "shm:2 x shm:*" --min-bytes 4K --max-bytes 64M --baseline mpi
//   mdring-run -n 4 mdring-bench --transport ucx --min-bytes 64K --max-bytes 16M --baseline gloo
//   mdring-bench --threads 8 --topology "shm:2 x shm:4" --bytes 16M --check
//
// The ranks are MPI processes (--transport mpi, the default), processes without
// MPI on mdring's UCX transport (--transport ucx: started by mdring-run or
// torchrun, mdring::ucx::world::from_env()), or threads of one process (--threads).
// For each size it runs the collective `--iters` times after `--warmup` untimed
// runs; with --baseline mpi it alternates every iteration with the matching MPI
// collective on the same buffers. --baseline gloo (with --transport ucx;
// all_reduce of float or double, sum) does the same with Gloo over TCP
// (gloo_baseline.hpp), timing both of its all-reduce algorithms, ring_chunked and
// halving_doubling, every iteration: a size reports the faster one's median, and
// which it was. --baseline mdring (with --reproducible or --accumulation float32:
// that mode against the default) times mdring's default mode on a second
// communicator of the same topology and options. Gloo reduces in place only: out
// of place, its time includes copying the send buffer into the receive buffer. A time is the slowest rank's
// for that iteration (the max over ranks of the local times: MPI_Allreduce over
// MPI; with --transport ucx a Gloo all-reduce, or without Gloo an mdring one on a
// flat communicator, outside the timed region), and the reported time is the
// median over iterations. algbw = bytes / time; busbw = algbw * factor as nccl-tests
// defines it (all_reduce 2(P-1)/P, reduce_scatter and all_gather (P-1)/P,
// broadcast and reduce 1); bytes is the size of the whole buffer (all_reduce,
// broadcast, reduce: the data; reduce_scatter: the send buffer; all_gather: the
// receive buffer). --check verifies every result of every iteration, both
// libraries', against exact expected values. --json adds the cost model's
// prediction (explain(), rank 0) as predicted_s. --link NAME=BW,LAT[,full][,device]
// registers a link (bytes/s, seconds) for --topology, e.g. to match a platform.
// --alloc node (the default) allocates the buffers with mdring::node_alloc, so
// that processes on one node read and write each other's buffers in place (the
// zero-copy path, mdring/memory.hpp); --alloc heap uses ordinary memory, which
// mdring reaches by cross-memory attach. Both libraries use the same buffers.
//
// Built with smpicxx (the `smpi` CMake preset), it runs under SimGrid's smpirun
// on simulated clusters (docs/SCALING.md): times are simulated (MPI_Wtime), and
// buffers and mdring's scratch are SMPI_SHARED_MALLOC'd unless --check is given.
//
// As nccl-tests' programs, it is a harness and one small file per collective:
// bench/harness.hpp names the files. This one is main().
#include "collectives.hpp"
#if MDRING_BENCH_WITH_MPI
#include <mdring/mpi.hpp>
#endif

#include <cstdio>
#include <exception>
#include <string>

namespace mdring_bench {

const collective_bench* find_collective(const std::string& op) {
  for (const collective_bench& c : every_collective::benches)
    if (op == c.name) return &c;
  return nullptr;
}

std::string collective_names() {
  std::string s;
  for (const collective_bench& c : every_collective::benches) s += (s.empty() ? "" : "|") + std::string(c.name);
  return s;
}

namespace {

// Runs a mode; an exception is reported and the exit status is 1.
template <class F>
int guarded(F&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mdring-bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace mdring_bench

int main(int argc, char** argv) {
  using namespace mdring_bench;
  const config cfg = parse(argc, argv);
  const collective_bench& coll = *find_collective(cfg.op);  // parse() checked it
#if !MDRING_BENCH_SMPI
  bench_node_memory = cfg.alloc == "node";
#endif
  for (auto& l : cfg.links) {
    try {
      md::register_link(l);
    } catch (const std::exception& e) {
      usage(e.what());
    }
  }
  if (cfg.threads > 0) return guarded([&] { return run_threads(cfg, coll); });
#if MDRING_BENCH_WITH_UCX
  if (cfg.transport == "ucx") return guarded([&] { return run_ucx(cfg, coll); });  // no MPI_Init
#endif
#if MDRING_BENCH_WITH_MPI
  // The nonblocking modes need a progress thread that calls MPI: MPI_THREAD_MULTIPLE.
  // The others keep plain MPI_Init, so that the blocking comparison is unchanged.
  if (cfg.inflight || cfg.overlap) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  const int status = guarded([&] { return run_mpi(cfg, coll); });
  MPI_Finalize();
  return status;
#elif MDRING_BENCH_WITH_UCX
  usage("built without MPI: use --threads N or --transport ucx");
#else
  usage("built without MPI: use --threads N");
#endif
}
