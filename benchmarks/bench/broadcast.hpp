// mdring-bench --op broadcast: every rank ends with --root's buffer. bytes = the
// buffer; busbw = algbw. It is always in place (one buffer).
#pragma once

#include "collective.hpp"

namespace mdring_bench {

struct broadcast_bench {
  static constexpr const char* name = "broadcast";
  static constexpr md::collective kind = md::collective::broadcast;
  static constexpr bool reduces = false;
  static double bus_factor(std::size_t) { return 1; }
  static shape shape_of(std::size_t elements, std::size_t) { return {elements, elements, elements}; }

  template <class T>
  static void fill(buffers<T>& b) {
    for (std::size_t i = 0; i < b.count; ++i) b.recv[i] = b.rank == b.cfg.root ? b.value(b.rank, i) : T(0.0f);
  }
  template <class T, class Comm, class Op>
  static void run(Comm& c, buffers<T>& b, Op) {
    md::broadcast(c, b.recvbuf(), b.count, b.cfg.root);
  }
  template <class T>
  static long verify(const buffers<T>& b) {
    long bad = 0;
    for (std::size_t i = 0; i < b.count; ++i) bad += !equal_value(b.recv[i], b.value(b.cfg.root, i));
    return bad;
  }

#if MDRING_BENCH_WITH_MPI
  template <class T>
  static void run_mpi(buffers<T>& b, MPI_Datatype type, MPI_Op, MPI_Comm world) {
    MPI_Bcast(b.recvbuf(), int(b.count), type, int(b.cfg.root), world);
  }
#endif
};

}  // namespace mdring_bench
