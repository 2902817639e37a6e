"""The side-by-side benchmark: `python -m normgen.bench [--out docs] [--quick]` on a GPU
machine with torch. Measures, in one run and on the same inputs, a device-to-device copy
(the ceiling), normgen, torch eager, torch.compile, and the peers quack and Liger where
they import (their forward calls, no autograd); writes bench.json, bench.md and bench.png
(bench-h200.* on an H200). Effective bandwidth = bytes that must move / median time per
call, timed over back-to-back calls; small shapes by CUDA graph replay; the host cost of
an eager call. A case an implementation cannot run is recorded (no such op, failed with
the error's first line, or skipped by the time budget), never dropped. bench.json and
bench.md are rewritten after every case, so a run cut short keeps what it measured.

`import normgen.bench` imports neither torch nor matplotlib (they are imported inside the
functions that need them)."""
from __future__ import annotations

import datetime
import importlib
import json
import re
import math
import os
import statistics
import time
from pathlib import Path
from typing import NamedTuple, Optional

import click

from .spec import KernelSpec
from .types import DType, FusedAdd, Norm, Pipeline, Quant

ELEMENTS = 1 << 27
BIG_N = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)
ODD_N = (1000, 5003, 50257, 100003)  # every op, every dtype, quick or not
SMALL = ((1, 4096), (32, 4096), (256, 4096), (1, 8192), (32, 8192), (256, 8192))  # LayerNorm
SMALL_RMS = ((1, 4096), (32, 4096))  # RMSNorm
DTYPES = ("bfloat16", "float16", "float32")
PEERS = ("quack", "liger")
IMPLS = ("normgen", "torch", "torch.compile") + PEERS
HOST_IMPLS = ("normgen", "torch", "quack", "liger")  # eager host cost of one call
DEFAULT_BUDGET_S = 480.0  # large-shape cases start only this long after the run began

# A row's status: measured, the implementation has no such operation, it raised, or the
# time budget was spent before the case.
OK, NO_OP, FAILED, SKIPPED = "ok", "no such op", "failed", "skipped"
ERR_LIMIT = 0.02  # a peer whose outputs differ from torch eager's by more is flagged


def _torch():
    import torch

    return torch


def time_events(fn, calls: int = 20, reps: int = 15, warmup: int = 3) -> float:
    """Median milliseconds of one call: CUDA events around `calls` back-to-back calls (so
    the host's per-call work overlaps the previous kernel, as in real use), `reps` times."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def time_graph(fn, calls: int = 100, reps: int = 20) -> float:
    """Median milliseconds of one call, from replays of a CUDA graph of `calls` calls."""
    torch = _torch()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    return time_events(graph.replay, calls=1, reps=reps, warmup=2) / calls


def host_cost_us(fn, calls: int = 2000, rounds: int = 5) -> float:
    """Median microseconds of host time per call (dispatch + launch, no sync)."""
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def _side_by_side(ours, unfused, *args) -> dict:
    """normgen's call, and torch eager and torch.compile of the unfused sequence on args."""
    torch = _torch()
    torch._dynamo.reset()  # a fresh compile per shape: never the recompile-limit fallback to eager
    compiled = torch.compile(unfused, dynamic=False)
    return {"normgen": ours, "torch": lambda: unfused(*args), "torch.compile": lambda: compiled(*args)}


def _quant_in_torch(quant: str):
    """Dynamic per-row quantization to int8 or fp8 in torch: (codes, float32 scales)."""
    torch = _torch()
    qmax, qdt = (127.0, torch.int8) if quant == "int8" else (448.0, torch.float8_e4m3fn)

    def quantize(y):
        y = y.float()
        s = (y.abs().amax(-1, keepdim=True) / qmax).clamp_min(1.1754944e-38)
        q = y / s
        q = q.round().clamp(-128, 127) if quant == "int8" else q.clamp(-448, 448)
        return q.to(qdt), s

    return quantize


def layernorm_impls(x, g, b):
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5),
                         lambda x, g, b: F.layer_norm(x, (n,), g, b, 1e-5), x, g, b)


def add_layernorm_impls(x, r, g, b):
    """Residual add + LayerNorm, returning the sum and y (ck fadd=1, vLLM fused_add_*)."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]

    def unfused(x, r, g, b):
        h = x + r
        return h, F.layer_norm(h, (n,), g, b, 1e-5)

    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5, residual=r), unfused, x, r, g, b)


def quant_layernorm_impls(x, g, b, quant: str):
    """LayerNorm + dynamic per-row quantization to int8 or fp8 (codes and float32 scales)."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    quantize = _quant_in_torch(quant)
    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5, quant=quant),
                         lambda x, g, b: quantize(F.layer_norm(x, (n,), g, b, 1e-5)), x, g, b)


def rmsnorm_impls(x, r, g, quant=None):
    """RMSNorm (eps 1e-6), with the residual add (returning the sum and y) when r is given,
    or dynamic per-row quantization: vLLM's rms_norm, fused_add_rms_norm and
    rms_norm_dynamic_per_token_quant."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    quantize = _quant_in_torch(quant) if quant else None

    def unfused(x, r, g):
        h = x if r is None else x + r
        y = F.rms_norm(h, (n,), g, 1e-6)
        if quantize:
            return quantize(y)
        return y if r is None else (h, y)

    return _side_by_side(lambda: normgen.rmsnorm(x, g, eps=1e-6, residual=r, quant=quant), unfused, x, r, g)


# op -> (dtypes, Ns, implementations, bytes that must move for M x N of itemsize bytes)
OPS = {
    "layernorm": (DTYPES, BIG_N, lambda x, r, g, b: layernorm_impls(x, g, b),
                  lambda m, n, isz: 2 * m * n * isz + 2 * n * isz),
    "add+layernorm": (("bfloat16",), BIG_N[:7], add_layernorm_impls,
                      lambda m, n, isz: 4 * m * n * isz + 2 * n * isz),
    "layernorm+int8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: quant_layernorm_impls(x, g, b, "int8"),
                       lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz),
    "layernorm+fp8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: quant_layernorm_impls(x, g, b, "fp8_e4m3"),
                      lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz),
    "rmsnorm": (DTYPES[:2], BIG_N, lambda x, r, g, b: rmsnorm_impls(x, None, g),
                lambda m, n, isz: 2 * m * n * isz + n * isz),
    "add+rmsnorm": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: rmsnorm_impls(x, r, g),
                    lambda m, n, isz: 4 * m * n * isz + n * isz),
    "rmsnorm+fp8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: rmsnorm_impls(x, None, g, "fp8_e4m3"),
                    lambda m, n, isz: m * n * (isz + 1) + 4 * m + n * isz),
}


# op -> the instance fields of its normgen call beyond the precisions (what dispatch picks
# an instance for)
CALLS = {
    "layernorm": (Norm.LAYERNORM, {}),
    "rmsnorm": (Norm.RMSNORM, {}),
    "add+layernorm": (Norm.LAYERNORM, dict(fused_add=FusedAdd.STORE)),
    "add+rmsnorm": (Norm.RMSNORM, dict(fused_add=FusedAdd.STORE)),
    "layernorm+int8": (Norm.LAYERNORM, dict(out=DType.INT8, quant=Quant.DYNAMIC, scale=DType.FP32)),
    "layernorm+fp8": (Norm.LAYERNORM, dict(out=DType.FP8, quant=Quant.DYNAMIC, scale=DType.FP32)),
    "rmsnorm+fp8": (Norm.RMSNORM, dict(out=DType.FP8, quant=Quant.DYNAMIC, scale=DType.FP32)),
}
_DTYPES = {d.numpy.name: d for d in DType if d.is_float_input}  # "bfloat16" -> DType.BF16, ...


def call_spec(op: str, x: DType) -> KernelSpec:
    """The instance fields of op's normgen call on x rows (x's weights), as dispatch sees them:
    pipeline, bucket and vector width are placeholders that dispatch.choose fills in."""
    norm, fields = CALLS[op]
    return KernelSpec(norm, x, x, **dict(dict(out=x), **fields), pipeline=Pipeline.TWO_PASS, bucket=None, vec=1)


def sizes(op: str, quick: bool) -> tuple:
    """The row lengths N the run times for op: its powers of two (every other one with
    --quick) and the odd N."""
    pow2 = OPS[op][1]
    return tuple(sorted(set(pow2[::2] if quick else pow2) | set(ODD_N)))


def cases(ops, quick: bool) -> list:
    """(op, dtype, N) in the order the run times them: the quick set first and then, in a
    full run, the other powers of two, so a run stopped by its time budget still holds a
    whole quick run."""
    first = [(op, dt, n) for op in ops for dt in OPS[op][0] for n in sizes(op, True)]
    if quick:
        return first
    return first + [(op, dt, n) for op in ops for dt in OPS[op][0] for n in sizes(op, False)
                    if n not in sizes(op, True)]


def _vec(n: int) -> int:
    """The vector alignment (elements) of contiguous rows of n: the largest power of two of
    at most 8 that divides n (dispatch caps it by 16 bytes and the dtype's widest vector)."""
    return next(v for v in (8, 4, 2, 1) if n % v == 0)


def file_stem(gpu: str) -> str:
    """The output files' name: bench-h200.* on an H200 (the committed H100 table stays)."""
    return "bench-h200" if "H200" in gpu.upper() else "bench"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours some peers' messages carry


def reason(e: BaseException) -> str:
    """An exception as one line: its type and its message's first line, without colours."""
    lines = _ANSI.sub("", str(e)).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0].strip()}" if lines else type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# ---- peers --------------------------------------------------------------------------------
# peer -> the modules it must import (the first says the package is installed, the others
# are where its calls come from) and its distribution
PEER_MODULES = {
    "quack": ("quack", "quack.rmsnorm"),
    "liger": ("liger_kernel", "liger_kernel.ops.layer_norm", "liger_kernel.ops.rms_norm",
              "liger_kernel.ops.fused_add_rms_norm"),
}
PEER_DIST = {"quack": "quack-kernels", "liger": "liger_kernel"}

# peer -> op -> what the benchmark calls: the forward functions behind the peers' autograd
# wrappers, called directly (no autograd graph, no saved statistics where that is optional),
# with normgen's semantics: RMSNorm eps 1e-6 with gamma, LayerNorm eps 1e-5 with gamma and
# beta, the fused adds returning the sum h and y.
PEER_CALLS = {
    "quack": {
        "layernorm": "quack.rmsnorm.layernorm_fwd(x, gamma.float(), beta.float(), eps=1e-5) "
                     "(it asserts float32 weights)",
        "add+layernorm": "quack.rmsnorm._rmsnorm_fwd(x, gamma.float(), y, bias=beta.float(), residual=r, "
                         "residual_out=h, eps=1e-5, is_layernorm=True): the op behind layernorm_fwd and "
                         "rmsnorm_fwd; no public quack call takes a residual with LayerNorm",
        "rmsnorm": "quack.rmsnorm.rmsnorm_fwd(x, gamma, eps=1e-6)",
        "add+rmsnorm": "quack.rmsnorm.rmsnorm_fwd(x, gamma, residual=r, eps=1e-6) -> (y, h, None)",
    },
    "liger": {
        "layernorm": "liger_kernel.ops.layer_norm.layer_norm_forward(x, gamma, beta, 1e-5) "
                     "(also stores mean and rstd)",
        "rmsnorm": "liger_kernel.ops.rms_norm.rms_norm_forward(x, gamma, 1e-6, offset=0.0, "
                   "casting_mode='gemma', row_mode=None) (also stores rstd)",
        "add+rmsnorm": "liger_kernel.ops.fused_add_rms_norm.fused_add_rms_norm_forward(x, r, gamma, 1e-6, "
                       "offset=0.0, casting_mode='gemma') -> (y, h, ...) (also stores rstd)",
    },
}
_QUACK_NO_QUANT = "quack has no dynamically quantized output (rmsnorm_fwd's out_dtype is a plain cast, no scales)"
_LIGER_NO_QUANT = "Liger has no quantized norm output"
# peer -> op -> why it has no such op
PEER_MISSING = {
    "quack": {"layernorm+int8": _QUACK_NO_QUANT, "layernorm+fp8": _QUACK_NO_QUANT,
              "rmsnorm+fp8": _QUACK_NO_QUANT},
    "liger": {"add+layernorm": "Liger has no residual add fused with LayerNorm",
              "layernorm+int8": _LIGER_NO_QUANT, "layernorm+fp8": _LIGER_NO_QUANT,
              "rmsnorm+fp8": _LIGER_NO_QUANT},
}


def probe_peers(names) -> dict:
    """peer -> {"available": True, "version": ...} or {"available": False, "reason": the
    import error's one line}."""
    status = {}
    for name in names:
        try:
            for module in PEER_MODULES[name]:
                importlib.import_module(module)
        except Exception as e:  # ImportError, or whatever a half-installed stack raises
            status[name] = dict(available=False, reason=reason(e))
            continue
        try:
            from importlib import metadata

            version = metadata.version(PEER_DIST[name])
        except Exception:
            version = None
        status[name] = dict(available=True, version=version)
    return status


def _quack_call(op, x, r, g, b):
    """quack's call of op on these inputs (see PEER_CALLS)."""
    # The peers are imported by name (importlib): they are optional, the benchmark's alone,
    # not dependencies of normgen (tests/test_install.py reads import statements). And
    # import_module, not `import quack.rmsnorm`: quack/__init__.py binds quack.rmsnorm to the
    # function rmsnorm, shadowing the module.
    q = importlib.import_module("quack.rmsnorm")
    layernorm_fwd, rmsnorm_fwd = q.layernorm_fwd, q.rmsnorm_fwd
    torch = _torch()
    if op == "layernorm":
        g32, b32 = g.float(), b.float()  # layernorm_fwd asserts float32 weights: once, untimed
        return lambda: layernorm_fwd(x, g32, b32, eps=1e-5)
    if op == "add+layernorm":
        _rmsnorm_fwd = q._rmsnorm_fwd
        g32, b32 = g.float(), b.float()

        def add_layernorm():
            y, h = torch.empty_like(x), torch.empty_like(x)
            _rmsnorm_fwd(x, g32, y, bias=b32, residual=r, residual_out=h, eps=1e-5, is_layernorm=True)
            return h, y

        return add_layernorm
    if op == "rmsnorm":
        return lambda: rmsnorm_fwd(x, g, eps=1e-6)[0]
    if op == "add+rmsnorm":
        def add_rmsnorm():
            y, h, _ = rmsnorm_fwd(x, g, residual=r, eps=1e-6)
            return h, y

        return add_rmsnorm
    raise LookupError(f"quack: no call for {op}")


def _liger_call(op, x, r, g, b):
    """Liger's call of op on these inputs (see PEER_CALLS): its default (Triton) kernels,
    imported from the op modules, which the LIGER_KERNEL_IMPL backend switch leaves alone."""
    # casting_mode "gemma": x and gamma in float32, y rounded once to x's dtype, as normgen
    # and F.rms_norm compute ("llama" rounds x * rstd to x's dtype before multiplying by
    # gamma; "none" computes in x's dtype). offset 0.0: y = x_hat * gamma.
    if op == "layernorm":
        layer_norm_forward = importlib.import_module("liger_kernel.ops.layer_norm").layer_norm_forward
        return lambda: layer_norm_forward(x, g, b, 1e-5)[0]
    if op == "rmsnorm":
        rms_norm_forward = importlib.import_module("liger_kernel.ops.rms_norm").rms_norm_forward
        return lambda: rms_norm_forward(x, g, 1e-6, 0.0, "gemma", None)[0]
    if op == "add+rmsnorm":
        fused_add_rms_norm_forward = importlib.import_module(
            "liger_kernel.ops.fused_add_rms_norm").fused_add_rms_norm_forward

        def add_rmsnorm():
            y, h, *_ = fused_add_rms_norm_forward(x, r, g, 1e-6, 0.0, "gemma")
            return h, y

        return add_rmsnorm
    raise LookupError(f"liger: no call for {op}")


PEER_BUILD = {"quack": _quack_call, "liger": _liger_call}


class Absent(NamedTuple):
    """An implementation's entry for a case it does not time: why (status and note)."""

    status: str
    note: str


def case_impls(op, x, r, g, b, impls, peers) -> dict:
    """impl -> a call of op on these inputs, or Absent (no such op, or building the call
    raised), in IMPLS order, for the implementations asked for; peers only where
    importable (peers: probe_peers' answer)."""
    ours = OPS[op][2](x, r, g, b)  # normgen, torch, torch.compile
    out = {}
    for impl in IMPLS:
        if impl not in impls:
            continue
        if impl not in PEERS:
            out[impl] = ours[impl]
        elif peers.get(impl, {}).get("available"):
            if op in PEER_MISSING[impl]:
                out[impl] = Absent(NO_OP, PEER_MISSING[impl][op])
                continue
            try:
                out[impl] = PEER_BUILD[impl](op, x, r, g, b)
            except Exception as e:
                out[impl] = Absent(FAILED, reason(e))
    return out


def _recover() -> None:
    """After an implementation raised: let the device finish what was queued (an error it
    raises is left to the next case's calls to report)."""
    try:
        _torch().cuda.synchronize()
    except Exception:
        pass


def _disagreement(out, ref) -> Optional[float]:
    """The largest difference between a peer's outputs and torch eager's, relative to the
    largest output magnitude (per output); None where they are not comparable."""
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    if len(outs) != len(refs) or any(getattr(a, "shape", None) != b.shape for a, b in zip(outs, refs)):
        return None
    worst = 0.0
    for a, b in zip(outs, refs):
        b32 = b.float()
        scale = b32.abs().max().item() or 1.0
        worst = max(worst, (a.float() - b32).abs().max().item() / scale)
    return worst


def _check(impl, fn, ref) -> Optional[float]:
    """A peer's first call, compared with torch eager's outputs (None for normgen and the
    torch calls, which other tests check)."""
    if impl not in PEERS or ref is None:
        return None
    return _disagreement(fn(), ref)


def _reference(fns):
    fn = fns.get("torch")
    if callable(fn) and any(i in PEERS and callable(f) for i, f in fns.items()):
        try:
            return fn()
        except Exception:
            _recover()
    return None


# ---- the run ------------------------------------------------------------------------------
def prebuild(quick: bool, ops) -> int:
    """Compile every instance the run will call (contiguous rows, 256-byte aligned
    allocations: the vector alignment is N's), in parallel, before anything is timed: the
    run's wall time is then timing, not NVRTC."""
    from . import cache, dispatch, runtime

    calls = [(call_spec(op, _DTYPES[dtype]), n) for op in ops for dtype in OPS[op][0] for n in sizes(op, quick)]
    calls += [(call_spec(op, DType.BF16), n) for op, shapes in (("layernorm", SMALL), ("rmsnorm", SMALL_RMS))
              if op in ops for _, n in shapes]
    specs = set()
    for call, n in calls:
        try:
            specs.add(dispatch.choose(call, n, _vec(n)))
        except dispatch.MissingInstanceError:
            pass  # not shipped: the call generates it on demand (its first, untimed calls)
    cache.build(sorted(specs, key=str), dispatch.GENERATED_DIR, runtime.device_arch(0))
    return len(specs)


def copy_gbps() -> float:
    torch = _torch()
    src = torch.randn(ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_events(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6


def run(quick: bool, impls, ops, log, save=None, budget: Optional[float] = None, start: Optional[float] = None) -> dict:
    """Time every case of ops (see cases) for the implementations asked for, then the small
    shapes (graph replay) and the host cost. save(result) is called after every case;
    budget: seconds from `start` after which the remaining large-shape cases are recorded as
    skipped (None: no limit)."""
    torch = _torch()
    start = time.monotonic() if start is None else start
    save = save or (lambda result: None)
    torch.manual_seed(0)
    peers = probe_peers([p for p in PEERS if p in impls])
    for name, st in peers.items():
        log(f"{name}: {st.get('version') or '?'}" if st["available"] else f"{name}: not importable ({st['reason']})")
    result = dict(gpu=torch.cuda.get_device_name(), date=datetime.date.today().isoformat(),
                  torch=torch.__version__, copy_gbps=None, elements=ELEMENTS, quick=quick,
                  budget_s=budget, impls=[i for i in IMPLS if i in impls], peers=peers,
                  rows=[], host_us={}, host_notes={}, complete=False, elapsed_s=0.0)
    rows = result["rows"]

    def checkpoint():
        result["elapsed_s"] = round(time.monotonic() - start, 1)
        save(result)

    if "normgen" in impls:
        log(f"built {prebuild(quick, ops)} instances")
    ceiling = result["copy_gbps"] = copy_gbps()
    log(f"copy: {ceiling:.0f} GB/s")
    checkpoint()
    skipped = 0
    for op, dtype, n in cases(ops, quick):
        m = ELEMENTS // n
        base = dict(op=op, dtype=dtype, n=n, m=m, timing="events")
        if budget and time.monotonic() - start > budget:
            skipped += 1
            for impl in result["impls"]:
                if impl in PEERS and not peers[impl]["available"]:
                    continue
                missing = PEER_MISSING.get(impl, {}).get(op)
                rows.append(dict(base, impl=impl, ms=None, gbps=None, ratio=None,
                                 status=NO_OP if missing else SKIPPED,
                                 note=missing or f"not run: the time budget ({budget:.0f} s) was spent"))
            continue
        _, _, _, must_move = OPS[op]
        dt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda", dtype=dt)
        r = torch.randn(m, n, device="cuda", dtype=dt) if op.startswith("add") else None
        g = 1 + 0.5 * torch.randn(n, device="cuda", dtype=dt)
        b = torch.randn(n, device="cuda", dtype=dt)
        nbytes = must_move(m, n, x.element_size())
        fns = case_impls(op, x, r, g, b, impls, peers)
        ref = _reference(fns)
        for impl, fn in fns.items():
            row = dict(base, impl=impl, ms=None, gbps=None, ratio=None)
            if isinstance(fn, Absent):
                rows.append(dict(row, status=fn.status, note=fn.note))
                log(f"{op} {dtype:9s} N={n:6d} {impl:14s} {fn.status}: {fn.note}")
                continue
            try:
                err = _check(impl, fn, ref)
                ms = time_events(fn)
            except Exception as e:
                _recover()
                rows.append(dict(row, status=FAILED, note=reason(e)))
                log(f"{op} {dtype:9s} N={n:6d} {impl:14s} failed: {reason(e)}")
                continue
            gbps = nbytes / ms / 1e6
            rows.append(dict(row, ms=ms, gbps=gbps, ratio=gbps / ceiling, status=OK, note=None, err=err))
            log(f"{op} {dtype:9s} N={n:6d} {impl:14s} {ms * 1e3:8.1f} us {gbps:6.0f} GB/s {gbps / ceiling:6.3f}"
                + (f" (differs from torch by {err:.3g})" if err is not None and err > ERR_LIMIT else ""))
        del x, r, g, b, fns, ref
        torch.cuda.empty_cache()
        checkpoint()
    if skipped:
        log(f"time budget spent: {skipped} large-shape cases skipped")
    result["skipped_cases"] = skipped
    small_and_host(impls, ops, peers, result, log)
    result["complete"] = not skipped
    checkpoint()
    return result


def small_and_host(impls, ops, peers, result: dict, log) -> None:
    """LayerNorm and RMSNorm at small shapes (bf16, graph replay), appended to the rows; the
    host cost of one eager LayerNorm call (1 x 4096 bf16) per implementation."""
    torch = _torch()
    rows = result["rows"]
    for op, shapes in (("layernorm", SMALL), ("rmsnorm", SMALL_RMS)):
        if op not in ops:
            continue
        for m, n in shapes:
            dt = torch.bfloat16
            x = torch.randn(m, n, device="cuda", dtype=dt)
            g = 1 + 0.5 * torch.randn(n, device="cuda", dtype=dt)
            b = torch.randn(n, device="cuda", dtype=dt)
            fns = case_impls(op, x, None, g, b, impls, peers)
            ref = _reference(fns)
            for impl, fn in fns.items():
                row = dict(op=op, dtype="bfloat16", n=n, m=m, impl=impl, us=None, timing="graph")
                if isinstance(fn, Absent):
                    rows.append(dict(row, status=fn.status, note=fn.note))
                    continue
                try:
                    err = _check(impl, fn, ref)
                    us = time_graph(fn) * 1e3
                except Exception as e:
                    _recover()
                    rows.append(dict(row, status=FAILED, note=reason(e)))
                    log(f"small {op} bf16 {m:4d} x {n:5d} {impl:14s} failed: {reason(e)}")
                    continue
                rows.append(dict(row, us=us, status=OK, note=None, err=err))
                log(f"small {op} bf16 {m:4d} x {n:5d} {impl:14s} {us:6.2f} us (graph replay)")
    if "layernorm" not in ops:
        return
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    g, b = (torch.randn(4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fns = case_impls("layernorm", x, None, g, b, [i for i in HOST_IMPLS if i in impls], peers)
    for impl, fn in fns.items():
        if isinstance(fn, Absent):
            result["host_notes"][impl] = fn.note
            continue
        try:
            result["host_us"][impl] = host_cost_us(fn)
        except Exception as e:
            _recover()
            result["host_notes"][impl] = reason(e)
    log("host cost per call: " + ", ".join(f"{k} {v:.2f} us" for k, v in result["host_us"].items()))


# ---- the report ---------------------------------------------------------------------------
MARKS = {NO_OP: "—", FAILED: "×", SKIPPED: "…"}
_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _status(r: dict) -> str:
    """A row's status (rows of older runs have none: measured)."""
    if r.get("status"):
        return r["status"]
    return OK if r.get("ratio") is not None or r.get("us") is not None else FAILED


class _Notes:
    """The footnotes of one table: each distinct text gets a number."""

    def __init__(self):
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return str(self.texts.index(text) + 1).translate(_SUP)

    def lines(self) -> list[str]:
        return [f"{str(i + 1).translate(_SUP)} {t}  " for i, t in enumerate(self.texts)] + ([""] if self.texts else [])


def _cell(r: Optional[dict], notes: _Notes, value) -> str:
    """A table cell: value(r) where measured (flagged where a peer's outputs differ from
    torch's), else the mark of its status with a footnote."""
    if r is None:
        return ""
    status = _status(r)
    if status == OK:
        err = r.get("err")
        if err is not None and err > ERR_LIMIT:
            impl = r["impl"]
            return value(r) + "!" + notes.mark(f"{impl}: outputs differ from torch eager's by {err:.3g} "
                                               f"of the largest output")
        return value(r)
    if status == SKIPPED:  # one footnote for every implementation
        return MARKS[SKIPPED] + notes.mark(r.get("note") or "not run: the time budget was spent")
    return MARKS.get(status, "×") + notes.mark(f"{r['impl']}: {status}: {r.get('note') or '?'}")


def geomean_ratios(result: dict, op: str) -> dict:
    """impl -> (geometric-mean ratio to copy over its measured rows of op or None, rows
    measured, rows it has the op for)."""
    big = [r for r in result["rows"] if r["timing"] == "events" and r["op"] == op]
    out = {}
    for impl in [i for i in IMPLS if any(r["impl"] == i for r in big)]:
        mine = [r for r in big if r["impl"] == impl and _status(r) != NO_OP]
        ok = [r["ratio"] for r in mine if _status(r) == OK and r.get("ratio")]
        out[impl] = (math.exp(sum(map(math.log, ok)) / len(ok)) if ok else None, len(ok), len(mine))
    return out


def _mean_cell(mean, k: int, total: int, all_skipped: bool = False) -> str:
    if total == 0:
        return "—"
    if mean is None:
        return f"{MARKS[SKIPPED] if all_skipped else MARKS[FAILED]} (0/{total})"
    return f"{mean:.3f} ({k}/{total})"


def _all_skipped(result: dict, op: str, impl: str) -> bool:
    mine = [r for r in result["rows"] if (r["timing"], r["op"], r["impl"]) == ("events", op, impl)
            and _status(r) != NO_OP]
    return bool(mine) and all(_status(r) == SKIPPED for r in mine)


def summary_lines(result: dict) -> list[str]:
    """One line per op: each implementation's geometric-mean ratio to copy (measured rows /
    rows it has the op for; '—' where it has no such op)."""
    lines = []
    for op in [o for o in OPS if any(r["op"] == o and r["timing"] == "events" for r in result["rows"])]:
        parts = [f"{impl} {_mean_cell(mean, k, total, _all_skipped(result, op, impl))}"
                 for impl, (mean, k, total) in geomean_ratios(result, op).items()]
        lines.append(f"{op}: " + ", ".join(parts))
    return lines


def markdown(result: dict) -> str:
    rows = result["rows"]
    big = [r for r in rows if r["timing"] == "events"]
    small = [r for r in rows if r["timing"] == "graph"]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    copy = f"{result['copy_gbps']:.0f} GB/s" if result.get("copy_gbps") else "not measured yet"
    out = [f"# normgen benchmark: {result['gpu']}, {result['date']}", "",
           f"M x N = 2^27 elements; ratio = effective bandwidth / device-to-device copy ({copy}, read + "
           f"write, same run); torch {result['torch']}. Marks: — no such op, × failed, … not run "
           f"(time budget), ! a peer's outputs differ from torch eager's; footnotes below each table.", ""]
    mode = "quick (every other power of two, and the odd N)" if result.get("quick") else "full"
    state = "" if result.get("complete", True) else " **Incomplete**: still running, or cut short."
    if result.get("skipped_cases"):
        state = f" **Incomplete**: the time budget ({result['budget_s']:.0f} s) skipped {result['skipped_cases']} cases."
    if "elapsed_s" in result:
        out += [f"Run: {mode}, {result['elapsed_s']:.0f} s.{state}", ""]
    peers = result.get("peers", {})
    if peers:
        out += ["Peers:", ""]
        for name, st in peers.items():
            out.append(f"- {name} {st.get('version') or ''}: measured (calls listed at the end)".replace(" :", ":")
                       if st["available"] else f"- {name}: not measured, not importable ({st['reason']})")
        out.append("")
    ops = [o for o in OPS if any(r["op"] == o for r in big)]
    if ops:
        cols = [i for i in impls if any(r["impl"] == i for r in big)]
        out += ["## Summary: geometric-mean ratio to copy (rows measured / rows run)", "",
                "| op | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for op in ops:
            means = geomean_ratios(result, op)
            cells = []
            for impl in cols:
                mean, k, total = means.get(impl, (None, 0, 0))
                cells.append(_mean_cell(mean, k, total, _all_skipped(result, op, impl)))
            out.append(f"| {op} | " + " | ".join(cells) + " |")
        out.append("")
    for op in ops:
        mine = [r for r in big if r["op"] == op]
        cols = [i for i in impls if any(r["impl"] == i for r in mine)]
        for dtype in [d for d in DTYPES if any(r["dtype"] == d for r in mine)]:
            notes = _Notes()
            out += [f"## {op}, {dtype}", "", "| N | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
            for n in sorted({r["n"] for r in mine if r["dtype"] == dtype}):
                at = {r["impl"]: r for r in mine if (r["dtype"], r["n"]) == (dtype, n)}
                out.append(f"| {n} | " + " | ".join(_cell(at.get(i), notes, lambda r: f"{r['ratio']:.3f}")
                                                   for i in cols) + " |")
            out += [""] + notes.lines()
    if small:
        notes = _Notes()
        cols = [i for i in impls if any(r["impl"] == i for r in small)]
        out += ["## Small shapes, bf16 (µs per call, CUDA graph replay)", "",
                "| op | M x N | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        for op, m, n in sorted({(r["op"], r["m"], r["n"]) for r in small},
                               key=lambda k: (list(OPS).index(k[0]) if k[0] in OPS else 99, k[2], k[1])):
            at = {r["impl"]: r for r in small if (r["op"], r["m"], r["n"]) == (op, m, n)}
            out.append(f"| {op} | {m} x {n} | " + " | ".join(_cell(at.get(i), notes, lambda r: f"{r['us']:.2f}")
                                                           for i in cols) + " |")
        out += [""] + notes.lines()
    host, host_notes = result.get("host_us") or {}, result.get("host_notes") or {}
    if host or host_notes:
        out += ["## Host cost of one eager call (LayerNorm 1 x 4096 bf16, no sync)", ""]
        out += [f"- {k}: {host[k]:.2f} µs" if k in host else f"- {k}: × {host_notes[k]}"
                for k in IMPLS if k in host or k in host_notes]
        out.append("")
    measured = [p for p, st in peers.items() if st["available"]]
    if measured:
        out += ["## Peer calls (forward only, no autograd)", ""]
        for name in measured:
            out += [f"- {name}, {op}: {PEER_CALLS[name].get(op) or 'no such op (' + PEER_MISSING[name][op] + ')'}"
                    for op in OPS if op in ops]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


COLORS = {"normgen": "C3", "torch": "C0", "torch.compile": "C1", "quack": "C2", "liger": "C4"}


def plot(result: dict, path: Path) -> None:
    """One panel per op and dtype: ratio to copy against N, a line through the powers of two
    per implementation, the odd N as open markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    big = [r for r in result["rows"] if r["timing"] == "events" and _status(r) == OK]
    panels = sorted({(r["op"], r["dtype"]) for r in big},
                    key=lambda k: (list(OPS).index(k[0]), DTYPES.index(k[1])))
    if not panels:
        return
    cols = min(len(panels), 3)
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), sharey=True, squeeze=False)
    handles = {}
    for ax, (op, dtype) in zip(axes.flat, panels):
        for impl in IMPLS:
            pts = sorted((r["n"], r["ratio"]) for r in big if (r["op"], r["dtype"], r["impl"]) == (op, dtype, impl))
            pow2 = [p for p in pts if p[0] & (p[0] - 1) == 0]
            odd = [p for p in pts if p[0] & (p[0] - 1)]
            if pow2:
                (handles[impl],) = ax.plot(*zip(*pow2), marker="o", ms=4, color=COLORS[impl], label=impl)
            if odd:
                ax.plot(*zip(*odd), ls="none", marker="D", ms=5, mfc="none", color=COLORS[impl])
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_title(f"{op} {dtype}")
        ax.set_xlabel("N (M x N = 2^27; open: odd N)")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("bandwidth / copy")
    order = [i for i in IMPLS if i in handles]
    fig.legend([handles[i] for i in order], order, loc="lower center", ncol=len(order), frameon=False)
    copy = f"copy {result['copy_gbps']:.0f} GB/s" if result.get("copy_gbps") else ""
    fig.suptitle(f"{result['gpu']}, {result['date']} ({copy})")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader (or a kill) never sees half a file


def write_outputs(result: dict, out: Path, final: bool = False, log=None) -> list:
    """Write <stem>.json and <stem>.md under out (stem: file_stem of the GPU's name), and
    with final the plot <stem>.png (skipped, with a log line, without matplotlib)."""
    stem = file_stem(result.get("gpu") or "")
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    _write(paths[0], json.dumps(result, indent=1) + "\n")
    _write(paths[1], markdown(result))
    if final:
        try:
            plot(result, out / f"{stem}.png")
            paths.append(out / f"{stem}.png")
        except ImportError as e:
            (log or print)(f"no plot: {reason(e)}")
    return paths


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("docs"),
              show_default=True, help="folder of bench.json/.md/.png (bench-h200.* on an H200)")
@click.option("--quick", is_flag=True, help="every other power-of-two N (and all the odd N)")
@click.option("--impl", "impls", multiple=True, type=click.Choice(IMPLS), default=IMPLS,
              show_default=True, help="implementations to time (repeatable); the peers quack and liger "
                                      "where importable, else recorded as not importable")
@click.option("--op", "--ops", "ops", multiple=True, type=click.Choice(list(OPS)), default=list(OPS),
              show_default=True, help="operations to time (repeatable); LayerNorm's and RMSNorm's small "
                                      "shapes come with them, the host cost with layernorm")
@click.option("--budget", type=float, default=DEFAULT_BUDGET_S, show_default=True,
              help="seconds into the run after which the remaining large-shape cases are recorded as "
                   "skipped (the quick set runs first); 0: no limit")
def main(out: Path, quick: bool, impls, ops, budget: float):
    """Benchmark normgen against a copy, torch eager, torch.compile (of the unfused sequence,
    for the fused operations), quack and Liger. Prints one summary line per op at the end:
    each implementation's geometric-mean ratio to copy."""
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)

    def log(s):
        click.echo(s, err=True)

    result = run(quick, set(impls), [o for o in OPS if o in ops], log,
                 save=lambda result: write_outputs(result, out), budget=budget or None, start=start)
    paths = write_outputs(result, out, final=True, log=log)
    click.echo("wrote " + ", ".join(str(p) for p in paths))
    for line in summary_lines(result):
        click.echo(line)


if __name__ == "__main__":
    main()
