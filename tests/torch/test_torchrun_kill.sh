#!/bin/bash
# A torchrun job on the mdring backend with one process killed: torchrun starts 3
# processes; after one all_reduce, rank 1 SIGKILLs itself and the others start a
# second all_reduce that needs it. Ranks 0 and 2 must raise in Python, naming rank
# 1, within 10 s (MDRING_TIMEOUT is 60 s: the death is noticed, not the deadline),
# and torchrun must exit non-zero naming local rank 1 and its signal.
# usage: test_torchrun_kill.sh PYTHON   (PYTHONPATH holds mdring_torch)
set -u
python=$1
work=$(mktemp -d /tmp/mdring-torchrun-kill-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/worker.py" <<'PY'
import os, signal, sys, time
import torch, torch.distributed as dist
import mdring_torch
# torchrun SIGTERMs the survivors as soon as it sees rank 1 gone (it looks every
# 0.25 s), which under load can come before they raise: what is tested is what
# they see, so they let it come out first (torchrun waits 30 s for them to exit).
signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("mdring")
r = dist.get_rank()
x = torch.ones(1 << 16)
dist.all_reduce(x)
assert x[0].item() == 3.0
if r == 1:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.time()
try:
    dist.all_reduce(x)
    print(f"rank {r}: no error", flush=True)
    sys.exit(0)
except Exception as e:
    print(f"rank {r}: raised after {time.time() - t0:.1f} s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
PY
MDRING_TIMEOUT=60 timeout 120 "$python" -m torch.distributed.run --standalone --redirects 1 --tee 1 \
  --nproc_per_node 3 --monitor_interval 0.25 "$work/worker.py" > "$work/log" 2>&1
rc=$?
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
[ $rc -ne 0 ] || fail "torchrun exited 0 with a killed process"
[ $rc -ne 124 ] || fail "the job hung (killed by timeout after 120 s)"
for r in 0 2; do
  line=$(grep -o "rank $r: raised after [0-9.]* s: .*" "$work/log" | head -1)
  [ -n "$line" ] || fail "rank $r did not raise in Python"
  secs=$(echo "$line" | sed -E 's/rank [0-9]: raised after ([0-9.]+) s.*/\1/')
  awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "rank $r raised only after $secs s"
  echo "$line" | grep -q "rank 1" || fail "rank $r's error does not name rank 1: $line"
done
grep -Eq "local_rank *: *1" "$work/log" || fail "torchrun did not name local rank 1"
grep -Eq "exitcode *: *-9" "$work/log" || fail "torchrun did not report the SIGKILL (exitcode -9)"
grep -o "rank [02]: raised after [0-9.]* s" "$work/log"
echo "ok: ranks 0 and 2 raised naming rank 1; torchrun exited $rc naming local rank 1 (exitcode -9)"
