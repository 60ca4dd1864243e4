// A communicator's per-call state is not part of its public face: a user's code
// cannot reach it (the executor does, through mdring::detail::internals).
// expect: (private within this context|is private|is a private member)
#include <mdring/mdring.hpp>
using comm_t = mdring::communicator<decltype(mdring::ring<mdring::shm, 2>), mdring::threads::transport>;
std::size_t peek(comm_t& c) { return c.program_dims().size(); }
int main() { return 0; }
