// smpi-pingpong: what a point-to-point message costs on a simulated platform.
//
//   smpirun -np 8 -platform p.xml -hostfile h smpi-pingpong --pairs 0:4,1:5 --bytes 1,268435456
//   smpirun -np 8 -platform p.xml -hostfile h smpi-pingpong --rings 0,1,2,3/4,5,6,7 --bytes 1,268435456
//
// --pairs: every listed pair (a:b) runs --iters ping-pongs at the same time (a
// sends, b sends it back); a message's time is half a round trip. --rings: every
// member of every listed ring sends to the next member and receives from the
// previous one at the same time (MPI_Sendrecv), --iters times: the step of a ring
// algorithm. The reported time is the slowest rank's mean per message. Flows that
// share a link share its bandwidth, so "--pairs 0:4,1:5,2:6,3:7" shows what four
// ranks of one node get through one uplink. A rank may appear once. Prints one
// JSON object per size; scripts/simulate.sh derives each link's latency (the
// 1-byte time) and bandwidth (from the largest size) from them, for the cost model
// and for the lower bound. Buffers are SMPI_SHARED_MALLOC'd under SMPI.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "smpi-pingpong: %s\nusage: smpi-pingpong (--pairs A:B[,C:D...] | --rings A,B,C[/D,E,F...]) "
               "--bytes N[,N...] [--iters N]\n",
               why.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (std::size_t pos = 0; pos <= s.size();) {
    const std::size_t at = std::min(s.find(sep, pos), s.size());
    out.push_back(s.substr(pos, at - pos));
    pos = at + 1;
  }
  return out;
}

void* buffer(std::size_t bytes) {
#if defined(SMPI_SHARED_MALLOC)
  return SMPI_SHARED_MALLOC(bytes ? bytes : 1);
#else
  return std::malloc(bytes ? bytes : 1);
#endif
}

void release(void* p) {
#if defined(SMPI_SHARED_MALLOC)
  SMPI_SHARED_FREE(p);
#else
  std::free(p);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::pair<int, int>> pairs;
  std::vector<std::vector<int>> rings;
  std::vector<long long> sizes;
  int iters = 3;
  std::string pattern;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--pairs") {
      pattern = v;
      for (auto& p : split(v, ',')) {
        const auto ab = split(p, ':');
        if (ab.size() != 2) usage("not a pair: " + p);
        pairs.emplace_back(std::atoi(ab[0].c_str()), std::atoi(ab[1].c_str()));
      }
    } else if (a == "--rings") {
      pattern = v;
      for (auto& r : split(v, '/')) {
        rings.emplace_back();
        for (auto& m : split(r, ',')) rings.back().push_back(std::atoi(m.c_str()));
        if (rings.back().size() < 2) usage("a ring needs two ranks or more: " + r);
      }
    } else if (a == "--bytes") {
      for (auto& b : split(v, ',')) sizes.push_back(std::atoll(b.c_str()));
    } else if (a == "--iters") {
      iters = std::atoi(v.c_str());
    } else {
      usage("unknown argument " + a);
    }
  }
  if (pairs.empty() == rings.empty() || sizes.empty() || iters < 1) usage("--pairs or --rings, and --bytes");
  std::vector<int> seen(std::size_t(size), 0);
  auto member = [&](int r) {
    if (r < 0 || r >= size || seen[std::size_t(r)]++) usage("a rank out of range or named twice: " + pattern);
  };
  for (auto [a, b] : pairs) member(a), member(b);
  for (auto& ring : rings)
    for (int r : ring) member(r);

  for (long long bytes : sizes) {
    void* buf = buffer(std::size_t(bytes));
    void* in = buffer(std::size_t(bytes));
    const int count = int(bytes);
    double mine = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (auto& ring : rings) {
      const int n = int(ring.size());
      for (int i = 0; i < n; ++i) {
        if (ring[std::size_t(i)] != rank) continue;
        const int next = ring[std::size_t((i + 1) % n)], prev = ring[std::size_t((i + n - 1) % n)];
        const double t0 = MPI_Wtime();
        for (int it = 0; it < iters; ++it)
          MPI_Sendrecv(buf, count, MPI_BYTE, next, 1, in, count, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        mine = (MPI_Wtime() - t0) / iters;
      }
    }
    for (auto [a, b] : pairs) {
      if (rank != a && rank != b) continue;
      const int peer = rank == a ? b : a;
      const double t0 = MPI_Wtime();
      for (int it = 0; it < iters; ++it) {
        if (rank == a) {
          MPI_Send(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
          MPI_Recv(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        }
      }
      mine = (MPI_Wtime() - t0) / (2.0 * iters);
    }
    double slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("{\"%s\": \"%s\", \"bytes\": %lld, \"seconds\": %.9g, \"bandwidth\": %.6g}\n",
                  rings.empty() ? "pairs" : "rings", pattern.c_str(), bytes, slowest,
                  slowest > 0 ? double(bytes) / slowest : 0.0);
    release(in);
    release(buf);
  }
  MPI_Finalize();
  return 0;
}
