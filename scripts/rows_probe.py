"""Time per call against the number of rows, for rows over clusters (bf16, on the GPU
machine): `python scripts/rows_probe.py [OP ...] [N ...]`. Shows how a launch's time grows
with its rows: a step at each multiple of the rows the device holds at once would be a
partial last wave; a line, a fixed cost per launch (OP "copy": torch's device-to-device
copy, the ceiling, for comparison). Rows of up to ~30 are bound by the host's time per
call."""
import sys

import torch

from normgen import layernorm, rmsnorm
from normgen.bench import time_events

ROWS = {262144: [1, 8, 17, 30, 45, 46, 90, 135, 450, 495, 512, 540, 1024, 2048],
        131072: [1, 46, 92, 93, 920, 1012, 1024, 1104, 2048],
        65536: [1, 66, 68, 132, 133, 264, 1980, 2048, 2112, 4096],
        32768: [1, 264, 265, 528, 3960, 4096, 4224, 8192]}


def main(ops=("rmsnorm", "layernorm"), ns=tuple(ROWS)):
    for op in ops:
        for n in ns:
            rows = ROWS[n]
            g, b = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            for m in rows:
                x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
                y = torch.empty_like(x)
                call = {"rmsnorm": lambda: rmsnorm(x, g), "layernorm": lambda: layernorm(x, g, b),
                        "copy": lambda: y.copy_(x)}[op]  # the ceiling's own fixed cost
                us = 1e3 * time_events(call, reps=11)
                print(f"{op} n={n} rows={m} {us:8.2f} us {us / m:7.3f} us/row "
                      f"{m * n * 4 / us / 1e3:6.0f} GB/s", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]  # ops and Ns to probe (all by default)
    main(tuple(a for a in args if not a.isdigit()) or ("rmsnorm", "layernorm"),
         tuple(int(a) for a in args if a.isdigit()) or tuple(ROWS))
