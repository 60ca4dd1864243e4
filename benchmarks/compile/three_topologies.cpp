// The compile-cost benchmark: three communicators with three topologies in one
// file (a code that describes its world, its nodes and its node leaders each with
// its own topology), all_reduce<float> and all_gather<float> on each.
#include <mdring/mpi.hpp>

#include <vector>

template <class Comm>
void use(Comm& comm) {
  std::vector<float> v(1 << 16, 1.0f), g(v.size() * comm.size());
  mdring::all_reduce(comm, v.data(), v.size(), mdring::sum);
  mdring::all_gather(comm, v.data(), g.data(), v.size());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto world = mdring::bind(mdring::ring<mdring::shm, 1> * mdring::ring<mdring::infiniband>, MPI_COMM_WORLD);
    auto node = mdring::bind(mdring::ring<mdring::shm>, MPI_COMM_WORLD);
    auto leaders = mdring::bind(mdring::ring<mdring::infiniband>, MPI_COMM_WORLD);
    use(world);
    use(node);
    use(leaders);
  }
  MPI_Finalize();
}
