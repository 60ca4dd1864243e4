#!/usr/bin/env bash
# tests/package/bare_machine.sh SOURCE_DIR WORK_DIR [CXX]: the README's headers-only
# install on a machine with only a compiler and CMake.
#
# In a private mount namespace (nothing outside it changes) every optional
# dependency this machine has is hidden: MPI (both wrappers, headers, libraries),
# CUDA, CMake package files (doctest, Boost, Torch, Gloo, pybind11, UCX),
# pkg-config's files and pkg-config itself, Python's headers, Doxygen. Then, as the
# README says, a plain `cmake -S . -B b` (no options) and `cmake --install b
# --prefix P`: configure must pass, its summary must name every optional part as
# left out, the install must hold the headers, the CMake package and mdring.pc,
# and a CMake consumer must find mdring::mdring in P, build and run an exact
# all_reduce. Skipped (77) where a mount namespace cannot be made (not root).
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
cxx=${3:-c++}
rm -rf "$work"
mkdir -p "$work"
if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "bare_machine: skipped: no mount namespace here (unshare --mount needs root)"
  exit 77
fi
# Every optional part of mdring's configure (CMakeLists.txt's mdring_part calls).
parts="mpi boost_mpi ucx pmpi cuda nccl cuda_mpi torch tests docs"
export MDRING_BARE_SRC=$src MDRING_BARE_WORK=$work MDRING_BARE_CXX=$cxx MDRING_BARE_PARTS=$parts
unshare --mount --propagation private bash -euo pipefail -c '
  empty=$(mktemp -d)
  hide() {  # hide DIR-or-FILE...: an empty directory over each directory, /dev/null over each file
    for p in "$@"; do
      [ -e "$p" ] || continue
      if [ -d "$p" ]; then mount --bind "$empty" "$p"; else mount --bind /dev/null "$p"; fi
    done
  }
  hide /usr/local/cuda /usr/local/cuda-* \
       /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/mpich /usr/include/x86_64-linux-gnu/mpich \
       /usr/include/x86_64-linux-gnu/openmpi /usr/include/x86_64-linux-gnu/mpi /usr/include/mpi.h \
       /usr/bin/opal_wrapper /usr/bin/mpicxx.mpich /usr/bin/mpicc.mpich /usr/bin/smpicxx \
       /usr/lib/cmake /usr/share/cmake /usr/lib/x86_64-linux-gnu/cmake \
       /usr/lib/x86_64-linux-gnu/pkgconfig /usr/lib/pkgconfig /usr/share/pkgconfig /usr/bin/pkgconf \
       /usr/include/python3.11 /usr/include/doctest /usr/include/ucp /usr/bin/doxygen /usr/bin/nvcc \
       /usr/local/bin/nvcc /usr/local/bin/ptxas /usr/local/bin/nvlink /usr/local/bin/fatbinary /usr/local/bin/cudafe++
  export PATH=/usr/bin:/bin
  cd "$MDRING_BARE_WORK"
  cmake -S "$MDRING_BARE_SRC" -B b -DCMAKE_CXX_COMPILER="$MDRING_BARE_CXX" > configure.log 2>&1 \
    || { cat configure.log; echo "bare_machine: a plain configure failed with every optional dependency hidden"; exit 1; }
  cat configure.log
  for p in $MDRING_BARE_PARTS; do
    grep -q "left out:  $p (" configure.log \
      || { echo "bare_machine: the summary does not name $p as left out (is it still hidden?)"; exit 1; }
  done
  cmake --install b --prefix "$MDRING_BARE_WORK/prefix" > install.log
  for f in include/mdring/mdring.hpp include/mdring/version.hpp share/cmake/mdring/mdringConfig.cmake; do
    [ -f "prefix/$f" ] || { echo "bare_machine: the install has no $f"; exit 1; }
  done
  pc=$(find prefix -name mdring.pc)
  [ -n "$pc" ] || { echo "bare_machine: the install has no mdring.pc"; exit 1; }
  if find prefix -name "mdring-mpi.pc" | grep -q .; then echo "bare_machine: mdring-mpi.pc installed without MPI"; exit 1; fi
  cmake -S "$MDRING_BARE_SRC/tests/package/consumer" -B consumer -DCMAKE_CXX_COMPILER="$MDRING_BARE_CXX" \
        -DMDRING_MODE=find_package -DCMAKE_PREFIX_PATH="$MDRING_BARE_WORK/prefix" > consumer.log 2>&1 \
    || { cat consumer.log; exit 1; }
  cmake --build consumer > build.log 2>&1 || { cat build.log; exit 1; }
  ./consumer/consumer_threads
'
echo "bare_machine: configure, install and a consumer work with only a compiler and CMake"
