#!/usr/bin/env bash
# The drop-in interposer under MPICH (Debian's mpich, installed beside Open MPI;
# Open MPI stays the default mpicc/mpirun): builds libmdring-pmpi.so and the
# unmodified test programs against MPICH in build-mpich/ and runs them natively
# and preloaded (tests/pmpi, label pmpi). MPICH's Fortran layer calls the C
# MPI_ functions, so the Fortran program needs no Fortran wrappers there.
#
#   scripts/test_mpich.sh           # every process count: about 7 minutes on 2 cores
#   scripts/test_mpich.sh --quick   # 1 and 2 processes and the failure test (CI): about 2 minutes
# (MPICH's ch4:ucx polls while it waits, so more processes than cores are slow.)
set -euo pipefail
quick=()
[ "${1:-}" = "--quick" ] && quick=(-R "np1|np2|failure")
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}" "${MDRING_MPICH_PACKAGES[@]}"
cmake -S . -B build-mpich -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="${MDRING_OPTIMIZE:--O2} -DNDEBUG" \
  -DMDRING_CUDA=OFF -DMDRING_ENABLE_BOOST_MPI=OFF -DMDRING_BUILD_EXAMPLES=OFF -DMDRING_BUILD_BENCHMARKS=OFF \
  -DMDRING_BUILD_TORCH=OFF -DMDRING_BUILD_TOOLS=OFF \
  -DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
  -DMPI_Fortran_COMPILER=/usr/bin/mpif90.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich >/dev/null
targets=(mdring_pmpi pmpi_collectives pmpi_buffers pmpi_measure pmpi_failure)
grep -q "^pmpi_fortran:" <(cmake --build build-mpich --target help | sed 's/^\.\.\. //; s/ .*//; s/$/:/') &&
  targets+=(pmpi_fortran)
cmake --build build-mpich -j "$(mdring_jobs)" --target "${targets[@]}"
grep -q "MPICH" <(/usr/bin/mpichversion 2>/dev/null || true) && /usr/bin/mpichversion | head -1
ldd build-mpich/libmdring-pmpi.so | grep -i mpi
ctest --test-dir build-mpich --output-on-failure --timeout 600 -L pmpi "${quick[@]}"
