#!/usr/bin/env bash
# mdring on simulated clusters of up to 4096 ranks with SimGrid SMPI (docs/SCALING.md).
# Installs what is missing (libsimgrid-dev, python3-matplotlib), builds the `smpi`
# preset (mdring-bench and smpi-pingpong with smpicxx, in build-smpi/), then runs
# scripts/smpi/simulate.py with the arguments given:
#
#   scripts/simulate.sh --smoke            # 16 ranks, a minute: does the simulation work?
#   scripts/simulate.sh                    # the study: ranks 4..256, bytes 1 MiB..102.4 MB,
#                                          # cost model on 4 platforms, the paper's table
#   scripts/simulate.sh --paper            # only the ResNet-50 efficiency table
#   scripts/simulate.sh --large            # and 1024 ranks (256 nodes x 4): long
#   scripts/simulate.sh --rerun mdring     # re-simulate mdring only (after a library change
#                                          # that its hash of include/ did not notice)
#   scripts/simulate.sh --publish docs/scaling   # also copy CSVs, plots and tables there and
#                                                # render docs/SCALING.md from them
#                                                # (scripts/scaling_report.py --write)
#
# Results are cached in out/simulate/results.jsonl (see --help for the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_SMPI_PACKAGES[@]}"
cmake --preset smpi >/dev/null
cmake --build --preset smpi -j "$(mdring_jobs)" >/dev/null
# Debian's python3, the one apt installed matplotlib for (not a pyenv or venv one).
py=$(mdring_python)
exec nice -n 10 "$py" scripts/smpi/simulate.py "$@"
