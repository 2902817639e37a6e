"""The NumPy reference against an independent formula, and its one rounding."""
import math

import ml_dtypes
import numpy as np
import pytest

from normgen import reference
from normgen.types import DType


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
    y, _, _, mean, rstd = reference.layernorm(x, g, b, 1e-5, return_mean_rstd=True)
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


# ---- the fused prologue and epilogue ----------------------------------------------------
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_fused_input_sums_in_float32_in_order_and_rounds_once():
    one = np.ones(4, dtype=BF16)
    # 1 + 2**-8 is a bf16 tie: to even (1); 1 + 2**-7 + 2**-8 ties up to 1 + 2**-6
    x = np.array([1, 1 + 2**-7, 1, 3], dtype=BF16)
    r = np.array([2**-8, 2**-8, -2**-9, 0], dtype=BF16)
    h = reference.fused_input(x, r)
    assert h.dtype == BF16
    assert h.astype(np.float64).tolist() == [1, 1 + 2**-6, 1, 3]
    # bias first, then residual, each in float32; rounded to bf16 only at the end
    b = np.array([2**-9, 2**-9, 2**-9, 0], dtype=BF16)
    want = ((x.astype(np.float32) + b.astype(np.float32)) + r.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(reference.fused_input(x, r, b), want)
    assert reference.fused_input(one) is not None and reference.fused_input(one).dtype == BF16


def test_int8_codes_round_half_to_even_and_saturate():
    v = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.6, 1e9, -128.4, -1e9])
    assert reference.quantize_values(v, "int8").tolist() == [0, 2, 2, 0, -2, 126, 127, 127, -128, -128]


def test_fp8_codes_round_to_nearest_even_and_saturate():
    v = np.array([17.0, 19.0, 0.0, -3.3, 448.0, 463.9, 1e6, -1e6, 2.0**-9])
    got = reference.quantize_values(v, "fp8_e4m3").astype(np.float64)
    # 17 and 19 are ties between 16/18 and 18/20: to the even mantissa; 2**-9 is the
    # smallest subnormal; -3.3 rounds to -3.25
    assert got.tolist() == [16, 20, 0, -3.25, 448, 448, 448, -448, 2.0**-9]


@pytest.mark.parametrize("quant, qmax", [("int8", 127), ("fp8_e4m3", 448)])
@pytest.mark.parametrize("scale_dtype", ["fp32", "fp16", "bf16"])
def test_dynamic_quant_scales(quant, qmax, scale_dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    x[1] = 0  # an all-zero row
    g = np.ones(256, np.float32)
    out = reference.layernorm(x, g, None, quant=quant, scale_dtype=scale_dtype)
    assert out.scale.shape == (4,) and out.scale.dtype == DType(scale_dtype).numpy
    s = out.scale.astype(np.float64)
    assert np.isfinite(s).all() and (s > 0).all(), "every scale finite and positive"
    assert (out.y[1].astype(np.float64) == 0).all(), "an all-zero row gives zero codes"
    y = reference.layernorm(x.astype(np.float64), g, None)
    for r in (0, 2, 3):
        assert s[r] == pytest.approx(np.abs(y[r]).max() / qmax, rel=2**-7)
        deq = out.y[r].astype(np.float64) * s[r]  # codes times the stored scale: back to y
        step = 1.0 if quant == "int8" else 2.0 ** (np.floor(np.log2(np.abs(y[r]) / s[r] + 1e-30)) - 3)
        assert np.all(np.abs(deq - y[r]) <= 0.5 * np.maximum(step, 2.0**-9) * s[r] * 1.01)


def test_static_quant_and_smooth_scale():
    x = np.array([[1.0, -1.0, 3.0, -3.0]], np.float32)
    g = np.ones(4, np.float32)
    sm = np.array([1.0, 2.0, 0.5, 1.0], np.float32)
    y = reference.layernorm(x, g, None, eps=0.0, quant="int8", smooth_scale=sm,
                            quant_scale=np.float32(0.01))
    # normalized: x / sqrt(5); times smooth; over 0.01; rounded and clamped
    want = np.clip(np.rint(x[0] / np.sqrt(5) * sm / np.float64(np.float32(0.01))), -128, 127)
    assert y.tolist() == [want.astype(np.int8).tolist()]


@pytest.mark.parametrize("n", [1, 7, 333])
def test_rmsnorm_matches_a_formula_by_hand(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * 3 + 10).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    y, _, _, mean, rstd = reference.rmsnorm(x, g, 1e-6, return_rstd=True)
    assert mean is None and rstd.dtype == np.float32
    for i in range(3):
        row = [float(v) for v in x[i]]
        r = 1 / math.sqrt(math.fsum(v * v for v in row) / n + 1e-6)
        want = [v * r * float(w) for v, w in zip(row, g)]
        np.testing.assert_array_equal(y[i], np.array(want, dtype=np.float32))
        assert rstd[i] == np.float32(r)


def test_layernorm_gamma_and_beta_none_mean_scale_one_and_shift_zero():
    x = np.linspace(-2, 3, 40, dtype=np.float32).reshape(2, 20).astype(np.float16)
    ones, zeros = np.ones(20, np.float16), np.zeros(20, np.float16)
    np.testing.assert_array_equal(reference.layernorm(x, None), reference.layernorm(x, ones, zeros))
    g = np.linspace(0.5, 2, 20).astype(np.float16)
    np.testing.assert_array_equal(reference.layernorm(x, None, g), reference.layernorm(x, ones, g))


def test_rmsnorm_gamma_none_and_weight_offset_in_float32():
    x = np.linspace(-2, 3, 40, dtype=np.float32).reshape(2, 20).astype(np.float16)
    np.testing.assert_array_equal(reference.rmsnorm(x), reference.rmsnorm(x, np.ones(20, np.float16)))
    # 1 + 2**-30 is 1 in float32: the offset is added in float32, as the kernel does
    g = np.full(20, 2.0**-30, dtype=np.float32)
    np.testing.assert_array_equal(reference.rmsnorm(x, g, weight_offset=1.0), reference.rmsnorm(x))
    g = np.full(20, 0.5, dtype=np.float32)
    np.testing.assert_array_equal(reference.rmsnorm(x, g, weight_offset=1.0),
                                  reference.rmsnorm(x, np.full(20, 1.5, np.float32)))


def test_rmsnorm_fusions_follow_the_layernorm_rules():
    rng = np.random.default_rng(5)
    x, r = (rng.standard_normal((4, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    g = rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    out = reference.rmsnorm(x, g, residual=r, quant="int8")
    h = reference.fused_input(x, r)
    np.testing.assert_array_equal(out.residual, h)
    y64 = reference.normalized("rmsnorm", h, g, None, 1e-6)
    codes, scales = reference.quantize(y64, "int8")
    np.testing.assert_array_equal(out.y, codes)
    np.testing.assert_array_equal(out.scale, scales)
