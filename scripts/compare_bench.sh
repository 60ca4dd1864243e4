#!/usr/bin/env bash
# Before/after check of a change: two mdring-bench binaries (say, one built from
# the commit before the change and one from after), all_reduce against
# MPI_Allreduce in the same run, 2 and 4 processes, 4 KiB to 256 MiB. The two
# binaries alternate (before, after, before, after) so that drift in the
# machine's speed hits both alike; the table gives each size's ratio to MPI and
# mdring's own time (medians of the rounds) before and after, and the changes.
#
#   scripts/compare_bench.sh OLD/mdring-bench NEW/mdring-bench [ROUNDS] [node|heap] > table.md
#
# The buffers come from mdring::node_alloc (node, the default) or the heap.
set -euo pipefail
old=$1 new=$2 rounds=${3:-2} alloc=${4:-node}
case $alloc in node | heap) ;; *) echo "compare_bench: the 4th argument is node or heap (got '$alloc')" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
source scripts/lib.sh
mdring_mpi_env
export OMPI_MCA_btl_vader_single_copy_mechanism=none
out=$(mktemp -d)
configs=("2 shm:*" "4 shm:2 x shm:*")
for ((round = 0; round < rounds; ++round)); do
  for cfg in "${configs[@]}"; do
    np=${cfg%% *}
    topo=${cfg#* }
    for which in before after; do
      bin=$old
      [ "$which" = after ] && bin=$new
      for range in "4K 1M 40 8" "4M 256M 8 2"; do
        read -r lo hi iters warm <<<"$range"
        mpirun -n "$np" "$bin" --op all_reduce --topology "$topo" --min-bytes "$lo" --max-bytes "$hi" --factor 4 \
          --iters "$iters" --warmup "$warm" --baseline mpi --alloc "$alloc" --json | grep '^{' >>"$out/$which-np$np.jsonl"
      done
    done
  done
done
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
$py - "$out" <<'PY'
import json, sys, statistics, collections
d = sys.argv[1]
print("| processes | bytes | ratio to MPI before | after | change | mdring us before | after | change |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for np in (2, 4):
    r, t = {}, {}
    for which in ("before", "after"):
        rows, times = collections.defaultdict(list), collections.defaultdict(list)
        for line in open(f"{d}/{which}-np{np}.jsonl"):
            j = json.loads(line)
            rows[j["bytes"]].append(j["ratio"])
            times[j["bytes"]].append(j["mdring_s"] * 1e6)
        r[which] = {b: statistics.median(v) for b, v in rows.items()}
        t[which] = {b: statistics.median(v) for b, v in times.items()}
    for b in sorted(r["before"]):
        a, c = r["before"][b], r["after"][b]
        x, y = t["before"][b], t["after"][b]
        print(f"| {np} | {b} | {a:.3f} | {c:.3f} | {100 * (c / a - 1):+.1f} % | {x:.1f} | {y:.1f} | {100 * (y / x - 1):+.1f} % |")
PY
rm -rf "$out"
