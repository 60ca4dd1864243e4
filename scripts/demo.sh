#!/usr/bin/env bash
# Quick start: installs what is missing, builds, and runs the demo:
#   1. explain() of a compile-time topology (nvlink:4 x infiniband:64),
#   2. an all_reduce on 8 in-process ranks shaped shm:2 x shm:4, checked,
#   3. 4 MPI processes: mdring's all_reduce against MPI_Allreduce on the same data.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
mdring_build --target demo mdring-bench
mdring_mpi_env

./build/examples/demo

echo
echo "== 3. all_reduce on 4 MPI processes (topology shm:2 x shm:*), mdring against MPI_Allreduce"
echo "   (same buffers, alternating every iteration, every result checked; ratio < 1: mdring is faster)"
echo
mpirun -n 4 ./build/benchmarks/mdring-bench --op all_reduce --topology "shm:2 x shm:*" \
  --min-bytes 64K --max-bytes 16M --factor 4 --iters 10 --warmup 3 --baseline mpi --check
