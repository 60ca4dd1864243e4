#!/usr/bin/env bash
# The C++ and CUDA sources follow .clang-format, checked with clang-format 16
# (Debian 12's clang-format-16; version 14 breaks requires-clauses).
#
#   scripts/format.sh            reformat every source file in place
#   scripts/format.sh --check    exit 1 naming the files that differ (ctest "format";
#                                77, skipped, where clang-format-16 is not installed:
#                                scripts/install-deps.sh format)
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format-16}
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "format.sh: $cf not found (scripts/install-deps.sh format installs it)"
  exit 77
fi
mapfile -t files < <(find include tests benchmarks tools pmpi nccl python/csrc examples -type f \
  \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cuh' -o -name '*.cu' \) | LC_ALL=C sort)
if [ "${1:-}" = --check ]; then
  # One run over every file (1.5 s; a run per file took 23 s of process starts),
  # and only where it fails, one per file to name them.
  if "$cf" --dry-run -Werror "${files[@]}" >/dev/null 2>&1; then
    echo "format.sh: ${#files[@]} files follow .clang-format"
    exit 0
  fi
  bad=()
  for f in "${files[@]}"; do
    "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: ${#bad[@]} of ${#files[@]} files do not follow .clang-format (scripts/format.sh fixes them):"
    printf '  %s\n' "${bad[@]}"
    "$cf" --dry-run "${bad[0]}" 2>&1 | head -20 || true
    exit 1
  fi
  echo "format.sh: ${#files[@]} files follow .clang-format"
else
  "$cf" -i "${files[@]}"
fi
