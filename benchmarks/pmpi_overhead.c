/* pmpi-overhead: what the interposer's wrapper costs a call it passes to MPI,
 * measured inside one process: batches of 10 calls through the wrapper
 * (MPI_Allreduce, preloaded libmdring-pmpi.so) alternate with batches of 10
 * straight to the MPI library (PMPI_Allreduce), 4000 of each, and rank 0 prints
 * both medians per call and their ratio. Separate runs cannot resolve this: at
 * half a microsecond, two runs of the same binary differ by more than 10 % here.
 *
 *   mpirun -n 2 -x LD_PRELOAD=.../libmdring-pmpi.so pmpi-overhead [collective [bytes]]
 *     collective: allreduce (default), bcast, allgather, reduce_scatter_block
 *
 * Where the measured choice keeps a size class on MPI, this ratio is what the
 * program pays for the interposer there. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

typedef int (*allreduce_fn)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);
typedef int (*bcast_fn)(void*, int, MPI_Datatype, int, MPI_Comm);
typedef int (*allgather_fn)(const void*, int, MPI_Datatype, void*, int, MPI_Datatype, MPI_Comm);
typedef int (*rsb_fn)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);

static int which, n, size;
static double *in, *out;

static void call(int direct) {
  switch (which) {
    case 0: (direct ? (allreduce_fn)PMPI_Allreduce : (allreduce_fn)MPI_Allreduce)(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    case 1: (direct ? (bcast_fn)PMPI_Bcast : (bcast_fn)MPI_Bcast)(in, n, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case 2: (direct ? (allgather_fn)PMPI_Allgather : (allgather_fn)MPI_Allgather)(in, n / size, MPI_DOUBLE, out, n / size, MPI_DOUBLE, MPI_COMM_WORLD); break;
    default: (direct ? (rsb_fn)PMPI_Reduce_scatter_block : (rsb_fn)MPI_Reduce_scatter_block)(in, out, n / size, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* name = argc > 1 ? argv[1] : "allreduce";
  which = !strcmp(name, "bcast") ? 1 : !strcmp(name, "allgather") ? 2 : !strcmp(name, "reduce_scatter_block") ? 3 : 0;
  const size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 8;
  n = (int)(bytes / sizeof(double));
  if (which >= 2) n = n / size * size;
  if (n < (which >= 2 ? size : 1)) n = which >= 2 ? size : 1;
  in = calloc((size_t)n, sizeof(double));
  out = calloc((size_t)n, sizeof(double));
  enum { N = 4000, B = 10 };
  double* ta = malloc(N * sizeof(double));
  double* tb = malloc(N * sizeof(double));
  for (int w = 0; w < 200; ++w) call(0), call(1);
  for (int k = 0; k < N; ++k) {
    const double t0 = MPI_Wtime();
    for (int j = 0; j < B; ++j) call(0);
    const double t1 = MPI_Wtime();
    for (int j = 0; j < B; ++j) call(1);
    const double t2 = MPI_Wtime();
    ta[k] = (t1 - t0) / B, tb[k] = (t2 - t1) / B;
  }
  qsort(ta, N, sizeof(double), cmp);
  qsort(tb, N, sizeof(double), cmp);
  if (rank == 0) printf("%s %zu %.3f %.3f %.3f\n", name, (size_t)n * sizeof(double), ta[N / 2] * 1e6, tb[N / 2] * 1e6, ta[N / 2] / tb[N / 2]);
  free(ta), free(tb), free(in), free(out);
  MPI_Finalize();
  return 0;
}
