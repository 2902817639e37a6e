"""NumPy references, the oracle for every test: computed in float64 from the inputs' exact
values, rounded once to the output precision."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .types import QMAX, QUANT_NAMES, DType, NormOutput

# (explicit mantissa bits, smallest normal exponent) of formats numpy cannot round to directly
_FORMATS = {
    np.dtype(ml_dtypes.bfloat16): (7, -126),
    np.dtype(ml_dtypes.float8_e4m3fn): (3, -6),
}
# the positive normal range of a per-row scale's precision
_NORMAL = {
    np.dtype(np.float32): (np.finfo(np.float32).tiny, np.finfo(np.float32).max),
    np.dtype(np.float16): (np.finfo(np.float16).tiny, np.finfo(np.float16).max),
    np.dtype(ml_dtypes.bfloat16): (np.finfo(np.float32).tiny, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
}


def round_to(values, dtype) -> np.ndarray:
    """float64 -> dtype with one round-to-nearest-even (ml_dtypes goes through float32,
    which can round twice)."""
    dtype = np.dtype(dtype)
    v = np.asarray(values, dtype=np.float64)
    if dtype not in _FORMATS:
        return v.astype(dtype)  # numpy rounds float64 -> float32/float16 directly
    mant, emin = _FORMATS[dtype]
    _, e = np.frexp(v)  # v = m * 2**e, 0.5 <= |m| < 1
    quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - mant)  # spacing at v (subnormals too)
    rounded = np.rint(v / quantum) * quantum  # exact: a power-of-two scale, rint is half-even
    with np.errstate(over="ignore"):
        return rounded.astype(np.float32).astype(dtype)  # exact from here on; overflow -> inf


def fused_input(x, residual=None, x_bias=None) -> np.ndarray:
    """h = x (+ x_bias) (+ residual): summed in float32 in that order, rounded once to x's
    dtype -- what the unfused sequence would store and normalize."""
    x = np.asarray(x)
    if residual is None and x_bias is None:
        return x
    h = x.astype(np.float32)
    if x_bias is not None:
        h = h + np.asarray(x_bias, dtype=np.float32)
    if residual is not None:
        h = h + np.asarray(residual, dtype=np.float32)
    return h.astype(x.dtype)  # float32 -> x's dtype: one rounding to nearest even


def quantize(y64, quant: str, quant_scale=None, scale_dtype="fp32"):
    """(codes, per-row scales or None). Dynamic: scale = absmax(row) / qmax, computed in
    float32, kept in the normal range of scale_dtype and rounded to it; codes are y divided
    by the scale as stored. Static: codes are y / quant_scale. int8 rounds half to even
    and saturates at [-128, 127]; fp8 e4m3 rounds to nearest even and saturates at 448."""
    if quant_scale is None:
        sdt = DType(scale_dtype).numpy  # 'fp32', 'fp16' or 'bf16'
        lo, hi = _NORMAL[sdt]
        amax = np.abs(y64).max(axis=-1, keepdims=True) if y64.shape[-1] else np.zeros(y64.shape[:-1] + (1,))
        s32 = np.clip((amax / QMAX[QUANT_NAMES[quant]]).astype(np.float32), np.float32(lo), np.float32(hi))
        stored = s32.astype(sdt)  # float32 -> scale_dtype: one rounding
        v = y64 / stored.astype(np.float64)
        scales = stored[..., 0]
    else:
        v = y64 / float(np.float32(np.asarray(quant_scale).reshape(())))
        scales = None
    return quantize_values(v, quant), scales


def quantize_values(v, quant: str) -> np.ndarray:
    """Codes for exact values v: int8 rounds half to even and saturates at [-128, 127];
    fp8 e4m3 rounds to nearest even and saturates at +-448."""
    if quant == "int8":
        return np.clip(np.rint(v), -128, 127).astype(np.int8)
    qmax = QMAX[DType.FP8]
    return round_to(np.clip(v, -qmax, qmax), DType.FP8.numpy)


def _finish(y64, x_dtype, h, residual, store_residual, quant, smooth_scale, quant_scale,
            scale_dtype, mean, rstd, return_stats):
    if smooth_scale is not None:
        y64 = y64 * np.asarray(smooth_scale, dtype=np.float64)
    scale = None
    if quant is None:
        y = round_to(y64, x_dtype)
    else:
        y, scale = quantize(y64, quant, quant_scale, scale_dtype)
    stored = h if residual is not None and store_residual else None
    if stored is None and scale is None and not return_stats:
        return y
    if not return_stats:
        return NormOutput(y, stored, scale)
    mean = None if mean is None else mean[..., 0].astype(np.float32)
    return NormOutput(y, stored, scale, mean, rstd[..., 0].astype(np.float32))


def stats(norm: str, h64: np.ndarray, eps: float):
    """(mean, rstd) over the last axis, float64, keepdims; RMSNorm's mean is 0."""
    if norm == "rmsnorm":
        mean = np.zeros(h64.shape[:-1] + (1,))
        var = np.square(h64).mean(axis=-1, keepdims=True)
    else:
        mean = h64.mean(axis=-1, keepdims=True)
        var = np.square(h64 - mean).mean(axis=-1, keepdims=True)
    return mean, 1.0 / np.sqrt(var + eps)


def normalized(norm: str, h, gamma, beta, eps, weight_offset=0.0) -> np.ndarray:
    """The float64 outputs before smoothing and rounding: LayerNorm (h - mean) * rstd *
    gamma + beta; RMSNorm h * rstd * (gamma + weight_offset); gamma None meaning 1, beta
    None 0."""
    h64 = np.asarray(h, dtype=np.float64)
    return _apply(norm, h64, *stats(norm, h64, eps), gamma, beta, weight_offset)


def _apply(norm, h64, mean, rstd, gamma, beta, weight_offset):
    if norm == "rmsnorm":
        # gamma + weight_offset is added in float32, as the kernel (and Gemma) does
        w = 1.0 if gamma is None else (np.asarray(gamma, np.float32) + np.float32(weight_offset)).astype(np.float64)
        return h64 * rstd * w
    y = (h64 - mean) * rstd
    if gamma is not None:  # None: no scale, as RMSNorm's
        y = y * np.asarray(gamma, dtype=np.float64)
    return y if beta is None else y + np.asarray(beta, dtype=np.float64)


def layernorm(x, gamma, beta=None, eps=1e-5, *, residual=None, store_residual=True,
              x_bias=None, quant=None, smooth_scale=None, quant_scale=None,
              scale_dtype="fp32", return_mean_rstd=False):
    """normgen.layernorm's semantics on host arrays, in float64 from the inputs' exact
    values: y = (h - mean) / sqrt(var + eps) * gamma + beta (population variance), then
    smooth scale and quantization; results rounded once to their precision."""
    return _norm("layernorm", x, gamma, beta, eps, residual, store_residual, x_bias, quant,
                 smooth_scale, quant_scale, scale_dtype, 0.0, return_mean_rstd)


def rmsnorm(x, gamma=None, eps=1e-6, *, residual=None, store_residual=True, x_bias=None,
            quant=None, smooth_scale=None, quant_scale=None, scale_dtype="fp32",
            weight_offset=0.0, return_rstd=False):
    """normgen.rmsnorm's semantics on host arrays: y = h / sqrt(mean(h^2) + eps) * (gamma +
    weight_offset) (gamma None: no scale), then smooth scale and quantization."""
    return _norm("rmsnorm", x, gamma, None, eps, residual, store_residual, x_bias, quant,
                 smooth_scale, quant_scale, scale_dtype, weight_offset, return_rstd)


def _norm(norm, x, gamma, beta, eps, residual, store_residual, x_bias, quant, smooth_scale,
          quant_scale, scale_dtype, weight_offset, return_stats):
    h = fused_input(x, residual, x_bias)
    h64 = h.astype(np.float64)
    mean, rstd = stats(norm, h64, eps)
    y = _apply(norm, h64, mean, rstd, gamma, beta, weight_offset)
    return _finish(y, h.dtype, h, residual, store_residual, quant, smooth_scale, quant_scale,
                   scale_dtype, mean if norm == "layernorm" else None, rstd, return_stats)
