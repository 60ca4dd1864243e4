// mdring-bench --op all_reduce (the default): every rank ends with the reduction of
// every rank's buffer. bytes = the buffer; busbw = algbw * 2(P-1)/P.
#pragma once

#include "collective.hpp"

namespace mdring_bench {

struct all_reduce_bench {
  static constexpr const char* name = "all_reduce";
  static constexpr md::collective kind = md::collective::all_reduce;
  static constexpr bool reduces = true;
  static double bus_factor(std::size_t p) {
    const double P = double(p);
    return 2 * (P - 1) / P;
  }
  static shape shape_of(std::size_t elements, std::size_t) { return {elements, elements, elements}; }

  template <class T>
  static void fill(buffers<T>& b) {
    b.fill_input();
  }
  template <class T, class Comm, class Op>
  static void run(Comm& c, buffers<T>& b, Op op) {
    md::all_reduce(c, b.sendbuf(), b.recvbuf(), b.count, op);
  }
  template <class T>
  static long verify(const buffers<T>& b) {
    return b.count_wrong(b.recv.data(), b.count, 0);
  }

#if MDRING_BENCH_WITH_MPI
  template <class T>
  static void run_mpi(buffers<T>& b, MPI_Datatype type, MPI_Op op, MPI_Comm world) {
    MPI_Allreduce(b.cfg.inplace ? MPI_IN_PLACE : b.sendbuf(), b.recvbuf(), int(b.count), type, op, world);
  }
#endif
};

}  // namespace mdring_bench
