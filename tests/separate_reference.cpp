// tests/separate_reference.cpp: header-only mdring in the separate-compilation test's
// program (tests/test_separate.cpp), to compare against: this file undefines
// MDRING_SEPARATE_COMPILATION, which the mdring::separate target sets for all of it.
#undef MDRING_SEPARATE_COMPILATION
#include <mdring/mpi.hpp>

#include <cstddef>
#include <string>

// explain() and scratch after reserve<float>(count) of a header-only communicator
// bound as test_separate binds its own (collective over MPI_COMM_WORLD).
std::string header_only_explain(std::size_t count, std::size_t& reserved) {
  namespace md = mdring;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto run = [&](auto comm) {
    comm.template reserve<float>(count);
    reserved = comm.scratch_bytes();
    return comm.template explain<float>(count) + comm.template explain<double, md::max_t>(count / 3) +
           comm.template explain<float>(count, md::collective::reduce, md::sum, std::size_t(size - 1));
  };
  if (size % 2 == 0 && size >= 4) return run(md::bind(md::ring<md::shm, 2> * md::ring<md::ethernet>, MPI_COMM_WORLD));
  return run(md::bind(md::ring<md::shm>, MPI_COMM_WORLD));
}
