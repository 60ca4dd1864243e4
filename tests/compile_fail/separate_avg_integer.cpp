// Separate compilation compiles avg for the floating types only.
// expect: avg is compiled for the floating types only
#define MDRING_SEPARATE_COMPILATION 1
#include <mdring/mdring.hpp>
#include <cstdint>
void call(mdring::compiled_communicator& comm, std::int32_t* buf) { mdring::all_reduce(comm, buf, 10, mdring::avg); }
int main() { return 0; }
