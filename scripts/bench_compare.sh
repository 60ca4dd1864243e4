#!/usr/bin/env bash
# scripts/bench_compare.sh: two builds of mdring-bench against each other, in one
# run: the host tables of docs/PERFORMANCE.md (scripts/bench.sh's configurations:
# 2 and 4 processes, all_reduce, reduce_scatter and all_gather, node_alloc and heap
# buffers, against MPI) measured with each build in turn, round after round, so
# that both see the same machine. For a change that must not make mdring slower.
#
#   scripts/bench_compare.sh OLD_BENCH NEW_BENCH [ROUNDS] [OUT.jsonl]
#
# OLD_BENCH, NEW_BENCH: mdring-bench binaries (build one from the commit before
# the change: git worktree add /tmp/old HEAD~1 && cmake --preset release -S
# /tmp/old && cmake --build /tmp/old/build --target mdring-bench). ROUNDS: 3 by
# default. MDRING_BENCH_QUICK=1: 4 KiB to 4 MiB only. Prints, per configuration and
# size, new/old of mdring's median time and each build's ratio to MPI's time
# (scripts/bench_compare.py); rows in OUT (default: a temporary file).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/bench_compare.sh OLD_BENCH NEW_BENCH [ROUNDS] [OUT.jsonl]" >&2; exit 2; }
old=$1 new=$2 rounds=${3:-3} out=${4:-}
for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "bench_compare: $b is not an executable mdring-bench" >&2; exit 2; }
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_compare: ROUNDS must be a positive integer (got '$rounds')" >&2; exit 2; }
source scripts/lib.sh
mdring_mpi_env
[ -n "$out" ] || out=$(mktemp --suffix=.jsonl)
: >"$out"
max=256M
[ "${MDRING_BENCH_QUICK:-0}" = 1 ] && max=4M
configs=("2 shm:*" "4 shm:2 x shm:*")
for round in $(seq "$rounds"); do
  for alloc in node heap; do
    for cfg in "${configs[@]}"; do
      np=${cfg%% *} topo=${cfg#* }
      for op in all_reduce reduce_scatter all_gather; do
        for build in old new; do
          bench=$old
          [ $build = new ] && bench=$new
          echo "== round $round, $build: $op, $np processes, \"$topo\", $alloc" >&2
          # Small sizes take many iterations: their per-call cost is what a change
          # to the call path moves, by tens of nanoseconds.
          for range in "4K 64K 1000 100" "256K 1M 100 10" "4M $max 10 3"; do
            read -r lo hi iters warm <<<"$range"
            mpirun -n "$np" "$bench" --op "$op" --topology "$topo" --min-bytes "$lo" --max-bytes "$hi" --factor 4 \
              --iters "$iters" --warmup "$warm" --baseline mpi --alloc "$alloc" --json |
              sed "s/^{/{\"build\": \"$build\", \"round\": $round, /" >>"$out"
          done
        done
      done
    done
  done
done
py=python3
/usr/bin/python3 -c "" 2>/dev/null && py=/usr/bin/python3
$py scripts/bench_compare.py "$out"
echo "bench_compare: rows in $out" >&2
