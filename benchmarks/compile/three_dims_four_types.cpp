// The compile-cost benchmark: a three-dimension topology over MPI and all_reduce
// on four element types (what a trainer with mixed precision instantiates).
#include <mdring/mpi.hpp>

#include <cstdint>
#include <vector>

template <class T, class Comm>
void reduce_one(Comm& comm) {
  std::vector<T> v(1 << 16, T(1));
  mdring::all_reduce(comm, v.data(), v.size(), mdring::sum);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto comm =
        mdring::bind(mdring::ring<mdring::nvlink, 1> * mdring::ring<mdring::shm> * mdring::ring<mdring::infiniband, 1>,
                     MPI_COMM_WORLD);
    reduce_one<float>(comm);
    reduce_one<double>(comm);
    reduce_one<mdring::bfloat16>(comm);
    reduce_one<std::int32_t>(comm);
  }
  MPI_Finalize();
}
