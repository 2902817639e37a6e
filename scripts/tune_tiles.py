"""Time alternative one-pass tile shapes for chosen (dtype, N) on the GPU, without touching
the committed table: each candidate is rendered into a scratch folder and dispatched from
there. Usage (GPU machine): python scripts/tune_tiles.py"""
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from normgen import bench, codegen, dispatch, runtime, tiles  # noqa: E402
from normgen.spec import KernelSpec  # noqa: E402
from normgen.types import DType, Norm, Pipeline  # noqa: E402

CANDIDATES = {  # (dtype, N): [(threads per block, cluster, staged), ...]
    (DType.BF16, 65536): [(256, 4, True), (512, 2, True), (256, 2, True), (512, 4, True), (128, 8, True)],
    (DType.BF16, 131072): [(256, 8, True), (512, 4, True), (256, 4, True), (512, 8, True)],
    (DType.BF16, 262144): [(512, 8, True), (1024, 8, True), (256, 8, True)],
    (DType.FP32, 32768): [(256, 4, True), (512, 2, True), (256, 2, True), (1024, 1, False)],
    (DType.FP32, 65536): [(256, 8, True), (512, 4, True), (256, 4, True)],
}
TORCH = {DType.BF16: torch.bfloat16, DType.FP32: torch.float32}

ceiling = bench.copy_gbps()
print(f"copy {ceiling:.0f} GB/s")
for (x, n), shapes in CANDIDATES.items():
    m = (1 << 27) // n
    xt = torch.randn(m, n, device="cuda", dtype=TORCH[x])
    g, b = torch.randn(n, device="cuda", dtype=TORCH[x]), torch.randn(n, device="cuda", dtype=TORCH[x])
    nbytes = 2 * xt.numel() * xt.element_size()
    for threads, cluster, staged in shapes:
        tiles.ONE_PASS_TILES[x.itemsize][n] = (threads, 1, cluster, staged)
        spec = KernelSpec(Norm.LAYERNORM, x, x, x, pipeline=Pipeline.ONE_PASS, bucket=n, vec=x.vmax)
        folder = Path(tempfile.mkdtemp())
        codegen.write(folder, codegen.outputs([spec]))
        dispatch.use_generated(folder, registry={spec.key: spec.name})
        t = spec.tile
        ms = bench.time_events(lambda xt=xt, g=g, b=b: dispatch.layernorm(xt, g, b))
        print(f"{x.value} N={n:6d} threads={threads:4d} cluster={cluster} staged={staged} "
              f"P={t.repeat:2d} smem={t.stage_bytes // 1024:3d}KB: {ms * 1e3:7.1f} us "
              f"{nbytes / ms / 1e6 / ceiling:5.2f}", flush=True)
        runtime._loaded.clear()
