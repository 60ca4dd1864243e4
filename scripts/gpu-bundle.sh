#!/usr/bin/env bash
# scripts/gpu-bundle.sh: builds, on a machine without a GPU, everything
# scripts/gpu-device.sh runs on a GPU machine, into one folder to carry there:
#
#   scripts/gpu-bundle.sh [DIR]        (default .devbuild; MDRING_GPU_BUILD: the build tree, default build-bundle)
#
# The GPU programs for sm_90 (MDRING_CUDA_ARCHITECTURES to change it): the tests
# test_gpu_fold, test_gpu_all_reduce and test_gpu_ipc_store (and test_gpu_mpi, test_gpu_ipc with MPI), mdring-gpu-bench,
# mdring-gpu-ipc-bench and mdring-run; and python/csrc/group_cuda.cu compiled to
# group_cuda.o for the pip build of mdring_torch there (MDRING_TORCH_CUDA_OBJECT,
# python/setup.py: its PyTorch differs from this one's);
# libmdring-nccl.so and nccl_api_check (NCCL's API on mdring, docs/NCCL.md), and
# with MDRING_NCCL_TESTS_SRC=<nccl-tests checkout> NCCL's benchmark programs against it;
# and segv_trace.so (scripts/segv_trace.c: a crash's native stack, for the diag phase).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
dest=${1:-.devbuild}
build=${MDRING_GPU_BUILD:-build-bundle}
arch=${MDRING_CUDA_ARCHITECTURES:-90}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DCMAKE_CUDA_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMDRING_BUILD_GPU_TESTS=ON \
  -DMDRING_BUILD_BENCHMARKS=ON >/dev/null
targets=(test_gpu_fold test_gpu_all_reduce test_gpu_ipc_store mdring-gpu-bench mdring-gpu-ipc-bench mdring-run)
# The MPI-bound GPU tests, where this machine has MPI (they link libmpi.so.40: Open MPI 4)
# (help's list read whole first: grep -q stops reading early, and under pipefail the
# writer's broken pipe failed the test, so these were never bundled)
help=$(cmake --build "$build" --target help)
grep -q "test_gpu_mpi$" <<<"$help" && targets+=(test_gpu_mpi test_gpu_ipc)
# NCCL's API on mdring (docs/NCCL.md), its C check and its point-to-point check, where nccl.h is found.
grep -q "mdring_nccl_api$" <<<"$help" && targets+=(nccl_api_check nccl_p2p_check)
cmake --build "$build" -j "$(mdring_jobs)" --target "${targets[@]}"
mkdir -p "$dest"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  cp "$f" "$dest/"
done
[ -f "$build/libmdring-nccl.so" ] && cp "$build/libmdring-nccl.so" "$dest/"
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
"$nvcc" -std=c++20 -O2 -arch=sm_"$arch" -Xcompiler -fPIC -Iinclude -Ipython/csrc -c python/csrc/group_cuda.cu \
  -o "$dest/group_cuda.o"
${CC:-cc} -shared -fPIC -O1 -o "$dest/segv_trace.so" scripts/segv_trace.c -ldl
# NCCL's benchmark programs (a checkout of github.com/NVIDIA/nccl-tests named by
# MDRING_NCCL_TESTS_SRC; never committed here), built against libmdring-nccl.so.
if [ -n "${MDRING_NCCL_TESTS_SRC:-}" ] && [ -f "$dest/libmdring-nccl.so" ]; then
  nh=$(mktemp -d)
  mkdir -p "$nh/include" "$nh/lib"
  cp -r "$(dirname "$(find /usr/local/cuda/include "${NCCL_HOME:-/nonexistent}" -name nccl.h 2>/dev/null | head -1)")"/nccl* "$nh/include/"
  cp "$dest/libmdring-nccl.so" "$nh/lib/" && ln -sf libmdring-nccl.so "$nh/lib/libnccl.so"
  make -C "$MDRING_NCCL_TESTS_SRC" -j "$(mdring_jobs)" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$nh" \
    NVCC_GENCODE="-gencode=arch=compute_$arch,code=sm_$arch" BUILDDIR="$(pwd)/$dest/nccl-tests" >/dev/null
fi
ls -la "$dest"
