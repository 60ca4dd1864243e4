// benchmarks/bench/harness.hpp: mdring-bench's harness, as nccl-tests' common.h is
// theirs: the options, the ranks, the rows a run measures and their output.
//
//   harness.cpp       main
//   options.cpp       the command line (usage, parse) and the mdring::options it sets
//   output.cpp        the table, --json's rows and --plot
//   collective.hpp    what a collective plugs into: its buffers, the timing loop
//   collectives.hpp   the list of collectives, one file each: all_reduce.hpp,
//                     reduce_scatter.hpp, all_gather.hpp, broadcast.hpp, reduce.hpp
//   threads.cpp       the ranks as threads of this process (--threads)
//   mpi.cpp           MPI processes, and the baselines mpi and mdring
//   nonblocking.hpp   --inflight and --overlap (MPI, all_reduce; part of mpi.cpp)
//   ucx.cpp           UCX processes (--transport ucx), and the baseline gloo
//
// This header is light (no transport): options.cpp and output.cpp include it alone.
#pragma once

#include <mdring/options.hpp>
#include <mdring/topology/link.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mdring_bench {

namespace md = mdring;

struct config {
  std::string op = "all_reduce";
  std::string topology = "shm:*";
  std::string dtype = "float";
  std::string reduce_op = "sum";
  std::size_t min_bytes = 4096, max_bytes = std::size_t(64) << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = false, json = false, inplace = false, explain = false;
  std::string alloc = "node";     // node: mdring::node_alloc; heap: std::allocator
  std::string baseline = "none";  // none, mpi or gloo
  std::string transport = "mpi";  // mpi or ucx (processes without MPI)
  std::string plot;               // --plot FILE.png: also FILE.png.jsonl, drawn by scripts/plot_bench.py
  bool baseline_only = false;     // time the baseline alone (mdring's columns are null)
  int threads = 0;                // > 0: in-process ranks
  std::vector<md::algorithm> algorithms;
  double timeout = 0;
  std::size_t root = 0;
  std::vector<md::link_info> links;                   // --link, registered before --topology is parsed
  std::size_t segment_bytes = 0, pipeline_depth = 0;  // options.tune's, when given
  std::size_t staging_bytes = std::size_t(-1), nontemporal_bytes = std::size_t(-1);  // the same (-1: default)
  std::size_t split_ring_extent = std::size_t(-1);                                   // the same
  int inflight = 0;                            // --inflight N: N calls in flight against N blocking (nonblocking.hpp)
  bool overlap = false;                        // --overlap: a call overlapped with compute (nonblocking.hpp)
  std::string progress;                        // --progress agent|in_wait: options.progress
  std::string compute = "cpu";                 // --compute cpu|sleep: what --overlap overlaps with
  std::string planning;                        // --planning estimate|measure: options.planning
  bool reproducible = false;                   // --reproducible: options.reproducible
  std::string accumulation;                    // --accumulation element|float32: options.accumulation
  std::string profile;                         // --profile FILE: options.profile
  std::size_t hd_max_bytes = std::size_t(-1);  // --hd-max-bytes N: tune.halving_doubling_max_bytes
  std::size_t rd_max_bytes = std::size_t(-1);  // --rd-max-bytes N: tune.recursive_doubling_max_bytes
  double host_gamma = -1;                      // --host-gamma S: tune.host_gamma (seconds per byte folded)
};

// ---- options.cpp ------------------------------------------------------------
// Prints why and the usage on stderr, and exits with status 2.
[[noreturn]] void usage(const std::string& why);
config parse(int argc, char** argv);
md::options make_options(const config& cfg);

// The ranks: MPI processes, UCX processes or threads of this process.
struct world_ops {
  std::size_t rank = 0, size = 1;
  std::function<void()> barrier;
  std::function<double(double)> max;  // max over ranks
  std::function<int(int)> sum_int;
};

// What one size measured (rank 0's: times are already the slowest rank's).
struct result_row {
  std::size_t bytes = 0, elements = 0;
  double mdring_s = 0, baseline_s = 0;
  double predicted_s = 0;  // the cost model's (explain(), rank 0)
  bool has_baseline = false;
  long errors = 0;
  // A baseline of several variants (Gloo's algorithms): each one's median, and
  // the fastest's name (baseline_s is its time). Empty for a single variant.
  std::vector<std::pair<std::string, double>> variant_s;
  std::string baseline_variant;
};

// ---- one collective ---------------------------------------------------------
// What the harness knows of an --op before it runs one (collectives.hpp lists them;
// each collective's file, all_reduce.hpp say, describes it).
struct collective_bench {
  const char* name;                     // --op
  bool reduces;                         // folds with --reduce-op (the MPI baseline has no avg)
  double (*bus_factor)(std::size_t P);  // busbw = algbw * bus_factor, as nccl-tests defines it
};

// ---- harness.cpp ------------------------------------------------------------
// The collective that --op names, or null; and every --op, as --help lists them.
const collective_bench* find_collective(const std::string& op);
std::string collective_names();  // "all_reduce|reduce_scatter|..."

// ---- threads.cpp, mpi.cpp, ucx.cpp ------------------------------------------
// Every size of --op on the ranks of one transport: threads of this process, MPI
// processes (MPI is initialized), or UCX processes (started by mdring-run or
// torchrun). Rank 0 prints the rows; each returns the exit status.
int run_threads(const config& cfg, const collective_bench& coll);
int run_mpi(const config& cfg, const collective_bench& coll);
int run_ucx(const config& cfg, const collective_bench& coll);

// The exit status of a run: 1 when --check found a wrong value on some rank.
inline int exit_status(const std::vector<result_row>& rows) {
  for (auto& r : rows)
    if (r.errors) return 1;
  return 0;
}

// ---- output.cpp -------------------------------------------------------------
// The rows as a table, or --json's lines, and --plot's file. bus_factor: busbw =
// algbw * bus_factor (the collective's, for P ranks).
void print_rows(const config& cfg, const std::vector<result_row>& rows, const std::string& topo, std::size_t P,
                const std::string& transport, double bus_factor);

}  // namespace mdring_bench
