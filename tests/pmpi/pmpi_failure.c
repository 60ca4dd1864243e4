/* pmpi_failure.c: a failure inside mdring, seen by an unmodified MPI program.
 * Run preloaded with MDRING_TIMEOUT=1 (tests/pmpi/CMakeLists.txt): rank 0 comes
 * to a 1 MiB MPI_Allreduce 3 s late, so the others' deadline passes. Every rank
 * must get an error code back (MPI_ERRORS_RETURN on the communicator), none may
 * hang, stderr says what failed, and the next call on the same communicator works
 * (it goes to MPI: mdring leaves a communicator it failed on).
 *
 * Then the same with nonblocking calls in flight: on a second
 * communicator every rank issues 8 MPI_Iallreduce, rank 0 again 3 s late. Every
 * rank's MPI_Waitall must return an error (MPI_ERR_IN_STATUS, each failed status
 * MPI_ERR_OTHER) instead of aborting or hanging. A nonblocking failure leaves the
 * communicator with mdring (the ranks learn of it at different calls, so it
 * cannot move them to MPI alike): the next blocking MPI_Allreduce on it fails
 * too, on every rank, and the one after works (on MPI) with the right sum. A
 * generalized request's error goes to MPI_COMM_WORLD's handler in Open MPI, so
 * that one returns too. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
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

  /* Nonblocking calls in flight when the failure comes. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm c2;
  MPI_Comm_dup(MPI_COMM_WORLD, &c2);
  MPI_Comm_set_errhandler(c2, MPI_ERRORS_RETURN);
  enum { calls = 8 };
  MPI_Request rq[calls];
  MPI_Status st[calls];
  MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c2, &rq[0]); /* binds mdring on c2 */
  MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
  if (rank == 0) sleep(3);
  double* y = malloc(sizeof(double) * n * calls);
  for (int k = 0; k < calls; ++k) MPI_Iallreduce(MPI_IN_PLACE, y + (size_t)k * n, n, MPI_DOUBLE, MPI_SUM, c2, &rq[k]);
  const int rc3 = MPI_Waitall(calls, rq, st);
  int failed = 0;
  int cls3 = MPI_SUCCESS;
  MPI_Error_class(rc3, &cls3);
  for (int k = 0; k < calls; ++k) { /* MPICH gives full codes: compare classes */
    int cls = MPI_SUCCESS;
    MPI_Error_class(st[k].MPI_ERROR, &cls);
    failed += cls3 == MPI_ERR_IN_STATUS && cls == MPI_ERR_OTHER;
  }
  for (int i = 0; i < n; ++i) x[i] = rank;
  const int rc4 = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c2);
  for (int i = 0; i < n; ++i) x[i] = rank;
  const int rc5 = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, c2);
  printf("rank %d: Waitall on %d calls in flight returned %d, %d of them failed; next call returned %d, the one after %d\n",
         rank, calls, rc3, failed, rc4, rc5);
  ok = ok && rc3 != MPI_SUCCESS && failed >= 1 && rc4 != MPI_SUCCESS && rc5 == MPI_SUCCESS &&
       x[n - 1] == (double)size * (size - 1) / 2;
  MPI_Comm_free(&c2);
  free(y);

  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", all ? "PASSED" : "FAILED");
  MPI_Comm_free(&c);
  free(x);
  MPI_Finalize();
  return all ? 0 : 1;
}
