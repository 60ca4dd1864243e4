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
#include <mdring/mdring.hpp>
#if MDRING_BENCH_WITH_MPI
#include <mdring/mpi.hpp>
#endif
#if MDRING_BENCH_WITH_UCX
#include <mdring/ucx.hpp>
#include <unistd.h>  // gethostname
#endif
#if MDRING_BENCH_WITH_GLOO
#include "gloo_baseline.hpp"
#endif
// Every --dtype and --reduce-op (7 x 5 instantiations of each collective per
// transport, most of this file's compile time), or float sum only (CI, where the
// bench is built only to check that it builds).
#ifndef MDRING_BENCH_ALL_TYPES
#define MDRING_BENCH_ALL_TYPES 1
#endif
#if MDRING_BENCH_WITH_MPI && defined(MDRING_SMPI) && MDRING_SMPI
#define MDRING_BENCH_SMPI 1
#include <memory_resource>
#include <new>
#else
#define MDRING_BENCH_SMPI 0
#endif

#include <algorithm>
#include <barrier>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace md = mdring;

namespace {

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
  int inflight = 0;             // --inflight N: N calls in flight against N blocking (bench_nonblocking.hpp)
  bool overlap = false;         // --overlap: a call overlapped with compute (bench_nonblocking.hpp)
  std::string progress;         // --progress agent|in_wait: options.progress
  std::string compute = "cpu";  // --compute cpu|sleep: what --overlap overlaps with
  std::string planning;         // --planning estimate|measure: options.planning
  bool reproducible = false;    // --reproducible: options.reproducible
  std::string accumulation;     // --accumulation element|float32: options.accumulation
  std::string profile;          // --profile FILE: options.profile
  std::size_t hd_max_bytes = std::size_t(-1);  // --hd-max-bytes N: tune.halving_doubling_max_bytes
  std::size_t rd_max_bytes = std::size_t(-1);  // --rd-max-bytes N: tune.recursive_doubling_max_bytes
  double host_gamma = -1;                      // --host-gamma S: tune.host_gamma (seconds per byte folded)
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "mdring-bench: %s\n"
      "usage: mdring-bench [--op all_reduce|reduce_scatter|all_gather|broadcast|reduce]\n"
      "  [--topology \"shm:2 x shm:*\"] [--dtype float|double|int32|int64|uint8|half|bfloat16]\n"
      "  [--reduce-op sum|prod|min|max|avg] [--bytes N | --min-bytes N --max-bytes N --factor F]\n"
      "  [--iters N] [--warmup N] [--check] [--inplace] [--baseline mpi|gloo|mdring|none] [--baseline-only] [--json]\n"
      "  [--reproducible] [--accumulation element|float32|element,float32]  (options.reproducible, "
      "options.accumulation\n"
      "   or per dimension options.dimension_accumulation; with\n"
      "     --baseline mdring, timed against the default mode)\n"
      "  [--transport mpi|ucx]  (ucx: processes started by mdring-run or torchrun, no MPI; --baseline gloo\n"
      "     needs it and times all_reduce of float or double, sum, with Gloo's ring_chunked and\n"
      "     halving_doubling, reporting the faster and which)\n"
      "  [--alloc node|heap]  (buffers from mdring::node_alloc, the default, or ordinary memory)\n"
      "  [--explain]  (rank 0 prints the plan of each size on stderr: stages, algorithms, segments, predicted time)\n"
      "  [--threads N] [--algorithms ring,direct,hd,rd,auto,...] [--root R] [--timeout SECONDS]\n"
      "  [--plot FILE.png]  (busbw against size, mdring and baseline; needs python3-matplotlib)\n"
      "  [--inflight N | --overlap [--compute cpu|sleep]] [--progress agent|in_wait]  (MPI, all_reduce:\n"
      "     N calls in flight against N blocking, or one call overlapped with compute; mdring and MPI\n"
      "     in one run)\n"
      "  [--link NAME=BANDWIDTH,LATENCY[,full|ring][,host|device][,ports=N][,overhead=S]]... [--segment-bytes N]\n"
      "  [--pipeline-depth N]\n"
      "  [--staging-bytes N] [--nontemporal-bytes N]  (options.tune.shared_staging_bytes, nontemporal_bytes)\n"
      "  [--split-ring-extent N]  (options.tune.split_ring_extent: rings of N ranks or more run as a x b; 0: never)\n"
      "  [--hd-max-bytes N]  (options.tune.halving_doubling_max_bytes: 0 never runs halving-doubling)\n"
      "  [--rd-max-bytes N]  (options.tune.recursive_doubling_max_bytes: 0 never runs recursive doubling or trees)\n"
      "  [--host-gamma S]  (options.tune.host_gamma, the cost model's seconds per byte folded on the host;\n"
      "     under SMPI with smpi/simulate-computation:no folds are free, as on GPUs: say 1e-12)\n"
      "  [--planning estimate|measure] [--profile FILE]  (options.planning: measure times candidate plans at\n"
      "     the first call of each size, in the warm-up; options.profile: figures from mdring-calibrate)\n"
      "sizes take K, M, G suffixes (powers of 1024); --link takes bytes/s and seconds\n",
      why.c_str());
  std::exit(2);
}

std::size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) usage("not a size: " + s);
  double mult = 1;
  switch (*end) {
    case 'k':
    case 'K':
      mult = 1024.0;
      break;
    case 'm':
    case 'M':
      mult = 1024.0 * 1024;
      break;
    case 'g':
    case 'G':
      mult = 1024.0 * 1024 * 1024;
      break;
    case '\0':
      break;
    default:
      usage("not a size: " + s);
  }
  return std::size_t(v * mult);
}

// --link: mdring::parse_link's syntax (topology/runtime.hpp).
md::link_info parse_link(const std::string& s) {
  try {
    return md::parse_link(s);
  } catch (const md::invalid_argument& e) {
    usage(std::string("--link: ") + e.what());
  }
}

config parse(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--op") c.op = next();
    else if (a == "--topology") c.topology = next();
    else if (a == "--dtype") c.dtype = next();
    else if (a == "--reduce-op") c.reduce_op = next();
    else if (a == "--bytes") c.min_bytes = c.max_bytes = parse_bytes(next());
    else if (a == "--min-bytes") c.min_bytes = parse_bytes(next());
    else if (a == "--max-bytes") c.max_bytes = parse_bytes(next());
    else if (a == "--factor") c.factor = std::atof(next().c_str());
    else if (a == "--iters") c.iters = std::atoi(next().c_str());
    else if (a == "--warmup") c.warmup = std::atoi(next().c_str());
    else if (a == "--check") c.check = true;
    else if (a == "--explain") c.explain = true;
    else if (a == "--inplace") c.inplace = true;
    else if (a == "--alloc") {
      c.alloc = next();
      if (c.alloc != "node" && c.alloc != "heap") usage("--alloc takes node or heap, not " + c.alloc);
    } else if (a == "--json") c.json = true;
    else if (a == "--plot") c.plot = next();
    else if (a == "--baseline") c.baseline = next();
    else if (a == "--transport") c.transport = next();
    else if (a == "--baseline-only") c.baseline_only = true;
    else if (a == "--threads") c.threads = std::atoi(next().c_str());
    else if (a == "--root") c.root = std::size_t(std::atol(next().c_str()));
    else if (a == "--timeout") c.timeout = std::atof(next().c_str());
    else if (a == "--link") c.links.push_back(parse_link(next()));
    else if (a == "--segment-bytes") c.segment_bytes = parse_bytes(next());
    else if (a == "--pipeline-depth") c.pipeline_depth = std::size_t(std::atol(next().c_str()));
    else if (a == "--staging-bytes") c.staging_bytes = parse_bytes(next());
    else if (a == "--nontemporal-bytes") c.nontemporal_bytes = parse_bytes(next());
    else if (a == "--split-ring-extent") c.split_ring_extent = std::size_t(std::atol(next().c_str()));
    else if (a == "--inflight") c.inflight = std::atoi(next().c_str());
    else if (a == "--overlap") c.overlap = true;
    else if (a == "--compute") {
      c.compute = next();
      if (c.compute != "cpu" && c.compute != "sleep") usage("--compute takes cpu or sleep, not " + c.compute);
    } else if (a == "--reproducible") c.reproducible = true;
    else if (a == "--accumulation") {
      c.accumulation = next();
      std::string_view v = c.accumulation;
      for (;;) {  // element, float32, or one per dimension: element,float32
        const std::string_view w = v.substr(0, v.find(','));
        if (w != "element" && w != "float32")
          usage("--accumulation takes element, float32 or one of them per dimension (element,float32), not " +
                c.accumulation);
        if (w.size() == v.size()) break;
        v.remove_prefix(w.size() + 1);
      }
    } else if (a == "--planning") {
      c.planning = next();
      if (c.planning != "estimate" && c.planning != "measure")
        usage("--planning takes estimate or measure, not " + c.planning);
    } else if (a == "--profile") c.profile = next();
    else if (a == "--hd-max-bytes") c.hd_max_bytes = parse_bytes(next());
    else if (a == "--rd-max-bytes") c.rd_max_bytes = parse_bytes(next());
    else if (a == "--host-gamma") c.host_gamma = std::atof(next().c_str());
    else if (a == "--progress") {
      c.progress = next();
      if (c.progress != "agent" && c.progress != "in_wait")
        usage("--progress takes agent or in_wait, not " + c.progress);
    } else if (a == "--algorithms") {
      std::string s = next();
      std::size_t pos = 0;
      while (pos <= s.size()) {
        const std::size_t comma = std::min(s.find(',', pos), s.size());
        const std::string w = s.substr(pos, comma - pos);
        // mdring's names (as explain() prints them), and the short hd and auto
        if (w == "hd") c.algorithms.push_back(md::algorithm::halving_doubling);
        else if (w == "rd") c.algorithms.push_back(md::algorithm::recursive_doubling);
        else if (w == "auto") c.algorithms.push_back(md::algorithm::automatic);
        else try {
            c.algorithms.push_back(md::algorithm_from_string(w, "--algorithms"));
          } catch (const md::invalid_argument& e) {
            usage(std::string("--algorithms: ") + e.what());
          }
        pos = comma + 1;
      }
    } else if (a == "-h" || a == "--help") usage("help");
    else usage("unknown argument: " + a);
  }
  if (c.op != "all_reduce" && c.op != "reduce_scatter" && c.op != "all_gather" && c.op != "broadcast" &&
      c.op != "reduce")
    usage("unknown --op " + c.op);
  if (c.baseline != "none" && c.baseline != "mpi" && c.baseline != "gloo" && c.baseline != "mdring")
    usage("unknown --baseline " + c.baseline);
  if (c.baseline == "mdring" && (c.transport != "mpi" || c.threads > 0 || c.baseline_only))
    usage(
        "--baseline mdring (mdring's default mode on a second communicator) needs --transport mpi, no --threads "
        "and no --baseline-only");
  if (c.baseline_only && c.baseline == "none") usage("--baseline-only needs --baseline mpi or gloo");
  if (c.transport != "mpi" && c.transport != "ucx") usage("--transport takes mpi or ucx, not " + c.transport);
  if (c.transport == "ucx") {
#if !MDRING_BENCH_WITH_UCX
    usage("built without UCX (libucx-dev): --transport ucx is not available");
#endif
    if (c.threads > 0) usage("--threads runs ranks as threads: no --transport ucx with it");
    if (c.baseline == "mpi")
      usage("--baseline mpi needs --transport mpi (no MPI runs with --transport ucx): use --baseline gloo");
    if (c.inflight || c.overlap) usage("--inflight and --overlap need --transport mpi");
  }
  if (c.baseline == "gloo") {
#if !MDRING_BENCH_WITH_GLOO
    usage("built without Gloo (libgloo-dev): --baseline gloo is not available");
#endif
    if (c.transport != "ucx") usage("--baseline gloo needs --transport ucx");
    if (c.op != "all_reduce" || (c.dtype != "float" && c.dtype != "double") || c.reduce_op != "sum")
      usage("--baseline gloo times all_reduce of float or double with --reduce-op sum");
    if (c.max_bytes > std::size_t(INT_MAX))
      usage("--baseline gloo: Gloo's algorithms take at most 2 GiB - 1 bytes (an int); lower --max-bytes");
  }
  if (c.iters < 1 || c.warmup < 0) usage("--iters must be >= 1 and --warmup >= 0");
  if (c.inflight < 0) usage("--inflight takes a number of calls >= 1");
  if ((c.inflight || c.overlap) && (c.op != "all_reduce" || c.threads > 0))
    usage("--inflight and --overlap time all_reduce between MPI processes (no --threads, --op all_reduce)");
  if (c.factor <= 1) usage("--factor must be > 1");
  if (c.min_bytes > c.max_bytes) usage("--min-bytes must not exceed --max-bytes");
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

md::collective collective_of(const std::string& op) {
  if (op == "reduce_scatter") return md::collective::reduce_scatter;
  if (op == "all_gather") return md::collective::all_gather;
  if (op == "broadcast") return md::collective::broadcast;
  if (op == "reduce") return md::collective::reduce;
  return md::collective::all_reduce;
}

double bus_factor(const std::string& op, std::size_t p) {
  const double P = double(p);
  if (op == "all_reduce") return 2 * (P - 1) / P;
  if (op == "reduce_scatter" || op == "all_gather") return (P - 1) / P;
  return 1;
}

// The value rank r contributes at index i: small integers, so that every op's
// result is exact in every type, in any order of reduction: 1..13 (sums stay
// exact in bfloat16 up to 19 ranks, in half up to 157), and for prod 1 or 2.
template <class T>
T input_value(const std::string& op, std::size_t r, std::size_t i) {
  if (op == "prod") return T(float((i + r) % 3 == 0 ? 2 : 1));
  return T(float((i * 7 + r * 3) % 13 + 1));
}

// What the op gives over ranks 0..P-1 at index i, computed as the library's
// definition says (integers wrap; avg divides the sum once, in the accumulator type).
template <class T>
T expected(const std::string& op, std::size_t P, std::size_t i) {
  using A = md::accumulator_t<T>;
  if constexpr (std::is_integral_v<T>) {
    std::uint64_t acc = std::uint64_t(input_value<T>(op, 0, i));
    for (std::size_t r = 1; r < P; ++r) {
      const auto x = std::uint64_t(input_value<T>(op, r, i));
      if (op == "sum" || op == "avg") acc += x;
      else if (op == "prod") acc *= x;
      else if (op == "min") acc = std::min(acc, x);
      else acc = std::max(acc, x);
    }
    if (op == "avg") return T(T(acc) / T(P));
    return T(acc);
  } else {
    double acc = double(A(input_value<T>(op, 0, i)));
    for (std::size_t r = 1; r < P; ++r) {
      const double x = double(A(input_value<T>(op, r, i)));
      if (op == "sum" || op == "avg") acc += x;
      else if (op == "prod") acc *= x;
      else if (op == "min") acc = std::min(acc, x);
      else acc = std::max(acc, x);
    }
    if (op == "avg") return T(A(acc) / A(P));
    return T(A(acc));
  }
}

// The ranks: MPI processes, or threads of this process.
struct world_ops {
  std::size_t rank = 0, size = 1;
  std::function<void()> barrier;
  std::function<double(double)> max;  // max over ranks
  std::function<int(int)> sum_int;
};

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

template <class T>
bool equal_value(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Seconds since some fixed point: simulated time under SMPI (steady_clock would
// read the machine running the simulation).
double now_seconds() {
#if MDRING_BENCH_SMPI
  return MPI_Wtime();
#else
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
#endif
}

#if MDRING_BENCH_SMPI
// ---- SimGrid SMPI ------------------------------------------------------------
// The user buffers and all of mdring's scratch (options::memory) come from SMPI's
// shared pages (mdring::mpi::smpi_shared_memory, transport/mpi_node.hpp); --check
// needs real data and keeps ordinary memory (small runs).
bool sim_shared_data = true;  // false with --check
std::pmr::memory_resource* sim_memory() {
  return sim_shared_data ? md::mpi::smpi_shared_memory() : std::pmr::new_delete_resource();
}

// What runner needs of std::vector, without touching the memory: 1024 ranks
// zero-filling shared pages would cost minutes of the host's time for nothing.
template <class T>
class sim_buffer {
public:
  sim_buffer() = default;
  sim_buffer(const sim_buffer&) = delete;
  sim_buffer& operator=(const sim_buffer&) = delete;
  ~sim_buffer() { release(); }
  void resize(std::size_t n) {
    release();
    if (n) p_ = static_cast<T*>(sim_memory()->allocate(n * sizeof(T), alignof(T) < 64 ? 64 : alignof(T)));
    n_ = n;
    if (n && !sim_shared_data) std::memset(static_cast<void*>(p_), 0, n * sizeof(T));
  }
  T* data() noexcept { return p_; }
  const T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_[i]; }

private:
  void release() noexcept {
    if (p_) sim_memory()->deallocate(p_, n_ * sizeof(T), alignof(T) < 64 ? 64 : alignof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};
template <class T>
using bench_buffer = sim_buffer<T>;
#else
// node_alloc or the heap, by --alloc (set once before any buffer exists).
bool bench_node_memory = true;
template <class T>
struct bench_allocator {
  using value_type = T;
  bench_allocator() = default;
  template <class U>
  bench_allocator(const bench_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return bench_node_memory ? md::node_allocator<T>().allocate(n) : std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    bench_node_memory ? md::node_allocator<T>().deallocate(p, n) : std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const bench_allocator<U>&) const noexcept {
    return true;
  }
};
template <class T>
using bench_buffer = std::vector<T, bench_allocator<T>>;
#endif

// Sets up buffers for one size and runs one collective on them.
template <class T, class Comm>
struct runner {
  const config& cfg;
  Comm& comm;
  std::size_t P, rank, count;  // count: per rank for reduce_scatter/all_gather, else the whole buffer
  bench_buffer<T> send, recv;

  runner(const config& c, Comm& cm, std::size_t bytes) : cfg(c), comm(cm), P(cm.size()), rank(cm.rank()) {
    const std::size_t elems = std::max<std::size_t>(bytes / sizeof(T), 0);
    const bool per_rank = cfg.op == "reduce_scatter" || cfg.op == "all_gather";
    count = per_rank ? elems / P : elems;
    const std::size_t send_n = cfg.op == "reduce_scatter" ? count * P : count;
    const std::size_t recv_n = cfg.op == "all_gather" ? count * P : count;
    send.resize(cfg.inplace ? 0 : send_n);
    recv.resize(cfg.inplace ? std::max(send_n, recv_n) : recv_n);
  }

  std::size_t bytes() const {
    const std::size_t per = count * sizeof(T);
    return (cfg.op == "reduce_scatter" || cfg.op == "all_gather") ? per * P : per;
  }

  void fill() {
#if MDRING_BENCH_SMPI
    if (sim_shared_data) return;  // shared pages: nothing to compute on
#endif
    auto& in = cfg.inplace ? recv : send;
    if (cfg.op == "all_gather") {
      T* own = cfg.inplace ? recv.data() + rank * count : send.data();
      for (std::size_t i = 0; i < count; ++i) own[i] = input_value<T>(cfg.reduce_op, rank, rank * count + i);
    } else if (cfg.op == "broadcast") {
      for (std::size_t i = 0; i < count; ++i)
        recv[i] = rank == cfg.root ? input_value<T>(cfg.reduce_op, rank, i) : T(0.0f);
    } else {
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = input_value<T>(cfg.reduce_op, rank, i);
    }
  }

  template <class Op>
  void run_mdring(Op op) {
    run_on(comm, op);
  }
  // The collective on these buffers through communicator c (--baseline mdring: a
  // second one, bound in the default mode).
  template <class C, class Op>
  void run_on(C& c, Op op) {
    T* r = recv.data();
    const T* s = cfg.inplace ? recv.data() : send.data();
    if (cfg.op == "all_reduce") md::all_reduce(c, s, r, count, op);
    else if (cfg.op == "reduce_scatter") md::reduce_scatter(c, s, cfg.inplace ? r + rank * count : r, count, op);
    else if (cfg.op == "all_gather") md::all_gather(c, cfg.inplace ? r + rank * count : s, r, count);
    else if (cfg.op == "broadcast") md::broadcast(c, r, count, cfg.root);
    else md::reduce(c, s, r, count, cfg.root, op);
  }

  long verify() const {
    long bad = 0;
    if (cfg.op == "all_reduce" || (cfg.op == "reduce" && rank == cfg.root)) {
      for (std::size_t i = 0; i < count; ++i) bad += !equal_value(recv[i], expected<T>(cfg.reduce_op, P, i));
    } else if (cfg.op == "reduce_scatter") {
      const T* r = cfg.inplace ? recv.data() + rank * count : recv.data();
      for (std::size_t i = 0; i < count; ++i)
        bad += !equal_value(r[i], expected<T>(cfg.reduce_op, P, rank * count + i));
    } else if (cfg.op == "all_gather") {
      for (std::size_t q = 0; q < P; ++q)
        for (std::size_t i = 0; i < count; ++i)
          bad += !equal_value(recv[q * count + i], input_value<T>(cfg.reduce_op, q, q * count + i));
    } else if (cfg.op == "broadcast") {
      for (std::size_t i = 0; i < count; ++i) bad += !equal_value(recv[i], input_value<T>(cfg.reduce_op, cfg.root, i));
    }
    return bad;
  }
};

// The library timed against mdring on the same buffers (--baseline): its variants
// (none: no baseline; several: each is timed, the fastest reported), run(runner,
// variant), and release(), called on every rank before a size's buffers are freed.
template <class Runner>
struct baseline_lib {
  std::vector<std::string> variants;
  std::function<void(Runner&, std::size_t)> run;
  std::function<void()> release;
};

template <class T, class Comm, class Op>
std::vector<result_row> run_sizes(const config& cfg, Comm& comm, const world_ops& w, Op op,
                                  const baseline_lib<runner<T, Comm>>& baseline) {
  std::vector<result_row> rows;
  const std::size_t variants = baseline.variants.size();
  for (std::size_t bytes = cfg.min_bytes;;) {
    runner<T, Comm> rn(cfg, comm, bytes);
    result_row row;
    row.bytes = rn.bytes();
    row.elements = rn.count;
    row.has_baseline = variants > 0;
    std::vector<std::vector<double>> times(1 + variants);  // mdring's, then each variant's
    for (int it = -cfg.warmup; it < cfg.iters; ++it) {
      for (std::size_t lib = cfg.baseline_only ? 1 : 0; lib < 1 + variants; ++lib) {
        rn.fill();
        w.barrier();
        const double t0 = now_seconds();
        if (lib == 0) rn.run_mdring(op);
        else baseline.run(rn, lib - 1);
        const double dt = now_seconds() - t0;
        const double slowest = w.max(dt);
        if (it >= 0) times[lib].push_back(slowest);
        if (cfg.check) row.errors += rn.verify();
      }
    }
    if (baseline.release) baseline.release();
    row.mdring_s = times[0].empty() ? 0 : median(times[0]);
    std::size_t best = 0;
    for (std::size_t v = 0; v < variants; ++v) {
      const double t = median(times[1 + v]);
      if (variants > 1) row.variant_s.emplace_back(baseline.variants[v], t);
      if (v == 0 || t < row.baseline_s) row.baseline_s = t, best = v;
    }
    if (variants > 1) row.baseline_variant = baseline.variants[best];
    const auto pl = comm.template make_plan<T>(rn.count, collective_of(cfg.op), op, cfg.root);
    row.predicted_s = pl.seconds();
    if (cfg.explain && comm.rank() == 0) std::fprintf(stderr, "%s\n", pl.to_string().c_str());
    row.errors = w.sum_int(int(std::min<long>(row.errors, 1 << 20)));
    rows.push_back(row);
    if (bytes >= cfg.max_bytes) break;
    const auto next = std::size_t(double(bytes) * cfg.factor);
    bytes = std::min(std::max(next, bytes + 1), cfg.max_bytes);
  }
  return rows;
}

std::string json_row(const config& cfg, const result_row& r, const std::string& topo, std::size_t P,
                     const std::string& transport) {
  const double f = bus_factor(cfg.op, P);
  const double algbw = r.mdring_s > 0 ? double(r.bytes) / r.mdring_s / 1e9 : 0;
  // --baseline-only: mdring did not run, its numbers are null.
  auto num = [&](const char* fmt, double v) {
    char b[64] = "null";
    if (!cfg.baseline_only) std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  char buf[1024];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"%s\", \"dtype\": \"%s\", \"reduce_op\": \"%s\", \"topology\": \"%s\", \"ranks\": %zu, "
                "\"transport\": \"%s\", \"alloc\": \"%s\", \"inplace\": %s, \"bytes\": %zu, \"elements\": %zu, "
                "\"mdring_s\": %s, ",
                cfg.op.c_str(), cfg.dtype.c_str(), cfg.reduce_op.c_str(), topo.c_str(), P, transport.c_str(),
                cfg.alloc.c_str(), cfg.inplace ? "true" : "false", r.bytes, r.elements,
                num("%.9g", r.mdring_s).c_str());
  s += buf;
  if (r.has_baseline) {
    const double balg = r.baseline_s > 0 ? double(r.bytes) / r.baseline_s / 1e9 : 0;
    std::snprintf(buf, sizeof buf,
                  "\"baseline\": \"%s\", \"baseline_s\": %.9g, \"ratio\": %s, \"baseline_algbw\": %.6g, "
                  "\"baseline_busbw\": %.6g, ",
                  cfg.baseline.c_str(), r.baseline_s,
                  num("%.6g", r.baseline_s > 0 ? r.mdring_s / r.baseline_s : 0.0).c_str(), balg, balg * f);
    s += buf;
    if (!r.variant_s.empty()) {  // baseline_s is the fastest variant's
      s += "\"baseline_variant\": \"" + r.baseline_variant + "\", \"variants_s\": {";
      for (std::size_t v = 0; v < r.variant_s.size(); ++v) {
        std::snprintf(buf, sizeof buf, "%s\"%s\": %.9g", v ? ", " : "", r.variant_s[v].first.c_str(),
                      r.variant_s[v].second);
        s += buf;
      }
      s += "}, ";
    }
  } else {
    s += "\"baseline\": null, \"baseline_s\": null, \"ratio\": null, ";
  }
  std::snprintf(buf, sizeof buf, "\"algbw\": %s, \"busbw\": %s, \"predicted_s\": %.9g, \"iters\": %d, \"check\": %s}",
                num("%.6g", algbw).c_str(), num("%.6g", algbw * f).c_str(), r.predicted_s, cfg.iters,
                cfg.check ? (r.errors ? "\"FAILED\"" : "\"ok\"") : "null");
  return s + buf;
}

#ifndef MDRING_SOURCE_DIR
#define MDRING_SOURCE_DIR "."  // CMake sets the source tree
#endif

// --plot FILE.png: the rows go to FILE.png.jsonl and scripts/plot_bench.py draws them.
void plot_rows(const config& cfg, const std::vector<result_row>& rows, const std::string& topo, std::size_t P,
               const std::string& transport) {
  const std::string data = cfg.plot + ".jsonl";
  std::FILE* f = std::fopen(data.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "mdring-bench: --plot: cannot write %s\n", data.c_str());
    return;
  }
  for (auto& r : rows) std::fprintf(f, "%s\n", json_row(cfg, r, topo, P, transport).c_str());
  std::fclose(f);
  const std::string cmd =
      "python3 \"" MDRING_SOURCE_DIR "/scripts/plot_bench.py\" \"" + cfg.plot + "\" \"" + data + "\"";
  if (std::system(cmd.c_str()) != 0)
    std::fprintf(stderr, "mdring-bench: --plot: %s failed (is python3-matplotlib installed?)\n", cmd.c_str());
}

void print_rows(const config& cfg, const std::vector<result_row>& rows, const std::string& topo, std::size_t P,
                const std::string& transport) {
  const double f = bus_factor(cfg.op, P);
  if (!cfg.plot.empty()) plot_rows(cfg, rows, topo, P, transport);
  if (cfg.json) {
    for (auto& r : rows) std::printf("%s\n", json_row(cfg, r, topo, P, transport).c_str());
    return;
  }
  std::printf(
      "# mdring-bench: %s of %s (op %s), topology %s = %zu ranks, %s transport, %s, %s memory, median of "
      "%d iters (%d warmup), time = slowest rank\n",
      cfg.op.c_str(), cfg.dtype.c_str(), cfg.reduce_op.c_str(), topo.c_str(), P, transport.c_str(),
      cfg.inplace ? "in place" : "out of place", cfg.alloc.c_str(), cfg.iters, cfg.warmup);
  const bool b = !rows.empty() && rows[0].has_baseline;
  std::printf("# %12s %12s | %11s %9s %9s", "bytes", "elements", "mdring us", "algbw", "busbw");
  if (b) std::printf(" | %11s %9s %9s | %6s", (cfg.baseline + " us").c_str(), "algbw", "busbw", "ratio");
  // A baseline of several variants: the fastest (whose time the columns before
  // show), then each one's time.
  const auto& variants = rows.empty() ? std::vector<std::pair<std::string, double>>{} : rows[0].variant_s;
  auto width = [](const std::string& name) { return int(std::max<std::size_t>(11, name.size() + 3)); };
  if (!variants.empty()) std::printf(" | %-16s", "fastest");
  for (auto& v : variants) std::printf(" %*s", width(v.first), (v.first + " us").c_str());
  std::printf("%s\n", cfg.check ? " | check" : "");
  for (auto& r : rows) {
    const double algbw = r.mdring_s > 0 ? double(r.bytes) / r.mdring_s / 1e9 : 0;
    if (cfg.baseline_only) std::printf("  %12zu %12zu | %11s %9s %9s", r.bytes, r.elements, "-", "-", "-");
    else std::printf("  %12zu %12zu | %11.2f %9.3f %9.3f", r.bytes, r.elements, r.mdring_s * 1e6, algbw, algbw * f);
    if (b) {
      const double balg = r.baseline_s > 0 ? double(r.bytes) / r.baseline_s / 1e9 : 0;
      std::printf(" | %11.2f %9.3f %9.3f", r.baseline_s * 1e6, balg, balg * f);
      if (cfg.baseline_only) std::printf(" | %6s", "-");
      else std::printf(" | %6.3f", r.baseline_s > 0 ? r.mdring_s / r.baseline_s : 0.0);
    }
    if (!r.variant_s.empty()) std::printf(" | %-16s", r.baseline_variant.c_str());
    for (auto& v : r.variant_s) std::printf(" %*.2f", width(v.first), v.second * 1e6);
    if (cfg.check) std::printf(" | %s", r.errors ? "FAILED" : "ok");
    std::printf("\n");
  }
  if (!rows.empty())
    std::printf("# algbw and busbw in GB/s (1e9 bytes per second); ratio = mdring time / baseline time%s\n",
                variants.empty() ? "" : " (the fastest variant's)");
}

template <class F>
void dispatch_dtype(const std::string& dtype, F&& f) {
  if (dtype == "float") f(float{});
#if MDRING_BENCH_ALL_TYPES
  else if (dtype == "double") f(double{});
  else if (dtype == "int32") f(std::int32_t{});
  else if (dtype == "int64") f(std::int64_t{});
  else if (dtype == "uint8") f(std::uint8_t{});
  else if (dtype == "half") f(md::half{});
  else if (dtype == "bfloat16") f(md::bfloat16{});
#else
  else if (dtype == "double" || dtype == "int32" || dtype == "int64" || dtype == "uint8" || dtype == "half" ||
           dtype == "bfloat16")
    usage("--dtype " + dtype +
          ": this mdring-bench was built for float only (-DMDRING_BENCH_ALL_TYPES=OFF); "
          "configure with -DMDRING_BENCH_ALL_TYPES=ON for every type");
#endif
  else usage("unknown --dtype " + dtype);
}

template <class F>
void dispatch_op(const std::string& op, F&& f) {
  if (op == "sum") f(md::sum);
#if MDRING_BENCH_ALL_TYPES
  else if (op == "prod") f(md::prod);
  else if (op == "min") f(md::min);
  else if (op == "max") f(md::max);
  else if (op == "avg") f(md::avg);
#else
  else if (op == "prod" || op == "min" || op == "max" || op == "avg")
    usage("--reduce-op " + op +
          ": this mdring-bench was built for sum only (-DMDRING_BENCH_ALL_TYPES=OFF); "
          "configure with -DMDRING_BENCH_ALL_TYPES=ON for every op");
#endif
  else usage("unknown --reduce-op " + op);
}

md::options make_options(const config& cfg) {
  md::options o;
  o.algorithms = cfg.algorithms;
  if (cfg.timeout > 0) o.timeout = std::chrono::milliseconds(long(cfg.timeout * 1000));
  if (cfg.segment_bytes) o.tune.segment_bytes = cfg.segment_bytes;
  if (cfg.pipeline_depth) o.tune.pipeline_depth = cfg.pipeline_depth;
  if (cfg.staging_bytes != std::size_t(-1)) o.tune.shared_staging_bytes = cfg.staging_bytes;
  if (cfg.nontemporal_bytes != std::size_t(-1)) o.tune.nontemporal_bytes = cfg.nontemporal_bytes;
  if (cfg.split_ring_extent != std::size_t(-1)) o.tune.split_ring_extent = cfg.split_ring_extent;
  if (cfg.progress == "agent") o.progress = md::progress_mode::agent;
  if (cfg.progress == "in_wait") o.progress = md::progress_mode::in_wait;
  if (cfg.planning == "measure") o.planning = md::planning::measure;
  if (cfg.planning == "estimate") o.planning = md::planning::estimate;
  if (cfg.reproducible) o.reproducible = true;
  if (cfg.accumulation == "float32") o.accumulation = md::accumulation::float32;
  if (cfg.accumulation == "element") o.accumulation = md::accumulation::element;
  if (cfg.accumulation.find(',') != std::string::npos) {  // per dimension
    o.accumulation = md::accumulation::element;
    for (std::size_t at = 0; at <= cfg.accumulation.size();) {
      const std::size_t comma = std::min(cfg.accumulation.find(',', at), cfg.accumulation.size());
      o.dimension_accumulation.push_back(cfg.accumulation.compare(at, comma - at, "float32") == 0
                                             ? md::accumulation::float32
                                             : md::accumulation::element);
      at = comma + 1;
    }
  }
  if (!cfg.profile.empty()) o.profile = cfg.profile;
  if (cfg.hd_max_bytes != std::size_t(-1)) o.tune.halving_doubling_max_bytes = cfg.hd_max_bytes;
  if (cfg.rd_max_bytes != std::size_t(-1)) o.tune.recursive_doubling_max_bytes = cfg.rd_max_bytes;
  if (cfg.host_gamma >= 0) o.tune.host_gamma = cfg.host_gamma;
  return o;
}

// The exit status: 1 when --check found a wrong value on some rank.
int exit_status(const std::vector<result_row>& rows) {
  for (auto& r : rows)
    if (r.errors) return 1;
  return 0;
}

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

int run_threads(const config& cfg) {
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
    dispatch_dtype(cfg.dtype, [&]<class T>(T) {
      dispatch_op(cfg.reduce_op, [&](auto op) {
        auto r = run_sizes<T>(cfg, comm, w, op, {});
        if (ep.rank == 0) {
          rows = std::move(r);
          resolved = comm.topology().to_string();
        }
      });
    });
  });
  print_rows(cfg, rows, resolved, n, "threads");
  return exit_status(rows);
}

#if MDRING_BENCH_WITH_MPI
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else return MPI_UINT16_T;  // half, bfloat16: with a user op
}

// MPI has no 16-bit float: reduce them with a user op (the fair equivalent).
template <class T, class Op>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<T*>(in);
  auto* b = static_cast<T*>(inout);
  const Op op{};
  for (int i = 0; i < *len; ++i) b[i] = T(op(float(a[i]), float(b[i])));
}

template <class T, class Op>
MPI_Op mpi_op(Op, std::vector<MPI_Op>& created) {
  if constexpr (md::is_16bit_float_v<T>) {
    MPI_Op o;
    MPI_Op_create(&user_reduce<T, std::conditional_t<std::is_same_v<Op, md::avg_t>, md::sum_t, Op>>, 1, &o);
    created.push_back(o);
    return o;
  } else {
    if constexpr (std::is_same_v<Op, md::prod_t>) return MPI_PROD;
    else if constexpr (std::is_same_v<Op, md::min_t>) return MPI_MIN;
    else if constexpr (std::is_same_v<Op, md::max_t>) return MPI_MAX;
    else return MPI_SUM;
  }
}

}  // namespace
#include "bench_nonblocking.hpp"
namespace {

int run_mpi(const config& cfg) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  md::options opts = make_options(cfg);
#if MDRING_BENCH_SMPI
  sim_shared_data = !cfg.check;
  opts.memory = sim_memory();  // all scratch in shared pages too
  opts.shared_memory = false;  // one process: every byte must be a simulated message
#endif
  auto comm = md::bind(md::parse_topology(cfg.topology), MPI_COMM_WORLD, opts);
  // --baseline mdring: the same options in the default mode (not reproducible,
  // 16-bit partial sums).
  std::optional<decltype(comm)> default_mode;
  if (cfg.baseline == "mdring") {
    md::options d = opts;
    d.reproducible = false;
    d.accumulation = md::accumulation::element;
    d.dimension_accumulation.clear();
    default_mode.emplace(md::bind(md::parse_topology(cfg.topology), MPI_COMM_WORLD, d));
  }
  world_ops w;
  w.rank = std::size_t(rank);
  w.size = std::size_t(size);
  w.barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  w.max = [](double x) {
    double m = 0;
    MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
  };
  w.sum_int = [](int x) {
    int s = 0;
    MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return s;
  };
  std::vector<result_row> rows;
  std::vector<MPI_Op> created;
  const bool baseline = cfg.baseline == "mpi" || cfg.baseline == "mdring";
  if (baseline && cfg.reduce_op == "avg" &&
      (cfg.op == "all_reduce" || cfg.op == "reduce_scatter" || cfg.op == "reduce"))
    usage("MPI has no avg op: use --reduce-op sum for a baseline comparison");
  dispatch_dtype(cfg.dtype, [&]<class T>(T) {
    dispatch_op(cfg.reduce_op, [&](auto op) {
      const MPI_Datatype type = mpi_type<T>();
      const MPI_Op mop = mpi_op<T>(op, created);
      auto base = [&](auto& rn, std::size_t) {
        if (default_mode) return rn.run_on(*default_mode, op);
        T* r = rn.recv.data();
        const int n = int(rn.count);
        const void* s = cfg.inplace ? MPI_IN_PLACE : static_cast<const void*>(rn.send.data());
        if (cfg.op == "all_reduce") MPI_Allreduce(s, r, n, type, mop, MPI_COMM_WORLD);
        else if (cfg.op == "reduce_scatter")
          MPI_Reduce_scatter_block(cfg.inplace ? MPI_IN_PLACE : s, r, n, type, mop, MPI_COMM_WORLD);
        else if (cfg.op == "all_gather")
          MPI_Allgather(cfg.inplace ? MPI_IN_PLACE : s, n, type, r, n, type, MPI_COMM_WORLD);
        else if (cfg.op == "broadcast") MPI_Bcast(r, n, type, int(cfg.root), MPI_COMM_WORLD);
        else
          MPI_Reduce(cfg.inplace && rank == int(cfg.root) ? MPI_IN_PLACE : (cfg.inplace ? r : s), r, n, type, mop,
                     int(cfg.root), MPI_COMM_WORLD);
      };
      if (cfg.inflight) return nonblocking_bench::run_inflight<T>(cfg, comm, w, op, type, mop);
      if (cfg.overlap) return nonblocking_bench::run_overlap<T>(cfg, comm, w, op, type, mop);
      const auto variants = baseline ? std::vector<std::string>{cfg.baseline} : std::vector<std::string>{};
      rows = run_sizes<T>(cfg, comm, w, op, {variants, base, {}});
    });
  });
  for (auto& o : created) MPI_Op_free(&o);
  if (rank == 0 && !cfg.inflight && !cfg.overlap)
    print_rows(cfg, rows, comm.topology().to_string(), std::size_t(size), "mpi");
  return exit_status(rows);
}
#endif

#if MDRING_BENCH_WITH_UCX
// ---- --transport ucx: processes started by mdring-run or torchrun, no MPI -------
// The ranks' barrier and max over ranks (outside the timed region): 1-element
// all-reduces on a second mdring communicator of the measured topology (on one
// node: shared-memory flags, as tight as MPI_Barrier over shm); with --baseline
// gloo, Gloo's barrier first and Gloo's max.
template <class Comm>
world_ops world_of(Comm& flat) {
  world_ops w;
  w.rank = flat.rank();
  w.size = flat.size();
  w.barrier = [&flat] {
    int x = 0;
    md::all_reduce(flat, &x, 1, md::sum);
  };
  w.max = [&flat](double x) {
    md::all_reduce(flat, &x, 1, md::max);
    return x;
  };
  w.sum_int = [&flat](int x) {
    md::all_reduce(flat, &x, 1, md::sum);
    return x;
  };
  return w;
}
#if MDRING_BENCH_WITH_GLOO
world_ops world_of(gloo_baseline& g) {
  world_ops w;
  w.rank = std::size_t(g.rank());
  w.size = std::size_t(g.size());
  w.barrier = [&g] { g.barrier(); };
  w.max = [&g](double x) { return g.max_over_ranks(x); };
  w.sum_int = [&g](int x) { return int(g.sum_over_ranks(double(x))); };
  return w;
}

// Where this process's Gloo listens: GLOO_SOCKET_IFNAME's first interface (as
// PyTorch reads it), else the loopback when the job is on one node, else this
// host's name.
std::string gloo_host(const md::ucx::world& world) {
  if (const char* v = std::getenv("GLOO_SOCKET_IFNAME"); v && *v) {
    const std::string names = v;
    return names.substr(0, names.find(','));
  }
  if (world.layout().nodes <= 1) return "127.0.0.1";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// --baseline gloo: Gloo's all-reduce algorithms, each a variant (sum, in place; out
// of place, the send buffer is first copied into the receive buffer, in the timed
// region, as a Gloo user would).
template <class T, class Comm>
baseline_lib<runner<T, Comm>> gloo_all_reduce(const config& cfg, gloo_baseline& gloo) {
  using algo = gloo_baseline::algo;
  static constexpr algo algos[] = {algo::ring_chunked, algo::halving_doubling};
  baseline_lib<runner<T, Comm>> b;
  for (algo a : algos) b.variants.emplace_back(gloo_baseline::name(a));
  b.run = [&cfg, &gloo](runner<T, Comm>& rn, std::size_t v) {
    if (!cfg.inplace && rn.count) std::memcpy(rn.recv.data(), rn.send.data(), rn.count * sizeof(T));
    gloo.all_reduce(rn.recv.data(), rn.count, algos[v]);
  };
  b.release = [&gloo] { gloo.release(); };
  return b;
}
#endif

int run_ucx_world(const config& cfg, const md::ucx::world& world) {
  const md::options opts = make_options(cfg);
  auto sync = md::bind(md::parse_topology(cfg.topology), world, opts);
  world_ops w = world_of(sync);
#if MDRING_BENCH_WITH_GLOO
  // Only with --baseline gloo: Gloo's TCP transport has a thread of its own, which
  // (with the processes bound to a core each, mdring-run --bind-to core) shares the
  // timed thread's core and cost mdring's 64 KiB all_reduce 100 us instead of 7.
  std::optional<gloo_baseline> gloo;
  if (cfg.baseline == "gloo") {
    gloo.emplace(world.store(), int(world.rank()), int(world.size()), opts.timeout, gloo_host(world));
    w = world_of(*gloo);
    // Gloo's barrier (TCP messages) lets the ranks go tens of microseconds apart,
    // which the first one out would count as its collective's time: the 1-element
    // all-reduce on `sync` follows it.
    w.barrier = [&gloo, &sync] {
      gloo->barrier();
      int x = 0;
      md::all_reduce(sync, &x, 1, md::sum);
    };
  }
#endif
  auto comm = md::bind(md::parse_topology(cfg.topology), world, opts);
  std::vector<result_row> rows;
  dispatch_dtype(cfg.dtype, [&]<class T>(T) {
    dispatch_op(cfg.reduce_op, [&](auto op) {
      baseline_lib<runner<T, decltype(comm)>> base;  // parse() allows only --baseline gloo or none
#if MDRING_BENCH_WITH_GLOO
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
        if (cfg.baseline == "gloo") base = gloo_all_reduce<T, decltype(comm)>(cfg, *gloo);
#endif
      rows = run_sizes<T>(cfg, comm, w, op, base);
    });
  });
  if (world.rank() == 0) print_rows(cfg, rows, comm.topology().to_string(), world.size(), "ucx");
  w.barrier();  // every rank is done with the connections before they close
  return exit_status(rows);
}

int run_ucx(const config& cfg) {
  const auto world = md::ucx::world::from_env();
  const int status = run_ucx_world(cfg, world);  // its communicators are gone after it
  md::ucx::wait_to_leave(world);                 // rank 0 hosts the store: it leaves last
  return status;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse(argc, argv);
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
  if (cfg.threads > 0) return guarded([&] { return run_threads(cfg); });
#if MDRING_BENCH_WITH_UCX
  if (cfg.transport == "ucx") return guarded([&] { return run_ucx(cfg); });  // no MPI_Init
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
  const int status = guarded([&] { return run_mpi(cfg); });
  MPI_Finalize();
  return status;
#elif MDRING_BENCH_WITH_UCX
  usage("built without MPI: use --threads N or --transport ucx");
#else
  usage("built without MPI: use --threads N");
#endif
}
