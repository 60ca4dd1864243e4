// python/csrc/group_noucx.cpp: mdring_torch built without UCX (MPI, or CUDA tensors only).
#include "group.hpp"

#include <mdring/error.hpp>

namespace mdring_torch {

bool have_ucx() noexcept { return false; }
std::unique_ptr<group> make_ucx_group(std::unique_ptr<mdring::rendezvous::store>, const group_config&) {
  throw mdring::invalid_argument("MDRING_TORCH_TRANSPORT",
                                 "mdring_torch was built without UCX, so CPU tensors need MPI (run under mpirun, or "
                                 "rebuild with libucx-dev installed)");
}

}  // namespace mdring_torch
