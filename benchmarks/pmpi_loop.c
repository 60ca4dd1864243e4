/* pmpi-loop: an unmodified MPI program that loops over one collective (double,
 * MPI_SUM where it reduces, out of place, heap buffers from malloc) over a range
 * of sizes. scripts/bench_pmpi.sh runs it natively and with libmdring-pmpi.so
 * preloaded.
 *
 *   mpirun -n 4 pmpi-loop [collective [min_bytes [max_bytes [factor]]]]
 *     collective: allreduce (default), bcast, allgather, reduce_scatter_block, reduce
 *       (reduce: to rank 0)
 *     bytes: the whole call's (allgather and reduce_scatter_block: all ranks' blocks)
 *
 * Per size: 90 untimed calls first below 64 KiB, 30 from there, each after a
 * barrier as the timed ones (the interposer's measured choice takes 82 and 22 at
 * its defaults: a loop of a real program soon leaves them behind; the report,
 * MDRING_REPORT=1, gives what they cost), then
 * the median over the trials of the slowest rank's time for one call (each
 * trial: barrier, then one call), in microseconds. The reduction of the timings
 * (8 bytes) is itself an MPI_Allreduce. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

enum { ALLREDUCE, BCAST, ALLGATHER, RSB, REDUCE };

static void call(int which, double* in, double* out, int n, int size) {
  switch (which) {
    case ALLREDUCE: MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    case BCAST: MPI_Bcast(in, n, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case ALLGATHER: MPI_Allgather(in, n / size, MPI_DOUBLE, out, n / size, MPI_DOUBLE, MPI_COMM_WORLD); break;
    case REDUCE: MPI_Reduce(in, out, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD); break;
    default: MPI_Reduce_scatter_block(in, out, n / size, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* name = argc > 1 ? argv[1] : "allreduce";
  const int which = !strcmp(name, "bcast") ? BCAST : !strcmp(name, "allgather") ? ALLGATHER
                  : !strcmp(name, "reduce_scatter_block") ? RSB : !strcmp(name, "reduce") ? REDUCE : ALLREDUCE;
  if (which == ALLREDUCE && strcmp(name, "allreduce")) {
    if (rank == 0) fprintf(stderr, "pmpi-loop: collective \"%s\": expected allreduce, bcast, allgather, reduce_scatter_block or reduce\n", name);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t lo = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)4 << 10;
  const size_t hi = argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)256 << 20;
  const size_t factor = argc > 4 ? strtoull(argv[4], NULL, 10) : 4;
  const size_t cap = hi < sizeof(double) * (size_t)size ? sizeof(double) * (size_t)size : hi;
  double* in = malloc(cap);
  double* out = malloc(cap);
  for (size_t i = 0; i < cap / sizeof(double); ++i) in[i] = (double)(rank + i % 1000), out[i] = 0;
  if (rank == 0) printf("# %d processes, %s; bytes median_us\n", size, name);
  for (size_t bytes = lo; bytes <= hi; bytes *= factor) {
    int n = (int)(bytes / sizeof(double));
    if (which == ALLGATHER || which == RSB) n = n / size * size;
    if (n < ((which == ALLGATHER || which == RSB) ? size : 1)) n = (which == ALLGATHER || which == RSB) ? size : 1;
    int trials = (int)((64ull << 20) / bytes);
    trials = trials < 7 ? 7 : trials > 300 ? 300 : trials;
    /* As the timed calls: a barrier before each (the measured choice times
       these calls, and a call right after another, with no barrier, meets its
       peers already there: MPI's own was 2 to 3 x faster that way, here, at
       128 KiB to 8 MiB on 2 processes, than in the loop below). */
    /* Untimed: more than the measured choice's trial calls at its defaults (82
       below 64 KiB, 22 from there), which would otherwise be in the median. */
    const int untimed = bytes < ((size_t)64 << 10) ? 90 : 30;
    for (int w = 0; w < untimed; ++w) {
      MPI_Barrier(MPI_COMM_WORLD);
      call(which, in, out, n, size);
    }
    double* t = malloc(sizeof(double) * (size_t)trials);
    for (int k = 0; k < trials; ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      call(which, in, out, n, size);
      double dt = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[k] = dt;
    }
    qsort(t, (size_t)trials, sizeof(double), cmp);
    /* one check per collective */
    double got = 0, want = 0;
    if ((which == ALLREDUCE || (which == REDUCE && rank == 0)) && n > 1) got = out[1], want = (double)size * (size - 1) / 2 + size;
    if (which == BCAST && n > 1) got = in[1], want = 1;   /* rank 0's element 1 */
    if (which == ALLGATHER) got = out[n - 1], want = (double)(size - 1 + (n / size - 1) % 1000);
    if (which == RSB) got = out[0], want = (double)size * (size - 1) / 2 + (double)size * (double)((size_t)rank * (size_t)(n / size) % 1000);
    if (got != want) fprintf(stderr, "rank %d: wrong result at %zu bytes: %g != %g\n", rank, bytes, got, want);
    if (rank == 0) printf("%zu %.2f\n", bytes, t[trials / 2] * 1e6);
    fflush(stdout);
    free(t);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
