// The compile-cost benchmark's baseline: the same program with MPI_Allreduce.
#include <mpi.h>

#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::vector<float> grad(1 << 20, 1.0f);
  MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(grad.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
}
