"""The NumPy reference against an independent formula, and its one rounding."""
import math

import ml_dtypes
import numpy as np
import pytest

from normgen import reference


def _by_hand(row, gamma, beta, eps):
    n = len(row)
    mean = math.fsum(row) / n
    var = math.fsum((v - mean) ** 2 for v in row) / n
    rstd = 1 / math.sqrt(var + eps)
    return [(v - mean) * rstd * g + b for v, g, b in zip(row, gamma, beta)], mean, rstd


@pytest.mark.parametrize("n", [1, 2, 7, 64, 333])
def test_layernorm_matches_a_formula_by_hand(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * 3 + 1000).astype(np.float32)
    g, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, mean, rstd = reference.layernorm(x, g, b, 1e-5, return_mean_rstd=True)
    assert y.dtype == np.float32 and mean.dtype == rstd.dtype == np.float32
    for i in range(3):
        want, m, r = _by_hand([float(v) for v in x[i]], map(float, g), map(float, b), 1e-5)
        np.testing.assert_array_equal(y[i], np.array(want, dtype=np.float32))
        assert mean[i] == np.float32(m) and rstd[i] == np.float32(r)


def test_beta_none_and_low_precision_output_dtype():
    x = np.linspace(-2, 3, 40, dtype=np.float32).reshape(2, 20).astype(ml_dtypes.bfloat16)
    g = np.full(20, 2.0, dtype=np.float32)
    y = reference.layernorm(x, g, None)
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    want = reference.layernorm(x.astype(np.float64), g, np.zeros(20))
    np.testing.assert_array_equal(y, reference.round_to(want, ml_dtypes.bfloat16))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_round_to_is_nearest_even(dtype):
    rng = np.random.default_rng(1)
    v = rng.standard_normal(100_000) * np.exp(rng.uniform(-14, 9, 100_000))  # fp16 range, subnormals too
    r = reference.round_to(v, dtype)
    assert r.dtype == np.dtype(dtype)
    # No representable value of dtype is closer: check both neighbours.
    finfo = ml_dtypes.finfo(dtype)
    bits = r.view(np.uint16 if finfo.bits == 16 else np.uint32).astype(np.int64)
    uint = np.uint16 if finfo.bits == 16 else np.uint32
    for step in (-1, 1):
        nb = (bits + step).astype(uint).view(dtype).astype(np.float64)
        gap = np.where(np.isnan(nb), np.inf, np.abs(v - nb))  # stepping down from +0 wraps to NaN
        assert np.all(np.abs(v - r.astype(np.float64)) <= gap)
    # ties go to even: the exact midpoint between 1 and the next bf16/fp16 value
    eps = float(finfo.eps)
    assert reference.round_to([1 + eps / 2], dtype)[0] == 1.0
    assert reference.round_to([1 + 3 * eps / 2], dtype)[0] == np.float64(1 + 2 * eps)


def test_bf16_rounds_once_where_float32_would_round_twice():
    # 1 + 2**-8 + 2**-30: above the bf16 midpoint, so it rounds up; through float32 the
    # 2**-30 is lost first and the tie then rounds to even (down).
    v = 1 + 2**-8 + 2**-30
    assert float(reference.round_to([v], ml_dtypes.bfloat16)[0]) == 1 + 2**-7
    assert float(np.float32(v).astype(ml_dtypes.bfloat16)) == 1.0
