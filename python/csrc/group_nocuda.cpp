// python/csrc/group_nocuda.cpp: mdring_torch built without its CUDA group (CPU tensors only).
#include "group.hpp"

#include <mdring/error.hpp>

namespace mdring_torch {

bool have_cuda() noexcept { return false; }
std::unique_ptr<device_group> make_device_group(mdring::rendezvous::store&, const group_config&, int) {
  throw mdring::invalid_argument("tensor",
                                 "mdring_torch was built without CUDA: CUDA tensors are not supported "
                                 "(rebuild with a CUDA compiler and a CUDA build of PyTorch)");
}

}  // namespace mdring_torch
