"""The public calls. Per call: check the arguments, look the kernel up in a dictionary,
launch. The first call for a new shape class resolves the instance through the generated
registry and compiles it (normgen.runtime)."""
from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Optional

from . import arrays, codegen, runtime, tiles
from .spec import KernelSpec
from .types import DType, Norm, Pipeline

GENERATED_DIR = Path(os.environ.get("NORMGEN_GENERATED_DIR", codegen.GENERATED))

_registry: Optional[dict] = None  # KernelSpec.key -> instance name
_kernels: dict = {}  # call key -> runtime.Kernel


class MissingInstanceError(LookupError):
    """The registry has no instance for a call; the message names the command that makes it."""


def use_generated(path, registry: Optional[dict] = None) -> None:
    """Dispatch from another generated folder (as written by generate.py --out PATH), or,
    with `registry`, from a subset of its instances."""
    global GENERATED_DIR, _registry
    GENERATED_DIR = Path(path)
    _registry = registry
    _kernels.clear()


def registry() -> dict:
    global _registry
    if _registry is None:
        path = GENERATED_DIR / "registry.py"
        if not path.exists():
            raise MissingInstanceError(f"{path} does not exist: run python generate.py")
        mod_spec = importlib.util.spec_from_file_location("normgen_generated_registry", path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        _registry = dict(module.REGISTRY)
    return _registry


# ---- instance choice ----------------------------------------------------------------------
def candidates(norm: Norm, x: DType, w: DType, save_stats: bool, n: int, vec_align: int):
    """Instances that can serve a call, best first: the smallest one-pass bucket that holds
    the row (while N is within the one-pass range), widest vector first; then two-pass."""
    def spec(pipeline, bucket, vec):
        return KernelSpec(norm=norm, x=x, w=w, out=x, save_stats=save_stats,
                          pipeline=pipeline, bucket=bucket, vec=vec)

    vecs = [v for v in (8, 4, 2, 1) if v <= vec_align and v <= x.vmax]
    if n <= tiles.ONE_PASS_MAX_N[x]:
        for b in tiles.BUCKETS:
            if b >= n:
                yield from (spec(Pipeline.ONE_PASS, b, v) for v in vecs if tiles.has_one_pass(x, b, v))
    yield from (spec(Pipeline.TWO_PASS, None, v) for v in vecs)


def choose(norm, x, w, save_stats, n, vec_align) -> KernelSpec:
    table = registry()
    options = list(candidates(norm, x, w, save_stats, n, vec_align))
    for spec in options:
        if spec.key in table:
            return spec
    best = options[0]
    raise MissingInstanceError(
        f"no generated instance serves this call (N={n}); the best one is {best.name}: "
        f"python generate.py --filter '{best.name}'"
        + ("" if GENERATED_DIR.resolve() == codegen.GENERATED else f" --out {GENERATED_DIR}")
    )


def _resolve(key) -> runtime.Kernel:
    device, norm, x, w, save_stats, n, vec_align = key
    kernel = runtime.load(choose(norm, x, w, save_stats, n, vec_align), GENERATED_DIR, device)
    _kernels[key] = kernel
    return kernel


# ---- argument checks ----------------------------------------------------------------------
def _rows(xv: arrays.View) -> tuple[int, int, int, int]:
    """(rows, inner, outer stride, inner stride): row r starts at
    (r // inner) * outer + (r % inner) * inner_stride elements."""
    shape, strides = xv.shape, xv.strides
    if len(shape) == 2:  # the common case
        return shape[0], shape[0], 0, strides[0]
    dims = [(s, st) for s, st in zip(shape[:-1], strides[:-1]) if s != 1]
    merged: list[list[int]] = []
    for s, st in dims:
        if merged and merged[-1][1] == st * s:
            merged[-1] = [merged[-1][0] * s, st]
        else:
            merged.append([s, st])
    rows = math.prod(xv.shape[:-1])
    if not merged:
        return rows, 1, 0, 0
    if len(merged) == 1:
        return rows, rows, 0, merged[0][1]
    if len(merged) == 2:
        return rows, merged[1][0], merged[0][1], merged[1][1]
    raise ValueError(
        f"x: its leading dimensions (shape {xv.shape}, strides {xv.strides} in elements) "
        "cannot be addressed as rows with two strides; pass a contiguous copy of x"
    )


def _vector(v: arrays.View, arg: str, n: int, x: arrays.View, dtypes: tuple) -> None:
    if v.device != x.device:
        raise ValueError(f"{arg} is on device {v.device} but x is on device {x.device}")
    if v.dtype not in dtypes:
        raise TypeError(f"{arg} must have dtype {' or '.join(d.value for d in dtypes)}, "
                        f"not {v.obj.dtype}")
    if v.shape != (n,):
        raise ValueError(f"{arg} must have shape ({n},) to match x's last dimension, "
                         f"not {v.shape}")
    if n > 1 and v.strides[0] != 1:
        raise ValueError(f"{arg} must be contiguous (stride 1), not stride {v.strides[0]}; "
                         f"pass a contiguous copy")


def _check_x(xv: arrays.View) -> int:
    if xv.dtype not in (DType.FP32, DType.FP16, DType.BF16):
        raise TypeError(f"x must have dtype float32, float16 or bfloat16, not {xv.obj.dtype}")
    if len(xv.shape) == 0:
        raise ValueError("x must have at least one dimension (..., N)")
    n = xv.shape[-1]
    if not 1 <= n < 2**31:
        raise ValueError(f"x: the last dimension N must be between 1 and 2**31 - 1, not {n}")
    if n > 1 and xv.strides[-1] != 1 and math.prod(xv.shape):  # an empty x has no strides to speak of
        raise ValueError(f"x: the last dimension must be contiguous (stride 1), not stride "
                         f"{xv.strides[-1]}; pass a contiguous copy of x")
    return n


def _eps(eps) -> float:
    e = float(eps)
    if not (math.isfinite(e) and e > 1.2e-38):  # a positive normal float32
        raise ValueError(f"eps must be a positive finite number (at least 1.2e-38), not {eps!r}")
    return e


def _lowbit(a: int) -> int:
    return a & -a if a else 1 << 62


def _vec_align(xv: arrays.View, x_bits: int, weights) -> int:
    """The widest vector width that every access of this call is aligned for."""
    v = min(_lowbit(x_bits | xv.ptr // xv.dtype.itemsize), 8)
    for wv in weights:
        if wv.ptr % 16:
            v = min(v, _lowbit(wv.ptr // wv.dtype.itemsize))
    return v


# ---- the calls ----------------------------------------------------------------------------
def layernorm(x, gamma, beta=None, *, eps: float = 1e-5, return_mean_rstd: bool = False):
    """LayerNorm over the last dimension: y = (x - mean) / sqrt(var + eps) * gamma + beta.

    x: (..., N) CUDA array, float32/float16/bfloat16; rows may be strided, the last
    dimension must be contiguous. gamma, beta: (N,), x's dtype or float32 (beta may be None).
    Returns y (same kind, shape and dtype as x), or (y, mean, rstd) with
    return_mean_rstd=True (float32, shape x.shape[:-1]). Population variance; statistics
    are accumulated in float32.
    """
    xv = arrays.view(x, "x")
    n = _check_x(xv)
    gv = arrays.view(gamma, "gamma")
    _vector(gv, "gamma", n, xv, (xv.dtype, DType.FP32))
    weights = (gv,)
    if beta is not None:
        bv = arrays.view(beta, "beta")
        _vector(bv, "beta", n, xv, (gv.dtype,))
        weights = (gv, bv)
    e = _eps(eps)
    rows, inner, so, si = _rows(xv)

    y = arrays.empty(xv, xv.shape, xv.dtype)
    mean = rstd = None
    if return_mean_rstd:
        mean = arrays.empty(xv, xv.shape[:-1], DType.FP32)
        rstd = arrays.empty(xv, xv.shape[:-1], DType.FP32)
    if rows:
        vec = _vec_align(xv, n | so | si, weights)
        key = (xv.device, Norm.LAYERNORM, xv.dtype, gv.dtype, return_mean_rstd, n, vec)
        kernel = _kernels.get(key) or _resolve(key)
        values = (
            xv.ptr, 0, 0, gv.ptr, weights[1].ptr if beta is not None else 0, 0, 0,
            arrays.data_ptr(y), 0, 0,
            arrays.data_ptr(mean) if return_mean_rstd else 0,
            arrays.data_ptr(rstd) if return_mean_rstd else 0,
            rows, inner, so, si, 0, 0, n, e, 0.0, 0,
        )
        stream = arrays.stream_of(xv)
        if xv.device == arrays.current_device():
            kernel.launch(stream, rows, *values)
        else:
            with arrays.on_device(xv.device):
                kernel.launch(stream, rows, *values)
    return (y, mean, rstd) if return_mean_rstd else y
