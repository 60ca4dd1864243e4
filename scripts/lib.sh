# Shared by scripts/*.sh: install what is missing, on Debian 12 (as root, or with sudo).
# shellcheck shell=bash

# The packages a build with tests, MPI and Boost.MPI needs (libsimgrid-dev: the
# smpi_smoke test, the MPI transport on simulated ranks; about 15 MB).
MDRING_PACKAGES=(g++ gfortran make cmake libopenmpi-dev openmpi-bin libboost-mpi-dev doctest-dev libsimgrid-dev libucx-dev ucx-utils libgloo-dev pkg-config python3-dev python3-torch libtorch-dev pybind11-dev iproute2 python3-venv python3-pip doxygen)

# The other groups (scripts/install-deps.sh installs any of them at once): the
# libFuzzer targets (scripts/fuzz.sh), the interposer under MPICH beside Open MPI
# (scripts/test_mpich.sh), the plots (scripts/bench.sh, scripts/simulate.sh).
MDRING_FUZZ_PACKAGES=(clang libclang-rt-14-dev cmake make doctest-dev)
MDRING_MPICH_PACKAGES=(mpich libmpich-dev)
MDRING_PLOT_PACKAGES=(python3 python3-matplotlib)
MDRING_FORMAT_PACKAGES=(clang-format-16)

mdring_ensure_packages() {
  local missing=()
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "mdring: installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "mdring: need root or sudo to install ${missing[*]}" >&2; return 1; }
    sudo=sudo
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Open MPI refuses to run as root and to oversubscribe cores unless told.
mdring_mpi_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
}

mdring_jobs() { nproc 2>/dev/null || echo 2; }

# Debian's python3 (the one apt installed torch and matplotlib for), else the first
# python3 on PATH.
mdring_python() { if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else echo python3; fi; }

# What a page of fresh memory costs this machine now, as one sentence for a bench
# report: the first write of a 64 MiB anonymous mapping against a second write of it.
# Where the first write costs many microseconds a page (seen on this project's VMs:
# 15 us), every allocation that is not reused (an MPI library's temporary buffers,
# torch's heap tensors of 32 MiB and more, which glibc maps and unmaps each time)
# pays that, and tables measured on different days differ for that reason.
mdring_fault_cost() {
  "$(mdring_python)" - <<'PY'
import ctypes, mmap, time
n = 64 << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
a = ctypes.addressof(ctypes.c_char.from_buffer(m))
t = []
for v in (1, 2):
    s = time.perf_counter()
    ctypes.memset(a, v, n)
    t.append(time.perf_counter() - s)
pages = n // 4096
print(f"fresh memory: the first write of a 64 MiB anonymous mapping took {t[0] / pages * 1e6:.2f} us per 4 KiB page, "
      f"a second write {t[1] / pages * 1e6:.2f} us")
PY
}

# Configure (once) and build the given targets in build/.
mdring_build() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  # Release at -O2 without debug info: -g makes the template-heavy tests compile
  # about 1.5 x slower, and CI has 2 cores (MDRING_BUILD_TYPE=RelWithDebInfo for -g).
  # MDRING_CUDA_ARCHITECTURES (e.g. 90) narrows the GPU code built (CI: one
  # architecture, to stay inside its time budget; default 80 and 90).
  # MDRING_CMAKE_ARGS: more -D options, split at spaces (CI's: see .ci/run); without
  # them, the defaults again (a build tree CI configured builds fully next time).
  # The parts MDRING_PACKAGES bring must be built (as in the presets): a missing one
  # fails configure, naming it, instead of leaving its tests out quietly.
  local extra=(-DMDRING_BENCH_ALL_TYPES=ON -DMDRING_TEST_OPTIMIZE=
               "-DMDRING_REQUIRE=tests;mpi;boost_mpi;ucx;pmpi;torch;tools;benchmarks;examples;bench_gloo;simgrid;docs")
  [ -n "${MDRING_CUDA_ARCHITECTURES:-}" ] && extra+=(-DCMAKE_CUDA_ARCHITECTURES="$MDRING_CUDA_ARCHITECTURES")
  # shellcheck disable=SC2206
  [ -n "${MDRING_CMAKE_ARGS:-}" ] && extra+=(${MDRING_CMAKE_ARGS})
  # MDRING_OPTIMIZE (default -O2): the C++ optimization of a Release build (the ci preset: -O0).
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE="${MDRING_BUILD_TYPE:-Release}" \
    -DCMAKE_CXX_FLAGS_RELEASE="${MDRING_OPTIMIZE:--O2} -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELEASE="-O2 -DNDEBUG" \
    "${extra[@]}" >/dev/null
  cmake --build "$root/build" -j "$(mdring_jobs)" "$@"
}

# What scripts/simulate.sh adds: SimGrid (smpicxx, smpirun) and the plots.
MDRING_SMPI_PACKAGES=(g++ make cmake libsimgrid-dev python3 python3-matplotlib)
