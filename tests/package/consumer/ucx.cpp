// A user's program on the UCX transport: all_reduce over the processes that
// mdring-run started (or a world of one).
#include <mdring/ucx.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto world = mdring::ucx::world::from_env();
  {
    auto comm = mdring::bind(world.topology(), world);
    std::vector<double> x(1000, double(world.rank() + 1));
    mdring::all_reduce(comm, x.data(), x.size(), mdring::sum);
    const double expect = double(world.size() * (world.size() + 1) / 2);
    if (x[0] != expect || x[999] != expect) {
      std::fprintf(stderr, "consumer_ucx: rank %zu got %g, expected %g\n", world.rank(), x[0], expect);
      return 1;
    }
  }
  mdring::ucx::wait_to_leave(world);
  std::printf("consumer_ucx: rank %zu of %zu ok\n", world.rank(), world.size());
  return 0;
}
