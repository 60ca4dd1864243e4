#!/usr/bin/env bash
# The soak (tests/soak/soak.cpp) for the record: random collectives, every result
# checked bitwise, resources sampled, on MPI (mpirun) and UCX (mdring-run), 4
# processes each, for SECONDS (default 3600). Prints each run's summary lines;
# exits non-zero if a run found a wrong result or growth. CI runs 30 s versions
# through ctest (label soak).
#
#   scripts/soak.sh            # an hour each, one after the other
#   scripts/soak.sh 600 both   # 10 minutes, MPI and UCX at the same time
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}"
seconds=${1:-3600}
together=${2:-}
mdring_build --target soak mdring-run
mdring_mpi_env
soak=./build/tests/soak
run_mpi() { mpirun -n 4 "$soak" --transport mpi --seconds "$seconds" 2>&1 | grep "^soak:"; }
run_ucx() { ./build/tools/mdring-run -n 4 "$soak" --transport ucx --seconds "$seconds" 2>&1 | grep "^soak:"; }
status=0
if [ "$together" = both ]; then
  run_mpi > /tmp/mdring-soak-mpi.$$ & a=$!
  run_ucx > /tmp/mdring-soak-ucx.$$ & b=$!
  wait $a || status=1
  wait $b || status=1
  cat /tmp/mdring-soak-mpi.$$ /tmp/mdring-soak-ucx.$$
  rm -f /tmp/mdring-soak-mpi.$$ /tmp/mdring-soak-ucx.$$
else
  run_mpi || status=1
  run_ucx || status=1
fi
exit $status
