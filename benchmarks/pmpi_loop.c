/* pmpi-allreduce: an unmodified MPI program that loops over MPI_Allreduce (double,
 * MPI_SUM, out of place, heap buffers from malloc) from 4 KiB to 256 MiB.
 * scripts/bench_pmpi.sh runs it natively and with libmdring-pmpi.so preloaded.
 *
 *   mpirun -n 4 pmpi-allreduce [min_bytes [max_bytes [factor]]]
 *
 * Prints, per size, the median over the trials of the slowest rank's time for one
 * call (each trial: barrier, then one call), in microseconds. The reduction of
 * the timings (8 bytes) is itself an MPI_Allreduce, far below any threshold. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t lo = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)4 << 10;
  const size_t hi = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)256 << 20;
  const size_t factor = argc > 3 ? strtoull(argv[3], NULL, 10) : 4;
  double* in = malloc(hi);
  double* out = malloc(hi);
  for (size_t i = 0; i < hi / sizeof(double); ++i) in[i] = (double)(rank + i % 1000), out[i] = 0;
  if (rank == 0) printf("# %d processes; bytes median_us\n", size);
  for (size_t bytes = lo; bytes <= hi; bytes *= factor) {
    const int n = (int)(bytes / sizeof(double));
    int trials = (int)((64ull << 20) / bytes);
    trials = trials < 7 ? 7 : trials > 300 ? 300 : trials;
    for (int w = 0; w < 3; ++w) MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double* t = malloc(sizeof(double) * (size_t)trials);
    for (int k = 0; k < trials; ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[k] = dt;
    }
    qsort(t, (size_t)trials, sizeof(double), cmp);
    /* one check: element 1 is the sum over ranks of (rank + 1) */
    const double want = (double)size * (size - 1) / 2 + size;
    if (n > 1 && out[1] != want && rank == 0) fprintf(stderr, "wrong result at %zu bytes: %g != %g\n", bytes, out[1], want);
    if (rank == 0) printf("%zu %.2f\n", bytes, t[trials / 2] * 1e6);
    fflush(stdout);
    free(t);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
