"""Hypothesis strategies over normgen's public API, the host side of a drawn call, the
checks the property tests share, and the hypothesis profiles.

A drawn call is a `Case`: its `Options` (what selects a kernel instance), the layout of x
and of the residual (`Layout`: leading dimensions, strides, start offset), the start
offsets of the per-column vectors, its data kind and seed, and how its arguments are
spelled. `host_inputs` makes its arrays on the host; `check_case` puts them on a device
through a backend (CuPy and torch CUDA tensors in test_gpu_properties.py; numpy memory
behind the real dispatcher in test_properties.py), calls normgen and compares every output
with normgen.reference through tests/gpu.py's assert functions and tolerances. A `Bad` is a
valid call with one argument made wrong; `check_bad` wants a TypeError or ValueError whose
message names that argument.

Profiles: 'ci' (the CPU tests), 'dev' (the GPU tests by default) and 'gpu' (the GPU
property run: NORMGEN_HYPOTHESIS_PROFILE=gpu, about 10,500 examples). Examples are kept in
HYPOTHESIS_DATABASE_DIR where it is set, else in hypothesis' default database
(.hypothesis/examples under the working directory)."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import warnings
from dataclasses import dataclass, replace
from typing import Optional

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from normgen import reference, tiles
from normgen.spec import KernelSpec
from normgen.types import DType, FusedAdd, Norm, NormOutput, Pipeline, Quant

from .gpu import MANTISSA, assert_bits_equal, assert_close, assert_codes, assert_scales, assert_stats

# ---- profiles ---------------------------------------------------------------------------
_DATABASE = os.environ.get("HYPOTHESIS_DATABASE_DIR")
_COMMON = dict(
    deadline=None,  # timing on shared machines is noise; max_examples bounds the run
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    **({"database": DirectoryBasedExampleDatabase(_DATABASE)} if _DATABASE else {}),
)
settings.register_profile("ci", max_examples=100, **_COMMON)
settings.register_profile("dev", max_examples=25, **_COMMON)
settings.register_profile("gpu", max_examples=2500, **_COMMON)
GPU_PROFILE = os.environ.get("NORMGEN_HYPOTHESIS_PROFILE", "dev")


def cpu_settings(max_examples: int) -> settings:
    return settings(settings.get_profile("ci"), max_examples=max_examples)


def gpu_settings(weight: float) -> settings:
    """The GPU profile's settings with `weight` times its max_examples (the tests' weights
    add up to 4.2: 10,500 examples under 'gpu')."""
    p = settings.get_profile(GPU_PROFILE)
    return settings(p, max_examples=max(1, round(p.max_examples * weight)))


HAS_TORCH = importlib.util.find_spec("torch") is not None

# ---- the vocabulary ---------------------------------------------------------------------
FLOATS = ("fp32", "fp16", "bf16")
DT = {"fp32": DType.FP32, "fp16": DType.FP16, "bf16": DType.BF16}
QUANT_OUT = {"int8": DType.INT8, "fp8_e4m3": DType.FP8}
EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}


@dataclass(frozen=True)
class Options:
    """What selects a call's kernel instance."""

    norm: str  # "layernorm" | "rmsnorm"
    x: str  # "fp32" | "fp16" | "bf16"
    w: str = "same"  # gamma/beta precision: "same" (x's) or "fp32"
    add: int = 0  # 0 no residual, 1 residual stored, 2 not stored
    x_bias: bool = False
    quant: Optional[str] = None  # None | "int8" | "fp8_e4m3"
    static: bool = False  # quant_scale given
    smooth: Optional[str] = None  # smooth_scale's precision
    scale: Optional[str] = None  # per-row scale precision (dynamic quant)
    stats: bool = False  # mean/rstd returned

    @property
    def wdt(self) -> str:
        return self.x if self.w == "same" else self.w

    @property
    def dynamic(self) -> bool:
        return self.quant is not None and not self.static

    @property
    def out(self) -> DType:
        return QUANT_OUT[self.quant] if self.quant else DT[self.x]

    @property
    def spec(self) -> KernelSpec:
        """The instance semantics (two-pass, single elements)."""
        mode = Quant.NONE if self.quant is None else Quant.STATIC if self.static else Quant.DYNAMIC
        return KernelSpec(Norm(self.norm), DT[self.x], DT[self.wdt], self.out, FusedAdd(self.add), self.x_bias,
                          mode, DT[self.smooth] if self.smooth else None,
                          DT[self.scale] if self.dynamic else None, self.stats,
                          pipeline=Pipeline.TWO_PASS, bucket=None, vec=1)


# The GPU tests' option combinations: every pair of option values appears in one of them
# (test_properties checks it), so the number of instances a GPU run compiles stays bounded.
# The first five are calls inference engines make.
POOL: tuple[Options, ...] = (
    Options('rmsnorm', 'bf16', add=1, quant='fp8_e4m3', scale='fp32'),
    Options('rmsnorm', 'fp16', add=1, quant='int8', static=True),
    Options('layernorm', 'bf16', add=1, quant='int8', smooth='fp32', scale='fp32'),
    Options('layernorm', 'fp32', stats=True),
    Options('rmsnorm', 'bf16'),
    Options('rmsnorm', 'fp16', w='fp32', add=2, x_bias=True, quant='fp8_e4m3', smooth='fp16', scale='bf16', stats=True),
    Options('layernorm', 'bf16', w='fp32', x_bias=True, quant='int8', smooth='bf16', scale='fp16', stats=True),
    Options('rmsnorm', 'fp32', add=2, x_bias=True, quant='fp8_e4m3', smooth='fp32', scale='fp16'),
    Options('layernorm', 'bf16', add=2, quant='int8', static=True, smooth='fp16', stats=True),
    Options('layernorm', 'fp16', quant='fp8_e4m3', smooth='bf16', scale='bf16'),
    Options('layernorm', 'fp32', add=1, x_bias=True, quant='int8', scale='bf16', stats=True),
    Options('rmsnorm', 'fp16', w='fp32', x_bias=True, quant='fp8_e4m3', static=True, smooth='fp32'),
    Options('rmsnorm', 'fp32', add=2, x_bias=True, quant='fp8_e4m3', smooth='bf16', scale='fp32', stats=True),
    Options('layernorm', 'fp16', w='fp32', add=1, quant='int8', scale='fp16', stats=True),
    Options('rmsnorm', 'fp16', w='fp32', x_bias=True, quant='int8', smooth='fp16', scale='fp32'),
    Options('rmsnorm', 'fp16', w='fp32', add=2, x_bias=True),
    Options('rmsnorm', 'fp16', add=1, x_bias=True, quant='fp8_e4m3', smooth='fp16', scale='fp16', stats=True),
    Options('rmsnorm', 'fp32', add=1, quant='fp8_e4m3', static=True, smooth='bf16', stats=True),
    Options('rmsnorm', 'bf16', w='fp32', add=1, x_bias=True, quant='int8', smooth='fp32', scale='bf16', stats=True),
    Options('rmsnorm', 'fp16', w='fp32', add=1),
    Options('layernorm', 'fp16', quant='fp8_e4m3', scale='fp32'),
    Options('layernorm', 'fp32', add=2, x_bias=True, quant='fp8_e4m3', static=True, stats=True),
    Options('rmsnorm', 'fp32', add=2, x_bias=True, quant='int8', smooth='fp16', scale='bf16', stats=True),
)

# Row lengths by class: one class per one-pass bucket (lo, hi], then the two-pass range up to
# 2**20. Each pool entry is drawn with one small, one medium and one large class (its index
# picks them), so that every class is run and the instances stay in the low hundreds.
CLASSES: tuple[tuple[int, int], ...] = tuple(zip((0,) + tiles.BUCKETS, tiles.BUCKETS)) + ((tiles.BUCKETS[-1], 2**20),)
SMALL, MEDIUM, LARGE = ([i for i, (_, hi) in enumerate(CLASSES) if pick(hi)] for pick in
                        (lambda hi: hi <= 1024, lambda hi: 1024 < hi <= 16384, lambda hi: hi > 16384))
assert len(SMALL) == 5 and CLASSES[MEDIUM[-1]][1] == 16384 and len(CLASSES) == len(tiles.BUCKETS) + 1


def tier_classes(index: int) -> tuple[int, int, int]:
    return SMALL[index % len(SMALL)], MEDIUM[index % len(MEDIUM)], LARGE[index % len(LARGE)]


@dataclass(frozen=True)
class Layout:
    """An array's place in its buffer: shape (..., N), strides in elements, and the offset
    of its first element in elements. `kind` names the family it was drawn from."""

    kind: str
    shape: tuple
    strides: tuple
    offset: int = 0

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:-1])

    @property
    def size(self) -> int:
        """Elements of the buffer it lies in."""
        if 0 in self.shape:
            return self.offset + 1
        return self.offset + 1 + sum((d - 1) * s for d, s in zip(self.shape, self.strides))


def vector(n: int, offset: int = 0) -> Layout:
    return Layout("vector", (n,), (1,), offset)


def contiguous(shape: tuple, offset: int = 0) -> Layout:
    strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return Layout("contiguous", tuple(shape), strides, offset)


def make_layout(kind: str, lead: tuple, n: int, pad: int = 0, gap: int = 8, offset: int = 0,
                loose: tuple = (3, 5)) -> Layout:
    """x's layouts: "rows" (M, N) rows of n + pad; "vector" (N,); "broadcast" (M, N) of one
    row (stride 0); "size1" (1, M, 1, N) with arbitrary strides for the size-1 dimensions
    (`loose`); (A, B, N) "contig3" (merges to one stride), "gap" (a gap between the A
    blocks: two strides) and "transposed" (the A index is the inner one: two strides)."""
    rs = n + pad
    if kind == "vector":
        return Layout(kind, (n,), (1,), offset)
    if kind == "rows":
        return Layout(kind, (lead[0], n), (rs, 1), offset)
    if kind == "broadcast":
        return Layout(kind, (lead[0], n), (0, 1), offset)
    if kind == "size1":
        return Layout(kind, (1, lead[0], 1, n), (loose[0], rs, loose[1], 1), offset)
    a, b = lead
    if kind == "contig3":
        return Layout(kind, (a, b, n), (b * rs, rs, 1), offset)
    if kind == "gap":
        return Layout(kind, (a, b, n), (b * rs + gap, rs, 1), offset)
    if kind == "transposed":
        return Layout(kind, (a, b, n), (rs, a * rs, 1), offset)
    raise ValueError(kind)


SCALE_SPELLINGS = {
    "fp32": (None, "float32", "fp32", "numpy") + (("torch",) if HAS_TORCH else ()),
    "fp16": ("float16", "fp16", "half", "numpy") + (("torch",) if HAS_TORCH else ()),
    "bf16": ("bfloat16", "bf16", "numpy") + (("torch",) if HAS_TORCH else ()),
}
_TORCH_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
STATIC_SCALES = {"int8": (3 / 127, 1 / 127, 2.0**-7, 0.05, 1.0, 1e-3),
                 "fp8_e4m3": (3 / 448, 1 / 448, 2.0**-9, 1 / 64, 1.0, 1e-4)}
KINDS = ("normal", "offset", "zero", "huge", "grid", "small", "ties", "boundary")


@dataclass(frozen=True)
class Case:
    """One call of normgen.layernorm / rmsnorm, as drawn (its repr is a regression case)."""

    opts: Options
    x: Layout
    residual: Optional[Layout] = None  # with opts.add
    offsets: tuple = (0, 0, 0, 0)  # start offsets of gamma, beta, x_bias, smooth_scale
    gamma: bool = True
    beta: bool = True  # LayerNorm only
    weight_offset: float = 0.0  # RMSNorm only
    eps: Optional[float] = None  # None: not passed
    eps_as: str = "float"  # "float", "numpy" (np.float32) or "int"
    scale_as: Optional[str] = None  # scale_dtype as passed (SCALE_SPELLINGS); None: not passed
    qs: float = 0.0  # static quant's scale
    qs_shape: tuple = (1,)
    kind: str = "normal"  # see host_inputs
    seed: int = 0
    poison: tuple = ()  # ((row, column, "nan" | "inf" | "-inf", "x" | "residual"),)
    lib: str = "host"  # "host" (numpy: test_properties.Host), "cupy", "torch" or "mixed" (x CuPy, the rest torch)

    @property
    def n(self) -> int:
        return self.x.shape[-1]

    @property
    def rows(self) -> int:
        return self.x.rows

    @property
    def has_beta(self) -> bool:
        return self.opts.norm == "layernorm" and self.beta

    def eps_value(self) -> float:
        return EPS[self.opts.norm] if self.eps is None else float(self.eps_arg())

    def eps_arg(self):
        if self.eps_as == "numpy":
            return np.float32(self.eps)
        return int(self.eps) if self.eps_as == "int" else float(self.eps)

    def scale_arg(self):
        return resolve_scale(self.scale_as, self.opts.scale)


def resolve_scale(spelling, sdt):
    if spelling == "numpy":
        return np.dtype(DT[sdt].numpy)
    if spelling == "torch":
        import torch

        return getattr(torch, _TORCH_NAMES[sdt])
    return spelling


# ---- strategies -------------------------------------------------------------------------
@st.composite
def options(draw, norm: Optional[str] = None) -> Options:
    """Any valid combination of options."""
    norm = norm or draw(st.sampled_from(("layernorm", "rmsnorm")))
    x = draw(st.sampled_from(FLOATS))
    w = "same" if x == "fp32" else draw(st.sampled_from(("same", "fp32")))
    quant = draw(st.sampled_from((None, "int8", "fp8_e4m3")))
    static = quant is not None and draw(st.booleans())
    return Options(norm, x, w, draw(st.sampled_from((0, 1, 2))), draw(st.booleans()), quant, static,
                   draw(st.sampled_from((None,) + FLOATS)) if quant else None,
                   draw(st.sampled_from(FLOATS)) if quant and not static else None, draw(st.booleans()))


def _is_prime(k: int) -> bool:
    if k < 2:
        return False
    return all(k % d for d in range(2, math.isqrt(k) + 1))


def prime_in(k: int, lo: int, hi: int) -> int:
    """The first prime from k up to hi, else the last one down to lo + 1, else k."""
    for p in range(k, hi + 1):
        if _is_prime(p):
            return p
    for p in range(k, lo, -1):
        if _is_prime(p):
            return p
    return k


@st.composite
def row_lengths(draw, lo: int, hi: int, coarse: bool = False) -> int:
    """N in (lo, hi]: the class's edges (lo + 1, hi - 1, hi), a prime, an odd number, a
    multiple of 8, or any. Coarse: odd or a multiple of 8 only (vectors of 1 or 16 bytes)."""
    how = draw(st.sampled_from(("edge", "prime", "odd", "whole") + (() if coarse else ("any",))))
    if how == "edge":
        edges = (lo + 1, hi - 1, hi) + (() if coarse else (lo + 2,))
        return draw(st.sampled_from(sorted({v for v in edges if lo < v <= hi})))
    k = draw(st.integers(lo + 1, hi))
    if how == "prime":
        return prime_in(k, lo, hi)
    if how == "odd":
        return k if k % 2 else (k + 1 if k + 1 <= hi else k - 1 if k - 1 > lo else k)
    if how == "whole":
        return k - k % 8 if k - k % 8 > lo else hi
    return k


@st.composite
def row_counts(draw, most: int) -> int:
    """One row (20%), 2-8 (40%), up to `most` (30%) or none (10%)."""
    how = draw(st.integers(0, 9))
    if how == 9:
        return 0
    if how < 2 or most < 2:
        return 1
    return draw(st.integers(2, min(8, most) if how < 6 else most))


MISALIGNED = (1, 3, 2, 4, 8)  # element offsets: odd ones break every vector width
COARSE = (1, 3, 8)  # vectors of one element or of 16 bytes


@st.composite
def x_layouts(draw, n: int, most: int, kinds=("rows", "vector", "gap", "transposed", "contig3", "size1",
                                               "broadcast")) -> Layout:
    """x's layout with at most `most` rows."""
    kind = draw(st.sampled_from(kinds))
    pad = draw(st.sampled_from((0, 8, 1, 3, 64)))  # (odd or multiples of 8: see COARSE)
    if kind == "vector":
        lead = ()
    elif kind in ("rows", "broadcast", "size1"):
        lead = (draw(row_counts(most)),)
    else:
        a = draw(st.integers(1, min(4, most)))
        lead = (a, draw(row_counts(most // a)))
    gap = draw(st.sampled_from((8, 1, 16, n)))
    loose = (draw(st.integers(0, 99)), draw(st.integers(0, 99)))
    return make_layout(kind, lead, n, pad, gap, 0, loose)


@st.composite
def case_details(draw, opts: Options, x: Layout, lib: str = "cupy", kinds=KINDS, coarse: bool = False) -> Case:
    """A call of options `opts` on x of layout `x` (its start offset drawn here): the
    residual's layout, start offsets (coarse: COARSE ones), which of gamma and beta are
    passed, eps, the spelling of scale_dtype, the static scale, the data."""
    n = x.shape[-1]
    misalign = draw(st.sampled_from(("none", "x", "vectors", "all")))
    off = (lambda: draw(st.sampled_from(COARSE if coarse else MISALIGNED)))
    x = replace(x, offset=off() if misalign in ("x", "all") else 0)
    residual = None
    if opts.add:
        how = draw(st.sampled_from(("same", "contiguous", "padded")))
        r_off = off() if misalign == "all" else 0
        if how == "contiguous":
            residual = contiguous(x.shape, r_off)
        elif how == "padded" and x.kind not in ("vector", "broadcast"):
            lead = x.shape[1:2] if x.kind == "size1" else x.shape[:-1]
            residual = make_layout(x.kind, lead, n, draw(st.sampled_from((8, 5, 16))), draw(st.sampled_from((16, 3))),
                                   r_off, (draw(st.integers(0, 9)), draw(st.integers(0, 9))))
        else:
            residual = replace(x, offset=r_off)
    offsets = tuple(off() if misalign in ("vectors", "all") else 0 for _ in range(4))
    gamma = draw(st.sampled_from((True, False)))
    beta = opts.norm == "layernorm" and draw(st.sampled_from((True, False)))
    weight_offset = draw(st.sampled_from((0.0, 1.0, -0.5))) if opts.norm == "rmsnorm" and gamma else 0.0
    eps = draw(st.sampled_from((None, 1e-5, 1e-6, 1e-12, 1e-3, 0.25, 1.0)))
    eps_as = draw(st.sampled_from(("float", "numpy") + (("int",) if eps == 1.0 else ())))
    scale_as = draw(st.sampled_from(SCALE_SPELLINGS[opts.scale])) if opts.dynamic else None
    qs = draw(st.sampled_from(STATIC_SCALES[opts.quant])) if opts.static else 0.0
    qs_shape = draw(st.sampled_from(((1,), ()))) if opts.static else (1,)
    return Case(opts, x, residual, offsets, gamma, beta, weight_offset, eps, eps_as, scale_as, qs, qs_shape,
                draw(st.sampled_from(kinds)), draw(st.integers(0, 2**32 - 1)), (), lib)


@st.composite
def poisons(draw, case: Case) -> tuple:
    """One non-finite element in one row of x or of the residual."""
    return (draw(st.integers(0, case.rows - 1)), draw(st.integers(0, case.n - 1)),
            draw(st.sampled_from(("nan", "inf", "-inf"))),
            draw(st.sampled_from(("x", "residual"))) if case.opts.add else "x")


@st.composite
def gpu_cases(draw, norm: str, libs=("cupy",), nonfinite: bool = False) -> Case:
    """GPU calls: options from POOL (of `norm`), N from the entry's small (60%), medium
    (30%) or large (10%) class, at most 2**16 elements (small and medium) or 2**21 (large);
    medium and large rows coarse (vectors of 1 or 16 bytes: fewer instances)."""
    index, opts = draw(st.sampled_from([(i, o) for i, o in enumerate(POOL) if o.norm == norm]))
    tier = draw(st.integers(0, 9))
    small, medium, large = tier_classes(index)
    cls = small if tier < 6 else medium if tier < 9 else large
    lo, hi = CLASSES[cls]
    n = draw(row_lengths(lo, hi, coarse=tier >= 6))
    most = max(1, min(256, 2**16 // n) if tier < 9 else min(2, 2**21 // n))
    x = draw(x_layouts(n, most))
    if nonfinite and x.rows == 0:
        x = make_layout("rows", (1,), n)
    lib = draw(st.sampled_from(tuple(libs)))
    case = draw(case_details(opts, x, lib, coarse=tier >= 6))
    return replace(case, poison=(draw(poisons(case)),)) if nonfinite else case


@st.composite
def small_cases(draw, lib: str = "host", nonfinite: bool = False, rows: int = 16, most_n: int = 300) -> Case:
    """Calls of any options on small arrays (the CPU tests)."""
    opts = draw(options())
    n = draw(st.one_of(row_lengths(0, 64), row_lengths(64, most_n)) if most_n > 64 else row_lengths(0, most_n))
    x = draw(x_layouts(n, rows))
    if nonfinite and x.rows == 0:
        x = make_layout("rows", (1,), n)
    case = draw(case_details(opts, x, lib))
    return replace(case, poison=(draw(poisons(case)),)) if nonfinite else case


# ---- the host side of a case ------------------------------------------------------------
HUGE = {"fp32": 1e6, "fp16": 3e4, "bf16": 1e6}


def _codes_between(quant: str, rng, k: int) -> np.ndarray:
    """k values y / scale on rounding boundaries: int8 midpoints and saturation edges; fp8
    midpoints between neighbouring codes (subnormal ones included) and the edges near 448."""
    if quant == "int8":
        v = rng.integers(-130, 130, k) + 0.5
        edges = np.array([127.25, 127.75, -128.25, -128.75, 300.0, -300.0])
    else:
        codes = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)  # 0 .. 448
        i = rng.integers(0, len(codes) - 1, k)
        v = (codes[i] + codes[i + 1]) / 2 * np.where(rng.random(k) < 0.5, -1, 1)
        edges = np.array([440.0, 456.0, 464.0, 470.0, 1000.0, -464.0])
    take = rng.random(k) < 0.3
    v[take] = edges[rng.integers(0, len(edges), int(take.sum()))]
    return v


def host_inputs(case: Case) -> dict:
    """The call's arrays on the host, in the call's shapes (x: case.x.shape). Kinds:
    "normal" N(0,1); "offset" 1000 + N(0,1); "small" 1e-3 N(0,1) (variances near eps);
    "zero" some rows all zero (x and residual; x_bias and beta zero: y = 0 there); "huge" one element a row of
    HUGE; "grid" small integers (ties for the absolute maximum, repeated codes); "ties" a
    residual of half an ulp of x in a third of the elements (h on rounding midpoints);
    "boundary" LayerNorm with gamma 0 in a quarter of the columns, where y = beta exactly,
    and beta there on quantization boundaries (times the static scale). Poison: non-finite
    elements; for a broadcast layout, in every row."""
    o, n, m = case.opts, case.n, case.rows
    rng = np.random.default_rng(case.seed)
    x = rng.standard_normal((m, n), dtype=np.float32)
    r = rng.standard_normal((m, n), dtype=np.float32)
    xb = 0.5 * rng.standard_normal(n, dtype=np.float32)
    g = 1 + 0.5 * rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    sm = 0.5 + rng.random(n, dtype=np.float32)
    g64 = b64 = None
    kind = case.kind
    if kind == "offset":
        x += 1000
    elif kind == "small":
        x *= 1e-3
        r *= 1e-3
        xb *= 1e-3
    elif kind == "zero" and m:
        zero = rng.random(m) < 0.5
        zero[rng.integers(m)] = True
        x[zero] = 0
        r[zero] = 0
        xb[:] = 0
        b[:] = 0
    elif kind == "huge" and m:
        x[np.arange(m), rng.integers(0, n, m)] = HUGE[o.x] * np.where(rng.random(m) < 0.5, -1, 1)
    elif kind == "grid":
        x = rng.integers(-8, 9, (m, n)).astype(np.float32)
        r = rng.integers(-4, 5, (m, n)).astype(np.float32)
        xb = rng.integers(-2, 3, n).astype(np.float32)
    elif kind == "boundary" and o.norm == "layernorm" and case.gamma and case.has_beta:
        cols = rng.random(n) < 0.25
        g64, b64 = g.astype(np.float64), b.astype(np.float64)
        g64[cols] = 0
        if o.static:
            b64[cols] = _codes_between(o.quant, rng, int(cols.sum())) * np.float64(np.float32(case.qs))
        else:
            b64[cols] = rng.integers(-16, 17, int(cols.sum())) / 4
    xd, wd = DT[o.x].numpy, DT[o.wdt].numpy
    x = x.astype(xd)
    r = r.astype(xd)
    if kind == "ties" and o.add:
        xf = x.astype(np.float32)
        _, e = np.frexp(xf)
        half_ulp = np.ldexp(np.ones_like(xf), e - 1 - MANTISSA[DT[o.x]] - 1)
        sign = np.where(rng.integers(0, 2, (m, n)) == 0, -1.0, 1.0).astype(np.float32)
        r = np.where(rng.integers(0, 3, (m, n)) == 0, sign * half_ulp, r.astype(np.float32)).astype(xd)
    for row, col, value, where in case.poison:
        target, lay = (x, case.x) if where == "x" else (r, case.residual)
        target[slice(None) if lay.kind == "broadcast" else row, col] = float(value)
    if case.x.kind == "broadcast" and m:
        x[:] = x[0]
    if case.residual is not None and case.residual.kind == "broadcast" and m:
        r[:] = r[0]
    out = {"x": x.reshape(case.x.shape),
           "gamma": (g if g64 is None else g64).astype(wd) if case.gamma else None,
           "beta": (b if b64 is None else b64).astype(wd) if case.has_beta else None}
    if o.add:
        out["residual"] = r.reshape(case.x.shape)
    if o.x_bias:
        out["x_bias"] = xb.astype(xd)
    if o.quant and o.smooth:
        out["smooth_scale"] = sm.astype(DT[o.smooth].numpy)
    if o.static:
        out["quant_scale"] = np.full(case.qs_shape, case.qs, np.float32)
    return out


def layout_of(case: Case, name: str) -> Layout:
    """Where each of a case's arrays lies in its buffer."""
    if name == "x":
        return case.x
    if name == "residual":
        return case.residual
    if name == "quant_scale":
        return Layout("scalar", case.qs_shape, (1,) * len(case.qs_shape), case.offsets[0] % 2)
    return vector(case.n, case.offsets[("gamma", "beta", "x_bias", "smooth_scale").index(name)])


def placed(host: np.ndarray, layout: Layout) -> np.ndarray:
    """A 1-D buffer holding `host` at `layout`, every other element all ones bits (NaN for
    floats): an element read outside the view poisons the result."""
    assert host.shape == layout.shape, (host.shape, layout.shape)
    isz = host.dtype.itemsize
    buf = np.full(layout.size * isz, 0xFF, np.uint8).view(host.dtype)
    view = np.lib.stride_tricks.as_strided(buf[layout.offset:], layout.shape,
                                           tuple(s * isz for s in layout.strides), writeable=True)
    view[...] = host
    return buf


def api_call(case: Case, arrays: dict) -> tuple[str, dict]:
    """normgen's function name and keyword arguments for a case, from its arrays by name."""
    o = case.opts
    kw = {"x": arrays["x"], "gamma": arrays.get("gamma")}
    if o.norm == "layernorm":
        kw["beta"] = arrays.get("beta")
    elif case.weight_offset:
        kw["weight_offset"] = case.weight_offset
    if case.eps is not None:
        kw["eps"] = case.eps_arg()
    if o.add:
        kw["residual"] = arrays["residual"]
        kw["store_residual"] = o.add == 1
    if o.x_bias:
        kw["x_bias"] = arrays["x_bias"]
    if o.quant:
        kw["quant"] = o.quant
        if o.static:
            kw["quant_scale"] = arrays["quant_scale"]
        elif case.scale_as is not None:
            kw["scale_dtype"] = case.scale_arg()
        if o.smooth:
            kw["smooth_scale"] = arrays["smooth_scale"]
    if o.stats:
        kw["return_mean_rstd" if o.norm == "layernorm" else "return_rstd"] = True
    return o.norm, kw


def reference_call(case: Case, host: dict):
    """normgen.reference's outputs for the case (a NormOutput) and the float64 values
    before rounding (times the smooth scale where quantized)."""
    o = case.opts
    kw = {}
    if o.add:
        kw.update(residual=host["residual"], store_residual=o.add == 1)
    if o.x_bias:
        kw["x_bias"] = host["x_bias"]
    if o.quant:
        kw["quant"] = o.quant
        if o.static:
            kw["quant_scale"] = host["quant_scale"]
        else:
            kw["scale_dtype"] = o.scale
        if o.smooth:
            kw["smooth_scale"] = host["smooth_scale"]
    eps = case.eps_value()
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN to int8 in poisoned rows
        if o.norm == "layernorm":
            out = reference.layernorm(host["x"], host["gamma"], host["beta"], eps, return_mean_rstd=o.stats, **kw)
        else:
            out = reference.rmsnorm(host["x"], host["gamma"], eps, weight_offset=case.weight_offset,
                                    return_rstd=o.stats, **kw)
        h = reference.fused_input(host["x"], host.get("residual"), host.get("x_bias"))
        y64 = reference.normalized(o.norm, h, host["gamma"], host["beta"], eps, case.weight_offset)
        if o.quant and o.smooth:
            y64 = y64 * host["smooth_scale"].astype(np.float64)
    return (out if isinstance(out, NormOutput) else NormOutput(out)), y64


def bad_rows(case: Case, host: dict) -> np.ndarray:
    """Rows holding a non-finite input (x or residual), as a boolean mask over the rows."""
    n = case.n
    bad = ~np.isfinite(host["x"].astype(np.float64).reshape(-1, n)).all(-1)
    if case.opts.add:
        bad |= ~np.isfinite(host["residual"].astype(np.float64).reshape(-1, n)).all(-1)
    return bad


# ---- the check ----------------------------------------------------------------------------
def lib_of(case: Case, name: str) -> str:
    return ("torch" if name != "x" else "cupy") if case.lib == "mixed" else case.lib


def place_case(case: Case, host: dict, backend) -> dict:
    return {k: None if v is None else backend.place(v, layout_of(case, k), lib_of(case, k))
            for k, v in host.items()}


def check_case(case: Case, backend) -> None:
    """Call normgen on the case's arrays (on `backend`) and check every output against the
    reference: the outputs' structure, kinds, dtypes and shapes; y within assert_close's
    tolerance, or codes (given the returned scales) and scales within assert_codes' and
    assert_scales'; the stored residual bit for bit; mean and rstd within assert_stats'.
    Rows with a non-finite input: NaN where the reference has NaN, the rest as above (an
    int8 code of a NaN value is not checked: it has none), and every other row as usual."""
    host = host_inputs(case)
    fn, kw = api_call(case, place_case(case, host, backend))
    out = backend.call(fn, kw)
    ref, y64 = reference_call(case, host)
    with backend.comparing():
        check_outputs(case, host, out, ref, y64, backend)


def check_outputs(case: Case, host: dict, out, ref: NormOutput, y64: np.ndarray, backend) -> None:
    o = case.opts
    xp = backend.xp
    if o.add != 1 and not o.dynamic and not o.stats:
        assert not isinstance(out, tuple), f"{type(out).__name__} returned where y alone is asked for"
        out = NormOutput(out)
    else:
        assert type(out) is NormOutput, f"{type(out).__name__} returned, not NormOutput"
    lib, shape = lib_of(case, "x"), case.x.shape
    lead = shape[:-1]
    want = {"y": (o.out, shape), "residual": (DT[o.x], shape) if o.add == 1 else None,
            "scale": (DT[o.scale], lead) if o.dynamic else None,
            "mean": (DType.FP32, lead) if o.stats and o.norm == "layernorm" else None,
            "rstd": (DType.FP32, lead) if o.stats else None}
    for name, kind in want.items():
        got = getattr(out, name)
        if kind is None:
            assert got is None, f"{name}: returned but not asked for"
            continue
        assert got is not None, f"{name}: asked for but None"
        expect = (lib, backend.dtype(lib, kind[0]), tuple(kind[1]))
        assert backend.describe(got) == expect, f"{name}: {backend.describe(got)} returned, not {expect}"

    m, n = case.rows, case.n
    bad = bad_rows(case, host)
    good = np.flatnonzero(~bad)

    def rows(a, idx):  # the output's rows idx, as (len(idx), N) or (len(idx),), on the device
        c = backend.canonical(a)
        return backend.take(c.reshape((m, n) if len(c.shape) == len(shape) else (m,)), idx)

    def ref_rows(a, idx):
        return a.reshape((m, n) if a.ndim == len(shape) else (m,))[idx]

    y64 = y64.reshape(m, n)
    if o.quant is None:
        assert_close(rows(out.y, good), xp.asarray(ref_rows(ref.y, good)), DT[o.x], "y", exact=lambda: y64[good])
    else:
        if o.dynamic:
            assert_scales(rows(out.scale, good), ref_rows(ref.scale, good), "scale")
            scale = backend.host(rows(out.scale, good)).astype(np.float64)[:, None]  # codes given the scales
        else:
            scale = float(np.float32(case.qs))
        assert_codes(rows(out.y, good), y64[good] / scale, o.out, "codes")
    if o.add == 1:
        assert_bits_equal(rows(out.residual, good), ref_rows(ref.residual, good), "residual")
    if o.stats:
        assert_stats(None if out.mean is None else rows(out.mean, good), rows(out.rstd, good),
                     None if ref.mean is None else ref_rows(ref.mean, good), ref_rows(ref.rstd, good), "stats")
    if not bad.any():
        return
    # rows with a non-finite input
    idx = np.flatnonzero(bad)
    if o.quant is None:
        got, want_y = backend.host(rows(out.y, idx)), ref_rows(ref.y, idx)
        nan = np.isnan(want_y.astype(np.float64))
        assert np.isnan(got.astype(np.float64))[nan].all(), "y of a non-finite row: a number, not NaN"
        assert_close(xp.asarray(got[~nan]), xp.asarray(want_y[~nan]), DT[o.x], "y of a non-finite row",
                     exact=lambda: y64[idx][~nan])
    else:
        if o.dynamic:
            s_got, s_want = backend.host(rows(out.scale, idx)), ref_rows(ref.scale, idx)
            nan_s = np.isnan(s_want.astype(np.float64))
            assert np.isnan(s_got.astype(np.float64))[nan_s].all(), "scale of a non-finite row: a number, not NaN"
            if (~nan_s).any():
                assert_scales(xp.asarray(s_got[~nan_s]), s_want[~nan_s], "scale of a non-finite row")
            v = y64[idx] / s_got.astype(np.float64)[:, None]
        else:
            v = y64[idx] / float(np.float32(case.qs))
        codes = backend.host(rows(out.y, idx))
        nan_v = np.isnan(v)
        if o.out == DType.FP8:
            assert np.isnan(codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32))[nan_v].all(), (
                "codes of a non-finite row: a number where y / scale is NaN")
        if (~nan_v).any():
            assert_codes(xp.asarray(codes[~nan_v]), v[~nan_v], o.out, "codes of a non-finite row")
    if o.add == 1:
        got, want_h = backend.host(rows(out.residual, idx)), ref_rows(ref.residual, idx)
        nan = np.isnan(want_h.astype(np.float64))
        assert np.isnan(got.astype(np.float64))[nan].all(), "residual of a non-finite row: a number, not NaN"
        assert_bits_equal(xp.asarray(got[~nan]), want_h[~nan], "residual of a non-finite row")
    if o.stats:  # NaN where the reference has NaN; an infinite mean may also be NaN
        got_r, want_r = backend.host(rows(out.rstd, idx)), ref_rows(ref.rstd, idx)
        got_m = want_m = None
        if o.norm == "layernorm":
            got_m, want_m = backend.host(rows(out.mean, idx)), ref_rows(ref.mean, idx)
        finite = np.ones(len(idx), bool)
        for got, want in ((got_r, want_r), (got_m, want_m)):
            if want is None:
                continue
            g64, w64 = got.astype(np.float64), want.astype(np.float64)
            nan, inf = np.isnan(w64), np.isinf(w64)
            assert np.isnan(g64[nan]).all(), "stats of a non-finite row: a number, not NaN"
            assert ((g64[inf] == w64[inf]) | np.isnan(g64[inf])).all(), "stats of a non-finite row: not inf or NaN"
            finite &= np.isfinite(w64)
        assert_stats(None if got_m is None else xp.asarray(got_m[finite]), xp.asarray(got_r[finite]),
                     None if want_m is None else want_m[finite], want_r[finite], "stats of a non-finite row")


# ---- bad calls ----------------------------------------------------------------------------
PARAMS = ("x", "gamma", "beta", "eps", "residual", "store_residual", "x_bias", "quant", "smooth_scale",
          "quant_scale", "scale_dtype", "weight_offset", "return_mean_rstd", "return_rstd")
_NAMED = re.compile(r"(?<!\w)(" + "|".join(sorted(PARAMS, key=len, reverse=True)) + r")(?!\w)")


def first_named(message: str) -> Optional[str]:
    """The first of the calls' parameter names a message mentions."""
    m = _NAMED.search(message)
    return m.group(1) if m else None


HOST_KINDS = ("numpy", "list", "scalar", "string", "object", "none") + (("torch_cpu",) if HAS_TORCH else ())
BAD_EPS = {"zero": 0, "negzero": -0.0, "negative": -1e-5, "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
           "subnormal": 1e-39, "tiny": 1e-45, "past_float32": 1e39, "huge": 1e300, "text": "abc", "none": None,
           "list": [1e-5], "complex": 1j}
BAD_OFFSET = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "past_float32": 1e39, "text": "a",
              "none": None, "list": [1.0], "complex": 1j}
BAD_QUANT = {"int4": "int4", "upper": "INT8", "fp8": "fp8", "e4m3": "e4m3", "empty": "", "e5m2": "fp8_e5m2",
             "torch_name": "float8_e4m3fn", "int": 8, "bool": True, "float": 1.5, "list": ["int8"],
             "tuple": ("int8",), "bytes": b"int8"}
BAD_SCALE = ("float64", "int8", "fp8", "e4m3", "FLOAT32", "f32", "", "np:float64", "np:int8", "int:3",
             "list:float32") + (("torch:float64", "torch:int8") if HAS_TORCH else ())


def bad_scale_value(token: str):
    if token.startswith("np:"):
        return np.dtype(token[3:])
    if token.startswith("torch:"):
        import torch

        return getattr(torch, token[6:])
    if token.startswith("int:"):
        return int(token[4:])
    return [token[5:]] if token.startswith("list:") else token


@dataclass(frozen=True)
class Bad:
    """A valid call (case) with one argument made wrong: `arg` by `how` (with `what`,
    which value or variant)."""

    case: Case
    arg: str
    how: str
    what: str = ""


def _present(case: Case) -> tuple[str, ...]:
    o = case.opts
    return tuple(a for a, on in (("x", True), ("gamma", case.gamma), ("beta", case.has_beta), ("residual", o.add),
                                 ("x_bias", o.x_bias), ("smooth_scale", bool(o.smooth)), ("quant_scale", o.static))
                 if on)


def wrong_dtypes(case: Case, arg: str) -> tuple[str, ...]:
    """numpy dtype names an argument may not have in this call."""
    o = case.opts
    floats = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    if arg == "x":
        return ("float64", "int8", "int32", "uint8", "bool", "complex64", "int16")
    if arg == "quant_scale":
        return ("float16", "bfloat16", "float64", "int32")
    if arg == "smooth_scale":
        return ("float64", "int8", "int32")
    if arg == "gamma":
        allowed = {o.x, "fp32"}
    elif arg == "beta":
        allowed = {o.wdt} if case.gamma else {o.x, "fp32"}
    else:  # residual, x_bias: x's dtype
        allowed = {o.x}
    return ("float64", "int8") + tuple(floats[f] for f in FLOATS if f not in allowed)


def bad_ways(case: Case, other_device: bool = True) -> list[tuple[str, str, str]]:
    """Every (arg, how, what) that makes this call wrong. Byte-level views ("bytes":
    strides that are not whole elements, "misaligned": a first element off an element
    boundary) are made of CuPy and host arrays only (torch cannot make them)."""
    o, n, m = case.opts, case.n, case.rows
    ways = []
    for arg in _present(case):
        raw = lib_of(case, arg) in ("cupy", "host")
        ways += [(arg, k, "") for k in HOST_KINDS if not (k == "none" and arg != "x")]
        ways += [(arg, "dtype", d) for d in wrong_dtypes(case, arg)]
        if arg == "x":
            ways += [("x", "shape", s) for s in ("0d", "no_columns")] + [("x", "three_strides", "")]
        elif arg == "residual":
            ways += [("residual", "shape", s) for s in ("more_rows", "wider", "extra_dim")]
        elif arg == "quant_scale":
            ways += [("quant_scale", "shape", s) for s in ("two", "empty", "pair")]
        else:
            ways += [(arg, "shape", s) for s in ("longer", "row", "scalar", "empty") + (("shorter",) if n > 1 else ())]
        if n > 1 and arg != "quant_scale" and (arg not in ("x", "residual") or m > 0):
            ways.append((arg, "stride", ""))  # (an empty x's strides are not checked: it has none to read)
        if raw and n > 1 and arg != "quant_scale":
            ways.append((arg, "bytes", ""))
        if raw:
            ways.append((arg, "misaligned", ""))
        if other_device and arg != "x":  # (x elsewhere moves the call: the others are then wrong)
            ways.append((arg, "device", ""))
    if o.add:
        ways.append(("residual", "grouping", ""))
    ways += [("eps", "value", k) for k in BAD_EPS]
    ways += [("quant", "value", k) for k in BAD_QUANT]
    if o.dynamic:
        ways += [("scale_dtype", "value", k) for k in BAD_SCALE]
    elif o.static:
        ways.append(("scale_dtype", "static", "float32"))
    else:
        ways += [("smooth_scale", "unquantized", ""), ("quant_scale", "unquantized", ""),
                 ("scale_dtype", "unquantized", "float32")]
    if o.norm == "rmsnorm":
        ways += [("weight_offset", "value", k) for k in BAD_OFFSET]
        if not case.gamma:
            ways.append(("weight_offset", "no_gamma", ""))
    return ways


@st.composite
def bad_calls(draw, libs=("host",), other_device: bool = True) -> Bad:
    """A small valid call with one argument made wrong."""
    opts = draw(options())
    n = draw(row_lengths(0, 64))
    x = draw(x_layouts(n, 4))
    case = draw(case_details(opts, x, draw(st.sampled_from(tuple(libs)))))
    arg, how, what = draw(st.sampled_from(bad_ways(case, other_device)))
    return Bad(case, arg, how, what)


def _rand(shape, dtype: str, seed: int = 0) -> np.ndarray:
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    v = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return (np.abs(v * 3) if dt.kind in "iub" else v).astype(dt)


_SHAPES = {"0d": lambda s, m, n: (), "no_columns": lambda s, m, n: s[:-1] + (0,),
           "more_rows": lambda s, m, n: (m + 1, n), "wider": lambda s, m, n: s[:-1] + (n + 1,),
           "extra_dim": lambda s, m, n: (1,) + s, "two": lambda s, m, n: (2,), "empty": lambda s, m, n: (0,),
           "pair": lambda s, m, n: (1, 2), "row": lambda s, m, n: (1,) + s, "longer": lambda s, m, n: (n + 1,),
           "shorter": lambda s, m, n: (n - 1,), "scalar": lambda s, m, n: ()}


def make_bad(bad: Bad, backend) -> tuple[str, dict, set]:
    """normgen's function and keyword arguments for a Bad, and the names of which the
    refusal must name one first (the argument made wrong; gamma too where weight_offset
    is given without it)."""
    case, arg, how, what = bad.case, bad.arg, bad.how, bad.what
    if how == "misaligned" and backend.launches_faults:
        # On a GPU a missed check would launch on misaligned memory and fault the device:
        # with no rows there is no launch, and a refusal owes nothing to the rows.
        empty = Layout("rows", (0, case.n), (case.n, 1))
        case = replace(case, x=empty, residual=case.residual and empty)
    host = host_inputs(case)
    fn, kw = api_call(case, place_case(case, host, backend))
    n, lib, like = case.n, lib_of(case, arg), host.get(arg)
    if how == "numpy":
        kw[arg] = like
    elif how == "list":
        kw[arg] = like.astype(np.float32).tolist()
    elif how == "torch_cpu":
        import torch

        kw[arg] = torch.from_numpy(np.ascontiguousarray(like.astype(np.float32)))
    elif how in ("scalar", "string", "object", "none"):
        kw[arg] = {"scalar": 1.0, "string": "x", "object": object(), "none": None}[how]
    elif how == "dtype":
        kw[arg] = backend.place(_rand(like.shape, what, case.seed), contiguous(like.shape), lib)
    elif how == "shape":
        shape = _SHAPES[what](like.shape, case.rows, n)
        kw[arg] = backend.place(_rand(shape, str(like.dtype), case.seed), contiguous(shape), lib)
    elif how == "stride":  # the last dimension every other element
        strides = tuple(2 * s for s in contiguous(like.shape).strides)
        kw[arg] = backend.place(like, Layout("stride", like.shape, strides), lib)
    elif how == "bytes":  # strides that are not whole elements
        isz = like.dtype.itemsize
        strides = tuple(s * isz + 1 for s in contiguous(like.shape).strides)
        kw[arg] = backend.raw(like.dtype, like.shape, strides, 0, lib)
    elif how == "misaligned":  # the first element one byte past an element boundary
        isz = like.dtype.itemsize
        kw[arg] = backend.raw(like.dtype, like.shape, tuple(s * isz for s in contiguous(like.shape).strides), 1, lib)
    elif how == "device":
        kw[arg] = backend.place(like, layout_of(case, arg), lib, device=1)
    elif how == "three_strides":
        lay = Layout("three", (2, 2, 2, n), (8 * n + 5, 4 * n + 3, 2 * n + 1, 1))
        kw["x"] = backend.place(_rand(lay.shape, str(like.dtype), case.seed), lay, lib)
        if case.opts.add:
            kw["residual"] = backend.place(_rand(lay.shape, str(like.dtype), 1), contiguous(lay.shape),
                                           lib_of(case, "residual"))
    elif how == "grouping":  # x's rows merge to one stride, the residual's take two
        xl, rl = make_layout("contig3", (2, 2), n, 1), make_layout("gap", (2, 2), n, 1, 3)
        dtype = str(host["x"].dtype)
        kw["x"] = backend.place(_rand(xl.shape, dtype, case.seed), xl, lib_of(case, "x"))
        kw["residual"] = backend.place(_rand(rl.shape, dtype, 1), rl, lib)
    elif how == "value":
        kw[arg] = {"eps": BAD_EPS.get, "quant": BAD_QUANT.get, "scale_dtype": bad_scale_value,
                   "weight_offset": BAD_OFFSET.get}[arg](what)
    elif how in ("static", "unquantized") and arg == "scale_dtype":
        kw[arg] = what
    elif how == "unquantized":
        shape = (1,) if arg == "quant_scale" else (n,)
        kw[arg] = backend.place(np.full(shape, 0.5, np.float32), contiguous(shape), lib)
    elif how == "no_gamma":
        kw["weight_offset"] = 1.0
        return fn, kw, {"weight_offset", "gamma"}
    else:
        raise ValueError(f"unknown way {how!r}")
    return fn, kw, {arg}


def check_bad(bad: Bad, backend) -> None:
    """The call is refused with a TypeError or ValueError whose message names the argument
    made wrong (first among the parameters it names); never accepted, never another error."""
    fn, kw, offending = make_bad(bad, backend)
    try:
        backend.call(fn, kw)
    except (TypeError, ValueError) as e:
        named = first_named(str(e))
        assert named in offending, (
            f"{type(e).__name__} names {named!r} first, not {sorted(offending)}: {e}")
    except Exception as e:  # noqa: BLE001 (any other kind of error is the failure)
        raise AssertionError(f"{type(e).__name__} instead of TypeError/ValueError: {e}") from e
    else:
        raise AssertionError(f"accepted: {bad.arg} {bad.how} {bad.what}".rstrip())
