// mdring-bench --op reduce_scatter: rank r ends with block r of the reduction of
// every rank's buffer of P blocks. bytes = the send buffer (P blocks); busbw =
// algbw * (P-1)/P. In place, rank r's block stays at its place in the buffer.
#pragma once

#include "collective.hpp"

namespace mdring_bench {

struct reduce_scatter_bench {
  static constexpr const char* name = "reduce_scatter";
  static constexpr md::collective kind = md::collective::reduce_scatter;
  static constexpr bool reduces = true;
  static double bus_factor(std::size_t p) {
    const double P = double(p);
    return (P - 1) / P;
  }
  static shape shape_of(std::size_t elements, std::size_t P) {
    const std::size_t block = elements / P;
    return {block, block * P, block};
  }

  template <class T>
  static void fill(buffers<T>& b) {
    b.fill_input();
  }
  // This rank's block of the result.
  template <class T>
  static const T* result(const buffers<T>& b) {
    return b.cfg.inplace ? b.recv.data() + b.rank * b.count : b.recv.data();
  }
  template <class T, class Comm, class Op>
  static void run(Comm& c, buffers<T>& b, Op op) {
    md::reduce_scatter(c, b.sendbuf(), const_cast<T*>(result(b)), b.count, op);
  }
  template <class T>
  static long verify(const buffers<T>& b) {
    return b.count_wrong(result(b), b.count, b.rank * b.count);
  }

#if MDRING_BENCH_WITH_MPI
  template <class T>
  static void run_mpi(buffers<T>& b, MPI_Datatype type, MPI_Op op, MPI_Comm world) {
    MPI_Reduce_scatter_block(b.cfg.inplace ? MPI_IN_PLACE : b.sendbuf(), b.recvbuf(), int(b.count), type, op, world);
  }
#endif
};

}  // namespace mdring_bench
