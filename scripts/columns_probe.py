"""What reading the per-column vectors (gamma, beta) costs a row, from the same kernels
called without them (the kernels test for a missing gamma or beta per vector and skip its
loads): `python scripts/columns_probe.py [--fp32]` on the GPU machine (bf16, M x N = 2^27,
ratio to copy as the benchmark counts bytes: x in, y out). --fp32: LayerNorm with float32
gamma and beta instead (twice the bytes, no conversions), from instances generated into a
scratch folder."""
import subprocess
import sys
import tempfile

import torch

from normgen import bench, dispatch, layernorm, rmsnorm

NS = (16384, 32768, 65536, 131072, 262144, 524288)


def main(fp32=False):
    if fp32:
        out = tempfile.mkdtemp()
        subprocess.run([sys.executable, "generate.py", "--out", out,
                        "--filter", "layernorm_fwd_bf16_wfp32_dqint8_syfp32_nb*_1p_v8",
                        "--filter", "layernorm_fwd_bf16_wfp32_nb*_1p_v8"], check=True, capture_output=True)
        dispatch.use_generated(out)
    copy = bench.copy_gbps()
    print(f"copy {copy:.0f} GB/s")
    for n in NS:
        m = (1 << 27) // n
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        g, b = (torch.randn(n, device="cuda", dtype=torch.float32 if fp32 else torch.bfloat16) for _ in range(2))
        if fp32:
            calls = {"layernorm g b fp32": lambda: layernorm(x, g, b)}
            if n <= 65536:
                calls["layernorm+int8 g b fp32"] = lambda: layernorm(x, g, b, quant="int8")
        else:
            calls = {"layernorm g b": lambda: layernorm(x, g, b), "layernorm g": lambda: layernorm(x, g),
                     "layernorm": lambda: layernorm(x, None), "rmsnorm g": lambda: rmsnorm(x, g),
                     "rmsnorm": lambda: rmsnorm(x)}
            if n <= 65536:
                calls.update({"layernorm+int8 g b": lambda: layernorm(x, g, b, quant="int8"),
                              "layernorm+int8": lambda: layernorm(x, None, quant="int8"),
                              "rmsnorm+fp8 g": lambda: rmsnorm(x, g, quant="fp8_e4m3"),
                              "rmsnorm+fp8": lambda: rmsnorm(x, quant="fp8_e4m3")})
        for name, fn in calls.items():
            ms = bench.time_events(fn)
            moved = m * n * (2 + (1 if "+" in name else 2))  # a quant's output: one byte
            print(f"N={n:6d} {name:23s} {ms * 1e3:7.1f} us {moved / ms / 1e6 / copy:5.3f}", flush=True)


if __name__ == "__main__":
    main("--fp32" in sys.argv[1:])
