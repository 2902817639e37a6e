"""GPU test helpers: device detection, poisoned allocations, input cases and comparison."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest

from normgen import reference
from normgen.types import DType


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
    kind: str  # "normal": N(0,1) rows; "offset": 1000 + N(0,1) rows
    pad: int  # extra elements between rows (0: contiguous)
    seed: int


def make_inputs(case: Case):
    """Device inputs (x possibly a strided view), plus their exact host copies."""
    import cupy

    rng = cupy.random.default_rng(case.seed)
    full = rng.standard_normal((case.m, case.n + case.pad), dtype=cupy.float32)
    if case.kind == "offset":
        full += 1000
    x = full.astype(case.x.numpy)[:, : case.n]
    g = (1 + 0.5 * rng.standard_normal(case.n, dtype=cupy.float32)).astype(case.w.numpy)
    b = rng.standard_normal(case.n, dtype=cupy.float32).astype(case.w.numpy)
    return (x, g, b), (cupy.asnumpy(x), cupy.asnumpy(g), cupy.asnumpy(b))


@functools.lru_cache(maxsize=48)  # instances that share x/w precision share inputs
def expected(case: Case):
    """(device inputs, reference y on the device, reference mean and rstd on the host)."""
    import cupy

    dev, host = make_inputs(case)
    y, mean, rstd = reference.layernorm(*host, 1e-5, return_mean_rstd=True)
    return dev, cupy.asarray(y), mean, rstd


def _ordered(a, bits: int):
    """Float bit patterns mapped to integers that are consecutive for consecutive values."""
    import cupy

    i = a.view(cupy.int16 if bits == 16 else cupy.int32).astype(cupy.int64)
    top = 1 << (bits - 1)
    return cupy.where(i < 0, -(i + top), i)


def assert_close(y, ref, dtype: DType, what: str):
    """fp32: |y - ref| <= 1e-5 (|ref| + 1). fp16/bf16: every element within 1 ulp of the
    correctly rounded reference (or within 1e-5, which matters only next to zero), and
    nearly all exact: at most 1% + 3 elements 1 ulp off (fp32 arithmetic flips a rounding
    with probability ~1e-4 per element, so a 63-element row may show one)."""
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
    off = int((ulps == 1).sum())
    assert off <= 0.01 * y.size + 3, f"{what}: {off} of {y.size} elements 1 ulp off"


def assert_stats(mean, rstd, ref_mean, ref_rstd, what: str):
    import cupy

    np.testing.assert_allclose(cupy.asnumpy(mean), ref_mean, rtol=1e-5, atol=1e-6, err_msg=what)
    np.testing.assert_allclose(cupy.asnumpy(rstd), ref_rstd, rtol=1e-5, err_msg=what)
