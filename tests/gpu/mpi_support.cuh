// tests/gpu/mpi_support.cuh: what the GPU test programs launched by mpiexec share:
// this process's rank and the world's size, and a check that every rank got the
// same bits (one MPI_Allreduce of min and max of the result hashes).
#pragma once

#include "harness.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpu_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
inline void check_same(const std::vector<std::uint64_t>& h, const std::string& label) {
  std::vector<std::uint64_t> mx(h.size()), mn(h.size());
  MPI_Allreduce(h.data(), mx.data(), int(h.size()), MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(h.data(), mn.data(), int(h.size()), MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < h.size(); ++i) bad += mx[i] != mn[i];
  check(bad == 0, label, ": ", bad, " calls gave different bits on different ranks");
}
// The worst exit code of every rank (0 passed, 77 skipped, else failed).
inline int worst_of_all(int rc) {
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace gpu_test
