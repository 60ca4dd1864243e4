// benchmarks/bench/mpi.cpp: mdring-bench on MPI processes (--transport mpi, the
// default; mpirun, or smpirun under SimGrid), with the baselines mpi (the MPI
// library's own collective, each collective's run_mpi) and mdring (mdring's
// default mode on a second communicator), and the modes --inflight and --overlap
// (nonblocking.hpp). Every collective is compiled here for the MPI transport.
#include "collectives.hpp"
#include "nonblocking.hpp"

#include <mdring/mpi.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace mdring_bench {
namespace {

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

// --baseline mpi: the MPI library's collective (C::run_mpi) on the same buffers;
// --baseline mdring: mdring's call on `default_mode`, a communicator bound in the
// default mode. `created` keeps the user ops made for 16-bit floats (freed after).
template <class C, class T, class Op, class Comm>
baseline_lib<T> mpi_baseline(const config& cfg, Comm* default_mode, Op op, std::vector<MPI_Op>& created) {
  const MPI_Datatype type = mpi_type<T>();
  const MPI_Op mop = mpi_op<T>(op, created);
  if (cfg.baseline != "mpi" && cfg.baseline != "mdring") return {};
  baseline_lib<T> b;
  b.variants = {cfg.baseline};
  b.run = [default_mode, type, mop, op](buffers<T>& rn, std::size_t) {
    if (default_mode) C::run(*default_mode, rn, op);
    else C::run_mpi(rn, type, mop, MPI_COMM_WORLD);
  };
  return b;
}

}  // namespace

int run_mpi(const config& cfg, const collective_bench& coll) {
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
  if (baseline && cfg.reduce_op == "avg" && coll.reduces)
    usage("MPI has no avg op: use --reduce-op sum for a baseline comparison");
  if (cfg.inflight || cfg.overlap) {
    dispatch_dtype(cfg.dtype, [&]<class T>(T) {
      dispatch_op(cfg.reduce_op, [&](auto op) {
        const MPI_Datatype type = mpi_type<T>();
        const MPI_Op mop = mpi_op<T>(op, created);
        if (cfg.inflight) nonblocking::run_inflight<T>(cfg, comm, w, op, type, mop);
        else nonblocking::run_overlap<T>(cfg, comm, w, op, type, mop);
      });
    });
  } else {
    every_collective::with(cfg.op, [&](auto c) {
      rows = run_collective<decltype(c)>(cfg, comm, w, [&]<class C, class T>(C, T, auto op) {
        return mpi_baseline<C, T>(cfg, default_mode ? &*default_mode : nullptr, op, created);
      });
    });
  }
  for (auto& o : created) MPI_Op_free(&o);
  if (rank == 0 && !cfg.inflight && !cfg.overlap)
    print_rows(cfg, rows, comm.topology().to_string(), std::size_t(size), "mpi", coll.bus_factor(std::size_t(size)));
  return exit_status(rows);
}

}  // namespace mdring_bench
