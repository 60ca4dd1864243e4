// soak: random collectives for a given time, every result checked bitwise, and the
// process's resources sampled. One program for three transports:
//
//   soak --transport threads --ranks 4 --seconds 60      (ranks are threads)
//   mpirun -n 4 soak --transport mpi --seconds 3600      (built with MPI)
//   mdring-run -n 4 soak --transport ucx --seconds 3600  (built with UCX)
//
// Each round, every rank draws the same choices from the same seeded generator:
// the communicator (a flat topology, or two dimensions when the ranks divide
// evenly), the collective (all_reduce, reduce_scatter, all_gather, broadcast,
// reduce), the element type and op (int32 sum and max, int64 sum and prod, float
// and double sums, double min, uint8 max), the count (0 to 1 Mi elements, log
// distributed, odd sizes included), in place or not, the root, and whether it
// runs blocking or as 1 to 4 nonblocking calls waited for by wait, wait_all,
// wait_any or test. Inputs are a function of (round, rank, element) whose
// results are exact in every type (small integers), so the reference is a plain
// loop over the ranks, and every element must be bitwise what it computes.
//
// Every 5 s (short runs: more often) it samples resident memory, open file
// descriptors, threads and mapped regions. The warm-up (the largest call of each
// collective and type first, 4 in flight, then random rounds for the first fifth
// of the run, at most 60 s) sets the high-water mark; after it, the floor of the
// last fifth of the samples (what a leak raises; peaks come and go) may not exceed
// it by more than a slack (RSS: 10 % + 16 MiB; descriptors, threads, maps: 4 + 2 %).
// --trace: rank 0 prints every sample. Prints one summary line per
// rank 0 ("soak: ... collectives checked, 0 wrong, ...") and exits 1 on any wrong
// result or growth.
#include <mdring/mdring.hpp>
#if defined(MDRING_SOAK_MPI)
#include <mdring/mpi.hpp>
#endif
#if defined(MDRING_SOAK_UCX)
#include <mdring/ucx.hpp>
#endif

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace md = mdring;
using clk = std::chrono::steady_clock;

namespace {

struct args {
  std::string transport = "threads";
  std::size_t ranks = 4;  // threads only
  double seconds = 60;
  std::uint64_t seed = 1;
  std::size_t max_count = std::size_t(1) << 20;
  bool trace = false;  // rank 0 prints every sample
};

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "soak: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--transport") a.transport = value();
    else if (k == "--ranks") a.ranks = std::stoul(value());
    else if (k == "--seconds") a.seconds = std::stod(value());
    else if (k == "--seed") a.seed = std::stoull(value());
    else if (k == "--max-count") a.max_count = std::stoul(value());
    else if (k == "--trace") a.trace = true;
    else {
      std::fprintf(stderr,
                   "usage: soak [--transport threads|mpi|ucx] [--ranks N (threads)] [--seconds S] [--seed N] "
                   "[--max-count N] [--trace]\n");
      std::exit(2);
    }
  }
  return a;
}

// ---- resources -------------------------------------------------------------------------
struct sample {
  double rss_mib = 0;
  long fds = 0, threads = 0, maps = 0;
};

long count_dir(const char* path) {
  long n = 0;
  if (DIR* d = opendir(path)) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

sample take_sample() {
  sample s;
  {
    std::ifstream f("/proc/self/statm");
    long size = 0, resident = 0;
    f >> size >> resident;
    s.rss_mib = double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
  }
  s.fds = count_dir("/proc/self/fd");
  s.threads = count_dir("/proc/self/task");
  std::ifstream m("/proc/self/maps");
  std::string line;
  while (std::getline(m, line)) ++s.maps;
  return s;
}

// ---- the rounds --------------------------------------------------------------------------
enum kind { k_all_reduce, k_reduce_scatter, k_all_gather, k_broadcast, k_reduce, n_kinds };
const char* kind_name[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"};

struct choice {
  std::size_t comm = 0;
  kind k = k_all_reduce;
  int type_op = 0;  // see run_typed
  std::size_t count = 0, root = 0;
  bool in_place = false;
  int calls = 0;  // 0: blocking; else that many nonblocking calls
  int wait_how = 0;
};

// Rank r's element i in round `round`: small, so that sums over up to 64 ranks and
// products of up to 64 factors of 1 or 2 (int64) are exact in every type.
template <class T>
T input(std::uint64_t round, std::size_t r, std::size_t i, int op) {
  const std::uint64_t h = (round * 1000003u + r * 7919u + i * 31u) % 1000u;
  if (op == 3) return T(h % 7 == 0 ? 2 : 1);  // prod
  return T(h % 100);
}

template <class T, class Op>
T combine(T a, T b, Op) {
  if constexpr (std::is_same_v<Op, md::sum_t>) return T(a + b);
  else if constexpr (std::is_same_v<Op, md::prod_t>) return T(a * b);
  else if constexpr (std::is_same_v<Op, md::max_t>) return a > b ? a : b;
  else return a < b ? a : b;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

struct tally {
  std::uint64_t collectives = 0, elements = 0, wrong = 0;
  std::string first_wrong;
};

// One collective of type T and op Op as chosen; checks this rank's result.
template <class T, class Op, class C>
void run_typed(C& comm, const choice& ch, std::uint64_t round, int opcode, tally& t) {
  const std::size_t P = comm.size(), r = comm.rank(), n = ch.count;
  const int k = std::max(ch.calls, 1);
  // Buffers per call (nonblocking: k calls in flight at once, each its own).
  std::vector<std::vector<T>> in(static_cast<std::size_t>(k)), out(static_cast<std::size_t>(k));
  const T poison = T(99);
  std::vector<md::request> reqs;
  for (int c = 0; c < k; ++c) {
    auto& x = in[std::size_t(c)];
    auto& y = out[std::size_t(c)];
    switch (ch.k) {
      case k_all_reduce:
      case k_reduce: {
        x.resize(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = input<T>(round + std::uint64_t(c), r, i, opcode);
        y.assign(n, poison);
        T* dst = ch.in_place ? x.data() : y.data();
        if (ch.k == k_all_reduce) {
          if (ch.calls)
            reqs.push_back(ch.in_place ? md::iall_reduce(comm, x.data(), n, Op{})
                                       : md::iall_reduce(comm, x.data(), dst, n, Op{}));
          else if (ch.in_place) md::all_reduce(comm, x.data(), n, Op{});
          else md::all_reduce(comm, x.data(), dst, n, Op{});
        } else {
          T* recv = r == ch.root ? dst : nullptr;  // in place at the root: recv is x
          if (ch.calls) reqs.push_back(md::ireduce(comm, x.data(), recv, n, ch.root, Op{}));
          else md::reduce(comm, x.data(), recv, n, ch.root, Op{});
        }
        break;
      }
      case k_reduce_scatter: {
        x.resize(n * P);
        for (std::size_t i = 0; i < n * P; ++i) x[i] = input<T>(round + std::uint64_t(c), r, i, opcode);
        y.assign(n, poison);
        if (ch.calls) reqs.push_back(md::ireduce_scatter(comm, x.data(), y.data(), n, Op{}));
        else md::reduce_scatter(comm, x.data(), y.data(), n, Op{});
        break;
      }
      case k_all_gather: {
        x.resize(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = input<T>(round + std::uint64_t(c), r, i, opcode);
        y.assign(n * P, poison);
        if (ch.calls) reqs.push_back(md::iall_gather(comm, x.data(), y.data(), n));
        else md::all_gather(comm, x.data(), y.data(), n);
        break;
      }
      case k_broadcast: {
        x.resize(n);
        for (std::size_t i = 0; i < n; ++i)
          x[i] = r == ch.root ? input<T>(round + std::uint64_t(c), r, i, opcode) : poison;
        if (ch.calls) reqs.push_back(md::ibroadcast(comm, x.data(), n, ch.root));
        else md::broadcast(comm, x.data(), n, ch.root);
        break;
      }
      default:
        break;
    }
  }
  if (!reqs.empty()) {
    switch (ch.wait_how) {
      case 0:
        md::wait_all(reqs);
        break;
      case 1:
        for (auto& q : reqs) q.wait();
        break;
      case 2:
        for (std::size_t left = reqs.size(); left; --left) (void)md::wait_any(reqs);
        break;
      default:
        for (auto& q : reqs)
          while (!q.test()) {}
        break;
    }
  }
  // Check.
  for (int c = 0; c < k; ++c) {
    const std::uint64_t rd = round + std::uint64_t(c);
    auto& x = in[std::size_t(c)];
    auto& y = out[std::size_t(c)];
    auto bad = [&](std::size_t i, const T& got, const T& want) {
      if (t.wrong++ == 0) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "round %llu %s count %zu element %zu: got %g, expected %g",
                      (unsigned long long)rd, kind_name[ch.k], n, i, double(got), double(want));
        t.first_wrong = buf;
      }
    };
    if (ch.k == k_all_reduce || (ch.k == k_reduce && r == ch.root)) {
      const auto& res = ch.in_place ? x : y;
      for (std::size_t i = 0; i < n; ++i) {
        T want = input<T>(rd, 0, i, opcode);
        for (std::size_t q = 1; q < P; ++q) want = combine(want, input<T>(rd, q, i, opcode), Op{});
        if (!same_bits(res[i], want)) {
          bad(i, res[i], want);
          break;
        }
      }
    } else if (ch.k == k_reduce) {
      if (!ch.in_place)
        for (std::size_t i = 0; i < n; ++i)
          if (!same_bits(y[i], poison)) {
            bad(i, y[i], poison);
            break;
          }  // a non-root's buffer untouched
    } else if (ch.k == k_reduce_scatter) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t e = r * n + i;
        T want = input<T>(rd, 0, e, opcode);
        for (std::size_t q = 1; q < P; ++q) want = combine(want, input<T>(rd, q, e, opcode), Op{});
        if (!same_bits(y[i], want)) {
          bad(i, y[i], want);
          break;
        }
      }
    } else if (ch.k == k_all_gather) {
      for (std::size_t q = 0, stop = 0; q < P && !stop; ++q)
        for (std::size_t i = 0; i < n; ++i)
          if (!same_bits(y[q * n + i], input<T>(rd, q, i, opcode))) {
            bad(q * n + i, y[q * n + i], input<T>(rd, q, i, opcode));
            stop = 1;
            break;
          }
    } else if (ch.k == k_broadcast) {
      for (std::size_t i = 0; i < n; ++i)
        if (!same_bits(x[i], input<T>(rd, ch.root, i, opcode))) {
          bad(i, x[i], input<T>(rd, ch.root, i, opcode));
          break;
        }
    }
    ++t.collectives;
    t.elements += n;
  }
}

template <class C>
void run_one(C& comm, const choice& ch, std::uint64_t round, tally& t) {
  switch (ch.type_op) {
    case 0:
      run_typed<std::int32_t, md::sum_t>(comm, ch, round, 0, t);
      break;
    case 1:
      run_typed<std::int32_t, md::max_t>(comm, ch, round, 1, t);
      break;
    case 2:
      run_typed<std::int64_t, md::sum_t>(comm, ch, round, 0, t);
      break;
    case 3:
      run_typed<std::int64_t, md::prod_t>(comm, ch, round, 3, t);
      break;
    case 4:
      run_typed<float, md::sum_t>(comm, ch, round, 0, t);
      break;
    case 5:
      run_typed<double, md::sum_t>(comm, ch, round, 0, t);
      break;
    case 6:
      run_typed<double, md::min_t>(comm, ch, round, 2, t);
      break;
    default:
      run_typed<std::uint8_t, md::max_t>(comm, ch, round, 1, t);
      break;
  }
}

choice draw(std::mt19937_64& g, std::size_t ncomms, std::size_t P, std::size_t max_count) {
  choice ch;
  ch.comm = g() % ncomms;
  ch.k = kind(g() % n_kinds);
  ch.type_op = int(g() % 8);
  // log-distributed counts 0 .. max_count, odd ones too
  const double lg = std::log2(double(max_count) + 1);
  ch.count = std::size_t(std::exp2(std::uniform_real_distribution<double>(0, lg)(g))) - 1;
  if (ch.k == k_reduce_scatter || ch.k == k_all_gather) ch.count /= P;  // per rank
  ch.root = g() % P;
  ch.in_place = g() % 2 == 0;
  ch.calls = g() % 3 == 0 ? int(1 + g() % 4) : 0;
  ch.wait_how = int(g() % 4);
  return ch;
}

// The rounds of one rank, on its communicators, until the time is up (every rank
// stops at the same round: rank 0 decides, by a broadcast every 16 rounds).
// judge: this rank's samples decide on growth (one rank per process: the ranks of
// the threads transport share one).
template <class C>
int soak(std::vector<C>& comms, const args& a, bool print, const char* transport, bool judge = true) {
  std::mt19937_64 g(a.seed);
  const std::size_t P = comms[0].size();
  tally t;
  const auto t0 = clk::now();
  // Samples every 5 s (short runs: 24 over the run, at least 0.25 s apart); the
  // warm-up is the first fifth (at most 60 s), at least two samples.
  const double every = std::clamp(a.seconds / 24, 0.25, 5.0);
  const double warm = std::min(std::max(a.seconds / 5, 2 * every), 60.0);
  const auto every_d = std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(every));
  std::optional<sample> warm_max;
  sample first = take_sample(), last = first, peak_after{};
  std::vector<sample> after;  // every sample after the warm-up
  bool warmed = false;
  auto next_sample = t0 + every_d;
  // The warm-up starts with the largest call of every collective and type, 4 in
  // flight, so that buffers and scratch reach their high-water mark before the
  // baseline (growth after it is then a leak, not a larger call).
  // (8-byte elements: the most bytes a call of max_count can take.)
  for (int k = 0; k < n_kinds; ++k) {
    choice ch;
    ch.k = kind(k), ch.type_op = 2, ch.calls = 4, ch.root = P - 1;
    ch.count = ch.k == k_reduce_scatter || ch.k == k_all_gather ? a.max_count / P : a.max_count;
    for (std::size_t c = 0; c < comms.size(); ++c) {
      ch.comm = c;
      run_one(comms[c], ch, 0, t);
    }
  }
  warm_max = take_sample();
  const auto warm_end = clk::now() + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(warm));
  next_sample = clk::now() + every_d;
  std::uint64_t round = 1;
  for (;; ++round) {
    if (round % 16 == 0) {
      int go = std::chrono::duration<double>(clk::now() - t0).count() < a.seconds ? 1 : 0;
      md::broadcast(comms[0], &go, 1, 0);
      if (!go) break;
    }
    const choice ch = draw(g, comms.size(), P, a.max_count);
    run_one(comms[ch.comm], ch, round * 8, t);
    if (clk::now() >= next_sample) {
      next_sample += every_d;
      last = take_sample();
      if (a.trace && print)
        std::printf("soak-sample: %.0f s, %llu collectives: rss %.1f MiB fds %ld threads %ld maps %ld\n",
                    std::chrono::duration<double>(clk::now() - t0).count(), (unsigned long long)t.collectives,
                    last.rss_mib, last.fds, last.threads, last.maps);
      if (clk::now() < warm_end) {
        if (!warm_max) warm_max = last;
        warm_max->rss_mib = std::max(warm_max->rss_mib, last.rss_mib);
        warm_max->fds = std::max(warm_max->fds, last.fds);
        warm_max->threads = std::max(warm_max->threads, last.threads);
        warm_max->maps = std::max(warm_max->maps, last.maps);
      } else {
        warmed = true;
        peak_after.rss_mib = std::max(peak_after.rss_mib, last.rss_mib);
        peak_after.fds = std::max(peak_after.fds, last.fds);
        peak_after.threads = std::max(peak_after.threads, last.threads);
        peak_after.maps = std::max(peak_after.maps, last.maps);
        after.push_back(last);
      }
    }
  }
  last = take_sample();
  if (!warm_max) warm_max = first;
  if (!warmed) peak_after = last, after.push_back(last);
  // The floor of the last fifth of the samples: what a leak raises. Peaks come and
  // go (over UCX, unexpected eager messages are buffered while a receiver is late:
  // tens of MiB that depend on timing, not on how long the job has run).
  sample floor = after.back();
  for (std::size_t i = after.size() - std::max<std::size_t>(1, after.size() / 5); i < after.size(); ++i) {
    floor.rss_mib = std::min(floor.rss_mib, after[i].rss_mib);
    floor.fds = std::min(floor.fds, after[i].fds);
    floor.threads = std::min(floor.threads, after[i].threads);
    floor.maps = std::min(floor.maps, after[i].maps);
  }
  const double el = std::chrono::duration<double>(clk::now() - t0).count();
  auto grew = [](double now, double before, double rel, double abs) { return now > before * (1 + rel) + abs; };
  const bool growth = judge && (grew(floor.rss_mib, warm_max->rss_mib, 0.10, 16) ||
                                grew(double(floor.fds), double(warm_max->fds), 0.02, 4) ||
                                grew(double(floor.threads), double(warm_max->threads), 0.02, 4) ||
                                grew(double(floor.maps), double(warm_max->maps), 0.02, 4));
  if (print || t.wrong || growth)
    std::printf(
        "soak: %s, rank %zu of %zu, %.0f s: %llu collectives checked (%llu elements), %llu wrong%s%s; "
        "warm-up max rss %.1f MiB fds %ld threads %ld maps %ld, after it max rss %.1f MiB fds %ld threads %ld "
        "maps %ld, last fifth's floor rss %.1f MiB fds %ld threads %ld maps %ld: %s\n",
        transport, comms[0].rank(), P, el, (unsigned long long)t.collectives, (unsigned long long)t.elements,
        (unsigned long long)t.wrong, t.wrong ? ", first: " : "", t.first_wrong.c_str(), warm_max->rss_mib,
        warm_max->fds, warm_max->threads, warm_max->maps, peak_after.rss_mib, peak_after.fds, peak_after.threads,
        peak_after.maps, floor.rss_mib, floor.fds, floor.threads, floor.maps, growth ? "GROWTH" : "no growth");
  std::fflush(stdout);
  return t.wrong || growth ? 1 : 0;
}

template <class Endpoint>
auto make_comms(Endpoint& ep, std::size_t P) {
  using comm_t = decltype(md::bind(md::parse_topology("shm:*"), ep));
  std::vector<comm_t> comms;
  comms.push_back(md::bind(md::parse_topology("shm:*"), ep));
  if (P % 2 == 0 && P > 2) comms.push_back(md::bind(md::parse_topology("shm:2 x ethernet:*"), ep));
  return comms;
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  if (a.transport == "threads") {
    std::atomic<int> status{0};
    md::threads::run(a.ranks, [&](md::threads::endpoint ep) {
      auto comms = make_comms(ep, a.ranks);
      if (soak(comms, a, ep.rank == 0, "threads", ep.rank == 0)) status = 1;
    });
    return status;
  }
#if defined(MDRING_SOAK_MPI)
  if (a.transport == "mpi") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int st = 0;
    {
      int P = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &P);
      MPI_Comm world = MPI_COMM_WORLD;
      auto comms = make_comms(world, std::size_t(P));
      st = soak(comms, a, comms[0].rank() == 0, "mpi");
      int all = 0;
      MPI_Allreduce(&st, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      st = all;
    }
    MPI_Finalize();
    return st;
  }
#endif
#if defined(MDRING_SOAK_UCX)
  if (a.transport == "ucx") {
    auto w = md::ucx::world::from_env();
    int st = 0;
    {
      auto comms = make_comms(w, w.size());
      st = soak(comms, a, w.rank() == 0, "ucx");
    }
    md::ucx::wait_to_leave(w);
    return st;
  }
#endif
  std::fprintf(stderr, "soak: transport %s is not built into this program\n", a.transport.c_str());
  return 2;
}
