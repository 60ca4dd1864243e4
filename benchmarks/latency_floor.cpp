// benchmarks/latency_floor.cpp: mdring-latency, the small-call floor (docs/perf/latency.md).
//
//   mpirun -n 2 mdring-latency [--rounds 5] [--iters 2000] [--max-bytes 65536] [--json FILE]
//                              [--calls all_reduce,broadcast,reduce,all_gather,reduce_scatter]
//
// 1. The floor: a cache-line ping-pong between ranks 0 and 1 through node memory
//    (MPI_Win_allocate_shared; each rank writes a sequence number into its own
//    128-byte line and spins on the other's): the least any 2-rank collective can
//    cost, one message each way. Printed as the one-way time, half a round trip.
// 2. Each small call, 8 B to --max-bytes (x8 steps, and 64 KiB), float sum where it
//    reduces: all_reduce, broadcast, reduce, all_gather, reduce_scatter, native MPI
//    and mdring (bound once, `shm:*`) back to back in every round, --iters calls each;
//    broadcast and reduce also on a communicator bound with options::eager_rooted
//    (the root, the leaves, return once their data is in node memory: "eager"),
//    and above the one-shot cap on one bound with tune.one_shot_stream_max_trip_ns =
//    SIZE_MAX (streamed over node memory in steps of the cap wherever the ranks are:
//    "streamed"; by default at once where bind measured them close, which it prints,
//    and elsewhere as each size class's first calls timed it: the "default" column),
//    and on one bound with a distance limit no trip meets, so that the first calls of
//    each size class time both ways wherever the ranks are ("timed", with the way
//    it chose: tune.one_shot_stream_trials), to compare the choice with both ways.
//    Per size the medians over the rounds, mdring / native and each / the floor.
// Every rank's results are checked once per size (exact: small integers).
// Oversubscribed (more ranks than cores), the ping-pong and the spins measure the
// scheduler as much as the path: the rounds' spread is printed beside each median.
#include <mdring/mpi.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  int rounds = 5;
  int iters = 2000;
  std::size_t max_bytes = 65536;
  std::string json;
  std::string calls = ",all_reduce,broadcast,reduce,all_gather,reduce_scatter,";  // ",name,..."
};

// --calls LIST: comma-separated collective names, each one mdring knows; returned
// as ",name,...," so that a name is found whole ("reduce" is not in "all_reduce").
std::string checked_calls(const std::string& list) {
  const std::string all = ",all_reduce,broadcast,reduce,all_gather,reduce_scatter,";
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, end - at);
    if (name.empty() || all.find("," + name + ",") == std::string::npos) {
      std::fprintf(stderr,
                   "mdring-latency: --calls: '%s' is not a collective (expected names from all_reduce, broadcast, "
                   "reduce, all_gather, reduce_scatter, separated by commas)\n",
                   name.c_str());
      std::exit(2);
    }
    at = end + 1;
  }
  return "," + list + ",";
}

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mdring-latency: %s needs a value\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds") s.rounds = std::atoi(value("--rounds"));
    else if (a == "--iters") s.iters = std::atoi(value("--iters"));
    else if (a == "--max-bytes") s.max_bytes = std::strtoull(value("--max-bytes"), nullptr, 10);
    else if (a == "--json") s.json = value("--json");
    else if (a == "--calls") s.calls = checked_calls(value("--calls"));
    else {
      std::fprintf(stderr,
                   "mdring-latency: unknown argument '%s' (--rounds N --iters N --max-bytes N --json FILE "
                   "--calls LIST)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  if (s.rounds < 1 || s.iters < 1 || s.max_bytes < 8) {
    std::fprintf(stderr, "mdring-latency: --rounds and --iters must be at least 1, --max-bytes at least 8\n");
    std::exit(2);
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// One-way seconds of a cache-line ping-pong between ranks 0 and 1 of `node`.
double ping_pong(MPI_Comm node, int iters) {
  int me = 0;
  MPI_Comm_rank(node, &me);
  constexpr MPI_Aint line = 128;  // two cache lines: no false sharing, no adjacent-line prefetch
  std::uint64_t* mine = nullptr;
  MPI_Win win;
  MPI_Win_allocate_shared(me < 2 ? line : 0, 1, MPI_INFO_NULL, node, &mine, &win);
  MPI_Aint bytes = 0;
  int unit = 0;
  std::uint64_t* lines[2] = {nullptr, nullptr};
  for (int r = 0; r < 2; ++r) MPI_Win_shared_query(win, r, &bytes, &unit, &lines[r]);
  if (me < 2) std::memset(mine, 0, line);
  MPI_Barrier(node);
  double seconds = 0;
  if (me < 2) {
    auto* out = reinterpret_cast<std::atomic<std::uint64_t>*>(lines[me]);
    auto* in = reinterpret_cast<std::atomic<std::uint64_t>*>(lines[1 - me]);
    const auto t0 = clock_type::now();
    for (std::uint64_t i = 1; i <= std::uint64_t(iters); ++i) {
      if (me == 0) {
        out->store(i, std::memory_order_release);
        while (in->load(std::memory_order_acquire) != i) __builtin_ia32_pause();
      } else {
        while (in->load(std::memory_order_acquire) != i) __builtin_ia32_pause();
        out->store(i, std::memory_order_release);
      }
    }
    seconds = std::chrono::duration<double>(clock_type::now() - t0).count() / iters / 2;
  }
  MPI_Barrier(node);
  MPI_Win_free(&win);
  MPI_Bcast(&seconds, 1, MPI_DOUBLE, 0, node);
  return seconds;
}

// The collectives timed, in the order the tables show them (mdring's own names: vocabulary.hpp).
using op = mdring::collective;
constexpr op all_ops[] = {op::all_reduce, op::broadcast, op::reduce, op::all_gather, op::reduce_scatter};
const char* name_of(op o) { return mdring::to_string(o).data(); }  // (the names are literals)

// A call of `o` with n floats per rank (all_gather, reduce_scatter: n per rank's block).
template <class Comm>
void call(op o, bool native, Comm& comm, std::vector<float>& send, std::vector<float>& recv, std::size_t n) {
  const int cnt = int(n);
  switch (o) {
    case op::all_reduce:
      if (native) MPI_Allreduce(send.data(), recv.data(), cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else mdring::all_reduce(comm, send.data(), recv.data(), n, mdring::sum);
      return;
    case op::broadcast:
      if (native) MPI_Bcast(recv.data(), cnt, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else mdring::broadcast(comm, recv.data(), n, 0);
      return;
    case op::reduce:
      if (native) MPI_Reduce(send.data(), recv.data(), cnt, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      else mdring::reduce(comm, send.data(), recv.data(), n, 0, mdring::sum);
      return;
    case op::all_gather:
      if (native) MPI_Allgather(send.data(), cnt, MPI_FLOAT, recv.data(), cnt, MPI_FLOAT, MPI_COMM_WORLD);
      else mdring::all_gather(comm, send.data(), recv.data(), n);
      return;
    case op::reduce_scatter:
      if (native) MPI_Reduce_scatter_block(send.data(), recv.data(), cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else mdring::reduce_scatter(comm, send.data(), recv.data(), n, mdring::sum);
      return;
  }
}

// Rank r's inputs, and what every rank must hold after the call (exact: small integers).
bool check(op o, const std::vector<float>& recv, std::size_t n, int rank, int P) {
  auto in = [](int r, std::size_t i) { return float((r + int(i)) % 7); };
  for (std::size_t i = 0; i < n; ++i) {
    float want = 0;
    switch (o) {
      case op::all_reduce:
        for (int r = 0; r < P; ++r) want += in(r, i);
        break;
      case op::reduce:
        if (rank != 0) return true;
        for (int r = 0; r < P; ++r) want += in(r, i);
        break;
      case op::broadcast:
        want = in(0, i);
        break;
      case op::reduce_scatter:
        for (int r = 0; r < P; ++r) want += in(r, std::size_t(rank) * n + i);
        break;
      case op::all_gather:
        for (int r = 0; r < P; ++r)
          if (recv[std::size_t(r) * n + i] != in(r, i)) return false;
        continue;
    }
    if (recv[i] != want) return false;
  }
  return true;
}

void fill(op o, std::vector<float>& send, std::vector<float>& recv, std::size_t n, int rank, int P) {
  auto in = [](int r, std::size_t i) { return float((r + int(i)) % 7); };
  const std::size_t sn = o == op::reduce_scatter ? n * std::size_t(P) : n;
  for (std::size_t i = 0; i < sn; ++i) send[i] = in(rank, i);
  std::fill(recv.begin(), recv.end(), -1.0f);
  if (o == op::broadcast)
    for (std::size_t i = 0; i < n; ++i) recv[i] = rank == 0 ? in(0, i) : -1.0f;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const settings s = parse(argc, argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  if (P < 2 || node_size != P) {
    if (rank == 0) std::fprintf(stderr, "mdring-latency: needs 2 or more processes, all on one node\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<double> floors;
  for (int r = 0; r < s.rounds; ++r) floors.push_back(ping_pong(node, 100000));
  const double floor = median(floors);

  int failures = 0;
  {  // mdring's communicator ends before MPI does
    auto comm = mdring::bind(mdring::ring<mdring::shm>, MPI_COMM_WORLD);
    mdring::options eager_opts;
    eager_opts.eager_rooted = true;
    auto eager = mdring::bind(mdring::ring<mdring::shm>, MPI_COMM_WORLD, eager_opts);
    // Broadcast and reduce above the one-shot cap streamed over node memory whatever
    // the ranks' distance (by default only where bind measured them close: tuning.hpp,
    // one_shot_stream_max_trip_ns).
    mdring::options stream_opts;  // (whatever MDRING_STREAM says)
    stream_opts.tune.one_shot_stream_max_trip_ns = SIZE_MAX;
    stream_opts.tune.one_shot_stream_max_bytes = std::size_t(64) << 10;
    auto streamed = mdring::bind(mdring::ring<mdring::shm>, MPI_COMM_WORLD, stream_opts);
    // The same calls left to timing whatever the distance (a limit no trip meets: the
    // first calls of each size class time the program against streaming, then every
    // rank takes the faster; tune.one_shot_stream_trials), to compare with both ways.
    mdring::options timed_opts;
    timed_opts.tune.one_shot_stream_max_trip_ns = 1;
    timed_opts.tune.one_shot_stream_max_bytes = std::size_t(64) << 10;
    auto timing = mdring::bind(mdring::ring<mdring::shm>, MPI_COMM_WORLD, timed_opts);
    // What the default communicator's bind measured and decided (where it left the
    // choice to the calls, each size class's is printed in its row once timed).
    const auto& distance = comm.distance();
    const bool default_streams = comm.runs_one_shot(mdring::collective::broadcast, 16384, 4);
    const bool timed = comm.explain<float>(16384, mdring::collective::broadcast).find("by timing") != std::string::npos;
    std::vector<std::size_t> sizes;
    for (std::size_t b = 8; b <= s.max_bytes; b *= 8) sizes.push_back(b);
    if (sizes.back() != s.max_bytes) sizes.push_back(s.max_bytes);
    std::FILE* json = rank == 0 && !s.json.empty() ? std::fopen(s.json.c_str(), "a") : nullptr;
    if (rank == 0) {
      std::printf(
          "mdring-latency: %d processes; the floor (cache-line ping-pong, one way): %.3f us (rounds %.3f..%.3f)\n", P,
          floor * 1e6, *std::min_element(floors.begin(), floors.end()) * 1e6,
          *std::max_element(floors.begin(), floors.end()) * 1e6);
      const mdring::tuning& asked = comm.bind_options().tune;
      const char* decided = default_streams ? "streamed"
                            : timed         ? "streamed or by their programs as their first calls time it"
                                            : "by their programs";
      if (asked.one_shot_stream_max_bytes == 0)
        std::printf(
            "mdring-latency: streaming off (tune.one_shot_stream_max_bytes 0, as MDRING_STREAM=0 sets): "
            "broadcast and reduce above 8 KiB, up to 64 KiB, %s by default\n",
            decided);
      else if (asked.one_shot_stream_max_trip_ns == SIZE_MAX)
        std::printf(
            "mdring-latency: bind measured nothing (tune.one_shot_stream_max_trip_ns SIZE_MAX, as "
            "MDRING_STREAM=1 sets): broadcast and reduce above 8 KiB, up to 64 KiB, %s by default\n",
            decided);
      else if (distance.measured())
        std::printf(
            "mdring-latency: bind measured %u ns from rank 0 to rank %zu (tune.one_shot_stream_max_trip_ns "
            "%zu): broadcast and reduce above 8 KiB, up to 64 KiB, %s by default\n",
            distance.trip_ns, distance.farthest, asked.one_shot_stream_max_trip_ns, decided);
      else
        std::printf(
            "mdring-latency: bind measured nothing (the ranks outnumber the cores): broadcast and reduce "
            "above 8 KiB, up to 64 KiB, %s by default\n",
            decided);
      std::printf("%-15s %8s %12s %12s %9s %9s %9s  %-24s %s\n", "call", "bytes", "native us", "mdring us", "md/native",
                  "md/floor", "nat/floor", "spread (native, mdring)",
                  "eager us (/native)  streamed us (/native)  timed us (/native), chose   default");
    }
    for (op o : all_ops) {
      if (s.calls.find("," + std::string(name_of(o)) + ",") == std::string::npos) continue;
      for (std::size_t bytes : sizes) {
        const std::size_t n = std::max<std::size_t>(bytes / sizeof(float), 1);
        std::vector<float> send(n * std::size_t(P)), recv(n * std::size_t(P));
        // 0 native, 1 mdring, 2 mdring with eager_rooted, 3 streamed and 4 timed
        // (broadcast and reduce only; the last two above the one-shot cap only).
        const bool rooted = o == op::broadcast || o == op::reduce;
        const bool above_cap = rooted && n * sizeof(float) > mdring::options{}.tune.one_shot_max_bytes &&
                               n * sizeof(float) <= stream_opts.tune.one_shot_stream_max_bytes;
        const int variants = !rooted ? 2 : above_cap ? 5 : 3;
        auto run = [&](int v) {
          if (v == 2) call(o, false, eager, send, recv, n);
          else if (v == 3) call(o, false, streamed, send, recv, n);
          else if (v == 4) call(o, false, timing, send, recv, n);
          else call(o, v == 0, comm, send, recv, n);
        };
        // Checked once per side, then timed (broadcast's recv is its buffer: refilled per round).
        bool ok = true;
        for (int v = 0; v < variants; ++v) {
          fill(o, send, recv, n, rank, P);
          run(v);
          ok = ok && check(o, recv, n, rank, P);
        }
        int all_ok = ok;
        MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        failures += !all_ok;
        std::vector<double> t[5];
        for (int r = 0; r < s.rounds; ++r)
          for (int v = 0; v < variants; ++v) {
            fill(o, send, recv, n, rank, P);
            MPI_Barrier(MPI_COMM_WORLD);
            const auto t0 = clock_type::now();
            for (int i = 0; i < s.iters; ++i) run(v);
            double dt = std::chrono::duration<double>(clock_type::now() - t0).count() / s.iters;
            // The slowest rank's. An eager root (leaves) may be ahead when the loop ends: the
            // barrier before the next round waits for the readers, its time not counted.
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            t[v].push_back(dt);
          }
        // The way the default communicator took above the cap (after its first calls' timing).
        const bool row_streams = variants == 5 && comm.runs_one_shot(o, n, sizeof(float));
        const bool timed_streams = variants == 5 && timing.runs_one_shot(o, n, sizeof(float));
        if (rank == 0) {
          const double nat = median(t[0]), md = median(t[1]);
          auto spread = [](const std::vector<double>& v) {
            return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) * 1e6;
          };
          const double eg = variants >= 3 ? median(t[2]) : 0, st = variants == 5 ? median(t[3]) : 0,
                       tm = variants == 5 ? median(t[4]) : 0;
          char eager_text[48] = "", stream_text[48] = "", timed_text[64] = "";
          if (variants >= 3) std::snprintf(eager_text, sizeof eager_text, "%.3f (%.2f)", eg * 1e6, eg / nat);
          if (variants == 5) std::snprintf(stream_text, sizeof stream_text, "%.3f (%.2f)", st * 1e6, st / nat);
          if (variants == 5)
            std::snprintf(timed_text, sizeof timed_text, "%.3f (%.2f) %s", tm * 1e6, tm / nat,
                          timed_streams ? "streamed" : "program");
          std::printf("%-15s %8zu %12.3f %12.3f %9.2f %9.2f %9.2f  %.3f, %-17.3f %-19s %-21s %-29s %s%s\n", name_of(o),
                      n * sizeof(float), nat * 1e6, md * 1e6, md / nat, md / floor, nat / floor, spread(t[0]),
                      spread(t[1]), eager_text, stream_text, timed_text,
                      variants < 5  ? ""
                      : row_streams ? "streamed"
                                    : "program",
                      all_ok ? "" : "  WRONG RESULT");
          if (json)
            std::fprintf(json,
                         "{\"bench\":\"latency\",\"np\":%d,\"op\":\"%s\",\"bytes\":%zu,\"native_us\":%.4f,"
                         "\"mdring_us\":%.4f,\"floor_us\":%.4f,\"rounds\":%d,\"iters\":%d,\"native_spread_us\":%.4f,"
                         "\"mdring_spread_us\":%.4f,\"eager_us\":%.4f,\"streamed_us\":%.4f,\"timed_us\":%.4f,"
                         "\"timed_streams\":%s,\"bind_trip_ns\":%d,"
                         "\"default_streams\":%s,\"row_streams\":%s,\"timed\":%s,\"correct\":%s}\n",
                         P, name_of(o), n * sizeof(float), nat * 1e6, md * 1e6, floor * 1e6, s.rounds, s.iters,
                         spread(t[0]), spread(t[1]), eg * 1e6, st * 1e6, tm * 1e6, timed_streams ? "true" : "false",
                         distance.measured() ? int(distance.trip_ns) : -1, default_streams ? "true" : "false",
                         row_streams ? "true" : "false", timed ? "true" : "false", all_ok ? "true" : "false");
        }
      }
    }
    if (json) std::fclose(json);
  }
  MPI_Comm_free(&node);
  MPI_Finalize();
  return failures ? 1 : 0;
}
