"""The kernel matrix: every axis with its values and default values, and the one filter
function that the CLI (generate.py) and the test suite both select instances with."""
from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional

from . import tiles
from .spec import KernelSpec, invalid_reason
from .types import DType, FusedAdd, Norm, Pipeline, Quant


@dataclass(frozen=True)
class Axis:
    help: str
    values: tuple[str, ...]  # every value, as spelled on the command line
    default: tuple[str, ...]  # the default set's values


_FLOATS = tuple(d.value for d in (DType.FP32, DType.FP16, DType.BF16))

AXES: dict[str, Axis] = {
    "norm": Axis("normalization", ("layernorm", "rmsnorm"), ("layernorm",)),
    "prec": Axis("input precision", _FLOATS, _FLOATS),
    "wprec": Axis("gamma/beta precision ('same' = the input's)", ("same", "fp32"), ("same", "fp32")),
    "fused_add": Axis("fused residual add: 0 none, 1 add and store the sum, 2 add only",
                      ("0", "1", "2"), ("0",)),
    "x_bias": Axis("fused x-bias: 0 off, 1 on", ("0", "1"), ("0",)),
    "quant": Axis("fused quantized output", ("none", "int8", "fp8"), ("none",)),
    "quant_mode": Axis("per-row scale computed (dynamic) or given (static)",
                       ("dynamic", "static"), ("dynamic", "static")),
    "smooth": Axis("smooth-scale precision ('none' = no smoothing)", ("none",) + _FLOATS,
                   ("none", "fp32")),
    "scale_prec": Axis("per-row scale output precision (dynamic quant)", _FLOATS, ("fp32",)),
    "save_mv": Axis("write mean and rstd: 0 no, 1 yes", ("0", "1"), ("0", "1")),
    "pipeline": Axis("1p: row held on chip; 2p: statistics, then re-read", ("1p", "2p"),
                     ("1p", "2p")),
    "bucket": Axis("largest N of a one-pass instance", tuple(map(str, tiles.BUCKETS)),
                   tuple(map(str, tiles.BUCKETS))),
    "vec": Axis("elements per access ('max' = 16 bytes; 'ragged' = 16 bytes, rows of any start and N; "
                "'framed' = 16 bytes over a frame around each row, rows of any start and N)",
                ("max", "ragged", "framed", "1", "2", "4", "8"), ("max", "ragged", "framed")),
}


# The default set is the union of these families and their fallbacks: each family names
# values for some axes, and the axes it leaves out take their default values above. Each
# family's fallback is the family as two-pass instances over single elements, which serve
# every N and every alignment: so a call of any family the default set holds is served.
DEFAULT_FAMILIES: tuple[Mapping[str, tuple[str, ...]], ...] = (
    {  # plain LayerNorm: every precision and weight precision, with and without stats; rows
        # in registers not 16-byte aligned also one element an access (recipe.ragged_first)
        "vec": ("max", "ragged", "framed", "1"),
    },
    {  # plain RMSNorm likewise
        "norm": ("rmsnorm",),
    },
    {  # the common inference fusions: add (and store) + norm (+ smooth) + dynamic quant
        "prec": ("fp16", "bf16"), "wprec": ("same",), "fused_add": ("0", "1"),
        "quant": ("none", "int8", "fp8"), "quant_mode": ("dynamic",), "smooth": ("none", "fp32"),
        "save_mv": ("0",),
    },
    {  # RMSNorm as LLM inference runs it: add (and store) + norm + dynamic or static quant
        "norm": ("rmsnorm",), "prec": ("fp16", "bf16"), "wprec": ("same",), "fused_add": ("0", "1"),
        "quant": ("none", "int8", "fp8"), "quant_mode": ("dynamic", "static"), "smooth": ("none",),
        "save_mv": ("0",),
    },
)
FALLBACK: Mapping[str, tuple[str, ...]] = {"pipeline": ("2p",), "vec": ("1",)}


def default_families(axes: Mapping[str, tuple[str, ...]] = {}) -> list[dict[str, tuple[str, ...]]]:
    """DEFAULT_FAMILIES, each followed by its fallback, with `axes` set in each: a fallback
    stays only where `axes` admits its own values (--pipeline 1p drops them)."""
    out = []
    for fam in DEFAULT_FAMILIES:
        out.append({a: axes.get(a, fam.get(a, AXES[a].default)) for a in AXES})
        if all(set(v) <= set(axes.get(a, v)) for a, v in FALLBACK.items()):
            out.append({**out[-1], **FALLBACK})
    return out


@dataclass(frozen=True)
class Selection:
    """What to select: per-axis values (an axis left out takes its default values, or every
    value when include globs are given), then include and exclude globs on names."""

    axes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def families(self) -> list[dict[str, tuple[str, ...]]]:
        """The axis values to enumerate, as a union of products: the named axes' values in
        every default family (or, with include globs, every value of the other axes)."""
        if self.include:
            return [{a: self.axes.get(a, AXES[a].values) for a in AXES}]
        return default_families(self.axes)


class SelectionError(ValueError):
    pass


def check_values(axis: str, values: tuple[str, ...]) -> tuple[str, ...]:
    valid = AXES[axis].values
    bad = [v for v in values if v not in valid]
    if bad:
        raise SelectionError(f"unknown {axis} value(s) {', '.join(bad)}; valid: {', '.join(valid)}")
    return values


def _enumerate(sel: Selection) -> Iterator[KernelSpec]:
    for family in sel.families():
        yield from _product(family)


def _product(values: Mapping[str, tuple[str, ...]]) -> Iterator[KernelSpec]:
    v = values.__getitem__
    quant_variants = _quant_variants(v)
    for norm, x, wp, add, xb, mv in itertools.product(
        v("norm"), v("prec"), v("wprec"), v("fused_add"), v("x_bias"), v("save_mv")
    ):
        xd = DType(x)
        shapes = [(Pipeline.TWO_PASS, None)] if "2p" in v("pipeline") else []
        if "1p" in v("pipeline"):
            shapes += [(Pipeline.ONE_PASS, int(b)) for b in v("bucket")]
        vecs = sorted({(xd.vmax, s == "ragged", s == "framed") if s in ("max", "ragged", "framed")
                       else (int(s), False, False) for s in v("vec")})
        for (pipe, bucket), (vec, ragged, framed), (quant, out, smooth, scale) in itertools.product(
            shapes, vecs, quant_variants
        ):
            yield KernelSpec(
                norm=Norm(norm), x=xd, w=xd if wp == "same" else DType(wp),
                out=out or xd, fused_add=FusedAdd(int(add)), x_bias=xb == "1",
                quant=quant, smooth=smooth, scale=scale, save_stats=mv == "1",
                pipeline=pipe, bucket=bucket, vec=vec, ragged=ragged, framed=framed,
            )


def _quant_variants(v) -> list[tuple[Quant, Optional[DType], Optional[DType], Optional[DType]]]:
    out = []
    for q in v("quant"):
        if q == "none":
            out.append((Quant.NONE, None, None, None))
            continue
        smooths = [None if s == "none" else DType(s) for s in v("smooth")]
        for mode, sm in itertools.product(v("quant_mode"), smooths):
            if mode == "static":
                out.append((Quant.STATIC, DType(q), sm, None))
            else:
                out += [(Quant.DYNAMIC, DType(q), sm, DType(s)) for s in v("scale_prec")]
    return out


def select(sel: Selection = Selection()) -> list[KernelSpec]:
    """The valid instances a selection names, sorted by name. The one filter function."""
    for axis, values in sel.axes.items():
        check_values(axis, values)
    chosen = {}
    for spec in _enumerate(sel):
        name = spec.name
        if name in chosen:
            continue
        # the globs first: with --filter every axis ranges, and most names do not match
        if sel.include and not any(fnmatch.fnmatchcase(name, g) for g in sel.include):
            continue
        if any(fnmatch.fnmatchcase(name, g) for g in sel.exclude) or invalid_reason(spec):
            continue
        chosen[name] = spec
    return [chosen[n] for n in sorted(chosen)]
