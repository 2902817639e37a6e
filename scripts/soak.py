#!/usr/bin/env python3
"""The soak: random valid calls on several threads and streams, every result checked.

Threads on several streams call normgen with random valid configurations for a while, every
result checked against the float64 reference, while a sampler records the GPU memory in use
and the dispatcher's caches.

    python3 scripts/soak.py [--minutes 10] [--threads 6] [--configs 48] [--out DIR] [--seed S]

Configurations: a finite pool (--configs) drawn at the start from the seed: LayerNorm and
RMSNorm; fp32/fp16/bf16 rows; gamma and beta of x's precision, fp32 or None; RMSNorm's
weight_offset; a residual stored or not; an x-bias; int8/fp8 dynamic (with each scale
precision) or static quant, with or without a smooth scale; mean/rstd; N from the buckets
and odd widths, M from 1 to a few hundred (at most 2^21 elements); rows strided, starting
off 16 bytes, or as (2, M/2, N); CuPy arrays and torch tensors. Each configuration gets its
inputs and reference once; each call makes new outputs (CuPy's allocations filled with 0xFF
first, torch's outputs filled so after their check, so that an element a kernel leaves
unwritten cannot pass as an earlier call's). Checks are tests/gpu.py's. Instances are
compiled ahead (normgen's ahead-of-time build over the instances the dispatcher will pick),
then each configuration is called once (warm-up) before the timed soak. NormgenWarning is
silenced.

Every --sample-seconds the sampler pauses the workers between calls (they wait at a
barrier), synchronizes the device and records: device memory in use (memGetInfo), CuPy's
pool (used and total bytes), torch's allocated and reserved bytes, the process's resident
memory, and the sizes of dispatch._plans, dispatch._kernels, runtime._loaded and
runtime._module's cache.

It fails (exit 1) where a result is wrong, an exception escapes a call or a thread, a
cache holds more entries than there are configurations (each cache is keyed by what a
configuration fixes, so its size is bounded by their number), or a quantity grows: over the
timed soak's samples, the maximum over the last third exceeds the maximum over the middle
third by more than a margin (the first third is left to settle). Margins: 1 MiB for the
bytes live between calls (CuPy's pool in use, torch's allocated), which hold only the
configurations' inputs and references once the workers are paused; 256 MiB or 10% for what
caches and high-water marks hold (device memory in use, CuPy's pool total, torch's
reserved, resident memory), which coincidences of large calls on several threads raise.
Fewer than six samples judge nothing ("inconclusive", not a failure). The summary is printed
last and written to DIR/soak.json, the samples to DIR/soak_samples.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from normgen import dispatch, reference  # noqa: E402
from normgen.spec import KernelSpec  # noqa: E402
from normgen.types import QUANT_NAMES, DType, FusedAdd, Norm, NormOutput, Quant  # noqa: E402

# ---- configurations ----------------------------------------------------------------------------
N_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
N_ODD = (1, 3, 7, 100, 1000, 1023, 1025, 2050, 4095, 5000, 12289, 40000, 100003)
M_CHOICES = (1, 2, 3, 5, 8, 17, 64, 200)
ELEMENTS = 1 << 21  # at most M x N elements a call
PADS = (0, 0, 8, 3)  # elements between rows
OFFSETS = (0, 0, 0, 1, 3)  # elements before the first row: 1 and 3 leave it off 16 bytes
SCALE_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}  # API name -> reference's


@dataclass(frozen=True)
class Config:
    norm: Norm
    x: DType
    gamma: Optional[DType]  # None: no gamma
    beta: Optional[DType]  # LayerNorm's; None: no beta
    weight_offset: float  # RMSNorm with gamma
    residual: FusedAdd  # NONE, STORE (store_residual=True), NO_STORE
    x_bias: bool
    quant: Optional[str]  # None, "int8", "fp8_e4m3"
    static: bool  # quant_scale given
    smooth: Optional[DType]
    scale_dtype: Optional[str]  # dynamic quant: None (the default, float32) or an API name
    stats: bool
    n: int
    m: int
    pad: int
    offset: int
    lead: bool  # x as (2, m // 2, n)
    shift: float  # added to x's values: rows far from zero
    lib: str  # "cupy" or "torch"
    eps: float

    def describe(self) -> str:
        parts = [self.norm.value, self.x.value, f"N={self.n}", f"M={self.m}", self.lib]
        parts.append(f"gamma={self.gamma.value if self.gamma else None}")
        if self.norm == Norm.LAYERNORM:
            parts.append(f"beta={self.beta.value if self.beta else None}")
        if self.weight_offset:
            parts.append(f"weight_offset={self.weight_offset}")
        if self.residual != FusedAdd.NONE:
            parts.append(f"residual(store={self.residual == FusedAdd.STORE})")
        if self.x_bias:
            parts.append("x_bias")
        if self.quant:
            parts.append(f"{self.quant} {'static' if self.static else 'dynamic'}"
                         + (f" scale={self.scale_dtype}" if self.scale_dtype else ""))
        if self.smooth:
            parts.append(f"smooth={self.smooth.value}")
        if self.stats:
            parts.append("stats")
        parts.append(f"pad={self.pad} offset={self.offset}" + (" lead" if self.lead else "")
                     + (f" shift={self.shift:g}" if self.shift else "") + f" eps={self.eps:g}")
        return " ".join(parts)


def draw_config(rng: random.Random, libs=("cupy", "torch")) -> Config:
    """One random configuration that normgen accepts."""
    norm = rng.choice((Norm.LAYERNORM, Norm.RMSNORM))
    x = rng.choice((DType.FP32, DType.FP16, DType.BF16))
    w = rng.choice((x, x, DType.FP32))  # the weights' precision, where there are weights
    gamma = rng.choice((w, w, w, None))
    beta = rng.choice((w, w, None)) if norm == Norm.LAYERNORM else None
    weight_offset = rng.choice((0.0, 0.0, 1.0)) if norm == Norm.RMSNORM and gamma else 0.0
    quant = rng.choice((None, None, "int8", "fp8_e4m3"))
    static = bool(quant) and rng.random() < 0.4
    smooth = rng.choice((None, None, DType.FP32, DType.FP16, DType.BF16)) if quant else None
    scale_dtype = rng.choice((None, "float32", "float16", "bfloat16")) if quant and not static else None
    n = rng.choice(N_BUCKETS + N_ODD)
    m = min(rng.choice(M_CHOICES), max(1, ELEMENTS // n))
    lead = m >= 2 and m % 2 == 0 and rng.random() < 0.25
    return Config(norm, x, gamma, beta, weight_offset, rng.choice((FusedAdd.NONE, FusedAdd.NONE, FusedAdd.STORE,
                  FusedAdd.NO_STORE)), rng.random() < 0.25, quant, static, smooth, scale_dtype,
                  rng.random() < 0.3, n, m, rng.choice(PADS), rng.choice(OFFSETS), lead,
                  rng.choice((0.0, 0.0, 1000.0)), rng.choice(libs), rng.choice((1e-5, 1e-6)))


def draw_configs(seed: int, count: int, libs=("cupy", "torch")) -> list[Config]:
    """`count` distinct configurations (fewer only if the draws keep repeating), in draw order."""
    rng = random.Random(seed)
    seen: dict = {}
    for _ in range(count * 20):
        if len(seen) == count:
            break
        seen.setdefault(draw_config(rng, libs), None)
    return list(seen)


def vec_align(c: Config) -> int:
    """The dispatcher's vector width bound for c (dispatch._vec_align): N, the row stride
    and the first row's offset in elements (allocations start 512-byte aligned; the
    residual is laid out as x; the per-column vectors are whole allocations, aligned for
    16-byte vectors)."""
    bits = c.n | (c.n + c.pad) | c.offset
    return min(bits & -bits, 16 // c.x.itemsize)


def call_key(c: Config, device: int = 0) -> dispatch.CallKey:
    """The key dispatch._plan files the kernel of a call of c under (dispatch._kernels)."""
    out = QUANT_NAMES[c.quant] if c.quant else c.x
    mode = Quant.NONE if not c.quant else Quant.STATIC if c.static else Quant.DYNAMIC
    sdt = DType(SCALE_DTYPES[c.scale_dtype or "float32"]) if mode == Quant.DYNAMIC else None
    w = c.gamma or c.beta
    return dispatch.CallKey(device, c.n, vec_align(c), 16 // c.x.itemsize, c.norm, c.x, w, out, c.residual, c.x_bias, mode,
                            c.smooth if c.quant else None, sdt, c.stats)


def planned_instance(c: Config, dev) -> KernelSpec:
    """The instance the dispatcher serves c with on `dev` (dispatch.instance_for's choice,
    without generating anything): the first shipped candidate, else the best candidate."""
    return dispatch.chosen(call_key(c), dev)[0]


# ---- the growth verdict ------------------------------------------------------------------------
MIB = 1 << 20
LIVE = ("pool_used", "torch_allocated")  # bytes live between calls
HELD = ("device_used", "pool_total", "torch_reserved", "host_rss")  # caches and high-water marks
MARGINS = {**{q: (1 * MIB, 0.0) for q in LIVE}, **{q: (256 * MIB, 0.10) for q in HELD}}
CACHES = ("plans", "kernels", "loaded", "modules")


def growth(series, floor: float, rel: float) -> dict:
    """Whether a sampled quantity grows: the maximum over the last third of the samples
    exceeds the maximum over the middle third by more than max(floor, rel x that maximum).
    grows is None (inconclusive) under six samples."""
    values = [v for v in series if v is not None]
    k = len(values)
    if k < 6:
        return {"grows": None, "samples": k, "why": f"{k} samples: too few to judge"}
    middle, last = values[k // 3: 2 * k // 3], values[2 * k // 3:]
    m_max, l_max = max(middle), max(last)
    margin = max(floor, rel * m_max)
    return {"grows": l_max > m_max + margin, "samples": k, "middle_max": m_max, "last_max": l_max,
            "margin": margin}


def cache_bound(samples: list[dict], bound: int) -> dict:
    """Each cache's largest sampled size, and whether it stayed within `bound` (the number
    of configurations: each cache is keyed by what one configuration fixes)."""
    peaks = {q: max((s[q] for s in samples), default=0) for q in CACHES}
    return {"bound": bound, "peaks": peaks, "within": all(v <= bound for v in peaks.values())}


# ---- device side -----------------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _to_cupy(a):
    """A torch tensor's memory as a CuPy array (bf16 and fp8 through integer views)."""
    import cupy

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(a, torch.Tensor):
        return a
    if a.dtype == torch.bfloat16:
        return cupy.from_dlpack(a.view(torch.int16)).view(DType.BF16.numpy)
    if a.dtype == torch.float8_e4m3fn:
        return cupy.from_dlpack(a.view(torch.uint8))
    return cupy.from_dlpack(a)


def _host(a) -> np.ndarray:
    import cupy

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return cupy.asnumpy(_to_cupy(a))
    return cupy.asnumpy(a)


@dataclass
class Prepared:
    inputs: dict  # name -> device array (the configuration's library)
    host: dict  # name -> host array of the same values
    ref: NormOutput
    y64: np.ndarray  # float64 values before rounding (times the smooth scale)
    ref_y: object  # ref.y on the device (CuPy), unquantized calls


def _rows(lib, np_values: np.ndarray, c: Config, dtype: DType):
    """x-like rows: a flat buffer of offset + M (N + pad) elements viewed as (M, N) rows
    (or (2, M/2, N)), on the device and, same values, on the host."""
    flat = _device(lib, np_values, dtype)
    host_flat = _host(flat)
    shape = (2, c.m // 2, c.n + c.pad) if c.lead else (c.m, c.n + c.pad)
    body = slice(c.offset, c.offset + c.m * (c.n + c.pad))
    return flat[body].reshape(shape)[..., :c.n], host_flat[body].reshape(shape)[..., :c.n]


def _device(lib, np_values: np.ndarray, dtype: DType):
    import cupy

    a = cupy.asarray(np_values.astype(np.float32)).astype(dtype.numpy)
    if lib == "cupy":
        return a
    import torch

    if dtype == DType.BF16:  # through the bits: one path whatever the DLPack support for bf16
        t = torch.from_dlpack(a.view(cupy.int16)).view(torch.bfloat16).clone()
    else:
        t = torch.from_dlpack(a).clone()
    torch.cuda.synchronize()  # the copy done before CuPy's buffer goes back to its pool
    return t


def prepare(c: Config, seed: int) -> Prepared:
    import cupy

    rng = np.random.default_rng(seed)
    count = c.offset + c.m * (c.n + c.pad)
    inputs, host = {}, {}
    inputs["x"], host["x"] = _rows(c.lib, rng.standard_normal(count) + c.shift, c, c.x)
    if c.residual != FusedAdd.NONE:
        inputs["residual"], host["residual"] = _rows(c.lib, rng.standard_normal(count), c, c.x)
    columns = {"gamma": (c.gamma, 1 + 0.5 * rng.standard_normal(c.n)), "beta": (c.beta, rng.standard_normal(c.n)),
               "x_bias": (c.x if c.x_bias else None, 0.5 * rng.standard_normal(c.n)),
               "smooth_scale": (c.smooth, 0.5 + rng.random(c.n))}
    for name, (dt, values) in columns.items():
        if dt is not None:
            inputs[name] = _device(c.lib, values, dt)
            host[name] = _host(inputs[name])
    if c.static:
        qs = np.asarray([3.0 / (127 if c.quant == "int8" else 448)], np.float32)
        inputs["quant_scale"], host["quant_scale"] = _device(c.lib, qs, DType.FP32), qs
    cupy.cuda.Device().synchronize()
    if c.lib == "torch":
        sys.modules["torch"].cuda.synchronize()
    fn = getattr(reference, c.norm.value)
    args = (host["x"], host.get("gamma")) + ((host.get("beta"),) if c.norm == Norm.LAYERNORM else ())
    kw = dict(residual=host.get("residual"), store_residual=c.residual == FusedAdd.STORE, x_bias=host.get("x_bias"),
              quant=c.quant, smooth_scale=host.get("smooth_scale"), quant_scale=host.get("quant_scale"),
              scale_dtype=SCALE_DTYPES[c.scale_dtype or "float32"])
    kw["return_mean_rstd" if c.norm == Norm.LAYERNORM else "return_rstd"] = c.stats
    if c.norm == Norm.RMSNORM:
        kw["weight_offset"] = c.weight_offset
    ref = fn(*args, c.eps, **kw)
    ref = ref if isinstance(ref, NormOutput) else NormOutput(ref)
    h = reference.fused_input(host["x"], host.get("residual"), host.get("x_bias"))
    y64 = reference.normalized(c.norm.value, h, host.get("gamma"), host.get("beta"), c.eps, c.weight_offset)
    if c.quant and c.smooth is not None:
        y64 = y64 * host["smooth_scale"].astype(np.float64)
    return Prepared(inputs, host, ref, y64, None if c.quant else cupy.asarray(ref.y))


def call(c: Config, inputs: dict):
    import normgen

    kw: dict = {"eps": c.eps}
    if c.residual != FusedAdd.NONE:
        kw.update(residual=inputs["residual"], store_residual=c.residual == FusedAdd.STORE)
    if c.x_bias:
        kw["x_bias"] = inputs["x_bias"]
    if c.quant:
        kw["quant"] = c.quant
        if c.static:
            kw["quant_scale"] = inputs["quant_scale"]
        elif c.scale_dtype:
            kw["scale_dtype"] = c.scale_dtype
        if c.smooth is not None:
            kw["smooth_scale"] = inputs["smooth_scale"]
    if c.norm == Norm.LAYERNORM:
        if c.stats:
            kw["return_mean_rstd"] = True
        return normgen.layernorm(inputs["x"], inputs.get("gamma"), inputs.get("beta"), **kw)
    if c.stats:
        kw["return_rstd"] = True
    if c.weight_offset:
        kw["weight_offset"] = c.weight_offset
    return normgen.rmsnorm(inputs["x"], inputs.get("gamma"), **kw)


def check(c: Config, p: Prepared, result, what: str) -> None:
    """Every output against the reference, with tests/gpu.py's tolerances; AssertionError."""
    import cupy

    from tests import gpu

    out = result if isinstance(result, NormOutput) else NormOutput(result)
    want_torch = c.lib == "torch"
    for name, v in zip(NormOutput._fields, out):
        if v is not None:
            is_torch = type(v).__module__.startswith("torch")
            assert is_torch == want_torch, f"{what}: {name} is a {type(v).__name__}"
    y, res, scale, mean, rstd = (None if v is None else _to_cupy(v) for v in out)
    ref = p.ref
    if not c.quant:
        gpu.assert_close(y, p.ref_y, c.x, what, exact=lambda: p.y64)
    else:
        qdt = QUANT_NAMES[c.quant]
        if c.static:
            v = p.y64 / float(p.host["quant_scale"][0])
        else:
            gpu.assert_scales(scale, ref.scale, what)
            v = p.y64 / cupy.asnumpy(scale).astype(np.float64)[..., None]
        gpu.assert_codes(y, v, qdt, what)
    if c.residual == FusedAdd.STORE:
        gpu.assert_bits_equal(res, ref.residual, what + " residual")
    else:
        assert res is None, f"{what}: a residual output nobody asked for"
    if c.stats:
        assert rstd is not None and rstd.shape == ref.rstd.shape, f"{what}: rstd"
        gpu.assert_stats(mean, rstd, ref.mean, ref.rstd, what)
    else:
        assert mean is None and rstd is None, f"{what}: statistics nobody asked for"


def _poison_torch(result) -> None:
    """Fill a checked call's torch outputs (NaN bytes) before they are freed: torch's
    allocator hands the same blocks to later calls."""
    out = result if isinstance(result, NormOutput) else NormOutput(result)
    torch = sys.modules["torch"]
    for v in out:
        if v is not None and isinstance(v, torch.Tensor):
            v.view(torch.uint8).fill_(0xFF)


def _poisoning_allocator():
    """CuPy allocations from its pool, filled with 0xFF on the calling thread's stream."""
    import cupy

    pool = cupy.get_default_memory_pool()

    def alloc(size):
        mem = pool.malloc(size)
        if size:
            cupy.cuda.runtime.memsetAsync(mem.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
        return mem

    return alloc


def sample(t0: float) -> dict:
    """One sample of every quantity (call with the workers paused)."""
    import cupy

    from normgen import runtime

    cupy.cuda.Device().synchronize()
    torch = _torch() if "torch" in sys.modules else None
    if torch is not None:
        torch.cuda.synchronize()
    free, total = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {"t": round(time.monotonic() - t0, 2), "device_used": total - free, "pool_used": pool.used_bytes(),
            "pool_total": pool.total_bytes(),
            "torch_allocated": torch.cuda.memory_allocated() if torch else None,
            "torch_reserved": torch.cuda.memory_reserved() if torch else None, "host_rss": rss,
            "plans": len(dispatch._plans), "kernels": len(dispatch._kernels), "loaded": len(runtime._loaded),
            "modules": runtime._module.cache_info().currsize}


class Pause:
    """The sampler's pauses: workers wait at a barrier between calls while it samples."""

    def __init__(self, workers: int, timeout: float):
        self.timeout = timeout  # a worker not back from its call by then: a hung call
        self.requested = threading.Event()
        self.arrive = threading.Barrier(workers + 1)
        self.leave = threading.Barrier(workers + 1)

    def checkpoint(self) -> None:  # workers, between calls
        if self.requested.is_set():
            self.arrive.wait(self.timeout)
            self.leave.wait(self.timeout)

    def hold(self) -> None:  # the sampler
        self.requested.set()
        self.arrive.wait(self.timeout)

    def release(self) -> None:
        self.requested.clear()
        self.leave.wait(self.timeout)

    def abort(self) -> None:
        self.arrive.abort()
        self.leave.abort()


def run_loop(threads: int, seconds: float, sample_seconds: float, work, take_sample, context=None,
             report=None, timeout: float = 600.0) -> tuple[list, list]:
    """`threads` workers call work(k) over and over, each inside context(k) (its streams),
    for `seconds`; every sample_seconds the workers are paused between calls and
    take_sample() is recorded (once before they start, once at the end). What escapes a
    worker or the sampler stops the loop. Returns (samples, failures)."""
    pause = Pause(threads, timeout)
    stop = threading.Event()
    failures: list = []
    samples = [take_sample()]

    def worker(k: int) -> None:
        try:
            with (context(k) if context else nullcontext()):
                while True:
                    pause.checkpoint()
                    if stop.is_set():
                        return
                    work(k)
        except threading.BrokenBarrierError:
            pass  # broken by whoever failed, which the failures name
        except BaseException:
            failures.append(f"thread {k}: {traceback.format_exc(limit=6)}")
            pause.abort()

    pool = [threading.Thread(target=worker, args=(k,), name=f"soak-{k}", daemon=True) for k in range(threads)]
    for t in pool:
        t.start()
    deadline = time.monotonic() + seconds
    try:
        while not stop.is_set():
            time.sleep(max(0.0, min(sample_seconds, deadline - time.monotonic())))
            pause.hold()
            try:
                samples.append(take_sample())
            finally:
                if time.monotonic() >= deadline:
                    stop.set()
                pause.release()
            if report and not stop.is_set():
                report(samples[-1])
    except threading.BrokenBarrierError:
        if not failures:
            failures.append(f"sampler: a worker did not reach the barrier within {timeout:.0f}s (a hung call?)")
    except BaseException:
        failures.append(f"sampler: {traceback.format_exc(limit=6)}")
    stop.set()
    pause.abort()
    for t in pool:
        t.join(timeout=timeout)
    alive = [t.name for t in pool if t.is_alive()]
    if alive:
        failures.append(f"threads still running at the end: {alive}")
    return samples, failures


def judge_soak(samples: list[dict], n_configs: int, soak_calls: int, wrong: int, errors: int,
               failures: list) -> dict:
    """The verdict: PASS without wrong results, exceptions, thread failures, growth (see
    growth, MARGINS) or a cache past the number of configurations, after some calls."""
    quantities = {q: growth([s.get(q) for s in samples], *MARGINS[q]) for q in LIVE + HELD}
    grew = sorted(q for q, g in quantities.items() if g["grows"])
    inconclusive = sorted(q for q, g in quantities.items() if g["grows"] is None and g["samples"])
    bounds = cache_bound(samples, n_configs)
    reasons = ([f"{wrong} wrong results"] * bool(wrong) + [f"{errors} exceptions in calls"] * bool(errors)
               + [f"{len(failures)} thread failures"] * bool(failures) + [f"{', '.join(grew)} grew"] * bool(grew)
               + [f"a cache exceeded {n_configs} entries ({bounds['peaks']})"] * (not bounds["within"])
               + ["no calls in the timed soak"] * (soak_calls <= 0))
    return {"verdict": "FAIL" if reasons else "PASS", "reasons": reasons, "growth": quantities, "grew": grew,
            "inconclusive": inconclusive, "cache_bound": bounds}


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = Counter()  # config index -> calls
        self.wrong = Counter()
        self.errors = Counter()
        self.messages: list = []

    def record(self, i: int, wrong: bool = False, error: Optional[str] = None) -> None:
        with self.lock:
            self.calls[i] += 1
            if wrong:
                self.wrong[i] += 1
            if error is not None:
                self.errors[i] += not wrong
                if len(self.messages) < 20:
                    self.messages.append(error)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="the timed soak (after the warm-up)")
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--configs", type=int, default=48, help="distinct configurations to draw")
    ap.add_argument("--out", type=Path, default=Path("/tmp/normgen-out/soak"))
    ap.add_argument("--seed", type=int, default=None, help="default: fresh, printed")
    ap.add_argument("--sample-seconds", type=float, default=3.0)
    ap.add_argument("--no-torch", action="store_true", help="CuPy inputs only")
    args = ap.parse_args(argv)

    import cupy

    import normgen
    from normgen import cache, devices, ondemand, runtime

    warnings.filterwarnings("ignore", category=normgen.NormgenWarning)
    normgen.set_strict(False)  # configurations outside the shipped set are generated
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    torch = None if args.no_torch else _torch()
    libs = ("cupy", "torch") if torch is not None else ("cupy",)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say = lambda s: print(f"[{time.monotonic() - started:7.1f}s] {s}", flush=True)  # noqa: E731
    configs = draw_configs(seed, args.configs, libs)
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode(errors="replace") if isinstance(name, bytes) else name
    say(f"seed {seed}: {len(configs)} configurations, {args.threads} threads, libraries {', '.join(libs)}, "
        f"device {name}")

    # the instances, compiled ahead on every core
    dev = devices.of(0)
    planned = [planned_instance(c, dev) for c in configs]
    table = dispatch.registry()
    folders = {s: dispatch.GENERATED_DIR if s.key in table else ondemand.provide(s) for s in set(planned)}
    cache.build(sorted(folders, key=str), folders, runtime.device_arch(0))
    say(f"compiled or found {len(folders)} instances")

    cupy.cuda.set_allocator(_poisoning_allocator())
    tally = Tally()
    prepared, mismatched = [], []

    def one(i: int, stream) -> None:
        """A call of configuration i, checked; its outputs freed on return."""
        c, p = configs[i], prepared[i]
        what = f"config {i} ({c.describe()})"
        try:
            result = call(c, p.inputs)
            if c.lib == "torch":
                stream.synchronize()
            check(c, p, result, what)
            if c.lib == "torch":
                _poison_torch(result)
            tally.record(i)
        except AssertionError:
            tally.record(i, wrong=True, error=traceback.format_exc(limit=3))
        except Exception:
            tally.record(i, error=traceback.format_exc(limit=6))

    for i, c in enumerate(configs):  # inputs, references and one call each, on this thread
        prepared.append(prepare(c, seed + i))
        one(i, torch.cuda.current_stream() if c.lib == "torch" else None)
        what = f"config {i} ({c.describe()})"
        kernel = dispatch._kernels.get(call_key(c))
        if kernel is None or kernel.spec != planned[i]:
            mismatched.append(f"{what}: planned {planned[i].name}, served by "
                              f"{kernel.spec.name if kernel else 'a kernel under another key'}")
    warm = dict(tally.calls)
    say(f"warm-up: {len(configs)} calls, {sum(tally.wrong.values())} wrong, {sum(tally.errors.values())} errors")
    for line in mismatched:
        say(f"note: {line}")
    if tally.messages:
        say(f"first failure:\n{tally.messages[0]}")

    rngs = [random.Random(seed * 1000 + k) for k in range(args.threads)]
    streams: dict = {}  # worker -> its torch stream (None without torch)

    def context(k: int):
        """Worker k's streams: every third worker the default ones, the others their own."""
        shared = k % 3 == 0
        cs = cupy.cuda.Stream.null if shared else cupy.cuda.Stream(non_blocking=k % 2 == 0)
        ts = (torch.cuda.default_stream() if shared else torch.cuda.Stream()) if torch is not None else None
        streams[k] = ts
        stack = ExitStack()
        stack.enter_context(cs)
        if ts is not None:
            stack.enter_context(torch.cuda.stream(ts))
        return stack

    def work(k: int) -> None:
        one(rngs[k].randrange(len(configs)), streams[k])

    last_report = [time.monotonic()]

    def report(s: dict) -> None:
        if time.monotonic() - last_report[0] >= 30:
            last_report[0] = time.monotonic()
            say(f"{sum(tally.calls.values()) - len(configs)} calls, {sum(tally.wrong.values())} wrong, "
                f"{sum(tally.errors.values())} errors, pool {s['pool_used'] / MIB:.0f} MiB in use")

    t0 = time.monotonic()
    samples, failures = run_loop(args.threads, 60 * args.minutes, args.sample_seconds, work, lambda: sample(t0),
                                 context, report)
    soak_seconds = time.monotonic() - t0

    calls = sum(tally.calls.values())
    wrong, errors = sum(tally.wrong.values()), sum(tally.errors.values())
    soak_calls = {i: n - warm.get(i, 0) for i, n in tally.calls.items()}
    verdict = judge_soak(samples, len(configs), calls - sum(warm.values()), wrong, errors, failures)
    reasons, grew, inconclusive, bounds = (verdict[k] for k in ("reasons", "grew", "inconclusive", "cache_bound"))
    instances = sorted({k.spec.name for k in dispatch._kernels.values()})
    peak_device = max(s["device_used"] for s in samples)
    final = samples[-1]
    summary = {
        "verdict": verdict["verdict"], "reasons": reasons, "seed": seed, "threads": args.threads,
        "libraries": list(libs), "minutes": round(soak_seconds / 60, 2), "calls": calls,
        "soak_calls": calls - sum(warm.values()), "wrong": wrong, "errors": errors,
        "configurations": len(configs),
        "configurations_covered": sum(1 for n in soak_calls.values() if n > 0),
        "instances_used": len(instances), "instances": instances,
        "planned_mismatches": mismatched,
        "peak_device_used": peak_device, "peak_pool_total": max(s["pool_total"] for s in samples),
        "peak_torch_allocated": torch.cuda.max_memory_allocated() if torch is not None else None,
        "final_caches": {q: final[q] for q in CACHES}, "cache_bound": bounds,
        "growth": verdict["growth"], "grew": grew, "inconclusive": inconclusive,
        "messages": tally.messages, "thread_failures": failures,
        "per_config": [{"config": c.describe(), "instance": planned[i].name, "calls": tally.calls[i],
                        "wrong": tally.wrong[i], "errors": tally.errors[i]} for i, c in enumerate(configs)],
    }
    (out / "soak.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "soak_samples.json").write_text(json.dumps(samples))
    for m in tally.messages[:5] + failures[:5]:
        print(m, flush=True)
    print(json.dumps({k: summary[k] for k in ("verdict", "reasons", "calls", "wrong", "errors", "configurations",
                                              "configurations_covered", "instances_used", "peak_device_used",
                                              "final_caches", "grew", "inconclusive")}, indent=1), flush=True)
    growth_text = ("none" if not grew else "GREW " + ", ".join(grew)) + (
        f" (inconclusive: {', '.join(inconclusive)})" if inconclusive else "")
    caches = " ".join(f"{q} {final[q]}" for q in CACHES)
    print(f"{summary['verdict']}: {calls} calls in {soak_seconds / 60:.1f} min on {args.threads} threads, "
          f"{wrong} wrong, {errors + len(failures)} errors, {summary['configurations_covered']}/{len(configs)} "
          f"configurations, {len(instances)} instances, peak {peak_device / (1 << 30):.2f} GiB in use, caches "
          f"{caches} (bound {len(configs)}), growth: {growth_text}" + (f"; {'; '.join(reasons)}" if reasons else ""),
          flush=True)
    return 1 if reasons else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # the summary line says so, last
        traceback.print_exc()
        print(f"FAIL: soak.py stopped: {type(e).__name__}: {e}", flush=True)
        sys.exit(2)
