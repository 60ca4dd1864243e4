// benchmarks/bench/collective.hpp: what a collective plugs into mdring-bench's
// harness (as an nccl-tests file fills in testColl). Its file, all_gather.hpp say,
// describes it in a struct of static members:
//
//   struct all_gather_bench {
//     static constexpr const char* name = "all_gather";                  // --op
//     static constexpr md::collective kind = md::collective::all_gather;  // its plan (predicted_s, --explain)
//     static constexpr bool reduces = false;                             // folds with --reduce-op
//     static double bus_factor(std::size_t P);                           // busbw = algbw * bus_factor
//     static shape shape_of(std::size_t elements, std::size_t P);        // what one size allocates
//     template <class T> static void fill(buffers<T>& b);                // this rank's input
//     template <class T, class Comm, class Op> static void run(Comm& c, buffers<T>& b, Op op);  // mdring's call
//     template <class T> static long verify(const buffers<T>& b);        // --check: the wrong elements
//     template <class T> static void run_mpi(buffers<T>& b, MPI_Datatype, MPI_Op, MPI_Comm);   // --baseline mpi
//   };
//
// and collectives.hpp lists it. The harness does the rest, for every --dtype and
// --reduce-op: the buffers of each size, the untimed and timed iterations, the
// baseline's on the same buffers, the slowest rank's time, medians and the plan's
// prediction. Each transport's file (threads.cpp, mpi.cpp, ucx.cpp) instantiates
// every collective for its communicator, so that the library's engine for a
// transport, which all the collectives share, is compiled once.
#pragma once

#include "harness.hpp"

#include <mdring/mdring.hpp>
#if MDRING_BENCH_WITH_MPI
#include <mdring/mpi.hpp>  // MPI_Datatype, MPI_Op; under SMPI, its shared memory
#endif
// Every --dtype and --reduce-op (7 x 5 instantiations of each collective per
// transport, most of mdring-bench's compile time), or float sum only (CI, where the bench is
// built only to check that it builds).
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
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mdring_bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds since some fixed point: simulated time under SMPI (steady_clock would
// read the machine running the simulation).
inline double now_seconds() {
#if MDRING_BENCH_SMPI
  return MPI_Wtime();
#else
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
#endif
}

// ---- values -----------------------------------------------------------------
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

template <class T>
bool equal_value(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// ---- memory -----------------------------------------------------------------
#if MDRING_BENCH_SMPI
// SimGrid SMPI: the user buffers and all of mdring's scratch (options::memory) come
// from SMPI's shared pages (mdring::mpi::smpi_shared_memory, transport/mpi_node.hpp);
// --check needs real data and keeps ordinary memory (small runs).
inline bool sim_shared_data = true;  // false with --check
inline std::pmr::memory_resource* sim_memory() {
  return sim_shared_data ? md::mpi::smpi_shared_memory() : std::pmr::new_delete_resource();
}

// What buffers needs of std::vector, without touching the memory: 1024 ranks
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
inline bool bench_node_memory = true;
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

// ---- one size's buffers -----------------------------------------------------
// What a collective allocates for one size, in elements: count is what its call
// takes (per rank for reduce_scatter and all_gather, else the whole buffer), send
// and recv the sizes of its two buffers.
struct shape {
  std::size_t count, send, recv;
};

// One size's buffers on this rank, both libraries'. In place (--inplace) there is
// no send buffer: recv has the larger of the two sizes and holds the input.
template <class T>
struct buffers {
  const config& cfg;
  std::size_t P, rank, count;
  std::size_t bytes;  // the size reported (as nccl-tests counts it): the larger buffer's
  bench_buffer<T> send, recv;

  buffers(const config& c, std::size_t ranks, std::size_t r, shape s)
      : cfg(c), P(ranks), rank(r), count(s.count), bytes(std::max(s.send, s.recv) * sizeof(T)) {
    send.resize(cfg.inplace ? 0 : s.send);
    recv.resize(cfg.inplace ? std::max(s.send, s.recv) : s.recv);
  }
  buffers(const buffers&) = delete;
  buffers& operator=(const buffers&) = delete;

  // The input: the send buffer, or in place the receive buffer.
  bench_buffer<T>& input() { return cfg.inplace ? recv : send; }
  const T* sendbuf() { return input().data(); }
  T* recvbuf() { return recv.data(); }

  // Rank r's value at index i (input_value), and the op's over every rank.
  T value(std::size_t r, std::size_t i) const { return input_value<T>(cfg.reduce_op, r, i); }
  T reduced(std::size_t i) const { return expected<T>(cfg.reduce_op, P, i); }
  // The whole input buffer, as this rank contributes it to a reduction.
  void fill_input() {
    auto& in = input();
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(rank, i);
  }
  // How many of n elements at `got` differ from the op's over every rank at
  // first, first + 1, ... (--check).
  long count_wrong(const T* got, std::size_t n, std::size_t first) const {
    long bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += !equal_value(got[i], reduced(first + i));
    return bad;
  }
};

// ---- --dtype and --reduce-op ------------------------------------------------
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

// ---- the timing loop --------------------------------------------------------
// The library timed against mdring on the same buffers (--baseline): its variants
// (none: no baseline; several: each is timed, the fastest reported), run(buffers,
// variant), and release(), called on every rank before a size's buffers are freed.
template <class T>
struct baseline_lib {
  std::vector<std::string> variants;
  std::function<void(buffers<T>&, std::size_t)> run;
  std::function<void()> release;
};

// Every size from --min-bytes to --max-bytes: --warmup untimed and --iters timed
// iterations, mdring's call then each baseline variant's, each from a barrier and
// timed on every rank, the slowest rank's time kept; a size's row has the medians.
template <class C, class T, class Comm, class Op>
std::vector<result_row> run_sizes(const config& cfg, Comm& comm, const world_ops& w, Op op,
                                  const baseline_lib<T>& baseline) {
  std::vector<result_row> rows;
  const std::size_t variants = baseline.variants.size();
  for (std::size_t bytes = cfg.min_bytes;;) {
    buffers<T> rn(cfg, comm.size(), comm.rank(), C::shape_of(bytes / sizeof(T), comm.size()));
    result_row row;
    row.bytes = rn.bytes;
    row.elements = rn.count;
    row.has_baseline = variants > 0;
    std::vector<std::vector<double>> times(1 + variants);  // mdring's, then each variant's
    for (int it = -cfg.warmup; it < cfg.iters; ++it) {
      for (std::size_t lib = cfg.baseline_only ? 1 : 0; lib < 1 + variants; ++lib) {
#if MDRING_BENCH_SMPI
        if (!sim_shared_data)  // shared pages: nothing to compute on
#endif
          C::fill(rn);
        w.barrier();
        const double t0 = now_seconds();
        if (lib == 0) C::run(comm, rn, op);
        else baseline.run(rn, lib - 1);
        const double dt = now_seconds() - t0;
        const double slowest = w.max(dt);
        if (it >= 0) times[lib].push_back(slowest);
        if (cfg.check) row.errors += C::verify(rn);
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
    const auto pl = comm.template make_plan<T>(rn.count, C::kind, op, cfg.root);
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

// Every size of collective C for --dtype and --reduce-op, on comm. baseline(C{},
// T{}, op) gives the library timed against mdring for T and op (a baseline_lib<T>).
template <class C, class Comm, class Baseline>
std::vector<result_row> run_collective(const config& cfg, Comm& comm, const world_ops& w, Baseline&& baseline) {
  std::vector<result_row> rows;
  dispatch_dtype(cfg.dtype, [&]<class T>(T) {
    dispatch_op(cfg.reduce_op, [&](auto op) { rows = run_sizes<C, T>(cfg, comm, w, op, baseline(C{}, T{}, op)); });
  });
  return rows;
}

}  // namespace mdring_bench
