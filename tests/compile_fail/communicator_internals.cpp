// A communicator's per-call state is not part of its public face: it lives in the
// host executor's workspace (executor/host/workspace.hpp), which the communicator
// holds privately and hands to each call's engine; a user's code cannot reach it.
// expect: (private within this context|is private|is a private member)
#include <mdring/mdring.hpp>
using comm_t = mdring::communicator<decltype(mdring::ring<mdring::shm, 2>), mdring::threads::transport>;
std::size_t peek(comm_t& c) { return c.ws_->per_slot(); }
int main() { return 0; }
