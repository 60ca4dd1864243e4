// All-reduce on a boost::mpi::communicator.
//
//   mpirun -n 4 ./boost_mpi_all_reduce
#include <boost/mpi/environment.hpp>
#include <mdring/boost_mpi.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  boost::mpi::environment env(argc, argv);
  boost::mpi::communicator world;
  auto comm = mdring::bind(mdring::ring<mdring::shm>, world);
  std::vector<double> v(1000, double(world.rank()));
  mdring::all_reduce(comm, v.data(), v.size(), mdring::max);
  const bool ok = v[0] == double(world.size() - 1) && v[999] == v[0];
  if (world.rank() == 0)
    std::printf("max over %d Boost.MPI ranks: %g (%s)\n", world.size(), v[0], ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
