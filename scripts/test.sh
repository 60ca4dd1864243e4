#!/usr/bin/env bash
# Installs what is missing, builds everything (library checks, tests, examples,
# benchmarks) and runs every test with ctest. Extra arguments go to ctest
# (e.g. scripts/test.sh -L mpi, or -LE large to skip the > 2^31-element tests).
#
#   scripts/test.sh [CTEST_ARGS...]     build/ at -O2 (MDRING_OPTIMIZE, MDRING_CMAKE_ARGS: see lib.sh)
#   scripts/test.sh --preset NAME       the workflow NAME of CMakePresets.json instead: its
#                                       configure, build and test presets (CI: --preset ci)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
preset=""
if [ "${1:-}" = "--preset" ]; then
  [ $# -ge 2 ] || { echo "test.sh: --preset needs a workflow name (release, ci, dev)" >&2; exit 2; }
  preset=$2
  shift 2
  if [ $# -gt 0 ]; then
    echo "test.sh: --preset $preset runs the workflow's own test preset; ctest arguments ($*) need no --preset" >&2
    exit 2
  fi
fi
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
# The ci preset compiles with clang (and checks files with g++: tests/CMakeLists.txt).
[ "$preset" = ci ] && mdring_ensure_packages clang
if [ -n "$preset" ]; then
  mdring_mpi_env
  # The presets name no job count: one build job per core, as below.
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(mdring_jobs)}
  exec cmake --workflow --preset "$preset"
fi
mdring_build
mdring_mpi_env
# Tests run two at a time where each needs one core; a test of N processes
# declares PROCESSORS N and runs alone on this machine (ctest caps it at -j).
ctest --test-dir build --output-on-failure --timeout 900 -j "$(mdring_jobs)" "$@"
