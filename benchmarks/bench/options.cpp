// benchmarks/bench/options.cpp: mdring-bench's command line: --help, the parser and
// its checks, and the mdring::options that the flags set.
#include "harness.hpp"

#include <mdring/error.hpp>
#include <mdring/plan/wisdom.hpp>             // algorithm_from_string
#include <mdring/topology/link_registry.hpp>  // parse_link

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace mdring_bench {

void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "mdring-bench: %s\n"
      "usage: mdring-bench [--op %s]\n"
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
      why.c_str(), collective_names().c_str());
  std::exit(2);
}

namespace {

// A size: a number with an optional K, M or G (powers of 1024).
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

}  // namespace

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
  if (!find_collective(c.op)) usage("unknown --op " + c.op);
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

}  // namespace mdring_bench
