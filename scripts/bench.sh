#!/usr/bin/env bash
# Measures the tables of docs/PERFORMANCE.md (and renders the page): mdring-bench against the MPI library's own
# collective (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather) on the same
# buffers in the same run, alternating every iteration, for 2 and 4 processes,
# 4 KiB to 256 MiB, with buffers from mdring::node_alloc (zero-copy) and from the
# heap (cross-memory attach); JSON rows in docs/perf/*.jsonl, plots in docs/perf/*.png.
#
#   scripts/bench.sh            # the full run (about 13 minutes on 2 cores)
#   MDRING_BENCH_QUICK=1 scripts/bench.sh   # 4 KiB to 4 MiB, fewer iterations
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_ensure_packages "${MDRING_PACKAGES[@]}" "${MDRING_PLOT_PACKAGES[@]}"
mdring_build --target mdring-bench
mdring_mpi_env

out=docs/perf
mkdir -p "$out"
bench=./build/benchmarks/mdring-bench
max=256M
[ "${MDRING_BENCH_QUICK:-0}" = 1 ] && max=4M

# name, processes, topology
configs=("np2 2 shm:*" "np4 4 shm:2 x shm:*")
for alloc in node heap; do
  suffix=""
  [ "$alloc" = heap ] && suffix="-heap"
  for cfg in "${configs[@]}"; do
    read -r name np topo <<<"$cfg"
    topo=${cfg#* * }
    for op in all_reduce reduce_scatter all_gather; do
      file="$out/$op-$name$suffix.jsonl"
      : >"$file"
      echo "== $op, $np processes, topology \"$topo\", $alloc memory"
      # Small sizes need more iterations for a stable median.
      mpirun -n "$np" "$bench" --op "$op" --topology "$topo" --min-bytes 4K --max-bytes 1M --factor 4 \
        --iters 50 --warmup 10 --baseline mpi --alloc "$alloc" --json | tee -a "$file"
      mpirun -n "$np" "$bench" --op "$op" --topology "$topo" --min-bytes 4M --max-bytes "$max" --factor 4 \
        --iters 10 --warmup 3 --baseline mpi --alloc "$alloc" --json | tee -a "$file"
    done
  done
done

# The plots (matplotlib from Debian's python3, whichever python3 comes first in PATH).
py=python3
/usr/bin/python3 -c "import matplotlib" 2>/dev/null && py=/usr/bin/python3
for name in np2 np4; do
  $py scripts/plot_bench.py "$out/busbw-$name.png" "$out"/*-"$name".jsonl \
    --title "mdring vs MPI, $name on $(nproc) cores, node_alloc buffers: busbw against size"
  $py scripts/plot_bench.py "$out/busbw-$name-heap.png" "$out"/*-"$name"-heap.jsonl \
    --title "mdring vs MPI, $name on $(nproc) cores, heap buffers: busbw against size"
done

# This machine and the date beside the data (MDRING_BENCH_NOTE="..." adds a line on
# the conditions of the run), then the page rendered from docs/perf.
$py scripts/perf_report.py --host "$out"
$py scripts/perf_report.py --write
echo "wrote docs/PERFORMANCE.md"
