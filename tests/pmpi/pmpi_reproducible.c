/* pmpi_reproducible.c: an unmodified MPI program under the interposer with
 * MDRING_REPRODUCIBLE=1. Every rank computes, for every element, the reproducible
 * mode's contract (docs/USAGE.md, "Reproducible reductions": dimensions innermost first,
 * each folded left to right in coordinate order) from every rank's inputs, and
 * compares the results of MPI_Allreduce, MPI_Iallreduce, MPI_Reduce_scatter_block
 * and MPI_Reduce bitwise, at sizes from 4 bytes up (small calls included: the mode
 * takes them all). Inputs have wide exponents, so that a sum's bits depend on the
 * order of its terms. PMPI_TEST_EXTENTS="2,2" gives the extents of MDRING_TOPOLOGY.
 * Prints PASSED, or the first wrong element of each call. */
#include <mpi.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x) { /* splitmix64, as tests/test_support.hpp */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* tests/reproducible_reference.hpp wide_value */
static float wide_value(uint64_t seed, size_t rank, size_t i, int spread) {
  const uint64_t h = mix(seed ^ mix((uint64_t)rank * 0x100000001b3ull + i));
  const float mant = 1.0f + (float)(h & 0xffffff) / (float)(1 << 24);
  const int e = (int)((h >> 24) % (uint64_t)(2 * spread + 1)) - spread;
  return (((h >> 40) & 1) ? -1.0f : 1.0f) * ldexpf(mant, e);
}

static int ndims = 0;
static size_t ext[8];

/* The contract's sum of element i over the ranks. */
static float contract(size_t P, size_t i, float* work) {
  size_t n = P;
  for (size_t r = 0; r < P; ++r) work[r] = wide_value(7, r, i, 24);
  for (int d = 0; d < ndims; ++d) {
    const size_t p = ext[d];
    for (size_t g = 0; g < n / p; ++g) {
      float a = work[g * p];
      for (size_t c = 1; c < p; ++c) a += work[g * p + c];
      work[g] = a;
    }
    n /= p;
  }
  return work[0];
}

static int wrong(const char* what, size_t n, const float* got, const float* expect) {
  for (size_t i = 0; i < n; ++i)
    if (memcmp(&got[i], &expect[i], sizeof(float)) != 0) {
      printf("%s of %zu floats: element %zu is %.9g, the contract's %.9g\n", what, n, i, (double)got[i],
             (double)expect[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* e = getenv("PMPI_TEST_EXTENTS");
  size_t prod = 1;
  for (const char* s = e ? e : ""; *s && ndims < 8;) {
    char* end = NULL;
    ext[ndims] = strtoul(s, &end, 10);
    prod *= ext[ndims++];
    s = *end ? end + 1 : end;
  }
  if (prod != (size_t)size) {
    if (rank == 0) printf("PMPI_TEST_EXTENTS=%s does not multiply to %d\n", e ? e : "", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t P = (size_t)size, nmax = 300007;
  float* expect = malloc(nmax * sizeof(float));
  float* work = malloc(P * sizeof(float));
  float* x = malloc(nmax * sizeof(float));
  float* y = malloc(nmax * sizeof(float));
  for (size_t i = 0; i < nmax; ++i) expect[i] = contract(P, i, work);
  int bad = 0;
  const size_t counts[] = {1, 3, 1000, 4099, 65536, nmax};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
    const size_t n = counts[k];
    for (size_t i = 0; i < n; ++i) x[i] = wide_value(7, (size_t)rank, i, 24);
    MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    bad |= wrong("MPI_Allreduce", n, y, expect);
    memcpy(y, x, n * sizeof(float));
    MPI_Request rq;
    MPI_Iallreduce(MPI_IN_PLACE, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    bad |= wrong("MPI_Iallreduce in place", n, y, expect);
    const size_t b = n / P;
    if (b > 0) {
      MPI_Reduce_scatter_block(x, y, (int)b, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      bad |= wrong("MPI_Reduce_scatter_block", b, y, expect + (size_t)rank * b);
    }
    const int root = (int)(n % P);
    MPI_Reduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    if (rank == root) bad |= wrong("MPI_Reduce", n, y, expect);
  }
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf(any ? "FAILED\n" : "PASSED\n");
  free(expect), free(work), free(x), free(y);
  MPI_Finalize();
  return any;
}
