// benchmarks/bench/nonblocking.hpp: mdring-bench's --inflight and --overlap modes
// (MPI processes, all_reduce), included by mpi.cpp.
//
//   mpirun -n 2 mdring-bench --inflight 16 --min-bytes 4K --max-bytes 16M
//     N calls in flight (N iall_reduce, then wait_all) against the same N calls
//     blocking one after the other, for mdring and for MPI (MPI_Iallreduce +
//     MPI_Waitall against N MPI_Allreduce), on N separate buffers of each size.
//
//   mpirun -n 2 mdring-bench --overlap --min-bytes 64K --max-bytes 64M
//     start one all_reduce, compute, wait. The compute is a dependent chain of
//     floating-point operations on registers (no memory traffic), calibrated to
//     last as long as the call alone. overlap = (t_comm + t_compute - t_total) /
//     min(t_comm, t_compute): 1 when the call is fully hidden, 0 when nothing is.
//     mdring (iall_reduce, its progress agent) and MPI (MPI_Iallreduce, MPI_Wait)
//     in the same run. --compute sleep replaces the chain by a sleep of the same
//     length: work that leaves the core free (a GPU kernel, I/O), which shows what
//     the library overlaps when it has a core to run on.
//
// Every time is the slowest rank's (max over ranks), the median over --iters.
#pragma once

#include "collective.hpp"

#include <mdring/mpi.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace mdring_bench::nonblocking {

// A dependent chain of multiply-adds: about 4 cycles each, no memory traffic. The
// seed and the step count pass through volatiles, so the compiler cannot fold it.
inline volatile double sink = 0, seed = 1.0;
inline volatile std::size_t opaque_steps = 0;
[[gnu::noinline]] inline double compute(std::size_t steps) {
  opaque_steps = steps;
  const std::size_t n = opaque_steps;
  double x = seed;
  for (std::size_t i = 0; i < n; ++i) x = x * 0.999999999 + 1e-9;
  return x;
}

// Seconds per compute step, measured over about 20 ms.
inline double calibrate(const world_ops& w) {
  const std::size_t steps = 5'000'000;
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const double t0 = now_seconds();
    sink = compute(steps);
    t.push_back(now_seconds() - t0);
  }
  return w.max(median(t)) / double(steps);
}

template <class T, class Comm, class Op>
void run_inflight(const config& cfg, Comm& comm, const world_ops& w, Op op, MPI_Datatype type, MPI_Op mop) {
  const std::size_t N = std::size_t(cfg.inflight);
  if (w.rank == 0) {
    std::printf("# mdring-bench --inflight %zu: all_reduce, %zu processes, topology \"%s\", progress %s\n", N, w.size,
                comm.topology().to_string().c_str(), std::string(md::to_string(comm.progress())).c_str());
    std::printf("# %10s %4s | %12s %12s %6s | %12s %12s %6s | %8s\n", "bytes", "N", "md block us", "md flight us",
                "ratio", "mpi block us", "mpi flight us", "ratio", "md/mpi");
  }
  for (std::size_t bytes = cfg.min_bytes;;) {
    const std::size_t count = bytes / sizeof(T);
    std::vector<bench_buffer<T>> bufs(N);
    for (auto& b : bufs) b.resize(count);
    auto fill = [&] {
      for (auto& b : bufs)
        for (std::size_t i = 0; i < count; ++i) b[i] = input_value<T>(cfg.reduce_op, w.rank, i);
    };
    std::vector<double> t[4];
    std::vector<md::request> reqs;
    std::vector<MPI_Request> mreqs(N);
    for (int it = -cfg.warmup; it < cfg.iters; ++it) {
      for (int mode = 0; mode < 4; ++mode) {
        fill();
        w.barrier();
        const double t0 = now_seconds();
        if (mode == 0) {
          for (auto& b : bufs) md::all_reduce(comm, b.data(), count, op);
        } else if (mode == 1) {
          for (auto& b : bufs) reqs.push_back(md::iall_reduce(comm, b.data(), count, op));
          md::wait_all(reqs);
          reqs.clear();
        } else if (mode == 2) {
          for (auto& b : bufs) MPI_Allreduce(MPI_IN_PLACE, b.data(), int(count), type, mop, MPI_COMM_WORLD);
        } else {
          for (std::size_t k = 0; k < N; ++k)
            MPI_Iallreduce(MPI_IN_PLACE, bufs[k].data(), int(count), type, mop, MPI_COMM_WORLD, &mreqs[k]);
          MPI_Waitall(int(N), mreqs.data(), MPI_STATUSES_IGNORE);
        }
        const double dt = w.max(now_seconds() - t0);
        if (it >= 0) t[mode].push_back(dt);
      }
    }
    double m[4];
    for (int k = 0; k < 4; ++k) m[k] = median(t[k]);
    if (w.rank == 0)
      std::printf("  %10zu %4zu | %12.1f %12.1f %6.3f | %12.1f %12.1f %6.3f | %8.3f\n", count * sizeof(T), N,
                  m[0] * 1e6, m[1] * 1e6, m[1] / m[0], m[2] * 1e6, m[3] * 1e6, m[3] / m[2], m[1] / m[3]);
    if (bytes >= cfg.max_bytes) break;
    bytes = std::min(std::max(std::size_t(double(bytes) * cfg.factor), bytes + 1), cfg.max_bytes);
  }
  if (w.rank == 0)
    std::printf(
        "# ratio = in flight / blocking (below 1: in flight is faster); md/mpi = mdring in flight / MPI in flight\n");
}

template <class T, class Comm, class Op>
void run_overlap(const config& cfg, Comm& comm, const world_ops& w, Op op, MPI_Datatype type, MPI_Op mop) {
  const double step_s = calibrate(w);
  if (w.rank == 0) {
    std::printf(
        "# mdring-bench --overlap: all_reduce, %zu processes, topology \"%s\", progress %s, compute %s "
        "(%.3g ns per step)\n",
        w.size, comm.topology().to_string().c_str(), std::string(md::to_string(comm.progress())).c_str(),
        cfg.compute.c_str(), step_s * 1e9);
    std::printf("# %10s | %10s %10s %10s %7s | %10s %10s %10s %7s\n", "bytes", "md comm", "compute", "total", "overlap",
                "mpi comm", "compute", "total", "overlap");
  }
  for (std::size_t bytes = cfg.min_bytes;;) {
    const std::size_t count = bytes / sizeof(T);
    bench_buffer<T> buf;
    buf.resize(count);
    auto fill = [&] {
      for (std::size_t i = 0; i < count; ++i) buf[i] = input_value<T>(cfg.reduce_op, w.rank, i);
    };
    double row[2][4];  // per library: comm, compute, total, overlap
    for (int lib = 0; lib < 2; ++lib) {
      MPI_Request mr = MPI_REQUEST_NULL;
      md::request req;
      auto start = [&] {
        if (lib == 0) req = md::iall_reduce(comm, buf.data(), count, op);
        else MPI_Iallreduce(MPI_IN_PLACE, buf.data(), int(count), type, mop, MPI_COMM_WORLD, &mr);
      };
      auto finish = [&] {
        if (lib == 0) req.wait();
        else MPI_Wait(&mr, MPI_STATUS_IGNORE);
      };
      auto work = [&](std::size_t steps) {
        if (cfg.compute == "sleep") std::this_thread::sleep_for(std::chrono::duration<double>(double(steps) * step_s));
        else sink = compute(steps);
      };
      auto timed = [&](std::size_t steps, bool comm_on, bool compute_on) {
        std::vector<double> t;
        for (int it = -cfg.warmup; it < cfg.iters; ++it) {
          fill();
          w.barrier();
          const double t0 = now_seconds();
          if (comm_on) start();
          if (compute_on) work(steps);
          if (comm_on) finish();
          const double dt = w.max(now_seconds() - t0);
          if (it >= 0) t.push_back(dt);
        }
        return median(t);
      };
      const double t_comm = timed(0, true, false);
      const std::size_t steps = std::size_t(t_comm / step_s);
      const double t_compute = timed(steps, false, true);
      const double t_total = timed(steps, true, true);
      const double hidden = t_comm + t_compute - t_total;
      row[lib][0] = t_comm, row[lib][1] = t_compute, row[lib][2] = t_total;
      row[lib][3] = hidden / std::min(t_comm, t_compute);
    }
    if (w.rank == 0)
      std::printf("  %10zu | %10.1f %10.1f %10.1f %7.2f | %10.1f %10.1f %10.1f %7.2f\n", count * sizeof(T),
                  row[0][0] * 1e6, row[0][1] * 1e6, row[0][2] * 1e6, row[0][3], row[1][0] * 1e6, row[1][1] * 1e6,
                  row[1][2] * 1e6, row[1][3]);
    if (bytes >= cfg.max_bytes) break;
    bytes = std::min(std::max(std::size_t(double(bytes) * cfg.factor), bytes + 1), cfg.max_bytes);
  }
  if (w.rank == 0)
    std::printf("# times in us; overlap = (comm + compute - total) / min(comm, compute): 1 = fully hidden, 0 = none\n");
}

}  // namespace mdring_bench::nonblocking
