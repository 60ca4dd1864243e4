// doctest under MPI: every rank runs every test case (the collectives need all of
// them); rank 0 prints the full report, the others only their failures. The
// exit code is non-zero on every rank if any rank failed.
//
// MPI is initialized with MPI_THREAD_MULTIPLE (so that mdring's progress agent may
// call it), or with MPI_Init when MDRING_TEST_MPI_INIT=single (the tests of what
// mdring does where MPI offers no thread support).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  const char* init = std::getenv("MDRING_TEST_MPI_INIT");
  if (init && std::strcmp(init, "single") == 0) {
    MPI_Init(&argc, &argv);
  } else {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  }
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
  if (rank == 0)
    std::printf("mdring MPI tests on %d ranks: %s\n", size, any ? "FAILED on some rank" : "all ranks passed");
  MPI_Finalize();
  return any;
}
