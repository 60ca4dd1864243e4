#!/usr/bin/env bash
# Installs what is missing, builds everything (library checks, tests, examples,
# benchmarks) and runs every test with ctest. Extra arguments go to ctest
# (e.g. scripts/test.sh -L mpi, or -LE large to skip the > 2^31-element tests).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
mdring_build
mdring_mpi_env
# Tests run two at a time where each needs one core; a test of N processes
# declares PROCESSORS N and runs alone on this machine (ctest caps it at -j).
ctest --test-dir build --output-on-failure --timeout 900 -j "$(mdring_jobs)" "$@"
