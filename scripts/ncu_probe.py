"""Run one normgen instance a few times, for ncu to profile (GPU machine):
ncu -k regex:NAME --launch-skip 2 --launch-count 1 python scripts/ncu_probe.py OP N [dtype]
OP: layernorm, rmsnorm, or either with +int8 / +fp8 (dynamic quant)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import normgen  # noqa: E402

op, n = sys.argv[1], int(sys.argv[2])
norm, _, quant = op.partition("+")
quant = {"": None, "int8": "int8", "fp8": "fp8_e4m3"}[quant]
dt = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "bfloat16")
x = torch.randn((1 << 27) // n, n, device="cuda", dtype=dt)
g, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
for _ in range(4):
    if norm == "layernorm":
        normgen.layernorm(x, g, b, quant=quant)
    else:
        normgen.rmsnorm(x, g, quant=quant)
torch.cuda.synchronize()
