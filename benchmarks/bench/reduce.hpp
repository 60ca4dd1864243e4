// mdring-bench --op reduce: --root ends with the reduction of every rank's buffer.
// bytes = the buffer; busbw = algbw.
#pragma once

#include "collective.hpp"

namespace mdring_bench {

struct reduce_bench {
  static constexpr const char* name = "reduce";
  static constexpr md::collective kind = md::collective::reduce;
  static constexpr bool reduces = true;
  static double bus_factor(std::size_t) { return 1; }
  static shape shape_of(std::size_t elements, std::size_t) { return {elements, elements, elements}; }

  template <class T>
  static void fill(buffers<T>& b) {
    b.fill_input();
  }
  template <class T, class Comm, class Op>
  static void run(Comm& c, buffers<T>& b, Op op) {
    md::reduce(c, b.sendbuf(), b.recvbuf(), b.count, b.cfg.root, op);
  }
  template <class T>
  static long verify(const buffers<T>& b) {
    return b.rank == b.cfg.root ? b.count_wrong(b.recv.data(), b.count, 0) : 0;
  }

#if MDRING_BENCH_WITH_MPI
  // In place, only the root passes MPI_IN_PLACE; the others send their buffer.
  template <class T>
  static void run_mpi(buffers<T>& b, MPI_Datatype type, MPI_Op op, MPI_Comm world) {
    const bool root = b.rank == b.cfg.root;
    MPI_Reduce(b.cfg.inplace && root ? MPI_IN_PLACE : b.sendbuf(), b.recvbuf(), int(b.count), type, op, int(b.cfg.root),
               world);
  }
#endif
};

}  // namespace mdring_bench
