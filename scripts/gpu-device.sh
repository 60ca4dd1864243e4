#!/usr/bin/env bash
# scripts/gpu-device.sh: the GPU path's device checks in one call, on a machine
# with an NVIDIA GPU, from programs built elsewhere (scripts/gpu-bundle.sh makes
# them on a machine without a GPU, so that no GPU time goes to compiling):
#
#   MDRING_DEVICE_BIN=.devbuild scripts/gpu-device.sh [PHASE...]
#
# Phases (default: env nccl ipc torch bench extra cxx):
#   env       the GPU, driver, CUDA, PyTorch and MPI found
#   nccl      libmdring-nccl.so (docs/NCCL.md): tests/nccl/nccl_api_check.c on a one-rank
#             communicator, tests/nccl/nccl_p2p_check.cpp with 2, 3 and 4 forked ranks
#             (point to point), then PyTorch's own nccl backend on it (LD_PRELOAD) under
#             torchrun, 2 and 4 processes sharing the GPU (tests/nccl/torch_nccl.py: every
#             collective and point-to-point call exact, 10 DDP steps), the same on gloo (CPU) and, with the torch
#             phase's build, on mdring's backend: the parameters compared
#   ipc       test_gpu_ipc_store under mdring-run with 2, 3 and 4 processes (the
#             ipc transport between processes sharing the GPU; no MPI)
#   cxx       test_gpu_fold, test_gpu_all_reduce (logical ranks in one process)
#   torch     builds mdring_torch for this machine's PyTorch (pip install --target, offline,
#             with the prebuilt CUDA group; in the background from the start),
#             then tests/torch/test_ops.py and test_ddp.py on CUDA tensors under
#             torchrun, 2 and 4 processes (MDRING_DEVICE_TORCH_TESTS: "ops2 ddp4 ops4 ddp2")
#   bench     mdring-gpu-ipc-bench (4 processes, time-sliced; then under the CUDA
#             MPS daemon, 2 and 4 processes, if it starts), benchmarks/torch_bench.py
#             --device cuda (mdring against gloo, 4 processes)
#   extra     test_gpu_ipc_store with 3 processes
#   mpi       test_gpu_mpi and test_gpu_ipc (bound to MPI) under mpirun, 2 and 4 processes
#             (MDRING_DEVICE_MPI_NP),
#             where the bundle has them and the machine has mpirun
#   sanitize  compute-sanitizer memcheck and racecheck on test_gpu_ipc_store (2 processes;
#             MDRING_DEVICE_SANITIZE_TESTS: which of its tests, MDRING_DEVICE_SANITIZE_S: each run's limit)
#   torchbench  benchmarks/torch_bench.py --device cuda alone (with the torch phase's build)
#   diag      the torch backend's refusals of bad input on CUDA and CPU tensors, each
#             case in its own 2-process torchrun, under segv_trace.so (a crash's native
#             stack, resolved with addr2line where the machine has it;
#             MDRING_DEVICE_DIAG_CASES: which cases)
# Every step runs under a timeout, and no step starts once MDRING_DEVICE_BUDGET
# seconds (default 480) have passed since the start: the most important steps come
# first (ipc 2 and 4 processes, torch, the benchmarks), then 3 processes and the
# rest. Logs, JSON rows and summary.txt go to $OUT (or /tmp/mdring-device). Exit
# status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=$(cd "${MDRING_DEVICE_BIN:-.devbuild}" && pwd) || { echo "gpu-device: no MDRING_DEVICE_BIN folder" >&2; exit 2; }
out=${OUT:-/tmp/mdring-device}
logs=/tmp/mdring-device-logs
mkdir -p "$out" "$logs"
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(env nccl ipc torch bench extra cxx)
want() { local p; for p in "${phases[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }
status=0
start=$(date +%s)
budget=${MDRING_DEVICE_BUDGET:-480}
: >"$out/summary.txt"
say() { echo "$*" | tee -a "$out/summary.txt"; }
# step NAME SECONDS COMMAND...: runs it, logs it, one summary line.
step() {
  local name=$1 lim=$2
  shift 2
  if [ $(( $(date +%s) - start )) -ge "$budget" ]; then
    say "$(printf '%-34s %-18s' "$name" "not run (budget)")"
    return 0
  fi
  local t0 rc log="$logs/${name// /_}.log"
  t0=$(date +%s.%N)
  timeout -k 5 "$lim" "$@" >"$log" 2>&1
  rc=$?
  local dt
  dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  local verdict=passed
  [ $rc -eq 77 ] && verdict="skipped"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="TIMED OUT"
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ "$verdict" = passed ] && verdict="FAILED (exit $rc)"
  say "$(printf '%-34s %-18s %7ss' "$name" "$verdict" "$dt")"
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    status=1
    grep -E "FAILED|FAIL:|Error|error|Traceback" "$log" | head -20 | sed 's/^/    /' | tee -a "$out/summary.txt"
  fi
  return 0
}

# The libraries the prebuilt programs link: CUDA's runtime, and NCCL (the one
# PyTorch's wheels ship when the toolkit has none).
nccl_dir=$(python3 -c "import glob, sys; print(next(iter(sorted(glob.glob(p + '/nvidia/nccl/lib') for p in sys.path if p and glob.glob(p + '/nvidia/nccl/lib'))), [''])[0])" 2>/dev/null)
export LD_LIBRARY_PATH="${nccl_dir:+$nccl_dir:}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MDRING_TIMEOUT=${MDRING_TIMEOUT:-20}  # a rank left behind by a failure ends the others' waits soon
run=("$bin/mdring-run" --grace 10)

torch_out=/tmp/mdring-torch
if want torch || want torchbench || want extra || want diag; then  # the build runs while the GPU tests run
  # Not installed: into $torch_out, which PYTHONPATH names below (python/setup.py; an
  # environment without pip, as uv makes them, or that cannot make a wheel, builds with
  # setuptools itself).
  (export MDRING_TORCH_CUDA_OBJECT="$bin/group_cuda.o" MDRING_TORCH_UCX=0 MDRING_TORCH_MPI=0 MAX_JOBS="$(nproc)" \
     MDRING_TORCH_BUILD_DIR=/tmp/mdring-torch-build
   if python3 -c "import pip, importlib.util as u; assert u.find_spec('wheel') or u.find_spec('setuptools.command.bdist_wheel')" \
     >/dev/null 2>&1; then
     python3 -m pip install --no-build-isolation --no-index --upgrade -v --target "$torch_out" ./python
   else
     python3 python/setup.py build --build-lib "$torch_out"
   fi >"$logs/torch_build.log" 2>&1; echo $? >/tmp/mdring-torch.rc) &
  torch_build=$!
fi

if want env; then
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader
    uname -r
    nvcc --version | tail -1
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    command -v mpirun && mpirun --version 2>&1 | head -1
    echo "nccl: ${nccl_dir:-toolkit}"
  } >"$logs/env.log" 2>&1
  sed 's/^/  /' "$logs/env.log" | tee -a "$out/summary.txt"
fi

# NCCL's API on mdring first: the issue that needs a GPU most (docs/NCCL.md).
tr=(python3 -m torch.distributed.run --standalone --redirects 1 --tee 1)
if want nccl; then
  if [ -f "$bin/libmdring-nccl.so" ]; then
    dropin=/tmp/mdring-nccl-drop-in  # the library as libnccl.so.2, first on the library path
    mkdir -p "$dropin" && ln -sf "$bin/libmdring-nccl.so" "$dropin/libnccl.so.2"
    step "nccl_api_check (1 rank)" 60 env LD_LIBRARY_PATH="$dropin:$LD_LIBRARY_PATH" "$bin/nccl_api_check"
    if [ -x "$bin/nccl_p2p_check" ]; then  # point to point between forked ranks sharing the GPU
      for np in 2 3 4; do
        step "nccl_p2p_check np$np" 120 env LD_LIBRARY_PATH="$dropin:$LD_LIBRARY_PATH" "$bin/nccl_p2p_check" "$np"
      done
    fi
    for np in ${MDRING_DEVICE_NCCL_NP:-2 4}; do
      step "torch nccl on mdring np$np" 240 env LD_PRELOAD="$bin/libmdring-nccl.so" MDRING_REPORT=1 \
        "${tr[@]}" --nproc_per_node "$np" tests/nccl/torch_nccl.py "$out/params_nccl_np$np.pt"
      grep -h "torch_nccl\|mdring NCCL" "$logs/torch_nccl_on_mdring_np$np.log" | head -8 | sed 's/^/    /' |
        tee -a "$out/summary.txt"
    done
    if [ -x "$bin/nccl-tests/all_reduce_perf" ]; then  # NCCL's own benchmark programs, one rank
      for t in all_reduce broadcast reduce all_gather reduce_scatter sendrecv alltoall gather scatter hypercube; do
        step "nccl-tests ${t}_perf" 60 env LD_LIBRARY_PATH="$dropin:$LD_LIBRARY_PATH" \
          "$bin/nccl-tests/${t}_perf" -b 8 -e 64M -f 8 -g 1 -c 1
        grep -E "Avg bus|wrong|Out of bounds" "$logs/nccl-tests_${t}_perf.log" | sed 's/^/    /' | tee -a "$out/summary.txt"
      done
    fi
    step "torch gloo (cpu) np2" 240 "${tr[@]}" --nproc_per_node 2 tests/nccl/torch_nccl.py "$out/params_gloo_np2.pt" \
      --backend gloo --device cpu
    step "params nccl-on-mdring vs gloo" 30 python3 tests/nccl/compare_params.py "$out/params_nccl_np2.pt" \
      "$out/params_gloo_np2.pt" 1e-6
  else
    say "nccl: not run (no libmdring-nccl.so in the bundle)"
  fi
fi

if want ipc; then
  step "test_gpu_ipc_store np2" 100 "${run[@]}" -n 2 "$bin/test_gpu_ipc_store"
  step "test_gpu_ipc_store np4" 120 "${run[@]}" -n 4 "$bin/test_gpu_ipc_store"
fi

if want mpi; then
  if command -v mpirun >/dev/null && [ -x "$bin/test_gpu_mpi" ]; then
    for np in ${MDRING_DEVICE_MPI_NP:-2 4}; do
      for t in test_gpu_mpi test_gpu_ipc; do
        [ -x "$bin/$t" ] && step "$t np$np" 120 mpirun --allow-run-as-root --oversubscribe -np $np \
          -x LD_LIBRARY_PATH -x MDRING_TIMEOUT "$bin/$t"
      done
    done
  else
    say "mpi: not run (no mpirun here, or no test_gpu_mpi in the bundle)"
  fi
fi

# While the torch build runs: compute-sanitizer on the ipc transport.
if want sanitize; then
  for tool in memcheck racecheck; do
    step "sanitize $tool np2" "${MDRING_DEVICE_SANITIZE_S:-120}" "${run[@]}" -n 2 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$bin/test_gpu_ipc_store" "${MDRING_DEVICE_SANITIZE_TESTS:-count matrix}"
  done
fi

if want torch || want torchbench || want extra || want diag; then
  wait "$torch_build"
  if [ "$(cat /tmp/mdring-torch.rc 2>/dev/null)" = 0 ]; then
    say "torch build                        passed"
    grep -E "^ *mdring_torch[ :]" "$logs/torch_build.log" | sed "s/^ */    /" | tee -a "$out/summary.txt"
    export PYTHONPATH="$torch_out${PYTHONPATH:+:$PYTHONPATH}"
    if want diag; then  # each refusal in its own job: one that crashes hides no other
      for c in ${MDRING_DEVICE_DIAG_CASES:-cuda-complex-pg cuda-complex-backend cpu-complex-pg cuda-bool cuda-band cuda-two-tensors}; do
        step "diag $c" 60 env LD_PRELOAD="$bin/segv_trace.so" PYTHONFAULTHANDLER=1 TORCH_SHOW_CPP_STACKTRACES=1 \
          "${tr[@]}" --nproc_per_node 2 tests/torch/refusals.py "$c"
        grep -h "refusals:\|segv_trace\|Fatal Python\|File \"" "$logs/diag_$c.log" | head -40 | sed 's/^/    /' |
          tee -a "$out/summary.txt"
        if grep -q "segv_trace: #" "$logs/diag_$c.log" && command -v addr2line >/dev/null; then
          grep -o "segv_trace: #[0-9]* [^ ]*+0x[0-9a-f]*" "$logs/diag_$c.log" | head -24 |
            while read -r _ frame at; do
              printf '    %s %s\n' "$frame" "$(addr2line -f -C -i -e "${at%+*}" "${at##*+}" 2>/dev/null | paste -sd' ')"
            done | tee -a "$out/summary.txt"
        fi
      done
    fi
    if want nccl && [ -f "$out/params_nccl_np2.pt" ]; then  # the same script on mdring's own backend
      step "torch mdring (cuda) np2" 240 "${tr[@]}" --nproc_per_node 2 tests/nccl/torch_nccl.py \
        "$out/params_mdring_np2.pt" --backend mdring
      step "params nccl-on-mdring vs mdring" 30 python3 tests/nccl/compare_params.py "$out/params_nccl_np2.pt" \
        "$out/params_mdring_np2.pt" 0
    fi
    if want torch; then  # MDRING_DEVICE_TORCH_TESTS: which (default ops2 ddp4 ops4 ddp2)
      for t in ${MDRING_DEVICE_TORCH_TESTS:-ops2 ddp4 ops4 ddp2}; do
        file=tests/torch/test_${t%[0-9]}.py
        step "torch test_${t%[0-9]} cuda np${t: -1}" 150 env MDRING_TORCH_TEST_DEVICE=cuda "${tr[@]}" \
          --nproc_per_node "${t: -1}" "$file"
      done
    fi
    grep -h "test_ops:\|test_ddp" "$logs"/torch_test_*.log 2>/dev/null | sed 's/^/    /' | tee -a "$out/summary.txt"
  else
    status=1
    say "torch build                        FAILED"
    grep -E "error|Error" "$logs/torch_build.log" | head -30 | sed 's/^/    /' | tee -a "$out/summary.txt"
  fi
fi


json="$out/bench.jsonl"
if want bench; then
  step "ipc bench np4 time-sliced" 120 "${run[@]}" -n 4 "$bin/mdring-gpu-ipc-bench" --json "$json"
  grep "all_reduce" "$logs/ipc_bench_np4_time-sliced.log" 2>/dev/null | sed 's/^/    /' | tee -a "$out/summary.txt"
  # Several processes' kernels run concurrently on one GPU only under the MPS daemon.
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mdring-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mdring-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d >/dev/null 2>&1; then
    for np in 4; do
      step "ipc bench np$np MPS" 120 "${run[@]}" -n $np "$bin/mdring-gpu-ipc-bench" --mps-label MPS --json "$json"
      grep "all_reduce" "$logs/ipc_bench_np${np}_MPS.log" 2>/dev/null | sed 's/^/    /' | tee -a "$out/summary.txt"
    done
    echo quit | nvidia-cuda-mps-control
    sleep 1
  else
    say "MPS daemon: not started"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
if want bench || want torchbench; then
  if [ -d "$torch_out/mdring_torch" ]; then
    step "torch_bench cuda np4" 200 python3 -m torch.distributed.run --standalone --redirects 1 --tee 1 \
      --nproc_per_node 4 benchmarks/torch_bench.py --device cuda --sizes 8K,64K,1M,8M,64M,256M \
      --rounds 3 --ddp-iters 6 --batches 32 --json "$json"
    grep -E "^\[default0\]:( |#)" "$logs/torch_bench_cuda_np4.log" | sed 's/^/    /' | tee -a "$out/summary.txt"
  fi
fi

if want cxx; then
  step "test_gpu_all_reduce" 150 "$bin/test_gpu_all_reduce"
  step "test_gpu_fold" 200 "$bin/test_gpu_fold"
fi

# Then what matters less: 3 processes, test_ops on 4, test_ddp on 2.
if want extra; then
  step "test_gpu_ipc_store np3" 150 "${run[@]}" -n 3 "$bin/test_gpu_ipc_store"
fi


# Logs: one archive (the files that come back are few).
tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null
echo "gpu-device: exit $status" | tee -a "$out/summary.txt"
exit $status
