/* pmpi_failure.c: a failure inside mdring, seen by an unmodified MPI program.
 * Run preloaded with MDRING_TIMEOUT=1 (tests/pmpi/CMakeLists.txt): rank 0 comes
 * to a 1 MiB MPI_Allreduce 3 s late, so the others' deadline passes. Every rank
 * must get an error code back (MPI_ERRORS_RETURN on the communicator), none may
 * hang, stderr says what failed, and the next call on the same communicator works
 * (it goes to MPI: mdring leaves a communicator it failed on). */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  const int n = 1 << 17;
  double* x = malloc(sizeof(double) * n);
  for (int i = 0; i < n; ++i) x[i] = rank;
  MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c); /* binds mdring: all on time */
  if (rank == 0) sleep(3);
  const int rc = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c);
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  printf("rank %d: late call returned %d (%s)\n", rank, rc, msg);
  for (int i = 0; i < n; ++i) x[i] = rank;
  const int rc2 = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c);
  int ok = rc != MPI_SUCCESS && rc2 == MPI_SUCCESS && x[n - 1] == (double)size * (size - 1) / 2;
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all ? "PASSED" : "FAILED");
  MPI_Comm_free(&c);
  free(x);
  MPI_Finalize();
  return all ? 0 : 1;
}
