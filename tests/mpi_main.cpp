// doctest under MPI: every rank runs every test case (the collectives need all of
// them); rank 0 prints the full report, the others only their failures. The
// exit code is non-zero on every rank if any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int failed = 0;
  {
    doctest::Context ctx(argc, argv);
    if (rank != 0) ctx.setOption("minimal", true);
    failed = ctx.run() != 0 ? 1 : 0;
    if (ctx.shouldExit()) {
      MPI_Finalize();
      return failed;
    }
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("mdring MPI tests on %d ranks: %s\n", size, any ? "FAILED on some rank" : "all ranks passed");
  MPI_Finalize();
  return any;
}
