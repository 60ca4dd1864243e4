// mdring-bench --op all_gather: every rank ends with every rank's block, in rank
// order. bytes = the receive buffer (P blocks); busbw = algbw * (P-1)/P. In place,
// each rank's block is at its place in the receive buffer.
#pragma once

#include "collective.hpp"

namespace mdring_bench {

struct all_gather_bench {
  static constexpr const char* name = "all_gather";
  static constexpr md::collective kind = md::collective::all_gather;
  static constexpr bool reduces = false;
  static double bus_factor(std::size_t p) {
    const double P = double(p);
    return (P - 1) / P;
  }
  static shape shape_of(std::size_t elements, std::size_t P) {
    const std::size_t block = elements / P;
    return {block, block, block * P};
  }

  // This rank's block: the send buffer, or in place its place in the receive buffer.
  template <class T>
  static T* own(buffers<T>& b) {
    return b.cfg.inplace ? b.recv.data() + b.rank * b.count : b.send.data();
  }
  template <class T>
  static void fill(buffers<T>& b) {
    T* mine = own(b);
    for (std::size_t i = 0; i < b.count; ++i) mine[i] = b.value(b.rank, b.rank * b.count + i);
  }
  template <class T, class Comm, class Op>
  static void run(Comm& c, buffers<T>& b, Op) {
    md::all_gather(c, own(b), b.recvbuf(), b.count);
  }
  template <class T>
  static long verify(const buffers<T>& b) {
    long bad = 0;
    for (std::size_t q = 0; q < b.P; ++q)
      for (std::size_t i = 0; i < b.count; ++i)
        bad += !equal_value(b.recv[q * b.count + i], b.value(q, q * b.count + i));
    return bad;
  }

#if MDRING_BENCH_WITH_MPI
  template <class T>
  static void run_mpi(buffers<T>& b, MPI_Datatype type, MPI_Op, MPI_Comm world) {
    const int n = int(b.count);
    MPI_Allgather(b.cfg.inplace ? MPI_IN_PLACE : b.sendbuf(), n, type, b.recvbuf(), n, type, world);
  }
#endif
};

}  // namespace mdring_bench
