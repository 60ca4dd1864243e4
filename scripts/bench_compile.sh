#!/usr/bin/env bash
# scripts/bench_compile.sh: what including mdring costs a user's translation unit.
#
#   scripts/bench_compile.sh [--runs N] [--opt -O2] [--json FILE]
#
# Compiles (-c, the way a build compiles each file) the programs in
# benchmarks/compile/ with mpicxx: plain_mpi.cpp (the baseline: MPI_Allreduce),
# include_only.cpp (<mdring/mdring.hpp>, nothing called), user_one_call.cpp (bind
# over MPI, one all_reduce<float>), three_dims_four_types.cpp (a three-dimension
# topology, all_reduce on float, double, bfloat16 and int32) and three_topologies.cpp
# (three communicators of different topologies, all_reduce and all_gather of float
# on each), header-only and in
# separate compilation (-DMDRING_SEPARATE_COMPILATION: the files see
# mdring/separate/api.hpp only), and the library file of separate compilation
# (include/mdring/separate/src.cpp, compiled once per program). Prints CPU seconds
# (user + system) and peak memory of the compiler, the best of N runs (default 1),
# and each against the baseline compiled in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=1 opt=-O2 json=""
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --opt) opt=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "bench_compile: unknown argument '$1' (--runs N, --opt FLAG, --json FILE)" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench_compile: --runs must be a positive integer (got '$runs')" >&2; exit 2; }
command -v mpicxx >/dev/null || { echo "bench_compile: mpicxx not found (Debian: libopenmpi-dev)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_compile: /usr/bin/time not found (Debian: time)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure() {  # FILE [FLAGS...] -> "cpu_seconds peak_mb", best of $runs
  local best_cpu="" best_mb=""
  for _ in $(seq "$runs"); do
    /usr/bin/time -f "%U %S %M" -o "$tmp/t" mpicxx -std=c++20 "$opt" -DNDEBUG -Iinclude "${@:2}" -c "$1" -o "$tmp/o.o"
    read -r u s kb <"$tmp/t"
    local cpu mb
    cpu=$(python3 -c "print(f'{$u + $s:.2f}')")
    mb=$(( kb / 1024 ))
    if [ -z "$best_cpu" ] || python3 -c "import sys; sys.exit(0 if $cpu < $best_cpu else 1)"; then
      best_cpu=$cpu best_mb=$mb
    fi
  done
  echo "$best_cpu $best_mb"
}

echo "# bench_compile: mpicxx $opt, $(mpicxx --version | head -1), best of $runs"
printf '# %-26s | %-8s | %8s | %8s | %9s | %9s\n' "translation unit" "mode" "CPU s" "peak MB" "CPU / MPI" "MB / MPI"
read -r base_cpu base_mb < <(measure benchmarks/compile/plain_mpi.cpp)
rows=()
row() {  # UNIT MODE FILE [FLAGS...]: one line and one json row
  local unit=$1 mode=$2 file=$3 cpu mb
  shift 3
  if [ "$unit" = plain_mpi.cpp ]; then cpu=$base_cpu mb=$base_mb; else read -r cpu mb < <(measure "$file" "$@"); fi
  rc=$(python3 -c "print(f'{$cpu / $base_cpu:.1f}')")
  rm_=$(python3 -c "print(f'{$mb / $base_mb:.1f}')")
  printf '  %-26s | %-8s | %8s | %8s | %9s | %9s\n' "$unit" "$mode" "$cpu" "$mb" "$rc" "$rm_"
  rows+=("{\"kind\":\"compile\",\"unit\":\"$unit\",\"mode\":\"$mode\",\"opt\":\"$opt\",\"cpu_s\":$cpu,\"peak_mb\":$mb,\"mpi_cpu_s\":$base_cpu,\"mpi_peak_mb\":$base_mb}")
}
for f in plain_mpi include_only user_one_call three_dims_four_types three_topologies; do
  row "$f.cpp" header benchmarks/compile/$f.cpp
done
for f in include_only user_one_call three_dims_four_types three_topologies; do
  row "$f.cpp" separate benchmarks/compile/$f.cpp -DMDRING_SEPARATE_COMPILATION=1
done
row "separate/src.cpp" library include/mdring/separate/src.cpp
if [ -n "$json" ]; then printf '%s\n' "${rows[@]}" >>"$json"; fi
