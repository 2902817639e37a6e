"""The operations the benchmark times: normgen's call and torch's unfused sequence per op
(OPS, with the bytes each must move), the instance fields of normgen's calls (CALLS,
call_spec), the row lengths and cases a run times, and the prebuild of their instances."""
from __future__ import annotations

from ..spec import KernelSpec
from ..types import DType, FusedAdd, Norm, Pipeline, Quant
from .timing import _torch

BIG_N = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)
# N that are not powers of two, every op, every dtype, quick or not: odd widths, 1000, and
# 5120, a common model width just past half its power-of-two bucket (tiles.fitted)
OTHER_N = (1000, 5003, 5120, 50257, 100003)
SMALL = ((1, 4096), (32, 4096), (256, 4096), (1, 8192), (32, 8192), (256, 8192))  # LayerNorm
SMALL_RMS = ((1, 4096), (32, 4096))  # RMSNorm
DTYPES = ("bfloat16", "float16", "float32")


def _side_by_side(ours, unfused, *args) -> dict:
    """normgen's call, and torch eager and torch.compile of the unfused sequence on args."""
    torch = _torch()
    torch._dynamo.reset()  # a fresh compile per shape: never the recompile-limit fallback to eager
    compiled = torch.compile(unfused, dynamic=False)
    return {"normgen": ours, "torch": lambda: unfused(*args), "torch.compile": lambda: compiled(*args)}


def _quant_in_torch(quant: str):
    """Dynamic per-row quantization to int8 or fp8 in torch: (codes, float32 scales)."""
    torch = _torch()
    qmax, qdt = (127.0, torch.int8) if quant == "int8" else (448.0, torch.float8_e4m3fn)

    def quantize(y):
        y = y.float()
        s = (y.abs().amax(-1, keepdim=True) / qmax).clamp_min(1.1754944e-38)
        q = y / s
        q = q.round().clamp(-128, 127) if quant == "int8" else q.clamp(-448, 448)
        return q.to(qdt), s

    return quantize


def layernorm_impls(x, g, b):
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5),
                         lambda x, g, b: F.layer_norm(x, (n,), g, b, 1e-5), x, g, b)


def add_layernorm_impls(x, r, g, b):
    """Residual add + LayerNorm, returning the sum and y (ck fadd=1, vLLM fused_add_*)."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]

    def unfused(x, r, g, b):
        h = x + r
        return h, F.layer_norm(h, (n,), g, b, 1e-5)

    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5, residual=r), unfused, x, r, g, b)


def quant_layernorm_impls(x, g, b, quant: str):
    """LayerNorm + dynamic per-row quantization to int8 or fp8 (codes and float32 scales)."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    quantize = _quant_in_torch(quant)
    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5, quant=quant),
                         lambda x, g, b: quantize(F.layer_norm(x, (n,), g, b, 1e-5)), x, g, b)


def rmsnorm_impls(x, r, g, quant=None):
    """RMSNorm (eps 1e-6), with the residual add (returning the sum and y) when r is given,
    or dynamic per-row quantization: vLLM's rms_norm, fused_add_rms_norm and
    rms_norm_dynamic_per_token_quant."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    quantize = _quant_in_torch(quant) if quant else None

    def unfused(x, r, g):
        h = x if r is None else x + r
        y = F.rms_norm(h, (n,), g, 1e-6)
        if quantize:
            return quantize(y)
        return y if r is None else (h, y)

    return _side_by_side(lambda: normgen.rmsnorm(x, g, eps=1e-6, residual=r, quant=quant), unfused, x, r, g)


# op -> (dtypes, Ns, implementations, bytes that must move for M x N of itemsize bytes)
OPS = {
    "layernorm": (DTYPES, BIG_N, lambda x, r, g, b: layernorm_impls(x, g, b),
                  lambda m, n, isz: 2 * m * n * isz + 2 * n * isz),
    "add+layernorm": (("bfloat16",), BIG_N[:7], add_layernorm_impls,
                      lambda m, n, isz: 4 * m * n * isz + 2 * n * isz),
    "layernorm+int8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: quant_layernorm_impls(x, g, b, "int8"),
                       lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz),
    "layernorm+fp8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: quant_layernorm_impls(x, g, b, "fp8_e4m3"),
                      lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz),
    "rmsnorm": (DTYPES[:2], BIG_N, lambda x, r, g, b: rmsnorm_impls(x, None, g),
                lambda m, n, isz: 2 * m * n * isz + n * isz),
    "add+rmsnorm": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: rmsnorm_impls(x, r, g),
                    lambda m, n, isz: 4 * m * n * isz + n * isz),
    "rmsnorm+fp8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: rmsnorm_impls(x, None, g, "fp8_e4m3"),
                    lambda m, n, isz: m * n * (isz + 1) + 4 * m + n * isz),
}


# op -> the instance fields of its normgen call beyond the precisions (what dispatch picks
# an instance for)
CALLS = {
    "layernorm": (Norm.LAYERNORM, {}),
    "rmsnorm": (Norm.RMSNORM, {}),
    "add+layernorm": (Norm.LAYERNORM, dict(fused_add=FusedAdd.STORE)),
    "add+rmsnorm": (Norm.RMSNORM, dict(fused_add=FusedAdd.STORE)),
    "layernorm+int8": (Norm.LAYERNORM, dict(out=DType.INT8, quant=Quant.DYNAMIC, scale=DType.FP32)),
    "layernorm+fp8": (Norm.LAYERNORM, dict(out=DType.FP8, quant=Quant.DYNAMIC, scale=DType.FP32)),
    "rmsnorm+fp8": (Norm.RMSNORM, dict(out=DType.FP8, quant=Quant.DYNAMIC, scale=DType.FP32)),
}
_DTYPES = {d.numpy.name: d for d in DType if d.is_float_input}  # "bfloat16" -> DType.BF16, ...


def call_spec(op: str, x: DType) -> KernelSpec:
    """The instance fields of op's normgen call on x rows (x's weights), as dispatch sees them:
    pipeline, bucket and vector width are placeholders that dispatch.choose fills in."""
    norm, fields = CALLS[op]
    return KernelSpec(norm, x, x, **dict(dict(out=x), **fields), pipeline=Pipeline.TWO_PASS, bucket=None, vec=1)


def sizes(op: str, quick: bool) -> tuple:
    """The row lengths N the run times for op: its powers of two (every other one with
    --quick) and OTHER_N, those that are not powers of two."""
    pow2 = OPS[op][1]
    return tuple(sorted(set(pow2[::2] if quick else pow2) | set(OTHER_N)))


def cases(ops, quick: bool) -> list:
    """(op, dtype, N) in the order the run times them: the quick set first and then, in a
    full run, the other powers of two, so a run stopped by its time budget still holds a
    whole quick run."""
    first = [(op, dt, n) for op in ops for dt in OPS[op][0] for n in sizes(op, True)]
    if quick:
        return first
    return first + [(op, dt, n) for op in ops for dt in OPS[op][0] for n in sizes(op, False)
                    if n not in sizes(op, True)]


def _vec(n: int) -> int:
    """The vector alignment (elements) of contiguous rows of n: the largest power of two of
    at most 8 that divides n (dispatch caps it by 16 bytes and the dtype's widest vector)."""
    return next(v for v in (8, 4, 2, 1) if n % v == 0)


def prebuild(quick: bool, ops) -> int:
    """Compile every instance the run will call (contiguous rows, 256-byte aligned
    allocations: the vector alignment is N's), in parallel, before anything is timed: the
    run's wall time is then timing, not NVRTC."""
    from .. import cache, dispatch, runtime

    calls = [(call_spec(op, _DTYPES[dtype]), n) for op in ops for dtype in OPS[op][0] for n in sizes(op, quick)]
    calls += [(call_spec(op, DType.BF16), n) for op, shapes in (("layernorm", SMALL), ("rmsnorm", SMALL_RMS))
              if op in ops for _, n in shapes]
    specs = set()
    for call, n in calls:
        try:
            specs.add(dispatch.choose(call, n, _vec(n)))
        except dispatch.MissingInstanceError:
            pass  # not shipped: the call generates it on demand (its first, untimed calls)
    cache.build(sorted(specs, key=str), dispatch.GENERATED_DIR, runtime.device_arch(0))
    return len(specs)
