"""Run one normgen instance a few times, for ncu to profile (GPU machine):
ncu -k regex:NAME --launch-skip 2 --launch-count 1 python scripts/ncu_probe.py [layernorm|rmsnorm] N [dtype]"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import normgen  # noqa: E402

norm, n = sys.argv[1], int(sys.argv[2])
dt = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "bfloat16")
x = torch.randn((1 << 27) // n, n, device="cuda", dtype=dt)
g, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
for _ in range(4):
    normgen.layernorm(x, g, b) if norm == "layernorm" else normgen.rmsnorm(x, g)
torch.cuda.synchronize()
