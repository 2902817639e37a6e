"""NumPy references, the oracle for every test: computed in float64 from the inputs' exact
values, rounded once to the output precision."""
from __future__ import annotations

import ml_dtypes
import numpy as np

# (explicit mantissa bits, smallest normal exponent) of formats numpy cannot round to directly
_FORMATS = {
    np.dtype(ml_dtypes.bfloat16): (7, -126),
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


def layernorm(x, gamma, beta=None, eps=1e-5, *, return_mean_rstd=False):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis, population var.

    Inputs are host arrays of any float dtype; y has x's dtype; mean and rstd are float32."""
    x64 = np.asarray(x, dtype=np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = np.square(x64 - mean).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (x64 - mean) * rstd * np.asarray(gamma, dtype=np.float64)
    if beta is not None:
        y = y + np.asarray(beta, dtype=np.float64)
    y = round_to(y, np.asarray(x).dtype)
    if return_mean_rstd:
        return y, mean[..., 0].astype(np.float32), rstd[..., 0].astype(np.float32)
    return y
