#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz): builds them with clang (the fuzz preset, in
# build-fuzz/) and runs each for SECONDS (default 20) on the corpus in
# tests/fuzz/corpus, through ctest (label fuzz). Exits non-zero on any finding:
# a crash, a sanitizer report, an input that takes over 10 s, a store that stops
# serving, a rejection that is not a clear mdring error.
#
#   scripts/fuzz.sh          # 20 s each (CI runs 15)
#   scripts/fuzz.sh 1800     # 30 minutes each (the record in docs/RELIABILITY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_FUZZ_PACKAGES[@]}"
seconds=${1:-20}
cmake --preset fuzz -DMDRING_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build --preset fuzz -j "$(mdring_jobs)"
# Two at a time on two cores: each target still has a core for its SECONDS.
ctest --test-dir build-fuzz -L fuzz --output-on-failure --timeout $((seconds + 300)) -j "$(mdring_jobs)"
