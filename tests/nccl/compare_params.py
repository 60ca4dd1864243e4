"""tests/nccl/compare_params.py A.pt B.pt TOLERANCE: the parameters two runs of
tests/nccl/torch_nccl.py saved agree within TOLERANCE, relative (the norm of the
difference over the norm; 0: bitwise). Exits 1 otherwise."""
import sys

import torch

a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
tol = float(sys.argv[3])
worst = 0.0
for x, y in zip(a, b):
    rel = (x - y).norm().item() / max(y.norm().item(), 1e-30)
    worst = max(worst, rel)
ok = len(a) == len(b) and (worst == 0.0 if tol == 0 else worst <= tol)
print(f"compare_params: {sys.argv[1]} against {sys.argv[2]}: largest relative difference {worst:.3g} "
      f"(allowed {tol:g}): {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
