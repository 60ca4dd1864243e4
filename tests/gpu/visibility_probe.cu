// tests/gpu/visibility_probe.cu: a shared object that instantiates an mdring
// kernel. tests/gpu/visibility.cmake checks that it exports this function and no
// kernel symbol (MDRING_KERNEL: hidden visibility), so two shared objects that
// both include mdring never share or interpose each other's kernels.
// (nvcc 12.8 and newer already give template kernels' host stubs internal linkage,
// -static-global-template-stub, so with them this passes even without the
// attribute; the attribute covers older nvcc and clang. The test guards the
// result, whichever of the two provides it.)
#include <mdring/cuda/reduce.cuh>

extern "C" __attribute__((visibility("default"))) void mdring_visibility_probe(float* d, const float* a, const float* b,
                                                                               std::size_t n, cudaStream_t s) {
  const float* in[2] = {a, b};
  mdring::cuda::fold(d, std::span<const float* const>(in, 2), n, mdring::sum, false, 1, s);
}
