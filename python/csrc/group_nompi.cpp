// python/csrc/group_nompi.cpp: mdring_torch built without MPI (UCX only).
#include "group.hpp"

#include <mdring/error.hpp>

namespace mdring_torch {

namespace {
[[noreturn]] void no_mpi() {
  throw mdring::invalid_argument("MDRING_TORCH_TRANSPORT",
                                 "mdring_torch was built without MPI: set MDRING_TORCH_TRANSPORT=ucx, or rebuild "
                                 "with libopenmpi-dev installed");
}
}  // namespace

bool have_mpi() noexcept { return false; }
std::unique_ptr<group> make_mpi_group(const std::vector<int>&, const group_config&) { no_mpi(); }
mpi_bootstrap bootstrap_mpi() { no_mpi(); }
void finalize_mpi() {}

}  // namespace mdring_torch
