/* pmpi_measure: an unmodified MPI program that calls each collective the
 * interposer takes many times per size, as a training or solver loop does, so
 * that the interposer's measured choice (MPI's own collective or mdring's, per
 * size class) runs its trial calls and then keeps one side. Every call's result
 * is checked exactly on every rank, whichever side ran it: integer values in
 * int and double (exact sums), each call with different inputs, in place and
 * not. Rank 0 prints a digest of every rank's results per collective and size
 * (run.cmake compares it with the native run's), then PASSED.
 *
 *   mpirun -n 3 pmpi_measure [calls per size, default 56]
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int R, P;
static uint64_t digest;
static long failures;

static void fold(const void* p, size_t bytes) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < bytes; ++i) digest = (digest ^ b[i]) * 1099511628211ull;
}

/* Rank r's element i at call k: small integers, exact in double. */
static long value(int r, long i, int k) { return (long)((r + 1) * 7 + (i % 97) * 3 + k * 11) % 1000; }

static void check(const char* what, long i, double got, double want, int k) {
  if (got == want) return;
  if (failures++ < 10)
    fprintf(stderr, "rank %d: %s call %d element %ld: %.17g, expected %.17g\n", R, what, k, i, got, want);
}

static void report(const char* what, size_t bytes) {
  uint64_t* all = R == 0 ? malloc(sizeof(uint64_t) * (size_t)P) : NULL;
  MPI_Gather(&digest, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (R == 0) {
    printf("digest %s %zu", what, bytes);
    for (int r = 0; r < P; ++r) printf(" %016llx", (unsigned long long)all[r]);
    printf("\n");
    free(all);
  }
  digest = 1469598103934665603ull;
}

static void allreduce(int n, int calls, int use_double) {
  const size_t es = use_double ? sizeof(double) : sizeof(int);
  char* in = malloc(es * (size_t)n + 1);
  char* out = malloc(es * (size_t)n + 1);
  for (int k = 0; k < calls; ++k) {
    const int inplace = k % 3 == 2;
    for (long i = 0; i < n; ++i) {
      if (use_double) ((double*)(inplace ? out : in))[i] = (double)value(R, i, k);
      else ((int*)(inplace ? out : in))[i] = (int)value(R, i, k);
    }
    MPI_Allreduce(inplace ? MPI_IN_PLACE : in, out, n, use_double ? MPI_DOUBLE : MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (long i = 0; i < n; ++i) {
      long want = 0;
      for (int r = 0; r < P; ++r) want += value(r, i, k);
      check("MPI_Allreduce", i, use_double ? ((double*)out)[i] : ((int*)out)[i], (double)want, k);
    }
    fold(out, es * (size_t)n);
  }
  free(in);
  free(out);
}

static void reduce(int n, int calls) {
  double* in = malloc(sizeof(double) * (size_t)n + 1);
  double* out = malloc(sizeof(double) * (size_t)n + 1);
  for (int k = 0; k < calls; ++k) {
    const int root = k % P;
    for (long i = 0; i < n; ++i) in[i] = (double)value(R, i, k), out[i] = -1;
    MPI_Reduce(in, out, n, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
    if (R == root) {
      for (long i = 0; i < n; ++i) {
        long want = 0;
        for (int r = 0; r < P; ++r) want += value(r, i, k);
        check("MPI_Reduce", i, out[i], (double)want, k);
      }
      fold(out, sizeof(double) * (size_t)n);
    }
  }
  free(in);
  free(out);
}

static void reduce_scatter_block(int rc, int calls) {
  const size_t total = (size_t)rc * (size_t)P;
  int* in = malloc(sizeof(int) * total + 1);
  int* out = malloc(sizeof(int) * (size_t)rc + 1);
  for (int k = 0; k < calls; ++k) {
    for (size_t i = 0; i < total; ++i) in[i] = (int)value(R, (long)i, k);
    MPI_Reduce_scatter_block(in, out, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (long i = 0; i < rc; ++i) {
      const long gi = (long)R * rc + i;
      long want = 0;
      for (int r = 0; r < P; ++r) want += value(r, gi, k);
      check("MPI_Reduce_scatter_block", i, out[i], (double)want, k);
    }
    fold(out, sizeof(int) * (size_t)rc);
  }
  free(in);
  free(out);
}

static void allgather(int n, int calls) {
  int* in = malloc(sizeof(int) * (size_t)n + 1);
  int* out = malloc(sizeof(int) * (size_t)n * (size_t)P + 1);
  for (int k = 0; k < calls; ++k) {
    const int inplace = k % 2 == 1;
    for (long i = 0; i < n; ++i) (inplace ? out + (size_t)R * (size_t)n : in)[i] = (int)value(R, i, k);
    MPI_Allgather(inplace ? MPI_IN_PLACE : in, n, MPI_INT, out, n, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < P; ++r)
      for (long i = 0; i < n; ++i) check("MPI_Allgather", (long)r * n + i, out[(size_t)r * (size_t)n + i], (double)value(r, i, k), k);
    fold(out, sizeof(int) * (size_t)n * (size_t)P);
  }
  free(in);
  free(out);
}

static void bcast(int n, int calls) {
  int* buf = malloc(sizeof(int) * (size_t)n + 1);
  for (int k = 0; k < calls; ++k) {
    const int root = (k + 1) % P;
    for (long i = 0; i < n; ++i) buf[i] = R == root ? (int)value(R, i, k) : -1;
    MPI_Bcast(buf, n, MPI_INT, root, MPI_COMM_WORLD);
    for (long i = 0; i < n; ++i) check("MPI_Bcast", i, buf[i], (double)value(root, i, k), k);
    fold(buf, sizeof(int) * (size_t)n);
  }
  free(buf);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &R);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const int calls = argc > 1 ? atoi(argv[1]) : 56;
  digest = 1469598103934665603ull;
  /* Sizes in bytes of the whole call (one size class each). */
  static const size_t sizes[] = {8, 1024, 65536, 1 << 20};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    const size_t bytes = sizes[s];
    const int n_int = (int)(bytes / sizeof(int)), n_dbl = (int)(bytes / sizeof(double));
    allreduce(n_int, calls, 0);
    report("MPI_Allreduce(int)", bytes);
    allreduce(n_dbl, calls, 1);
    report("MPI_Allreduce(double)", bytes);
    reduce(n_dbl, calls);
    report("MPI_Reduce", bytes);
    const int rc = n_int / P > 0 ? n_int / P : 1;
    reduce_scatter_block(rc, calls);
    report("MPI_Reduce_scatter_block", bytes);
    allgather(rc, calls);
    report("MPI_Allgather", bytes);
    bcast(n_int, calls);
    report("MPI_Bcast", bytes);
  }
  long all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (R == 0) printf(all ? "FAILED: %ld wrong elements\n" : "PASSED\n", all);
  MPI_Finalize();
  return all != 0;
}
