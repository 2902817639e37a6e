"""GPU test helpers: device detection, poisoned allocations, input cases and comparison."""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from normgen import reference
from normgen.recipe import recipe
from normgen.spec import KernelSpec
from normgen.types import QMAX, QUANT_NAMES, DType, FusedAdd, Norm, NormOutput, Pipeline, Quant


@functools.cache
def gpu_reason() -> str:
    """Why GPU tests cannot run here, or '' when they can."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device, no cupy
        return f"no CUDA GPU ({type(e).__name__}: {e})"
    return "" if count else "no CUDA GPU (0 devices)"


requires_gpu = pytest.mark.skipif(bool(gpu_reason()), reason=gpu_reason() or "GPU present")


def cuda_torch(devices: int = 1):
    """torch, or a skip where it is missing or sees fewer than `devices` CUDA devices."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < devices:
        pytest.skip(f"torch sees fewer than {devices} CUDA device(s)")
    return torch


@pytest.fixture(autouse=True)
def default_registry():
    """Each test of a module that imports this starts from the shipped generated folder, with
    no plans or kernels kept from another test's folder."""
    from normgen import dispatch
    from normgen.paths import GENERATED

    dispatch.use_generated(GENERATED)
    yield


class poisoned_allocations:
    """Fill every CuPy allocation with 0xFF bytes (NaN for every float type) while active,
    so an output element the kernel fails to write cannot pass a comparison."""

    def __enter__(self):
        import cupy

        pool = cupy.get_default_memory_pool()

        def alloc(size):
            mem = pool.malloc(size)
            cupy.cuda.runtime.memsetAsync(mem.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
            return mem

        cupy.cuda.set_allocator(alloc)
        return self

    def __exit__(self, *exc):
        import cupy

        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


@dataclass(frozen=True)
class Case:
    x: DType
    w: DType
    n: int
    m: int
    kind: str  # see make_inputs
    pad: int  # extra elements between rows (0: contiguous)
    seed: int
    call: Optional[KernelSpec] = None  # the call's semantics (see semantics); None: plain LayerNorm
    weight_offset: float = 0.0  # RMSNorm: gamma + weight_offset
    gamma: bool = True  # RMSNorm: False passes gamma=None (no scale)
    lead: tuple[int, ...] = ()  # kind "lead": the columns given the lead (shift_columns)
    start: int = 0  # x's first column within its wider rows (at most pad): rows starting mid-vector


def shift_columns(spec: KernelSpec, n: int) -> tuple[int, ...]:
    """The columns of a row of n that LayerNorm's shifts are taken from (the template's
    warp_shift and Pilot): in rows held in registers by one block, the first vector of L
    evenly spaced lanes of each warp (of each row's T lanes where rows share a warp); in
    rows over a cluster and in ragged rows, the first 16 bytes (or vector). The two-pass pipeline's shift is
    the mean of its first chunk: all of that chunk's columns, so that the row is summed
    again around its mean."""
    t = recipe(spec).tile
    v = t.vec
    if spec.ragged:  # ragged_shift: the first vector's columns
        return tuple(range(min(n, v)))
    if spec.pipeline == Pipeline.TWO_PASS:
        return tuple(range(min(n, t.threads_per_row * v * t.repeat)))
    if not t.stage_bytes and t.cluster == 1:
        w = min(t.threads_per_row, 32)
        lanes = 1 if t.repeat == 1 else min(32 // v, w, 8)
        firsts = [s + k * w // lanes for s in range(0, t.threads_per_row, w) for k in range(lanes)]
    else:
        firsts = range(max(1, 16 // (v * spec.x.itemsize)))
    return tuple(c for f in firsts for c in range(f * v, f * v + v) if c < n)


def case_seed(seed: int, *what) -> int:
    """A case's own data seed: the run's seed mixed with what the case is (its N, M and
    kind, or its special kind), so that each case of a run draws different data."""
    return seed ^ zlib.crc32(",".join(map(str, what)).encode())


KINDS = ("normal", "offset")  # every instance, every shape
SPECIAL_KINDS = ("zero", "huge", "ties")  # fused instances, a few rows
LEAD = "lead"  # LayerNorm instances, a few rows at their largest N


def semantics(spec: KernelSpec) -> KernelSpec:
    """The spec with what does not change results (pipeline, bucket, vector width) fixed:
    instances with the same semantics share test data and references."""
    return spec.scalar_two_pass


EPS = {Norm.LAYERNORM: 1e-5, Norm.RMSNORM: 1e-6}


def call_args(spec: Optional[KernelSpec], inputs: dict, case: Optional[Case] = None
              ) -> tuple[str, tuple, dict]:
    """The function name (normgen's and the reference's) and the positional and keyword
    arguments of the call an instance serves (spec None: plain LayerNorm with its
    statistics), from a dict of inputs by name (device or host arrays)."""
    if spec is None:
        args = (inputs["x"], inputs["gamma"], inputs["beta"])
        return "layernorm", args, {"eps": EPS[Norm.LAYERNORM], "return_mean_rstd": True}
    kw: dict = {"eps": EPS[spec.norm]}
    if spec.norm == Norm.LAYERNORM:
        args = (inputs["x"], inputs["gamma"], inputs["beta"])
    else:
        args = (inputs["x"], inputs["gamma"] if case is None or case.gamma else None)
        if case is not None and case.weight_offset:
            kw["weight_offset"] = case.weight_offset
    if spec.fused_add != FusedAdd.NONE:
        kw["residual"] = inputs["residual"]
        kw["store_residual"] = spec.fused_add == FusedAdd.STORE
    if spec.x_bias:
        kw["x_bias"] = inputs["x_bias"]
    if spec.quant != Quant.NONE:
        kw["quant"] = QUANT_NAME[spec.out]
        if spec.quant == Quant.STATIC:
            kw["quant_scale"] = inputs["quant_scale"][spec.out]
        else:
            kw["scale_dtype"] = spec.scale.value
        if spec.smooth is not None:
            kw["smooth_scale"] = inputs["smooth_scale"][spec.smooth]
    if spec.save_stats:
        kw["return_mean_rstd" if spec.norm == Norm.LAYERNORM else "return_rstd"] = True
    return spec.norm.value, args, kw


QUANT_NAME = {dt: name for name, dt in QUANT_NAMES.items()}


def make_inputs(case: Case) -> dict:
    """Device inputs by name (x possibly a strided view of wider rows). Kinds: "normal"
    N(0,1) rows; "offset" 1000 + N(0,1); "zero" every other row all zero, with zero beta
    and x-bias (y == 0 there); "huge" one element per row 2e4; "ties" a residual of half an
    ulp of x in a third of the elements, so that h lands on rounding midpoints; "lead" 3000
    in the columns LayerNorm's shifts are taken from (case.lead: shift_columns), so that
    the shifts lie far from the mean."""
    import cupy

    rng = cupy.random.default_rng(case.seed)
    shape = (case.m, case.n + case.pad)
    full = rng.standard_normal(shape, dtype=cupy.float32)
    if case.kind == "offset":
        full += 1000
    res = rng.standard_normal(shape, dtype=cupy.float32)
    if case.kind == "huge":
        full[cupy.arange(case.m), rng.integers(0, case.n, case.m)] = 2e4
    if case.kind == LEAD:
        full[:, list(case.lead)] += 3000
    x = full.astype(case.x.numpy)
    r = res.astype(case.x.numpy)
    if case.kind == "ties":
        # half an ulp of x (a power of two, exact in x's precision), signed, in 1/3 of places
        xf = x.astype(cupy.float32)
        _, e = cupy.frexp(xf)
        half_ulp = cupy.ldexp(cupy.ones_like(xf), e - 1 - MANTISSA[case.x] - 1)
        pick = rng.integers(0, 3, shape) == 0
        sign = cupy.where(rng.integers(0, 2, shape) == 0, -1.0, 1.0).astype(cupy.float32)
        r = cupy.where(pick, sign * half_ulp, r.astype(cupy.float32)).astype(case.x.numpy)
    g = (1 + 0.5 * rng.standard_normal(case.n, dtype=cupy.float32)).astype(case.w.numpy)
    b = rng.standard_normal(case.n, dtype=cupy.float32).astype(case.w.numpy)
    xb = (0.5 * rng.standard_normal(case.n, dtype=cupy.float32)).astype(case.x.numpy)
    if case.kind == "zero":
        x[::2] = 0
        r[::2] = 0
        b[:] = 0
        xb[:] = 0
    sm = 0.5 + rng.random(case.n, dtype=cupy.float32)
    return {
        "x": x[:, case.start: case.start + case.n], "gamma": g, "beta": b, "residual": r[:, : case.n], "x_bias": xb,
        "smooth_scale": {dt: sm.astype(dt.numpy) for dt in (DType.FP32, DType.FP16, DType.BF16)},
        # static scales that let a few values saturate
        "quant_scale": {DType.INT8: cupy.asarray([3.0 / 127], cupy.float32),
                        DType.FP8: cupy.asarray([3.0 / 448], cupy.float32)},
    }


MANTISSA = {DType.FP32: 23, DType.FP16: 10, DType.BF16: 7}


def _host(v):
    import cupy

    if isinstance(v, dict):
        return {k: _host(a) for k, a in v.items()}
    return cupy.asnumpy(v)


@dataclass
class Expected:
    inputs: dict  # device arrays by name
    ref: NormOutput  # host arrays
    y64: Optional[np.ndarray]  # the float64 values before quantization (quant only)
    # |y64|'s terms: where LayerNorm's beta cancels the normalized value, y keeps the float32
    # rounding of the larger terms (quant only)
    terms64: Optional[np.ndarray] = None

    @property
    def xgb(self):
        return self.inputs["x"], self.inputs["gamma"], self.inputs["beta"]


def unrounded(case: Case, terms: bool = False):
    """The reference's float64 outputs of a case before rounding (and before quantization);
    terms: and their terms' magnitudes, |(h - mean) * rstd * gamma| + |beta| (smoothed)."""
    host = _host(make_inputs(case))
    fn, args, kw = call_args(case.call, host, case)
    h = reference.fused_input(host["x"], kw.get("residual"), kw.get("x_bias"))
    beta = args[2] if fn == "layernorm" else None
    y64 = reference.normalized(fn, h, args[1], beta, kw["eps"], kw.get("weight_offset", 0.0))
    t64 = np.abs(y64) if beta is None else (
        np.abs(reference.normalized(fn, h, args[1], None, kw["eps"])) + np.abs(np.asarray(beta, np.float64)))
    if "smooth_scale" in kw:
        sm = kw["smooth_scale"].astype(np.float64)
        y64, t64 = y64 * sm, t64 * np.abs(sm)
    return (y64, t64) if terms else y64


@functools.lru_cache(maxsize=48)  # instances that share precisions and fusions share them
def expected(case: Case) -> Expected:
    dev = make_inputs(case)
    host = _host(dev)
    fn, args, kw = call_args(case.call, host, case)
    ref = getattr(reference, fn)(*args, **kw)
    if not isinstance(ref, NormOutput):
        ref = NormOutput(ref)
    y64 = t64 = None
    if case.call is not None and case.call.quant != Quant.NONE:
        y64, t64 = unrounded(case, terms=True)
    return Expected(dev, ref, y64, t64)


def _ordered(a, bits: int):
    """Float bit patterns mapped to integers that are consecutive for consecutive values."""
    import cupy

    i = a.view(cupy.int16 if bits == 16 else cupy.int32).astype(cupy.int64)
    top = 1 << (bits - 1)
    return cupy.where(i < 0, -(i + top), i)


def assert_close(y, ref, dtype: DType, what: str, exact=None):
    """fp32: |y - ref| <= 1e-5 (|ref| + 1). fp16/bf16: every element within 1 ulp of the
    correctly rounded reference (or within 1e-5, which matters only next to zero); an
    element 1 ulp off only where fp32 arithmetic may round either way. With `exact` (a
    function giving the reference's float64 values before rounding): its value lies within
    1e-5 (|value| + 1) of the midpoint between the two neighbours, as an fp32 result may.
    Without: at most 1% + 3 elements (fp32 arithmetic flips a rounding with probability
    ~1e-4 per element on random data; inputs of few distinct values, such as 16-bit rows
    with a large offset, repeat the same outputs, so one flip can recur in many rows)."""
    import cupy

    assert y.shape == ref.shape and y.dtype == ref.dtype, what
    y64, r64 = y.astype(cupy.float64), ref.astype(cupy.float64)
    assert not bool(cupy.isnan(y64).any()), f"{what}: NaN in the output (an unwritten element?)"
    err = cupy.abs(y64 - r64)
    if dtype == DType.FP32:
        worst = float((err / (cupy.abs(r64) + 1)).max()) if y.size else 0.0
        assert worst <= 1e-5, f"{what}: relative error {worst:.3g} > 1e-5"
        return
    ulps = cupy.abs(_ordered(y, 16) - _ordered(ref, 16))
    bad = (ulps > 1) & (err > 1e-5)
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} elements more than 1 ulp off, worst {int(ulps.max())} ulp")
    off = ulps == 1
    if exact is None:
        assert int(off.sum()) <= 0.01 * y.size + 3, f"{what}: {int(off.sum())} of {y.size} elements 1 ulp off"
    elif bool(off.any()):
        e64 = cupy.asarray(exact())
        far = off & (cupy.abs(e64 - (y64 + r64) / 2) > 1e-5 * (cupy.abs(e64) + 1))
        assert not bool(far.any()), (
            f"{what}: {int(far.sum())} of {int(off.sum())} elements 1 ulp off away from a rounding midpoint")


def assert_stats(mean, rstd, ref_mean, ref_rstd, what: str):
    """mean (None for RMSNorm) and rstd against the reference's."""
    import cupy

    if ref_mean is None:
        assert mean is None, what
    else:
        np.testing.assert_allclose(cupy.asnumpy(mean), ref_mean, rtol=1e-5, atol=1e-6, err_msg=what)
    np.testing.assert_allclose(cupy.asnumpy(rstd), ref_rstd, rtol=1e-5, err_msg=what)


def assert_bits_equal(a, ref, what: str):
    """Bit-identical (NaN, e.g. an unwritten element, never equals)."""
    import cupy

    ref = cupy.asarray(ref)
    assert a.shape == ref.shape, what
    bits = {1: cupy.uint8, 2: cupy.uint16, 4: cupy.uint32}[a.dtype.itemsize]
    same = a.view(bits) == ref.view(bits)
    assert bool(same.all()), f"{what}: {int((~same).sum())} of {a.size} elements differ"


def _code_index(codes: np.ndarray, out: DType) -> np.ndarray:
    """Quantized codes as integers that are consecutive for consecutive code values."""
    if out == DType.INT8:
        return codes.astype(np.int64)
    i = codes.view(np.uint8).astype(np.int64)
    return np.where(i & 0x80, -(i & 0x7F), i)


def _near_midpoint(v: np.ndarray, out: DType, within: float = 1e-3) -> np.ndarray:
    """Where v lies within `within` (in units of y / scale, as the int8 rule counts) of a
    rounding midpoint between two codes. For fp8 the codes' spacing varies; near zero it is
    far below 1, so the rule is absolute, as for int8: y's own error there is absolute (y
    near zero comes from cancellation of terms of the row's magnitude)."""
    if out == DType.INT8:
        mid = np.floor(v) + 0.5
    else:  # e4m3: 3 mantissa bits, smallest normal exponent -6
        _, e = np.frexp(v)
        quantum = np.ldexp(1.0, np.maximum(e - 1, -6) - 3)
        mid = (np.floor(v / quantum) + 0.5) * quantum
    return np.abs(v - mid) <= within


def assert_codes(q, v: np.ndarray, out: DType, what: str):
    """Quantized codes q (device) against the exact values v = y / scale (host float64):
    equal to v rounded (half to even, saturating), except within 1e-3 of a midpoint
    between two codes, where they may be either neighbour."""
    import cupy

    qmax = QMAX[out]
    want = reference.quantize_values(v, QUANT_NAME[out])
    got = cupy.asnumpy(q).view(out.numpy) if out == DType.FP8 else cupy.asnumpy(q)
    assert got.shape == want.shape, what
    if out == DType.FP8:
        assert not np.isnan(got.astype(np.float32)).any(), f"{what}: NaN codes (unwritten?)"
    diff = np.abs(_code_index(got, out) - _code_index(want, out))
    # int8 values saturate at -128 and 127, so -127.5 is a midpoint; fp8 ones at +-448
    loose = _near_midpoint(v if out == DType.INT8 else np.clip(v, -qmax, qmax), out)
    bad = (diff > 1) | ((diff == 1) & ~loose)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {v.size} codes differ, e.g. got {got[bad][:4]} want "
        f"{want[bad][:4]} for y/scale = {v[bad][:4]}")


def assert_scales(s, ref: np.ndarray, what: str, terms: Optional[np.ndarray] = None):
    """Per-row scales against the reference's: float32 scales within 2**-20 (8 ulp)
    relative to the larger of the scale and the row's largest |terms| / qmax (terms: the
    magnitudes of y's terms, Expected.terms64; in a row where beta cancels the normalized
    values, y keeps their rounding), 16-bit ones within 1 ulp of their precision. A scale is
    absmax(y) / qmax of the kernel's float32 y, and y carries the error of float32
    statistics and of the normalize chain (a few ulp: rstd from float32 sums, then three
    roundings); rounded to 16 bits, that error flips at most one rounding."""
    import cupy

    got = cupy.asnumpy(s)
    assert got.shape == ref.shape and got.dtype == ref.dtype, what
    g64, r64 = got.astype(np.float64), ref.astype(np.float64)
    assert np.isfinite(g64).all() and (g64 > 0).all(), f"{what}: scales must be finite and positive"
    if got.dtype == np.float32:
        unit = r64
        if terms is not None:  # the row's largest term, per row
            unit = np.maximum(r64, terms.reshape(r64.shape + terms.shape[-1:]).max(axis=-1, initial=0.0))
        worst = float((np.abs(g64 - r64) / unit).max()) if got.size else 0.0
        assert worst <= 2**-20, f"{what}: scales {worst:.3g} relative from the reference's"
        return
    uint = np.uint16  # positive 16-bit floats: bit patterns count ulps
    worst = int(np.abs(got.view(uint).astype(np.int64) - ref.view(uint).astype(np.int64)).max()) if got.size else 0
    assert worst <= 1, f"{what}: scales {worst} ulp from the reference's"


def check_call(call: KernelSpec, case: Case, e: Expected, what: str, allocations=poisoned_allocations) -> None:
    """Make the call a case describes (its semantics: call), into poisoned allocations (made
    by the `allocations` context manager), and check its outputs (check_outputs)."""
    import normgen

    fn, args, kw = call_args(call, e.inputs, case)
    with allocations():
        out = getattr(normgen, fn)(*args, **kw)
    check_outputs(call, case, e, out if isinstance(out, NormOutput) else NormOutput(out), what)


def check_outputs(call: KernelSpec, case: Case, e: Expected, out: NormOutput, what: str) -> None:
    """Every output of a call against the reference, on the outputs' device (the current
    one): y within the tolerances above, codes given the scales, scales, the stored residual
    bit for bit, the statistics."""
    import cupy

    ref = e.ref
    if call.quant == Quant.NONE:
        assert_close(out.y, cupy.asarray(ref.y), call.x, what, exact=lambda: unrounded(case))
    else:
        if call.quant == Quant.DYNAMIC:
            assert_scales(out.scale, ref.scale, what, None if e.terms64 is None else e.terms64 / QMAX[call.out])
            scale = cupy.asnumpy(out.scale).astype(np.float64)[..., None]  # codes given the scale
        else:
            scale = float(cupy.asnumpy(e.inputs["quant_scale"][call.out])[0])
        assert_codes(out.y, e.y64 / scale, call.out, what)
    if call.fused_add == FusedAdd.STORE:
        assert_bits_equal(out.residual, ref.residual, what + " residual")
    else:
        assert out.residual is None, what
    if call.save_stats:
        assert out.rstd.shape == (case.m,), what
        if call.norm == Norm.RMSNORM:
            assert out.mean is None, what
        assert_stats(out.mean, out.rstd, ref.mean, ref.rstd, what)
