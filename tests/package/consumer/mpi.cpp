#include <mdring/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int bad = 0;
  {
    auto comm = mdring::bind(mdring::ring<mdring::shm>, MPI_COMM_WORLD);
    long v = long(comm.rank()) + 1, expect = long(comm.size() * (comm.size() + 1) / 2);
    mdring::all_reduce(comm, &v, 1, mdring::sum);
    if (v != expect) bad = std::printf("consumer_mpi: got %ld, expected %ld\n", v, expect);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
