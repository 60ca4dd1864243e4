#!/usr/bin/env bash
# scripts/install-deps.sh: installs, on Debian 12 (as root, or with sudo), what
# mdring's scripts need, in one step; each script also installs its own when run
# alone. The lists are in scripts/lib.sh.
#
#   scripts/install-deps.sh [GROUP...]
#
# Groups: build (compilers, CMake, Open MPI, Boost.MPI, doctest, SimGrid, UCX,
# Gloo, PyTorch 1.13: what scripts/test.sh builds and runs), fuzz (clang and
# libFuzzer), mpich (MPICH beside Open MPI), plot (matplotlib), format
# (clang-format-16: scripts/format.sh), smpi (SimGrid and the plots); ci = build
# fuzz mpich format (what .ci/run runs); all = every group.
# Default: build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(build)
pkgs=()
for g in "${groups[@]}"; do
  case $g in
    build) pkgs+=("${MDRING_PACKAGES[@]}") ;;
    fuzz) pkgs+=("${MDRING_FUZZ_PACKAGES[@]}") ;;
    mpich) pkgs+=("${MDRING_MPICH_PACKAGES[@]}") ;;
    plot) pkgs+=("${MDRING_PLOT_PACKAGES[@]}") ;;
    format) pkgs+=("${MDRING_FORMAT_PACKAGES[@]}") ;;
    smpi) pkgs+=("${MDRING_SMPI_PACKAGES[@]}") ;;
    ci) pkgs+=("${MDRING_PACKAGES[@]}" "${MDRING_FUZZ_PACKAGES[@]}" "${MDRING_MPICH_PACKAGES[@]}"
               "${MDRING_FORMAT_PACKAGES[@]}") ;;
    all) pkgs+=("${MDRING_PACKAGES[@]}" "${MDRING_FUZZ_PACKAGES[@]}" "${MDRING_MPICH_PACKAGES[@]}"
                "${MDRING_PLOT_PACKAGES[@]}" "${MDRING_SMPI_PACKAGES[@]}" "${MDRING_FORMAT_PACKAGES[@]}") ;;
    *) echo "install-deps: unknown group '$g' (build, fuzz, mpich, plot, smpi, ci, all)" >&2; exit 2 ;;
  esac
done
# Each package once, in order.
declare -A seen
uniq=()
for p in "${pkgs[@]}"; do [ -n "${seen[$p]:-}" ] || { seen[$p]=1; uniq+=("$p"); }; done
mdring_ensure_packages "${uniq[@]}"
echo "install-deps: ${groups[*]}: every package installed"
