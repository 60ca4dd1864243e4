// The compile-cost benchmark's user translation unit (scripts/bench_compile.sh):
// include mdring, bind a two-dimension topology over MPI, one all_reduce<float>.
#include <mdring/mpi.hpp>

#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto comm = mdring::bind(mdring::ring<mdring::shm> * mdring::ring<mdring::infiniband, 1>, MPI_COMM_WORLD);
    std::vector<float> grad(1 << 20, 1.0f);
    mdring::all_reduce(comm, grad.data(), grad.size(), mdring::sum);
  }
  MPI_Finalize();
}
