"""GPU, two devices: calls whose inputs are on device 1 while device 0 is current (CuPy
arrays and torch tensors) give the reference's results on device 1 and leave the current
device as it was; threads on both devices at once, each on a stream of its own, all give
the reference's results."""
from __future__ import annotations

import threading
from contextlib import nullcontext

import numpy as np
import pytest

import normgen
from normgen import reference
from normgen.spec import parse_name
from normgen.types import DType, NormOutput

from .gpu import default_registry  # noqa: F401 (autouse: each test from the shipped folder)
from .gpu import (
    cuda_torch,
    Case, Expected, call_args, case_seed, check_outputs, gpu_reason, make_inputs, requires_gpu, semantics,
)


def _device_count() -> int:
    if gpu_reason():
        return 0
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


pytestmark = [requires_gpu, pytest.mark.skipif(
    _device_count() < 2, reason=f"needs two GPUs; {_device_count()} visible")]

# calls as default instances serve them: (instance whose semantics the call has, N, M); the
# pipelines of registers, a stage, resident clusters (resident_clusters on device 1) and
# streamed rows over more rows than their grid holds, and two-pass
CALLS = (
    ("layernorm_fwd_bf16_nb4096_1p_v8_mv", 4096, 37),
    ("rmsnorm_fwd_bf16_add1_dqfp8_syfp32_nb8192_1p_v8", 8000, 19),
    ("layernorm_fwd_fp16_add1_smfp32_dqint8_syfp32_nb32768_1p_v8", 32768, 5),
    ("rmsnorm_fwd_bf16_sqint8_nb131072_1p_v8", 131072, 3),
    ("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8", 30000, 300),
    ("layernorm_fwd_fp32_2p_v4", 600000, 2),
)


def _expected_on(device: int, case: Case) -> Expected:
    """tests.gpu.expected's inputs made on `device` (not cached: the cache does not know
    devices) and their reference."""
    import cupy

    with cupy.cuda.Device(device):
        dev = make_inputs(case)
        host = {k: ({kk: cupy.asnumpy(a) for kk, a in v.items()} if isinstance(v, dict) else cupy.asnumpy(v))
                for k, v in dev.items()}
    fn, args, kw = call_args(case.call, host, case)
    ref = getattr(reference, fn)(*args, **kw)
    ref = ref if isinstance(ref, NormOutput) else NormOutput(ref)
    h = reference.fused_input(host["x"], kw.get("residual"), kw.get("x_bias"))
    y64 = reference.normalized(fn, h, args[1], args[2] if fn == "layernorm" else None, kw["eps"],
                               kw.get("weight_offset", 0.0))
    if "smooth_scale" in kw:
        y64 = y64 * kw["smooth_scale"].astype(np.float64)
    return Expected(dev, ref, y64)


def _cases(seed, calls=CALLS):
    for name, n, m in calls:
        call = semantics(parse_name(name))
        yield call, Case(call.x, call.w, n, m, "normal", 8, case_seed(seed, "two devices", name, n, m), call)


def _to_torch(a):
    """A CuPy array's memory as a torch tensor (bf16 through int16: one path whatever the
    DLPack support)."""
    import cupy
    import torch

    if a.dtype == DType.BF16.numpy:
        return torch.from_dlpack(a.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def _to_cupy(t):
    import cupy
    import torch

    if t.dtype == torch.bfloat16:
        return cupy.from_dlpack(t.view(torch.int16)).view(DType.BF16.numpy)
    if t.dtype == torch.float8_e4m3fn:
        return cupy.from_dlpack(t.view(torch.uint8))
    return cupy.from_dlpack(t)


def _torch_inputs(inputs: dict) -> dict:
    return {k: ({kk: _to_torch(a) for kk, a in v.items()} if isinstance(v, dict) else _to_torch(v))
            for k, v in inputs.items()}


def test_cupy_inputs_on_device_1_while_device_0_is_current(seed):
    import cupy

    for call, case in _cases(seed):
        e = _expected_on(1, case)
        fn, args, kw = call_args(call, e.inputs, case)
        what = f"{fn} N={case.n} M={case.m} ({call.name}) on device 1, seed {seed}"
        with cupy.cuda.Device(0):
            out = getattr(normgen, fn)(*args, **kw)
            assert cupy.cuda.runtime.getDevice() == 0, f"{what}: the current device changed"
        out = out if isinstance(out, NormOutput) else NormOutput(out)
        for name, v in zip(NormOutput._fields, out):
            assert v is None or v.device.id == 1, f"{what}: {name} on device {v.device.id}"
        with cupy.cuda.Device(1):
            check_outputs(call, case, e, out, what)


def test_torch_inputs_on_device_1_while_device_0_is_current(seed):
    torch = cuda_torch(2)
    import cupy

    for call, case in _cases(seed):
        e = _expected_on(1, case)
        fn, args, kw = call_args(call, _torch_inputs(e.inputs), case)
        what = f"{fn} N={case.n} M={case.m} ({call.name}) torch on cuda:1, seed {seed}"
        with torch.cuda.device(0), cupy.cuda.Device(0):
            out = getattr(normgen, fn)(*args, **kw)
            assert torch.cuda.current_device() == 0, f"{what}: torch's current device changed"
            assert cupy.cuda.runtime.getDevice() == 0, f"{what}: the current device changed"
        out = out if isinstance(out, NormOutput) else NormOutput(out)
        for name, v in zip(NormOutput._fields, out):
            assert v is None or (isinstance(v, torch.Tensor) and v.device.index == 1), f"{what}: {name} {v.device}"
        torch.cuda.synchronize(1)
        with cupy.cuda.Device(1):
            check_outputs(call, case, e, NormOutput(*(None if v is None else _to_cupy(v) for v in out)), what)


THREADS = 4  # two a device
ROUNDS = 10  # calls of each case per thread
THREAD_CALLS = tuple(c for c in CALLS if c[2] <= 40)  # the streamed rows' 300 left out: host-bound checks


def test_threads_on_both_devices_at_once(seed):
    """Four threads, two a device (one of them CuPy, the other torch where torch sees both
    devices), each on a stream of its own, call every case ROUNDS times, all at once."""
    import cupy

    try:
        torch = cuda_torch(2)
    except pytest.skip.Exception:
        torch = None
    plans = []  # (device, library, [(call, case, Expected, inputs)])
    for t in range(THREADS):
        device, lib = t % 2, "torch" if torch is not None and t >= 2 else "cupy"
        work = []
        for call, case in _cases(seed + t, THREAD_CALLS):
            e = _expected_on(device, case)
            work.append((call, case, e, _torch_inputs(e.inputs) if lib == "torch" else e.inputs))
        plans.append((device, lib, work))
    start = threading.Barrier(THREADS)
    failures: list = []
    calls = [0] * THREADS

    def worker(t: int) -> None:
        device, lib, work = plans[t]
        try:
            with cupy.cuda.Device(device):
                stream = cupy.cuda.Stream(non_blocking=True)
                tstream = torch.cuda.Stream(device=device) if lib == "torch" else None
                start.wait(timeout=120)
                with stream, (torch.cuda.stream(tstream) if tstream is not None else nullcontext()):
                    for r in range(ROUNDS):
                        for call, case, e, inputs in work:
                            fn, args, kw = call_args(call, inputs, case)
                            out = getattr(normgen, fn)(*args, **kw)
                            out = out if isinstance(out, NormOutput) else NormOutput(out)
                            if tstream is not None:
                                tstream.synchronize()
                                out = NormOutput(*(None if v is None else _to_cupy(v) for v in out))
                            check_outputs(call, case, e, out, f"thread {t} ({lib}, device {device}) round {r} "
                                                         f"{call.name} N={case.n} M={case.m} seed {seed}")
                            calls[t] += 1
        except BaseException as exc:  # reported by the main thread
            failures.append(f"thread {t}: {type(exc).__name__}: {exc}")
            start.abort()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, "\n".join(failures)
    assert calls == [ROUNDS * len(THREAD_CALLS)] * THREADS
