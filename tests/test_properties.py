"""Property-based tests (hypothesis) without a GPU, under the 'ci' profile (tests/strategies.py):

- spec names round-trip over the whole matrix, and names of invalid specs or garbled
  names are refused;
- the reference against a formula written here (and torch's layer_norm / rms_norm where
  torch is installed);
- bad calls are refused with a TypeError or ValueError naming the argument, through the
  real entry points on host data: host values for x, and wrong options (checked before any
  array). Every other wrong argument needs device arrays: test_gpu_properties.py."""
from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import replace

import ml_dtypes
import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

import normgen
from normgen import devices, dispatch, tiles
from normgen.spec import KernelSpec, SpecError, invalid_reason, parse_name
from normgen.types import FLOAT_INPUTS, DType, FusedAdd, Norm, Pipeline, Quant

from .strategies import (
    BAD_EPS, BAD_OFFSET, BAD_QUANT, CLASSES, DT, FLOATS, HAS_TORCH, HOST_KINDS, POOL, SMALL, Case, Options,
    api_call, bad_calls, check_bad, cpu_settings, first_named, host_inputs, placed, reference_call,
    small_cases, tier_classes,
)


# ---- bad options ---------------------------------------------------------------------------
class Host:
    """A backend for strategies.make_bad / check_bad without a GPU: the arrays are numpy
    arrays, and the call is normgen's own. Only the options are checked before any array
    (dispatch._plan), so only calls whose one wrong argument is an option (CPU_WAYS) are
    drawn here; the GPU property tests draw every other wrong argument."""

    launches_faults = False

    def place(self, host, layout, lib="host", device=0):
        buf = placed(host, layout)
        return np.lib.stride_tricks.as_strided(buf[layout.offset:], layout.shape,
                                               tuple(s * buf.itemsize for s in layout.strides))

    def call(self, fn, kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", normgen.NormgenWarning)
            return getattr(normgen, fn)(**kw)


CPU_WAYS = ("value", "static", "unquantized", "no_gamma")


@given(bad_calls().filter(lambda bad: bad.how in CPU_WAYS))
@cpu_settings(400)
def test_bad_options_are_refused_naming_them(bad):
    check_bad(bad, Host())


@st.composite
def host_calls(draw):
    """Real entry points on host data: x a host value (numpy, list, torch CPU tensor,
    scalar...), the other arrays numpy, and perhaps one wrong option. The refusal must
    name x or one of the other wrong arguments (rmsnorm checks weight_offset first)."""
    case = draw(small_cases(rows=4, most_n=64))
    host = host_inputs(case)
    fn, kw = api_call(case, host)
    kinds = tuple(k for k in HOST_KINDS if k != "none") + ("none",)
    how = draw(st.sampled_from(kinds))
    x = host["x"]
    if how == "torch_cpu":
        import torch

        kw["x"] = torch.from_numpy(np.ascontiguousarray(x.astype(np.float32)))
    else:
        kw["x"] = {"numpy": x, "list": x.astype(np.float32).tolist(), "scalar": 1.0, "string": "x",
                   "object": object(), "none": None}[how]
    offending = {"x"} | {k for k, v in kw.items() if isinstance(v, np.ndarray)}
    option = draw(st.sampled_from(("", "eps", "quant") + (("weight_offset",) if fn == "rmsnorm" else ())))
    if option:
        bad = {"eps": BAD_EPS, "quant": BAD_QUANT, "weight_offset": BAD_OFFSET}[option]
        kw[option] = bad[draw(st.sampled_from(sorted(bad)))]
        offending.add(option)
    if fn == "rmsnorm" and kw.get("gamma") is None and isinstance(kw.get("weight_offset"), float) \
            and kw["weight_offset"] != 0:
        offending |= {"weight_offset", "gamma"}
    return fn, kw, offending


@given(host_calls())
@cpu_settings(150)
def test_host_arrays_are_refused_naming_the_argument(call):
    fn, kw, offending = call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", normgen.NormgenWarning)
        try:
            getattr(normgen, fn)(**kw)
        except (TypeError, ValueError) as e:
            assert first_named(str(e)) in offending, f"{type(e).__name__}: {e} (names none of {sorted(offending)})"
        else:
            raise AssertionError("a call on host data returned")


# ---- spec names ---------------------------------------------------------------------------
def _widths(x: DType) -> tuple[int, ...]:
    return tuple(v for v in (1, 2, 4, 8) if v <= x.vmax)


@st.composite
def valid_specs(draw) -> KernelSpec:
    """Any instance of the matrix (the strategy draws consistent fields; invalid_reason
    filters the rest)."""
    x = draw(st.sampled_from(FLOAT_INPUTS))
    quant = draw(st.sampled_from(tuple(Quant)))
    pipeline = draw(st.sampled_from(tuple(Pipeline)))
    spec = KernelSpec(
        norm=draw(st.sampled_from(tuple(Norm))), x=x, w=draw(st.sampled_from((x, DType.FP32))),
        out=x if quant == Quant.NONE else draw(st.sampled_from((DType.INT8, DType.FP8))),
        fused_add=draw(st.sampled_from(tuple(FusedAdd))), x_bias=draw(st.booleans()), quant=quant,
        smooth=None if quant == Quant.NONE else draw(st.sampled_from((None,) + FLOAT_INPUTS)),
        scale=draw(st.sampled_from(FLOAT_INPUTS)) if quant == Quant.DYNAMIC else None,
        save_stats=draw(st.booleans()), pipeline=pipeline,
        bucket=(draw(st.sampled_from(sorted(tiles.ONE_PASS_TILES[x.itemsize])))
                if pipeline == Pipeline.ONE_PASS else None),
        vec=draw(st.sampled_from(_widths(x))))
    assume(invalid_reason(spec) is None)
    return spec


@st.composite
def any_specs(draw) -> KernelSpec:
    """Specs of any field values, most of them invalid."""
    dts = tuple(DType)
    return KernelSpec(
        norm=draw(st.sampled_from(tuple(Norm))), x=draw(st.sampled_from(dts)), w=draw(st.sampled_from(dts)),
        out=draw(st.sampled_from(dts)), fused_add=draw(st.sampled_from(tuple(FusedAdd))), x_bias=draw(st.booleans()),
        quant=draw(st.sampled_from(tuple(Quant))), smooth=draw(st.sampled_from((None,) + dts)),
        scale=draw(st.sampled_from((None,) + dts)), save_stats=draw(st.booleans()),
        pipeline=draw(st.sampled_from(tuple(Pipeline))),
        bucket=draw(st.one_of(st.none(), st.sampled_from(tiles.BUCKETS), st.integers(0, 2**21))),
        vec=draw(st.sampled_from((0, 1, 2, 3, 4, 8, 16))))


@given(valid_specs())
@cpu_settings(300)
def test_valid_spec_names_round_trip(spec):
    assert parse_name(spec.name) == spec


@given(any_specs().filter(lambda s: invalid_reason(s) is not None))
@cpu_settings(300)
def test_names_of_invalid_specs_do_not_parse_to_them(spec):
    """parse_name refuses an invalid spec's name, or (where the name does not spell the
    invalid field, e.g. a two-pass spec's bucket) gives the valid spec of that name."""
    try:
        parsed = parse_name(spec.name)
    except SpecError:
        return
    assert parsed != spec and invalid_reason(parsed) is None and parsed.name == spec.name


@st.composite
def garbled_names(draw) -> str:
    name = draw(valid_specs()).name
    parts = name.split("_")
    how = draw(st.sampled_from(("insert", "delete", "replace", "swap", "drop", "repeat")))
    if how in ("swap", "drop", "repeat") and len(parts) > 1:
        i = draw(st.integers(0, len(parts) - 2))
        if how == "swap":
            parts[i], parts[i + 1] = parts[i + 1], parts[i]
        elif how == "drop":
            del parts[i]
        else:
            parts.insert(i, parts[i])
        return "_".join(parts)
    i = draw(st.integers(0, len(name)))
    c = draw(st.sampled_from("_0123456789abcdefmnpqrstuvwxy"))
    if how == "insert":
        return name[:i] + c + name[i:]
    if how == "delete" and i < len(name):
        return name[:i] + name[i + 1:]
    return name[:i] + c + name[i + 1:]


@given(garbled_names())
@cpu_settings(300)
def test_garbled_names_parse_to_valid_specs_of_that_name_or_not_at_all(name):
    try:
        spec = parse_name(name)
    except SpecError:
        return
    assert spec.name == name and invalid_reason(spec) is None


# ---- the GPU tests' option pool -----------------------------------------------------------
def _applies(o: Options, f: str) -> bool:
    if f in ("static", "smooth"):
        return o.quant is not None
    if f == "scale":
        return o.dynamic
    return f != "w" or o.x != "fp32"


_FIELDS = ("norm", "x", "w", "add", "x_bias", "quant", "static", "smooth", "scale", "stats")


def _pairs(o: Options) -> set:
    return {(a, getattr(o, a), b, getattr(o, b)) for a, b in itertools.combinations(_FIELDS, 2)
            if _applies(o, a) and _applies(o, b)}


def test_the_option_pool_covers_every_pair_of_option_values():
    every = set()
    for v in itertools.product(("layernorm", "rmsnorm"), FLOATS, ("same", "fp32"), (0, 1, 2), (False, True),
                               (None, "int8", "fp8_e4m3"), (False, True), (None,) + FLOATS, FLOATS, (False, True)):
        norm, x, w, add, xb, q, static, sm, sc, stats = v
        if (x == "fp32" and w != "same") or (q is None and (static or sm)) or (not q or static) and sc != "fp32":
            continue
        every |= _pairs(Options(norm, x, w, add, xb, q, static, sm, sc if q and not static else None, stats))
    covered = set().union(*map(_pairs, POOL))
    assert every - covered == set()
    for o in POOL:
        assert invalid_reason(o.spec) is None, o
        assert (o.scale is not None) == o.dynamic and (o.smooth is None or o.quant), o


def _instance(call: KernelSpec, w_given: bool, n: int, vec: int, dev) -> str:
    """The instance dispatch.instance_for takes (without generating anything)."""
    calls = [call] if w_given else [replace(call, w=call.x), replace(call, w=DType.FP32)]
    for c in calls:
        s = dispatch.shipped(c, n, vec, dev)
        if s is not None:
            return s.name
    return next(dispatch.candidates(calls[0], n, vec, dev)).name


def test_the_gpu_tests_reach_a_bounded_set_of_instances():
    """Every instance the GPU property tests can use on an H100: each pool entry with its
    three classes of N (small: every vector width; medium and large: 1 or 16 bytes), with
    and without gamma and beta."""
    dev = devices.KNOWN[90]
    reach = set()
    for i, o in enumerate(POOL):
        for cls in tier_classes(i):
            n = CLASSES[cls][1]
            vmax = DT[o.x].vmax
            for vec in (v for v in (1, 2, 4, 8) if v <= vmax and (cls in SMALL or v in (1, vmax))):
                for w_given in (True, False):
                    reach.add(_instance(o.spec, w_given, n, vec, dev))
    print(f"{len(reach)} instances reachable")
    assert 50 <= len(reach) <= 250, len(reach)


# ---- the reference against a formula ------------------------------------------------------
_NORMAL = {"fp32": (np.finfo(np.float32).tiny, np.finfo(np.float32).max),
           "fp16": (np.finfo(np.float16).tiny, np.finfo(np.float16).max),
           "bf16": (2.0**-126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))}
_QMAX = {"int8": 127.0, "fp8_e4m3": 448.0}


def _sum(row: np.ndarray) -> float:
    return math.fsum(row) if np.isfinite(row).all() else float(np.sum(row))


def _formula(case: Case, host: dict):
    """The outputs of a call, computed here: h in float32 in order, rounded once to x's
    dtype; exactly rounded float64 sums for the statistics; y in float64. Returns h, y64
    (times the smooth scale), mean (LayerNorm), rstd and a bound on y64's float64 error
    per row."""
    o, n = case.opts, case.n
    x = host["x"].reshape(-1, n)
    h = x
    if o.add or o.x_bias:
        h32 = x.astype(np.float32)
        if o.x_bias:
            h32 = h32 + host["x_bias"].astype(np.float32)
        if o.add:
            h32 = h32 + host["residual"].reshape(-1, n).astype(np.float32)
        h = h32.astype(x.dtype)
    h64 = h.astype(np.float64)
    eps = case.eps_value()
    with np.errstate(all="ignore"):
        if o.norm == "layernorm":
            mean = np.array([_sum(r) / n for r in h64])
            var = np.array([_sum((r - mu) ** 2) / n for r, mu in zip(h64, mean)])
        else:
            mean = np.zeros(len(h64))
            var = np.array([_sum(r * r) / n for r in h64])
        rstd = 1 / np.sqrt(var + eps)
        g = host["gamma"]
        if o.norm == "layernorm":
            w = np.ones(n) if g is None else g.astype(np.float64)
            b = np.zeros(n) if host["beta"] is None else host["beta"].astype(np.float64)
            y = (h64 - mean[:, None]) * rstd[:, None] * w + b
        else:
            w = np.ones(n) if g is None else (g.astype(np.float32) + np.float32(case.weight_offset)).astype(np.float64)
            b = np.zeros(n)
            y = h64 * rstd[:, None] * w
        sm = host["smooth_scale"].astype(np.float64) if o.quant and o.smooth else np.ones(n)
        y = y * sm
        err = 1e-11 * (1 + (np.abs(h64).max(-1, initial=0) * rstd * np.abs(w).max() + np.abs(b).max()) * sm.max())
    return h, y, mean, rstd, np.where(np.isfinite(err), err, 0.0)  # (rows with an infinity: their finite y are 0)


def _assert_rounded(got, t, cast, rel: float, err, what: str):
    """`got` is `t` rounded by `cast`, t known to within err (+ rel * |t| for casts that
    may round twice): NaN exactly where t is NaN, infinities equal, the rest within the
    roundings of t - e and t + e (rounding is monotone)."""
    g, t = np.asarray(got).astype(np.float64), np.broadcast_to(np.asarray(t, np.float64), np.shape(got))
    nan = np.isnan(t)
    assert np.array_equal(np.isnan(g), nan), f"{what}: NaN at {np.flatnonzero(np.isnan(g) != nan)[:4]}"
    fin = np.isfinite(t)
    assert (g[~fin & ~nan] == t[~fin & ~nan]).all(), f"{what}: infinities differ"
    e = rel * np.abs(t[fin]) + np.broadcast_to(err, t.shape)[fin]
    with np.errstate(all="ignore"):
        lo, hi = cast(t[fin] - e).astype(np.float64), cast(t[fin] + e).astype(np.float64)
    ok = (lo <= g[fin]) & (g[fin] <= hi)
    assert ok.all(), f"{what}: {g[fin][~ok][:4]} is not {t[fin][~ok][:4]} rounded"


_CAST = {"fp32": lambda v: v.astype(np.float32), "fp16": lambda v: v.astype(np.float16),
         "bf16": lambda v: v.astype(ml_dtypes.bfloat16)}
_TWICE = {"fp32": 0.0, "fp16": 0.0, "bf16": 2.0**-22}  # ml_dtypes may round through float32


@given(st.one_of(small_cases(), small_cases(nonfinite=True)))
@cpu_settings(300)
def test_the_reference_matches_a_formula(case):
    o, n = case.opts, case.n
    host = host_inputs(case)
    ref, _ = reference_call(case, host)
    h, y, mean, rstd, err = _formula(case, host)
    m = len(h)
    err = err[:, None]
    if o.add == 1:
        assert np.array_equal(ref.residual.reshape(m, n).view(f"u{h.dtype.itemsize}"), h.view(f"u{h.dtype.itemsize}"))
    else:
        assert ref.residual is None
    if o.quant is None:
        _assert_rounded(ref.y.reshape(m, n), y, _CAST[o.x], _TWICE[o.x], err, "y")
    else:
        qmax = _QMAX[o.quant]
        if o.dynamic:
            lo, hi = _NORMAL[o.scale]
            with np.errstate(all="ignore"):
                amax = np.abs(y).max(-1)
            sdt = DT[o.scale].numpy
            to_scale = lambda v: np.clip(v.astype(np.float32), lo, hi).astype(sdt)  # noqa: E731
            _assert_rounded(ref.scale.reshape(m), amax / qmax, to_scale, 1e-12, err[:, 0] / qmax, "scale")
            scale = ref.scale.reshape(m, 1).astype(np.float64)
        else:
            assert ref.scale is None
            scale = np.float64(np.float32(case.qs))
        with np.errstate(all="ignore"):
            v = y / scale
        if o.quant == "int8":
            nan = np.isnan(v)  # an int8 code of NaN is whatever the platform's cast gives
            codes = ref.y.reshape(m, n).astype(np.float64)
            _assert_rounded(codes[~nan], v[~nan], lambda u: np.clip(np.rint(u), -128, 127), 0.0,
                            np.broadcast_to(err / scale, v.shape)[~nan] + 1e-9, "int8 codes")
        else:
            _assert_rounded(ref.y.reshape(m, n).astype(np.float32), v,
                            lambda u: np.clip(u, -448, 448).astype(ml_dtypes.float8_e4m3fn), 2.0**-22,
                            err / scale + 1e-9, "fp8 codes")
    if o.stats:
        _assert_rounded(ref.rstd.reshape(m), rstd, lambda v: v.astype(np.float32), 1e-10, 0.0, "rstd")
        if o.norm == "layernorm":
            _assert_rounded(ref.mean.reshape(m), mean, lambda v: v.astype(np.float32), 0.0,
                            1e-12 * (1 + np.abs(h.astype(np.float64)).max(-1, initial=0)), "mean")
        else:
            assert ref.mean is None
    else:
        assert ref.mean is None and ref.rstd is None
    if HAS_TORCH and m:
        _torch_agrees(case, host, h, y)


def _torch_agrees(case, host, h, y):
    """torch's layer_norm / rms_norm in float64 give the formula's y (before smoothing)."""
    import torch

    o, n = case.opts, case.n
    h64 = torch.from_numpy(h.astype(np.float64))
    g = host["gamma"]
    eps = case.eps_value()
    if o.norm == "layernorm":
        w = None if g is None else torch.from_numpy(g.astype(np.float64))
        b = None if host["beta"] is None else torch.from_numpy(host["beta"].astype(np.float64))
        t = torch.nn.functional.layer_norm(h64, (n,), w, b, eps)
    else:
        w = None if g is None else torch.from_numpy(
            (g.astype(np.float32) + np.float32(case.weight_offset)).astype(np.float64))
        t = torch.nn.functional.rms_norm(h64, (n,), w, eps)
    sm = host["smooth_scale"].astype(np.float64) if o.quant and o.smooth else 1.0
    mine = y / sm
    theirs = t.numpy()
    scale = 1 + np.abs(np.where(np.isfinite(mine), mine, 0)).max()
    np.testing.assert_allclose(theirs, mine, rtol=1e-9, atol=1e-9 * scale, err_msg="torch")
