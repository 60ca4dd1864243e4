// libmdring-pmpi.so, Open MPI's Fortran (mpif.h) entry points: Open MPI's
// Fortran layer calls PMPI_ itself, so without these a Fortran code would never
// reach the C entry points in mdring_pmpi.cpp. Each converts its handles and
// calls the C function (MPI_Allreduce, ...), which decides as for C. MPICH's
// Fortran layer calls the C MPI_ functions, so nothing here is built for it.
#include <mpi.h>

#include <dlfcn.h>

#include <algorithm>
#include <vector>

#define MDRING_PMPI_API extern "C" __attribute__((visibility("default")))

#if defined(OPEN_MPI) && OPEN_MPI
namespace {
// Fortran's MPI_IN_PLACE is the address of a common block, one symbol per mangling.
bool fortran_in_place(const void* p) {
  static void* const addrs[4] = {
      dlsym(RTLD_DEFAULT, "mpi_fortran_in_place"), dlsym(RTLD_DEFAULT, "mpi_fortran_in_place_"),
      dlsym(RTLD_DEFAULT, "mpi_fortran_in_place__"), dlsym(RTLD_DEFAULT, "MPI_FORTRAN_IN_PLACE")};
  for (void* a : addrs)
    if (a && p == a) return true;
  return false;
}
const void* f_in(const void* p) { return fortran_in_place(p) ? MPI_IN_PLACE : p; }

void f_allreduce(void* sb, void* rb, MPI_Fint* count, MPI_Fint* type, MPI_Fint* op, MPI_Fint* comm, MPI_Fint* ierr) {
  *ierr = MPI_Allreduce(f_in(sb), rb, int(*count), PMPI_Type_f2c(*type), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm));
}
void f_iallreduce(void* sb, void* rb, MPI_Fint* count, MPI_Fint* type, MPI_Fint* op, MPI_Fint* comm, MPI_Fint* req,
                  MPI_Fint* ierr) {
  MPI_Request r = MPI_REQUEST_NULL;
  *ierr = MPI_Iallreduce(f_in(sb), rb, int(*count), PMPI_Type_f2c(*type), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm), &r);
  if (*ierr == MPI_SUCCESS) *req = PMPI_Request_c2f(r);
}
void f_reduce(void* sb, void* rb, MPI_Fint* count, MPI_Fint* type, MPI_Fint* op, MPI_Fint* root, MPI_Fint* comm,
              MPI_Fint* ierr) {
  *ierr =
      MPI_Reduce(f_in(sb), rb, int(*count), PMPI_Type_f2c(*type), PMPI_Op_f2c(*op), int(*root), PMPI_Comm_f2c(*comm));
}
void f_reduce_scatter_block(void* sb, void* rb, MPI_Fint* count, MPI_Fint* type, MPI_Fint* op, MPI_Fint* comm,
                            MPI_Fint* ierr) {
  *ierr =
      MPI_Reduce_scatter_block(f_in(sb), rb, int(*count), PMPI_Type_f2c(*type), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm));
}
void f_reduce_scatter(void* sb, void* rb, MPI_Fint* counts, MPI_Fint* type, MPI_Fint* op, MPI_Fint* comm,
                      MPI_Fint* ierr) {
  const MPI_Comm c = PMPI_Comm_f2c(*comm);
  int size = 0, inter = 0;
  PMPI_Comm_test_inter(c, &inter);
  inter ? PMPI_Comm_remote_size(c, &size) : PMPI_Comm_size(c, &size);
  std::vector<int> rc(counts, counts + std::max(size, 0));
  *ierr = MPI_Reduce_scatter(f_in(sb), rb, rc.data(), PMPI_Type_f2c(*type), PMPI_Op_f2c(*op), c);
}
void f_allgather(void* sb, MPI_Fint* sc, MPI_Fint* st, void* rb, MPI_Fint* rc, MPI_Fint* rt, MPI_Fint* comm,
                 MPI_Fint* ierr) {
  *ierr = MPI_Allgather(f_in(sb), int(*sc), PMPI_Type_f2c(*st), rb, int(*rc), PMPI_Type_f2c(*rt), PMPI_Comm_f2c(*comm));
}
// Open MPI's Fortran MPI_INIT calls PMPI_Init itself: without these, a Fortran
// program would never get the thread level the progress agent needs.
void f_init(MPI_Fint* ierr) { *ierr = MPI_Init(nullptr, nullptr); }
void f_init_thread(MPI_Fint* required, MPI_Fint* provided, MPI_Fint* ierr) {
  int p = 0;
  *ierr = MPI_Init_thread(nullptr, nullptr, int(*required), &p);
  *provided = MPI_Fint(p);
}
void f_bcast(void* b, MPI_Fint* count, MPI_Fint* type, MPI_Fint* root, MPI_Fint* comm, MPI_Fint* ierr) {
  *ierr = MPI_Bcast(b, int(*count), PMPI_Type_f2c(*type), int(*root), PMPI_Comm_f2c(*comm));
}
}  // namespace

// Each Fortran name in its four manglings (upper case, lower case, one and two
// trailing underscores), as Open MPI's libmpi_mpifh defines them.
#define MDRING_FORTRAN(lower, upper, impl, params, args) \
  MDRING_PMPI_API void lower params { impl args; }       \
  MDRING_PMPI_API void lower##_ params { impl args; }    \
  MDRING_PMPI_API void lower##__ params { impl args; }   \
  MDRING_PMPI_API void upper params { impl args; }

MDRING_FORTRAN(mpi_allreduce, MPI_ALLREDUCE, f_allreduce,
               (void* sb, void* rb, MPI_Fint* n, MPI_Fint* t, MPI_Fint* o, MPI_Fint* c, MPI_Fint* e),
               (sb, rb, n, t, o, c, e))
MDRING_FORTRAN(mpi_iallreduce, MPI_IALLREDUCE, f_iallreduce,
               (void* sb, void* rb, MPI_Fint* n, MPI_Fint* t, MPI_Fint* o, MPI_Fint* c, MPI_Fint* r, MPI_Fint* e),
               (sb, rb, n, t, o, c, r, e))
MDRING_FORTRAN(mpi_reduce, MPI_REDUCE, f_reduce,
               (void* sb, void* rb, MPI_Fint* n, MPI_Fint* t, MPI_Fint* o, MPI_Fint* root, MPI_Fint* c, MPI_Fint* e),
               (sb, rb, n, t, o, root, c, e))
MDRING_FORTRAN(mpi_reduce_scatter_block, MPI_REDUCE_SCATTER_BLOCK, f_reduce_scatter_block,
               (void* sb, void* rb, MPI_Fint* n, MPI_Fint* t, MPI_Fint* o, MPI_Fint* c, MPI_Fint* e),
               (sb, rb, n, t, o, c, e))
MDRING_FORTRAN(mpi_reduce_scatter, MPI_REDUCE_SCATTER, f_reduce_scatter,
               (void* sb, void* rb, MPI_Fint* n, MPI_Fint* t, MPI_Fint* o, MPI_Fint* c, MPI_Fint* e),
               (sb, rb, n, t, o, c, e))
MDRING_FORTRAN(mpi_allgather, MPI_ALLGATHER, f_allgather,
               (void* sb, MPI_Fint* sc, MPI_Fint* st, void* rb, MPI_Fint* rc, MPI_Fint* rt, MPI_Fint* c, MPI_Fint* e),
               (sb, sc, st, rb, rc, rt, c, e))
MDRING_FORTRAN(mpi_bcast, MPI_BCAST, f_bcast,
               (void* b, MPI_Fint* n, MPI_Fint* t, MPI_Fint* root, MPI_Fint* c, MPI_Fint* e), (b, n, t, root, c, e))
MDRING_FORTRAN(mpi_init, MPI_INIT, f_init, (MPI_Fint * e), (e))
MDRING_FORTRAN(mpi_init_thread, MPI_INIT_THREAD, f_init_thread, (MPI_Fint * req, MPI_Fint* prov, MPI_Fint* e),
               (req, prov, e))
#undef MDRING_FORTRAN
#endif
