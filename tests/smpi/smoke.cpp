// The MPI transport under SimGrid SMPI: 8 simulated ranks on two simulated nodes
// (platform.xml) run all_reduce (also pipelined: 98 segments, 8 in flight),
// broadcast and nonblocking all_reduces through mdring::bind(MPI_COMM_WORLD) and
// check every element; rank 0
// prints the simulated time of a 1 MiB all_reduce next to explain()'s prediction. With the argument
// "natural", on SMPI's default network model: the topology as a user writes it with default link
// traits, 4 MiB checked against MPI_Allreduce and timed beside it. Built with smpicxx and run with
// smpirun by run.cmake (ctest label "smpi"); see docs/SCALING.md.
#include <mdring/mdring.hpp>
#include <mdring/mpi.hpp>

#include <cstdio>
#include <string>
#include <vector>

static_assert(MDRING_SMPI == 1, "compile with smpicxx");

// One natural-input row on SMPI's default network model (run.cmake's second run):
// the topology as a user writes it, default link traits, nothing fitted. 4 MiB
// all_reduce, checked element by element, timed beside MPI_Allreduce.
long natural_row(int rank, int size) {
  long bad = 0;
  auto comm = mdring::bind(mdring::parse_topology("nvlink:4 x infiniband:*"), MPI_COMM_WORLD);
  const std::size_t n = std::size_t(1) << 20;
  std::vector<float> in(n), out(n), ref(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = float((i * 3 + std::size_t(rank) * 5) % 17);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  mdring::all_reduce(comm, in.data(), out.data(), n, mdring::sum);
  const double t_md = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  MPI_Allreduce(in.data(), ref.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const double t_mpi = MPI_Wtime() - t0;
  for (std::size_t i = 0; i < n; ++i) bad += out[i] != ref[i];
  if (rank == 0)
    std::printf(
        "smpi smoke natural: nvlink:4 x infiniband:%d, SMPI's default network, 4 MiB all_reduce: "
        "%.1f us simulated (%.1f us predicted), MPI_Allreduce %.1f us: %.3f x\n",
        size / 4, t_md * 1e6, comm.make_plan<float>(n).seconds() * 1e6, t_mpi * 1e6, t_md / t_mpi);
  return bad;
}

// Nonblocking calls on simulated ranks (no progress thread under SMPI: they move
// inside test and wait): six all_reduces of different sizes in flight, waited in
// reverse order, then one polled with test() to completion.
template <class Comm>
long nonblocking(int rank, int size, Comm& comm) {
  long bad = 0;
  std::vector<std::vector<float>> bufs;
  std::vector<mdring::request> reqs;
  for (std::size_t k = 0; k < 6; ++k) {
    const std::size_t n = 1 + k * 7919;
    bufs.emplace_back(n);
    for (std::size_t i = 0; i < n; ++i) bufs.back()[i] = float((i + k + std::size_t(rank)) % 9);
  }
  for (auto& b : bufs) reqs.push_back(mdring::iall_reduce(comm, b.data(), b.size(), mdring::sum));
  for (std::size_t k = reqs.size(); k-- > 0;) reqs[k].wait();
  std::vector<float> x(50000, float(rank));
  auto rq = mdring::iall_reduce(comm, x.data(), x.size(), mdring::sum);
  std::size_t polls = 1;
  while (!rq.test()) ++polls;
  for (std::size_t k = 0; k < bufs.size(); ++k)
    for (std::size_t i = 0; i < bufs[k].size(); ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += float((i + k + std::size_t(r)) % 9);
      bad += bufs[k][i] != want;
    }
  for (float v : x) bad += v != float(size * (size - 1) / 2);
  if (rank == 0 && comm.progress() != mdring::progress_mode::in_wait) ++bad;  // no threads in a simulation
  return bad;
}

// all_reduce (also pipelined) and broadcast on fitted links, every element checked.
long fitted_links(int rank, int size) {
  long bad = 0;
  // Links as the platform has them: 4 ranks per node at 40 GB/s each, one
  // 10 GB/s uplink per node shared by its 4 ranks.
  mdring::register_link({"smoke-node", 40e9, 2e-6, true, mdring::memory_space::device});
  mdring::register_link({"smoke-net", 2.5e9, 5e-6, false, mdring::memory_space::device});
  auto comm = mdring::bind(mdring::parse_topology("smoke-node:4 x smoke-net:*"), MPI_COMM_WORLD);
  // The same all_reduce cut into many segments, up to 8 in flight: their steps
  // complete out of order through MPI_Waitany (transport/mpi.hpp).
  mdring::options po;
  po.tune.segment_bytes = 4096;
  po.tune.pipeline_depth = 8;
  auto piped = mdring::bind(mdring::parse_topology("smoke-node:4 x smoke-net:*"), MPI_COMM_WORLD, po);
  for (std::size_t n : {std::size_t(5), std::size_t(100000)}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = float((i * 5 + std::size_t(rank)) % 11);
    mdring::all_reduce(piped, x.data(), n, mdring::sum);
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += float((i * 5 + std::size_t(r)) % 11);
      bad += x[i] != want;
    }
  }
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(262144)}) {
    std::vector<float> in(n), out(n, -1.0f);
    for (std::size_t i = 0; i < n; ++i) in[i] = float((i * 7 + std::size_t(rank) * 3) % 13 + 1);
    const double t0 = MPI_Wtime();
    mdring::all_reduce(comm, in.data(), out.data(), n, mdring::sum);
    const double t = MPI_Wtime() - t0;
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += float((i * 7 + std::size_t(r) * 3) % 13 + 1);
      bad += out[i] != want;
    }
    if (rank == 0 && n == 262144)
      std::printf("smpi smoke: all_reduce of 1 MiB on %d simulated ranks: %.1f us simulated, %.1f us predicted\n", size,
                  t * 1e6, comm.make_plan<float>(n).seconds() * 1e6);
    std::vector<int> b(n, rank == 3 ? 42 : 0);
    mdring::broadcast(comm, b.data(), n, 3);
    for (int v : b) bad += v != 42;
  }
  return bad + nonblocking(rank, size, comm) + nonblocking(rank, size, piped);
}

// Runs one of the above on every rank, counts the wrong elements of all ranks
// (an exception counts as one), prints the verdict run.cmake looks for.
int finish(const char* label, long (*run)(int, int)) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long bad = 0;
  try {
    bad = run(rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    bad += 1;
  }
  long all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s: %s (%ld wrong elements)\n", label, all ? "FAILED" : "ok", all);
  return all ? 1 : 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const bool natural = argc > 1 && std::string(argv[1]) == "natural";
  const int rc = natural ? finish("smpi smoke natural", natural_row) : finish("smpi smoke", fitted_links);
  MPI_Finalize();
  return rc;
}
