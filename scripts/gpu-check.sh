#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds the GPU path for that GPU, runs the GPU
# tests (ctest -L gpu) and mdring-gpu-bench (and mdring-gpu-ipc-bench under
# mdring-run, 4 processes), and prints a short table. (For a lent machine's one
# call: scripts/gpu-bundle.sh here, scripts/gpu-device.sh there.)
#
#   scripts/gpu-check.sh            full benchmark (1 MiB .. 1 GiB)
#   MDRING_GPU_QUICK=1 scripts/gpu-check.sh   fewer iterations, up to 256 MiB
#   MDRING_GPU_PREBUILT=DIR scripts/gpu-check.sh
#                                   run the programs already built in DIR (a build
#                                   tree made elsewhere for this GPU's architecture,
#                                   e.g. on a machine without a GPU, to spend no GPU
#                                   time compiling); no configure, no build, no ctest
#
# It needs nvcc (on PATH, $CUDACXX or /usr/local/cuda), CMake and Python 3. It
# builds what it can with what is there and says what it skipped: without
# doctest no host tests, without MPI no MPI GPU test, without NCCL no NCCL test,
# and the NCCL test itself needs two GPUs. Logs and JSON rows go to $MDRING_GPU_OUT
# (default: $OUT when set, else build-gpu/out). Exit status: 0 when every test
# that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${MDRING_GPU_BUILD:-$root/build-gpu}
out=${MDRING_GPU_OUT:-${OUT:-$build/out}}
mkdir -p "$out"
skipped=()

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 1
fi
nvidia-smi -L | tee "$out/gpus.txt"
prebuilt=${MDRING_GPU_PREBUILT:-}
if [ -n "$prebuilt" ]; then
  build=$(cd "$prebuilt" && pwd) || { echo "gpu-check: MDRING_GPU_PREBUILT=$prebuilt is not a folder" >&2; exit 1; }
  echo "gpu-check: running the programs prebuilt in $build (no configure, no build)"
else
if ! command -v nvcc >/dev/null; then
  for c in "${CUDACXX:-}" /usr/local/cuda/bin/nvcc; do
    [ -n "$c" ] && [ -x "$c" ] && export CUDACXX="$c" && break
  done
fi
command -v nvcc >/dev/null || [ -n "${CUDACXX:-}" ] || { echo "gpu-check: no nvcc found" >&2; exit 1; }

# Optional packages, if this is a Debian/Ubuntu machine that can install (quietly; a
# machine without network simply keeps what it has).
if command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
  missing=()
  for p in doctest-dev libopenmpi-dev openmpi-bin; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-check: trying to install ${missing[*]} (optional)"
    timeout 120 env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >"$out/apt.log" 2>&1 || echo "gpu-check: could not install ${missing[*]} (see $out/apt.log); going on without"
  fi
fi

have_doctest=OFF
if [ -f /usr/include/doctest/doctest.h ] || [ -f /usr/local/include/doctest/doctest.h ]; then
  have_doctest=ON
else
  skipped+=("host tests (no doctest)")
fi

# Build for the GPU that is here only (faster than 80;90).
archs=native
cmake_minor=$(cmake --version | head -1 | sed -E 's/.* ([0-9]+)\.([0-9]+).*/\1 \2/')
read -r cmaj cmin <<<"$cmake_minor"
if [ "$cmaj" -lt 3 ] || { [ "$cmaj" -eq 3 ] && [ "$cmin" -lt 24 ]; }; then archs=90; fi

echo "gpu-check: configuring in $build (CUDA architectures $archs, host tests $have_doctest)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMDRING_CUDA=ON -DMDRING_BUILD_TESTS=$have_doctest \
    -DMDRING_BUILD_GPU_TESTS=ON -DMDRING_BUILD_EXAMPLES=OFF -DMDRING_BUILD_BENCHMARKS=ON -DMDRING_INSTALL=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=$archs >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"
  echo "gpu-check: configure failed (log: $out/configure.log)" >&2
  exit 1
fi
grep "mdring 0" "$out/configure.log"
grep -q "NCCL ON" "$out/configure.log" || skipped+=("NCCL test (no NCCL found)")
grep -q "MPI ON" "$out/configure.log" || skipped+=("MPI GPU test (no MPI found)")
grep -q "GPU present ON" "$out/configure.log" || echo "gpu-check: configure did not see the GPU; tests will not be registered" >&2

targets=(test_gpu_fold test_gpu_all_reduce mdring-gpu-bench mdring-run)
grep -q "NCCL ON" "$out/configure.log" && targets+=(test_gpu_nccl test_gpu_ipc_store mdring-gpu-ipc-bench)
grep -q "MPI ON" "$out/configure.log" && targets+=(test_gpu_mpi test_gpu_ipc)
echo "gpu-check: building ${targets[*]}"
start=$(date +%s)
if ! cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40
  echo "gpu-check: build failed (log: $out/build.log)" >&2
  exit 1
fi
echo "gpu-check: built in $(( $(date +%s) - start )) s"

fi

status=0
export MDRING_TIMEOUT=120 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [ -n "$prebuilt" ]; then
  # ctest's registrations live in the tree that configured them; here the programs
  # run directly, each under a timeout, one line per program in results.txt.
  : >"$out/results.txt"
  run_one() {  # NAME COMMAND...
    local name=$1; shift
    local t0 rc; t0=$(date +%s.%N)
    timeout "${MDRING_GPU_TEST_TIMEOUT:-600}" "$@" >"$out/$name.log" 2>&1; rc=$?
    local dt; dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
    local verdict=Passed
    [ $rc -eq 77 ] && verdict="skipped (77)"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && { verdict="FAILED (exit $rc)"; status=1; }
    echo "$name $verdict $dt" | tee -a "$out/results.txt"
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -40 "$out/$name.log"
    return 0
  }
  run_one test_gpu_fold "$build/tests/gpu/test_gpu_fold"
  run_one test_gpu_all_reduce "$build/tests/gpu/test_gpu_all_reduce"
  [ -x "$build/tests/gpu/test_gpu_nccl" ] && run_one test_gpu_nccl "$build/tests/gpu/test_gpu_nccl"
  # The ipc transport between processes sharing the GPUs, bound through mdring's store.
  if [ -x "$build/tests/gpu/test_gpu_ipc_store" ] && [ -x "$build/tools/mdring-run" ]; then
    for np in 2 3 4; do
      run_one test_gpu_ipc_store_np$np "$build/tools/mdring-run" -n $np "$build/tests/gpu/test_gpu_ipc_store"
    done
  fi
  if [ -x "$build/tests/gpu/test_gpu_mpi" ]; then
    if command -v mpirun >/dev/null; then
      for np in 2 4; do run_one test_gpu_mpi_np$np mpirun -np $np "$build/tests/gpu/test_gpu_mpi"; done
    else
      skipped+=("MPI GPU test (no mpirun on PATH)")
    fi
  fi
else
  ctest --test-dir "$build" -L gpu --output-on-failure --timeout 900 2>&1 | tee "$out/ctest.log" || status=1
fi

bench_args=(--json "$out/gpu_bench.jsonl")
[ "${MDRING_GPU_QUICK:-0}" = 1 ] && bench_args+=(--quick)
"$build/benchmarks/mdring-gpu-bench" "${bench_args[@]}" 2>&1 | tee "$out/gpu_bench.txt" || status=1
if [ -x "$build/benchmarks/mdring-gpu-ipc-bench" ] && [ -x "$build/tools/mdring-run" ]; then
  "$build/tools/mdring-run" -n 4 "$build/benchmarks/mdring-gpu-ipc-bench" --json "$out/gpu_ipc_bench.jsonl" 2>&1 |
    tee "$out/gpu_ipc_bench.txt" || status=1
fi

python3 - "$out" "${skipped[@]}" <<'PY'
import json, re, sys
out, skipped = sys.argv[1], sys.argv[2:]
print("\n==== mdring gpu-check summary ====")
print(open(f"{out}/gpus.txt").read().strip())
import os
if os.path.exists(f"{out}/results.txt"):
    for line in open(f"{out}/results.txt"):
        name, rest = line.split(" ", 1)
        print(f"  test {name:28s} {rest.rsplit(' ', 1)[0]} ({rest.rsplit(' ', 1)[1].strip()} s)")
for line in (open(f"{out}/ctest.log") if os.path.exists(f"{out}/ctest.log") else []):
    m = re.search(r"Test\s+#\d+: (\S+) \.+\s*(\*\*\*\w+|Passed|\w+.*?)\s+[\d.]+ sec", line)
    if m: print(f"  test {m.group(1):28s} {m.group(2)}")
rows = [json.loads(l) for l in open(f"{out}/gpu_bench.jsonl")] if __import__("os").path.exists(f"{out}/gpu_bench.jsonl") else []
folds = [r for r in rows if r["kind"] == "fold"]
if folds:
    sizes = sorted({r["bytes"] for r in folds})
    print("  fold sum, achieved GB/s (% of a device copy of the same bytes in the same run):")
    print("    " + " " * 13 + "".join(f"{str(s >> 20) + ' MiB':>16}" for s in sizes))
    for t in ("fp32", "bf16"):
        for k in (2, 4):
            cells = {r["bytes"]: r for r in folds if r["type"] == t and r["inputs"] == k}
            print(f"    {t} {k} inputs " + "".join(
                f"{cells[s]['fold_gbs']:>9.0f} ({100 * cells[s]['ratio']:3.0f}%)" if s in cells else " " * 18 for s in sizes))
    big = [r for r in folds if r["bytes"] >= 256 << 20]
    if big:
        worst = min(big, key=lambda r: r["ratio"])
        verdict = "meets" if worst["ratio"] >= 0.9 else "MISSES"
        print(f"  target >= 90 % of copy at >= 256 MiB: {verdict} (lowest {100 * worst['ratio']:.1f} %: "
              f"{worst['type']} {worst['inputs']} inputs {worst['bytes'] >> 20} MiB)")
ars = [r for r in rows if r["kind"] == "all_reduce"]
if ars:
    print("  all_reduce fp32 over logical ranks on one GPU: ms as called; replayed from a CUDA graph (algbw);")
    print("  baseline: one fold of all P buffers + P-1 copies, same run")
    for r in ars:
        g = r.get("graph_ms")
        extra = (f"  graph {g:8.3f} ms {r['graph_algbw_gbs']:7.1f} GB/s  baseline {r['baseline_ms']:8.3f} ms"
                 f"  graph/baseline {g / r['baseline_ms']:5.2f}") if g else f" {r['algbw_gbs']:8.1f} GB/s"
        print(f"    {r['topology']:26s} {r['bytes'] >> 20:>5} MiB/rank {r['ms']:9.3f} ms{extra}  segments {r['segments']}")
for s in skipped:
    print(f"  skipped: {s}")
PY
exit $status
