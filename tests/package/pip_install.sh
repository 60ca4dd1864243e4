#!/usr/bin/env bash
# tests/package/pip_install.sh: mdring_torch as a trainer installs it, with pip, into a
# fresh virtual environment that sees the system's site packages (where Debian's
# torch is):
#   pip install --no-build-isolation --no-index ./python
# then, from that environment's python with PYTHONPATH unset: the version is
# include/mdring/config.hpp's (mdring_torch.__version__ and the package's metadata),
# the module is the environment's own (and the interpreter outside it does not see
# it), and a two-process all_reduce gives the exact sums, under torchrun (UCX) and
# under mpirun (MPI) where the build has them. The build tree goes to a temporary
# folder (MDRING_TORCH_BUILD_DIR): nothing new appears in the source tree. Without
# torch, the build stops saying how to build instead.
#
#   tests/package/pip_install.sh [PYTHON]      (ctest: package_pip; default /usr/bin/python3)
#
# MAX_JOBS: the extension's parallel compiles (default 2). Exit 77 (skipped, with the
# reason) where PYTHON has no venv module, no pip or no torch.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:-/usr/bin/python3}
skip() { echo "pip_install: skipped: $*"; exit 77; }
fail() { echo "pip_install: FAILED: $*" >&2; exit 1; }
unset PYTHONPATH PIP_TARGET PIP_USER PIP_PREFIX
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 OMP_NUM_THREADS=1 MDRING_TIMEOUT=${MDRING_TIMEOUT:-60}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v "$python" >/dev/null || skip "no $python"
"$python" -c "import torch" 2>/dev/null || skip "$python cannot import torch"
start=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mdring-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The environment: without pip of its own where the system's pip (a system site
# package, Debian's python3-pip) serves; else with the pip that ensurepip installs.
# Where PYTHON is itself in a virtual environment (pip's torch), the new one sees that
# one's packages too (a .pth file adding them), as a venv sees the system's.
venv=$tmp/venv
py=$venv/bin/python
parent=$("$python" -c "import sys, sysconfig; print(sysconfig.get_paths()['purelib'] if sys.prefix != sys.base_prefix else '')")
make_venv() {  # [--without-pip]
  rm -rf "$venv"
  "$python" -m venv --system-site-packages "$@" "$venv" >/dev/null 2>&1 || return 1
  [ -z "$parent" ] || echo "import site; site.addsitedir('$parent')" \
    >"$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/mdring_parent.pth"
}
make_venv --without-pip || skip "$python -m venv failed (Debian: python3-venv)"
"$py" -m pip --version >/dev/null 2>&1 || make_venv || skip "no pip for $python (Debian: python3-pip)"
"$py" -c "import torch" 2>/dev/null || skip "torch is not importable in a venv made by $python"
"$py" -c "import setuptools, wheel" 2>/dev/null || skip "no setuptools or wheel for $python (Debian: python3-setuptools python3-wheel)"

# Without torch (an environment without the system's packages), setup.py says how
# to build instead of failing on the import (pip's isolated build environment has none).
"$python" -m venv --without-pip "$tmp/bare" >/dev/null
if "$tmp/bare/bin/python" python/setup.py --version >"$tmp/bare.log" 2>&1 ||
  ! grep -q "cannot import torch.*--no-build-isolation" "$tmp/bare.log"; then
  cat "$tmp/bare.log"
  fail "setup.py without torch did not stop with the --no-build-isolation advice"
fi

status_before=$(git status --porcelain --ignored -- python include 2>/dev/null || true)
t0=$(date +%s)
if ! MDRING_TORCH_BUILD_DIR=$tmp/build MAX_JOBS=${MAX_JOBS:-2} "$py" -m pip install --no-build-isolation --no-index -v \
  ./python >"$tmp/pip.log" 2>&1; then
  tail -60 "$tmp/pip.log"
  fail "pip install --no-build-isolation --no-index ./python"
fi
grep "^ *mdring_torch" "$tmp/pip.log" | sed 's/^ */pip_install: /'
echo "pip_install: built and installed in $(( $(date +%s) - t0 )) s"
status_after=$(git status --porcelain --ignored -- python include 2>/dev/null || true)
[ "$status_before" = "$status_after" ] ||
  fail "the build left files in the source tree: $(diff <(echo "$status_before") <(echo "$status_after") | grep '^>' | head)"

# The version, the module's place, the metadata; the interpreter outside the environment does not see it.
major=$(sed -nE 's/^#define MDRING_VERSION_MAJOR ([0-9]+)$/\1/p' include/mdring/config.hpp)
minor=$(sed -nE 's/^#define MDRING_VERSION_MINOR ([0-9]+)$/\1/p' include/mdring/config.hpp)
patch=$(sed -nE 's/^#define MDRING_VERSION_PATCH ([0-9]+)$/\1/p' include/mdring/config.hpp)
want=$major.$minor.$patch
(cd "$tmp" && "$py" - "$want" "$venv" <<'PY') || fail "the installed module"
import importlib.metadata, os, sys
import mdring_torch
want, venv = sys.argv[1], os.path.realpath(sys.argv[2])
where = os.path.realpath(mdring_torch.__file__)
assert where.startswith(venv + os.sep), f"mdring_torch imported from {where}, not from the environment {venv}"
assert mdring_torch.__version__ == want, f"mdring_torch.__version__ {mdring_torch.__version__}, config.hpp {want}"
meta = importlib.metadata.version("mdring-torch")
assert meta == want, f"the package's version {meta}, config.hpp {want}"
print(f"pip_install: mdring_torch {mdring_torch.__version__} from {where}; UCX {mdring_torch._C.have_ucx()}, "
      f"MPI {mdring_torch._C.have_mpi()}, CUDA tensors {mdring_torch.have_cuda()}")
PY
outside=$(cd "$tmp" && "$python" -c "import importlib.util as u; s = u.find_spec('mdring_torch'); print(s.origin if s else 'none')")
case "$outside" in "$tmp"/*) fail "$python outside the environment imports its mdring_torch ($outside)" ;; esac
echo "pip_install: outside the environment, $python finds mdring_torch at: $outside"

# Two processes, rank r contributing r + 1: exact sums (and AVG, MAX, int64) at sizes
# from one element to 4 MiB + 12 bytes (node memory from 1 MiB).
cat >"$tmp/all_reduce.py" <<'PY'
import datetime, os, sys
import torch
import torch.distributed as dist
import mdring_torch
venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(mdring_torch.__file__).startswith(venv + os.sep), mdring_torch.__file__
dist.init_process_group("mdring", timeout=datetime.timedelta(seconds=60))
r, n = dist.get_rank(), dist.get_world_size()
assert n == 2, n
sizes = (1, 7, 1000, 65536, (1 << 20) + 3)
for size in sizes:
    for op, want in ((dist.ReduceOp.SUM, 3.0), (dist.ReduceOp.AVG, 1.5), (dist.ReduceOp.MAX, 2.0)):
        t = torch.full((size,), float(r + 1))
        dist.all_reduce(t, op=op)
        assert torch.equal(t, torch.full((size,), want)), (size, op, t[:4], t[-4:])
    t = torch.arange(size, dtype=torch.int64) * (r + 1)
    dist.all_reduce(t)
    assert torch.equal(t, torch.arange(size, dtype=torch.int64) * 3), (size, t[:4], t[-4:])
print(f"pip_install: rank {r}: all_reduce exact at sizes {sizes} over {mdring_torch.transport()} "
      f"({mdring_torch.describe()})", flush=True)
dist.destroy_process_group()
PY
ran=0
if "$py" -c "import mdring_torch, sys; sys.exit(0 if mdring_torch._C.have_ucx() else 1)"; then
  # (Debian's torchrun, torch 1.13, fails at start without --redirects and --tee)
  (cd "$tmp" && timeout 300 "$py" -m torch.distributed.run --standalone --redirects 1 --tee 1 --monitor_interval 0.25 \
    --nproc_per_node 2 all_reduce.py "$venv") >"$tmp/torchrun.log" 2>&1 ||
    { cat "$tmp/torchrun.log"; fail "the all_reduce under torchrun"; }
  grep -o "pip_install: rank .*" "$tmp/torchrun.log"
  ran=$((ran + 1))
fi
if command -v mpirun >/dev/null && "$py" -c "import mdring_torch, sys; sys.exit(0 if mdring_torch._C.have_mpi() else 1)"; then
  (cd "$tmp" && timeout 300 mpirun -np 2 "$py" all_reduce.py "$venv") >"$tmp/mpirun.log" 2>&1 ||
    { cat "$tmp/mpirun.log"; fail "the all_reduce under mpirun"; }
  grep -o "pip_install: rank .*" "$tmp/mpirun.log"
  ran=$((ran + 1))
fi
[ $ran -gt 0 ] || skip "built and installed, but the build has neither UCX nor MPI (nor mpirun): no two-process run here"
echo "pip_install: passed in $(( $(date +%s) - start )) s"
