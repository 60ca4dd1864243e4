// All-reduce over MPI, two ranks per node times however many nodes there are.
//
//   mpirun -n 4 ./mpi_all_reduce
#include <mdring/mpi.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    // The dynamic extent takes the rest of the communicator's size.
    auto comm = mdring::bind(mdring::ring<mdring::shm, 2> * mdring::ring<mdring::infiniband>, MPI_COMM_WORLD);
    std::vector<long> v(100'000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = long(i) * long(comm.rank() + 1);
    mdring::all_reduce(comm, v.data(), v.size(), mdring::sum);
    const long p = long(comm.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != long(i) * p * (p + 1) / 2) status = 1;
    if (comm.rank() == 0) {
      std::printf("%s", comm.explain<long>(v.size()).c_str());
      std::printf("%s\n", status ? "WRONG" : "all_reduce over MPI: correct on rank 0");
    }
  } catch (const mdring::error& e) {
    std::fprintf(stderr, "%s\n", e.what());  // e.g. an odd number of processes for 2 x *
    status = 2;
  }
  MPI_Finalize();
  return status;
}
