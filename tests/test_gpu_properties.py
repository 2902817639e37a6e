"""GPU property tests (hypothesis): drawn calls of normgen.layernorm / rmsnorm against the
reference, every output (tests/strategies.check_case under tests/gpu.py's tolerances),
rows holding NaN or inf beside clean ones, and bad calls refused with a TypeError or
ValueError naming the argument (strategies.check_bad), on CuPy arrays and torch CUDA
tensors.

The profile comes from NORMGEN_HYPOTHESIS_PROFILE: 'dev' by default (about 105 examples),
'gpu' for the full run (about 10,500). Options are drawn from strategies.POOL with three
classes of N each, so a run compiles a bounded set of instances (test_properties counts
them). The full run, keeping its examples under $OUT:

    NORMGEN_HYPOTHESIS_PROFILE=gpu HYPOTHESIS_DATABASE_DIR=$OUT/hypothesis \\
        python -m pytest -q -p no:cacheprovider tests/test_gpu_properties.py

(with -n 4, pytest-xdist runs its four tests side by side, each worker compiling what it
uses). At the end the examples run and the distinct instances the calls took are printed and
written to $OUT/hypothesis-gpu-summary*.json. An example that leaves the device unusable
(a sticky CUDA error) ends the process, naming the example (stderr and
$OUT/hypothesis-gpu-fatal.txt); one running past HANG_S too (tracebacks on stderr, the
example in $OUT/hypothesis-gpu-current.txt)."""
from __future__ import annotations

import collections
import faulthandler
import functools
import json
import os
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import normgen
from normgen import arrays, dispatch
from normgen.types import DType

from .gpu import poisoned_allocations, requires_gpu
from .strategies import GPU_PROFILE, bad_calls, check_bad, check_case, gpu_cases, gpu_settings, placed

pytestmark = requires_gpu

HANG_S = 180  # one example: a compile, a call, the reference; far less than this
COUNTS: collections.Counter = collections.Counter()  # examples run per test (shrinks included)


@functools.cache
def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@functools.cache
def _libs() -> tuple[str, ...]:
    return ("cupy", "torch", "mixed") if _torch_cuda() else ("cupy",)


@functools.cache
def _devices() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


class Cuda:
    """A backend for strategies.check_case / check_bad: CuPy arrays, torch CUDA tensors."""

    launches_faults = True  # a launch on bad memory faults the device (see make_bad)

    def __init__(self):
        import cupy

        self.cupy = self.xp = cupy
        self.torch = _torch_cuda()

    def _torch_dtype(self, dt):
        t = self.torch
        return {np.dtype(np.float32): t.float32, np.dtype(np.float16): t.float16,
                np.dtype(ml_dtypes.bfloat16): t.bfloat16, np.dtype(np.float64): t.float64, np.dtype(np.int8): t.int8,
                np.dtype(np.int16): t.int16, np.dtype(np.int32): t.int32, np.dtype(np.uint8): t.uint8,
                np.dtype(np.bool_): t.bool, np.dtype(np.complex64): t.complex64}[np.dtype(dt)]

    def place(self, host, layout, lib, device=None):
        """`host` at `layout` in a buffer of its own (gaps poisoned: strategies.placed)."""
        buf = placed(host, layout)
        isz, dev = buf.dtype.itemsize, device or 0
        if lib == "torch":
            t = self.torch.from_numpy(buf.view(_INT[isz])).to(f"cuda:{dev}").view(self._torch_dtype(buf.dtype))
            return self.torch.as_strided(t, layout.shape, layout.strides, layout.offset)
        assert lib == "cupy", lib
        with self.cupy.cuda.Device(dev):
            d = self.cupy.asarray(buf)
            return self.cupy.lib.stride_tricks.as_strided(d[layout.offset:], layout.shape,
                                                          tuple(s * isz for s in layout.strides))

    def raw(self, dtype, shape, byte_strides, byte_offset, lib):
        """A CuPy view of byte strides and offset (torch cannot make one)."""
        assert lib == "cupy", lib
        extent = sum((d - 1) * s for d, s in zip(shape, byte_strides)) if all(shape) else 0
        mem = self.cupy.zeros(byte_offset + extent + np.dtype(dtype).itemsize, self.cupy.uint8)
        return self.cupy.ndarray(shape, dtype, memptr=mem.data + byte_offset, strides=byte_strides)

    def call(self, fn, kw):
        with poisoned_allocations(), warnings.catch_warnings():
            warnings.simplefilter("ignore", normgen.NormgenWarning)
            _recorder().active = True
            try:
                out = getattr(normgen, fn)(**kw)
            finally:
                _recorder().active = False
        self.cupy.cuda.runtime.deviceSynchronize()
        return out

    def describe(self, a):
        if isinstance(a, self.cupy.ndarray):
            return "cupy", a.dtype, a.shape
        if self.torch is not None and isinstance(a, self.torch.Tensor):
            return ("torch" if a.is_cuda else "torch on the host"), a.dtype, tuple(a.shape)
        return type(a).__name__, None, None

    def dtype(self, lib, dt: DType):
        if lib == "torch":
            t = self.torch
            return {DType.FP32: t.float32, DType.FP16: t.float16, DType.BF16: t.bfloat16, DType.INT8: t.int8,
                    DType.FP8: t.float8_e4m3fn}[dt]
        return np.dtype(arrays._CUPY_DTYPES.get(dt, dt.numpy))

    def canonical(self, a):
        """A CuPy array of a's bits as CuPy outputs have them (fp8 as uint8)."""
        if isinstance(a, self.cupy.ndarray):
            return a
        t = self.torch
        a = a.contiguous()
        host = a.view({1: t.uint8, 2: t.int16, 4: t.int32}[a.element_size()]).cpu().numpy()
        kind = {t.float32: np.float32, t.float16: np.float16, t.bfloat16: ml_dtypes.bfloat16, t.int8: np.int8,
                t.float8_e4m3fn: np.uint8}[a.dtype]
        return self.cupy.asarray(host.view(kind))

    def take(self, a, idx):
        return a[self.cupy.asarray(idx)]

    def host(self, a):
        return self.cupy.asnumpy(a)

    def comparing(self):
        return nullcontext()


class _Recorder(dict):
    """dispatch._kernels, noting the instance each kernel a property test's call takes
    belongs to (a call's plan, made once per signature, looks its kernel up here)."""

    def __init__(self, kernels):
        super().__init__(kernels)
        self.active = False
        self.names: set = set()

    def get(self, key, default=None):
        kernel = super().get(key, default)
        if self.active and kernel is not None:
            self.names.add(kernel.spec.name)
        return kernel

    def __setitem__(self, key, kernel):
        super().__setitem__(key, kernel)
        if self.active:
            self.names.add(kernel.spec.name)


def _recorder() -> _Recorder:
    k = dispatch._kernels
    return k if isinstance(k, _Recorder) else _Recorder({})  # (a stray one when not installed)


def _out_file(name: str) -> Path | None:
    out = os.environ.get("OUT")
    return Path(out) / name if out else None


@pytest.fixture(scope="session")
def gpu_run(request):
    """Counts the examples and the instances, and reports them when the test run ends."""
    saved = dispatch._kernels
    recorder = dispatch._kernels = _Recorder(saved)
    dispatch._plans.clear()  # every signature planned afresh: each lookup is seen
    start = time.monotonic()
    yield recorder
    if dispatch._kernels is recorder:
        dispatch._kernels = saved
        saved.update(recorder)
    total = sum(COUNTS.values())
    line = (f"hypothesis GPU properties (profile {GPU_PROFILE}): {total} examples "
            f"({', '.join(f'{k} {v}' for k, v in sorted(COUNTS.items()))}), "
            f"{len(recorder.names)} distinct instances, {time.monotonic() - start:.0f} s")
    worker = os.environ.get("PYTEST_XDIST_WORKER") or request.config.getoption("--shard", "").replace("/", "of")
    path = _out_file(f"hypothesis-gpu-summary{'-' + worker if worker else ''}.json")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"profile": GPU_PROFILE, "examples": dict(COUNTS), "total": total,
                                    "instances": sorted(recorder.names),
                                    "seconds": round(time.monotonic() - start, 1)}, indent=1))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line, file=sys.__stderr__)


def _device_broken(what) -> None:
    """After a failed example: end the process if the device is no longer usable."""
    import cupy

    try:
        cupy.cuda.runtime.deviceSynchronize()
        float(cupy.ones(4).sum())
    except Exception as e:  # noqa: BLE001 (any error here means the context is gone)
        message = f"the device is unusable after this example ({type(e).__name__}: {e}):\n{what!r}\n"
        path = _out_file("hypothesis-gpu-fatal.txt")
        if path is not None:
            path.write_text(message)
        sys.__stderr__.write(message)
        sys.__stderr__.flush()
        os._exit(3)


def _run(test: str, what, check) -> None:
    COUNTS[test] += 1
    path = _out_file("hypothesis-gpu-current.txt")
    if path is not None:
        path.write_text(f"{test}: {what!r}\n")
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        check()
    except Exception:
        _device_broken(what)
        raise
    finally:
        faulthandler.cancel_dump_traceback_later()


@given(case=st.deferred(lambda: gpu_cases("layernorm", _libs())))
@gpu_settings(1.4)
def test_layernorm_calls_match_the_reference(gpu_run, case):
    _run("layernorm", case, lambda: check_case(case, Cuda()))


@given(case=st.deferred(lambda: gpu_cases("rmsnorm", _libs())))
@gpu_settings(1.4)
def test_rmsnorm_calls_match_the_reference(gpu_run, case):
    _run("rmsnorm", case, lambda: check_case(case, Cuda()))


@given(case=st.deferred(lambda: st.one_of(gpu_cases("layernorm", _libs(), nonfinite=True),
                                          gpu_cases("rmsnorm", _libs(), nonfinite=True))))
@gpu_settings(0.4)
def test_rows_with_nan_or_inf_leave_the_other_rows_alone(gpu_run, case):
    """A NaN or inf in one row: NaN in that row's outputs where the reference has NaN, and
    every other row as without it."""
    _run("nonfinite", case, lambda: check_case(case, Cuda()))


@given(bad=st.deferred(lambda: bad_calls(_libs(), other_device=_devices() > 1)))
@gpu_settings(1.0)
def test_bad_calls_are_refused_naming_the_argument(gpu_run, bad):
    _run("bad", bad, lambda: check_bad(bad, Cuda()))
