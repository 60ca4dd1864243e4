#!/usr/bin/env bash
# tests/package/pkg_config.sh SOURCE_DIR BUILD_DIR WORK_DIR VERSION LIBDIR "PARTS" [CXX [OPTIMIZE]]:
# mdring from pkg-config, as a make-built HPC code takes it. Installs BUILD_DIR into
# WORK_DIR/prefix; checks that every .pc file is valid, carries VERSION, and that
# the one of each built part in PARTS (mpi, ucx, boost_mpi, pmpi, cuda, nccl) is
# there (and mdring-mpi.pc only with mpi); then builds examples/make with make and
# runs its `check` (threads, and with MPI the header-only and the separately
# compiled program on 4 processes).
set -euo pipefail
src=$1 build=$2 work=$3 version=$4 libdir=$5 parts=$6 cxx=${7:-c++} optimize=${8:--O2}
rm -rf "$work"
mkdir -p "$work/out"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
export PKG_CONFIG_PATH=$work/prefix/$libdir/pkgconfig
[ -f "$PKG_CONFIG_PATH/mdring.pc" ] || { echo "pkg_config: no mdring.pc in $PKG_CONFIG_PATH"; exit 1; }
has() { [[ " $parts " == *" $1 "* ]]; }
expect=(mdring)
has mpi && expect+=(mdring-mpi mdring-separate)
has boost_mpi && expect+=(mdring-boost-mpi)
has ucx && expect+=(mdring-ucx)
has pmpi && expect+=(mdring-pmpi)
has cuda && expect+=(mdring-cuda)
has nccl && expect+=(mdring-nccl)
for m in "${expect[@]}"; do
  [ -f "$PKG_CONFIG_PATH/$m.pc" ] || { echo "pkg_config: $m.pc is not installed although its part was built"; exit 1; }
done
for f in "$PKG_CONFIG_PATH"/*.pc; do
  m=$(basename "$f" .pc)
  pkg-config --validate "$m" || { echo "pkg_config: $f is not valid"; exit 1; }
  got=$(pkg-config --modversion "$m")
  [ "$got" = "$version" ] || { echo "pkg_config: $m says version $got, the headers $version"; exit 1; }
done
if ! has mpi && [ -f "$PKG_CONFIG_PATH/mdring-mpi.pc" ]; then
  echo "pkg_config: mdring-mpi.pc installed by a build without MPI"
  exit 1
fi
# The headers' directory is the installed one, found from the file's own place.
inc=$(pkg-config --cflags-only-I mdring)
[[ "$inc" == *"$work/prefix/"*include* ]] || { echo "pkg_config: mdring's -I ($inc) is not the prefix's"; exit 1; }
if has pmpi; then
  pre=$(pkg-config --variable=preload mdring-pmpi)
  [ -f "$pre" ] || { echo "pkg_config: mdring-pmpi's preload ($pre) does not exist"; exit 1; }
fi
if has mpi; then
  srcfile=$(pkg-config --variable=source mdring-separate)
  [ -f "$srcfile" ] || { echo "pkg_config: mdring-separate's source ($srcfile) does not exist"; exit 1; }
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make -C "$src/examples/make" O="$work/out" CXX="$cxx" CXXFLAGS="$optimize" check
echo "pkg_config: ${expect[*]} installed, valid, version $version; examples/make built and ran"
