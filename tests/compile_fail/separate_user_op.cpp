// Separate compilation compiles the built-in ops only: a user-defined op is refused
// at compile time, with what to do instead.
// expect: only mdring::sum, prod, min, max and avg are compiled into the library
#define MDRING_SEPARATE_COMPILATION 1
#include <mdring/mdring.hpp>
struct absmax {
  float operator()(float a, float b) const { return (a < 0 ? -a : a) > (b < 0 ? -b : b) ? a : b; }
};
void call(mdring::compiled_communicator& comm, float* buf) { mdring::all_reduce(comm, buf, 10, absmax{}); }
int main() { return 0; }
