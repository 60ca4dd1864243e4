#!/usr/bin/env bash
# tests/package/configure.sh SOURCE_DIR WORK_DIR [CXX]: `./configure && make && make
# install`, as an autotools build (Spack, EasyBuild, a make-built HPC stack) takes mdring.
#
# 1. Bad arguments: each fails, names the argument and what was expected, and writes
#    no Makefile (an unknown option or part, a relative prefix, a directory that is
#    not there or holds no nvcc, a directory for a part that takes none, a stray word,
#    a CMake missing or too old, a part asked for that cannot be built).
#    And the arguments Debian's dh_auto_configure passes (${prefix} in directories,
#    CPPFLAGS, --disable-option-checking with an option not mdring's, -n) taken.
# 2. From a directory of its own (VPATH), the headers alone: installation directories
#    inside and outside the prefix, make docs where doxygen is (the API reference
#    installed into DOCDIR/html), make install with and without DESTDIR, make
#    installcheck (examples/make built and run on the installed pkg-config files),
#    the CMake package building and running a threads all_reduce, config.status, make
#    uninstall (nothing left), make distclean.
# 3. Where MPI is: ./configure in (a copy of) the sources, CXXFLAGS given, the
#    interposer asked for: make builds libmdring-pmpi.so with those flags alone, make
#    install puts it and mdring-pmpi.pc in the libdir.
# shellcheck disable=SC2016 # (${prefix} in single quotes: configure expands it, as autoconf's make does)
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
cxx=${3:-c++}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
# Directories outside the prefix, and outside the sources (CMake refuses an installed
# include directory under the source or build tree, where ctest's WORK_DIR is).
outside=$(mktemp -d "${TMPDIR:-/tmp}/mdring-configure.XXXXXX")
trap 'rm -rf "$outside"' EXIT
export CXX=$cxx
unset CXXFLAGS CMAKE MAKEFLAGS
fail() {
  echo "configure test: $*"
  exit 1
}
# Everything optional left out (the headers alone).
off=(--without-mpi --without-ucx --without-cuda --without-torch --disable-tests --disable-examples --disable-benchmarks
  --disable-tools --disable-docs)

# ---- 1. errors -------------------------------------------------------------------------------
n=0
expect_error() { # expect_error TEXT ARGS...: configure ARGS fails, its stderr says TEXT, no Makefile
  local want=$1
  shift
  local d="$work/error$((n += 1))"
  mkdir -p "$d"
  if (cd "$d" && "$src/configure" "$@" >out 2>err); then
    fail "configure $* passed; expected an error saying: $want"
  fi
  grep -qF -- "$want" "$d/err" || {
    cat "$d/err"
    fail "configure $*: the error does not say: $want"
  }
  [ ! -e "$d/Makefile" ] || fail "configure $* failed but wrote a Makefile"
}
expect_error "unrecognized option: --with-fortran (the parts: mpi boost-mpi" --with-fortran
expect_error "unrecognized option: --frobnicate" --frobnicate
expect_error "--prefix=relative: expected an absolute directory" --prefix=relative
expect_error "--with-cuda=$work/none: $work/none is not a directory" --with-cuda="$work/none"
expect_error "--with-cuda=$work: no bin/nvcc there" --with-cuda="$work"
expect_error "--with-pmpi=/usr: --with-pmpi takes no directory" --with-pmpi=/usr
expect_error "--enable-tools=/usr: --enable-tools takes no value" --enable-tools=/usr
expect_error "--without-mpi takes no value" --without-mpi=/usr
expect_error "--libdir needs a directory" --libdir=
expect_error "--bindir=bin: expected an absolute directory" --bindir=bin
expect_error "--includedir=inc/usr/local: expected an absolute directory" '--includedir=inc${prefix}'
expect_error "--disable-shared: mdring's libraries" --disable-shared
expect_error "--host=aarch64-linux-gnu differs from --build=x86_64-linux-gnu" --build=x86_64-linux-gnu \
  --host=aarch64-linux-gnu
expect_error "unexpected argument: stray" stray
expect_error "unexpected argument: 9X=1" 9X=1
expect_error "no CMake found as '$work/no-cmake'" --cmake="$work/no-cmake"
printf '#!/bin/sh\necho "cmake version 3.18.4"\n' >"$work/old-cmake"
chmod +x "$work/old-cmake"
expect_error "is CMake 3.18.4; mdring needs 3.25 or later" CMAKE="$work/old-cmake"
# Asked for, and what it needs left out: CMake's refusal, naming the part and why.
expect_error "pmpi (libmdring-pmpi.so, the MPI interposer): needs MPI" "${off[@]}" --with-pmpi
grep -q "CMake failed" "$work/error$n/err" || fail "the refused --with-pmpi does not say that CMake failed"
grep -q "MDRING_REQUIRE=pmpi" "$work/error$n/config.log" || fail "config.log does not hold CMake's command line"
echo "configure test: $n bad arguments refused, each named"

# ---- 1b. what Debian's dh_auto_configure passes every configure -----------------------------
mkdir -p "$work/dh"
(cd "$work/dh" && CPPFLAGS="-Wdate-time -D_FORTIFY_SOURCE=2" "$src/configure" --with-fancy-lib --build=x86_64-linux-gnu \
  --prefix=/usr '--includedir=${prefix}/include' '--mandir=${prefix}/share/man' '--infodir=${prefix}/share/info' \
  --sysconfdir=/etc --localstatedir=/var --disable-option-checking --disable-silent-rules \
  '--libdir=${prefix}/lib/x86_64-linux-gnu' --runstatedir=/run --disable-maintainer-mode \
  --disable-dependency-tracking --enable-fancy-thing -n "${off[@]}" >out 2>err) || {
  cat "$work/dh/err"
  fail "configure with dh_auto_configure's arguments failed"
}
for o in --with-fancy-lib --enable-fancy-thing; do  # (before and after --disable-option-checking)
  grep -q -- "$o is not an option of mdring's; ignored" "$work/dh/err" ||
    fail "--disable-option-checking did not turn $o into a note"
done
[ ! -e "$work/dh/Makefile" ] || fail "--no-create wrote a Makefile"
cache=$work/dh/cmake-build/CMakeCache.txt
for want in "CMAKE_INSTALL_LIBDIR:PATH=lib/x86_64-linux-gnu" "CMAKE_INSTALL_INCLUDEDIR:PATH=include" \
  "CMAKE_INSTALL_SYSCONFDIR:PATH=/etc" "CMAKE_VERBOSE_MAKEFILE:BOOL=ON" \
  "CMAKE_CXX_FLAGS:STRING=-Wdate-time -D_FORTIFY_SOURCE=2" "CMAKE_BUILD_TYPE:STRING=RelWithDebInfo"; do
  grep -qxF "$want" "$cache" || fail "dh's arguments: CMakeCache.txt has no line $want"
done
echo "configure test: dh_auto_configure's arguments taken (\${prefix} expanded, CPPFLAGS, silent rules, option checking off)"

# ---- 2. the headers, from a directory of its own -------------------------------------------
prefix=$work/prefix elsewhere=$outside/elsewhere
mkdir -p "$work/b"
cd "$work/b"
docs=--disable-docs  # (the API reference too, where doxygen is: make docs, installed into DOCDIR/html)
command -v doxygen >/dev/null && docs=--with-docs
"$src/configure" --prefix="$prefix" --libdir="$prefix/lib64" --includedir="$elsewhere/include" "${off[@]}" $docs \
  >"$work/configure.out"
grep -q "mdring [0-9.]*: the headers" "$work/configure.out" || {
  cat "$work/configure.out"
  fail "configure printed no summary"
}
grep -q "left out:  mpi (mdring::mpi, mdring::separate): MDRING_ENABLE_MPI is OFF" "$work/configure.out" ||
  fail "the summary does not say that --without-mpi left mpi out"
for f in Makefile config.status config.log cmake-build/CMakeCache.txt; do
  [ -e "$f" ] || fail "configure wrote no $f"
done
grep -q "^CMAKE_INSTALL_LIBDIR:PATH=lib64$" cmake-build/CMakeCache.txt ||
  fail "--libdir=PREFIX/lib64 did not become CMake's relative lib64"
grep -q "^CMAKE_INSTALL_INCLUDEDIR:PATH=$elsewhere/include$" cmake-build/CMakeCache.txt ||
  fail "--includedir outside the prefix is not kept absolute"
grep -q "^CMAKE_BUILD_TYPE:STRING=RelWithDebInfo$" cmake-build/CMakeCache.txt ||
  fail "without CXXFLAGS the build type is not RelWithDebInfo (-O2 -g)"
make >"$work/make.out"
want=("$prefix/lib64/pkgconfig/mdring.pc" "$prefix/share/cmake/mdring/mdringConfig.cmake"
  "$elsewhere/include/mdring/mdring.hpp")
if [ "$docs" = --with-docs ]; then
  make docs >"$work/docs.out" 2>&1 || {
    tail -20 "$work/docs.out"
    fail "make docs failed"
  }
  want+=("$prefix/share/doc/mdring/html/index.html")
fi
make install DESTDIR="$work/stage" >"$work/install.out"
for f in "${want[@]}"; do
  [ -f "$work/stage$f" ] || fail "make install DESTDIR=$work/stage put no $work/stage$f"
done
[ ! -e "$prefix" ] || fail "make install DESTDIR=... wrote into the prefix itself"
make uninstall DESTDIR="$work/stage" >/dev/null
[ -z "$(find "$work/stage" -type f)" ] || fail "make uninstall DESTDIR=... left $(find "$work/stage" -type f | head -3)"
make install >"$work/install.out"
[ -f "$elsewhere/include/mdring/mdring.hpp" ] || fail "make install put no headers in --includedir"
if command -v pkg-config >/dev/null; then
  make installcheck CXXFLAGS=-O0 >"$work/installcheck.out" 2>&1 || {
    tail -20 "$work/installcheck.out"
    fail "make installcheck failed"
  }
  grep -q "every element is" "$work/installcheck.out" || fail "make installcheck ran no example"
fi
# pkg-config, as a make-built code finds it
if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH=$prefix/lib64/pkgconfig
  flags=$(pkg-config --cflags --libs mdring)
  [[ "$flags" == *"-I$elsewhere/include"* ]] || fail "pkg-config --cflags mdring ($flags) does not name --includedir"
fi
# the CMake package
cmake -S "$src/tests/package/consumer" -B "$work/consumer" -DCMAKE_CXX_COMPILER="$cxx" -DMDRING_MODE=find_package \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/consumer.log" 2>&1 || {
  cat "$work/consumer.log"
  fail "a CMake consumer did not find the installed package"
}
cmake --build "$work/consumer" --target consumer_threads >"$work/consumer-build.log" 2>&1 || {
  cat "$work/consumer-build.log"
  fail "the CMake consumer did not build"
}
"$work/consumer/consumer_threads" >/dev/null || fail "the CMake consumer failed"
# config.status: the same arguments again
./config.status -q
grep -q "^prefix = $prefix$" Makefile || fail "config.status did not configure with the same prefix"
grep -q "^CMAKE_INSTALL_INCLUDEDIR:PATH=$elsewhere/include$" cmake-build/CMakeCache.txt ||
  fail "config.status did not configure with the same --includedir"
make uninstall >/dev/null
left=$(find "$prefix" "$elsewhere" -type f)
[ -z "$left" ] || fail "make uninstall left files: $left"
make distclean >/dev/null
[ -z "$(find . -mindepth 1 -maxdepth 1)" ] || fail "make distclean left $(find . -mindepth 1 -maxdepth 1 | tr "\n" " ")"
echo "configure test: the headers installed (VPATH, DESTDIR, dirs in and out of the prefix), found by pkg-config and CMake, uninstalled"

# ---- 3. in the sources, CXXFLAGS given, the interposer --------------------------------------
if ! command -v mpicxx >/dev/null; then
  echo "configure test: no MPI here: the interposer's build left untested"
  exit 0
fi
mkdir -p "$work/src"
(cd "$src" && tar --exclude='./build*' --exclude=./.git --exclude=./cmake-build --exclude=./b -cf - .) |
  (cd "$work/src" && tar -xf -)
cd "$work/src"
rm -f Makefile config.status config.log
./configure -q --prefix="$work/p2" --libdir="$outside/p2lib" --includedir="$outside/p2inc" "${off[@]}" --with-mpi --with-pmpi \
  --without-boost-mpi CXXFLAGS="-O1" CFLAGS="-O1"
grep -q "^CMAKE_BUILD_TYPE:STRING=None$" cmake-build/CMakeCache.txt || fail "with CXXFLAGS given the build type is not None"
grep -q "^CMAKE_CXX_FLAGS:STRING=-O1$" cmake-build/CMakeCache.txt || fail "CXXFLAGS=-O1 did not become CMAKE_CXX_FLAGS"
if make docs >docs.out 2>&1; then fail "make docs passed where configure left the API reference out"; fi
grep -q "make docs: the API reference was left out (configure --with-docs" docs.out ||
  fail "make docs without the API reference does not say why: $(cat docs.out)"
make -j2 >make.out 2>&1 || {
  tail -30 make.out
  fail "make failed"
}
make install >install.out
lib=$outside/p2lib/libmdring-pmpi.so
[ -f "$lib" ] || fail "make install put no libmdring-pmpi.so in --libdir ($outside/p2lib)"
nm -D --defined-only "$lib" | grep -q " T MPI_Allreduce$" || fail "$lib does not export MPI_Allreduce"
[ -f "$outside/p2lib/pkgconfig/mdring-pmpi.pc" ] || fail "make install put no mdring-pmpi.pc in --libdir"
# The CMake package with both directories outside the prefix: the interposer found,
# mdring::separate's library source where it was installed.
mkdir -p "$work/pmpi_consumer"
cat >"$work/pmpi_consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(pmpi_consumer LANGUAGES C CXX)
find_package(mdring REQUIRED COMPONENTS mpi pmpi)
get_target_property(src mdring::separate INTERFACE_SOURCES)
string(GENEX_STRIP "${src}" plain)
if(NOT src MATCHES "p2inc/mdring/separate/src.cpp" OR NOT EXISTS "${plain}")
  message(FATAL_ERROR "mdring::separate's source is ${src}")
endif()
message(STATUS "pmpi and separate found")
EOF
cmake -S "$work/pmpi_consumer" -B "$work/pmpi_consumer/b" -DCMAKE_PREFIX_PATH="$work/p2" >"$work/pmpi_consumer.log" 2>&1 || {
  cat "$work/pmpi_consumer.log"
  fail "the CMake package did not find pmpi and separate with --libdir and --includedir outside the prefix"
}
echo "configure test: ./configure in the sources with CXXFLAGS built and installed the interposer ($lib)"
