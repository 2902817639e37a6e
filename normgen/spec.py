"""One frozen spec per kernel instance: the source of truth for its name, file, kernel
symbol, registry key, cache key and test id. How it is built (tile, launch bounds, the
template's knobs) is its recipe: normgen.recipe."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Optional

from . import tiles
from .recipe import fitted_serves, framed_serves, has_one_pass, recipe
from .types import FLOAT_INPUTS, QUANT_OUTPUTS, DType, FusedAdd, Norm, Pipeline, Quant


@dataclass(frozen=True, order=False)
class KernelSpec:
    norm: Norm
    x: DType  # input (and residual) precision
    w: DType  # gamma/beta precision: x's or fp32
    out: DType  # y precision: x's, or int8/fp8 when quantizing
    fused_add: FusedAdd = FusedAdd.NONE
    x_bias: bool = False
    quant: Quant = Quant.NONE
    smooth: Optional[DType] = None  # per-column smooth-scale precision, None = no smoothing
    scale: Optional[DType] = None  # per-row scale output precision (dynamic quant only)
    save_stats: bool = False  # write mean and rstd (fp32, one per row)
    pipeline: Pipeline = Pipeline.ONE_PASS
    bucket: Optional[int] = None  # largest N a one-pass instance serves; None for two-pass
    vec: int = 8  # elements per memory access
    # rows of any start and length, in aligned accesses of `vec` (16 bytes) realigned on chip;
    # else every row's start and N are multiples of `vec`
    ragged: bool = False
    # rows of any start and length in register buckets, in the aligned accesses of `vec` over
    # a frame around each row, the per-column vectors read realigned (kernels/framed_rows.cuh)
    framed: bool = False

    # ---- names and keys derived from the fields (policy: normgen.recipe) -------------
    @property
    def name(self) -> str:
        parts = [self.norm.value, "fwd", self.x.value]
        if self.w != self.x:
            parts.append("w" + self.w.value)
        if self.x_bias:
            parts.append("xb")
        if self.fused_add != FusedAdd.NONE:
            parts.append(f"add{int(self.fused_add)}")
        if self.smooth is not None:
            parts.append("sm" + self.smooth.value)
        if self.quant != Quant.NONE:
            parts.append(self.quant.value + self.out.value)
        if self.scale is not None:
            parts.append("sy" + self.scale.value)
        if self.pipeline == Pipeline.ONE_PASS:
            parts.append(f"nb{self.bucket}")
        parts += [self.pipeline.value, f"{'r' if self.ragged else 'f' if self.framed else 'v'}{self.vec}"]
        if self.save_stats:
            parts.append("mv")
        return "_".join(parts)

    # The kernel symbol, file stem, registry value and pytest id are all the name.
    symbol = file_stem = test_id = name

    @property
    def file_name(self) -> str:
        return self.name + ".cu"

    @property
    def key(self) -> tuple:
        """Registry key: the field values, in field order (what the dispatcher builds)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def __str__(self) -> str:
        return self.name

    @property
    def scalar_two_pass(self) -> "KernelSpec":
        """The instance of the same operation that serves every N and alignment (two-pass,
        one element an access): what the matrix falls back to, and what calls of the same
        semantics share whatever instance serves them."""
        return replace(self, pipeline=Pipeline.TWO_PASS, bucket=None, vec=1, ragged=False, framed=False)


def invalid_reason(spec: KernelSpec) -> Optional[str]:
    """Why this combination of choices is not a kernel instance, or None if it is one."""
    s = spec
    if s.x not in FLOAT_INPUTS:
        return f"input precision must be one of fp32/fp16/bf16, not {s.x.value}"
    if s.w not in (s.x, DType.FP32):
        return f"gamma/beta precision must be the input's ({s.x.value}) or fp32, not {s.w.value}"
    if s.quant == Quant.NONE:
        if s.out != s.x:
            return "without quantization the output precision is the input's"
        if s.smooth is not None:
            return "a smooth scale needs quantization"
    elif s.out not in QUANT_OUTPUTS:
        return f"a quantized output is int8 or fp8, not {s.out.value}"
    if (s.scale is not None) != (s.quant == Quant.DYNAMIC):
        return "a per-row scale precision goes with dynamic quantization, and only with it"
    for role, dt in (("smooth scale", s.smooth), ("per-row scale", s.scale)):
        if dt is not None and dt not in FLOAT_INPUTS:
            return f"{role} precision must be fp32/fp16/bf16, not {dt.value}"
    if s.vec not in _vec_widths(s.x):
        return f"vector width must be one of {_vec_widths(s.x)} for {s.x.value}, not {s.vec}"
    if s.pipeline == Pipeline.ONE_PASS:
        if s.bucket not in tiles.ONE_PASS_TILES[s.x.itemsize]:
            valid = sorted(tiles.ONE_PASS_TILES[s.x.itemsize])
            return f"a one-pass {s.x.value} bucket must be one of {valid}, not {s.bucket}"
        cut_from = tiles.FITTED_FROM[s.x.itemsize].get(s.bucket)
        if cut_from and not fitted_serves(s):
            return (f"a fitted bucket ({s.bucket}) serves rows of whole 16-byte vectors (and narrower "
                    f"ones where tiles.NARROW_TILES has it); ragged rows and other narrower vectors take the "
                    f"bucket it is cut from ({cut_from})")
        if not has_one_pass(s.x, s.bucket, s.vec):
            return (f"a one-pass row of {s.bucket} in {s.vec}-element accesses needs more "
                    "accesses per thread than its register share holds, or sub-word "
                    "shared-memory staging; the two-pass instance serves it")
        if s.x_bias and s.fused_add != FusedAdd.NONE and recipe(s).tile.block_threads == 1024:
            return ("a 1024-thread block (64 registers a thread) cannot also load an x-bias and a "
                    "residual without spilling; the next bucket or the two-pass instance serves it")
    if s.ragged and (s.pipeline != Pipeline.ONE_PASS or s.vec != s.x.vmax):
        return "ragged rows are one-pass instances of 16-byte vectors"
    if s.framed:
        if s.ragged:
            return "a row is framed or ragged, not both"
        if s.pipeline != Pipeline.ONE_PASS or s.vec != s.x.vmax:
            return "framed rows are one-pass instances of 16-byte vectors"
        tile = recipe(s).tile
        if tile.shared_bytes or tile.cluster > 1:
            return (f"framed rows are held in registers by one block; the {s.bucket} bucket's rows are "
                    "staged or span a cluster (its ragged rows serve them)")
        narrow = [d.value for d in (s.w, s.smooth) if d is not None and d.itemsize * s.x.vmax < 16]
        if narrow:
            return (f"framed rows read per-column vectors in 16-byte chunks of {s.x.vmax} elements; "
                    f"{', '.join(narrow)} ones of {s.x.value} rows fill less (ragged rows serve them)")
        if not framed_serves(s):
            return (f"ragged rows or narrower vectors serve the {s.bucket} bucket's unaligned rows of this "
                    "operation faster than framed rows (recipe.framed_serves)")
    if s.pipeline == Pipeline.TWO_PASS and s.bucket is not None:
        return "a two-pass instance serves every N and has no bucket"
    return None


def longest_row(spec: KernelSpec) -> int:
    """The longest row a one-pass instance serves: its bucket, less the vector's other
    columns for framed rows (a row's frame may begin vec - 1 columns before it)."""
    return spec.bucket - (spec.vec - 1 if spec.framed else 0)


def framed_range(spec: KernelSpec) -> tuple[int, int]:
    """(lo, top): the rows a framed instance serves, lo < N <= top: those whose smallest
    one-pass bucket is its own and whose frame it holds (dispatch.candidates)."""
    return max((b for b in tiles.ONE_PASS_TILES[spec.x.itemsize] if b < spec.bucket), default=0), longest_row(spec)


def shorter_bucket(spec: KernelSpec) -> int:
    """The largest bucket below a one-pass spec's in which the same instance is valid (0:
    none): the dispatcher gives spec the rows of its kind longer than that."""
    return max((b for b in tiles.BUCKETS if b < spec.bucket and invalid_reason(replace(spec, bucket=b)) is None),
               default=0)


def _vec_widths(x: DType) -> tuple[int, ...]:
    return tuple(1 << i for i in range(x.vmax.bit_length()) if (1 << i) <= x.vmax)


class SpecError(ValueError):
    pass


def validated(spec: KernelSpec) -> KernelSpec:
    reason = invalid_reason(spec)
    if reason:
        raise SpecError(f"{spec.name}: {reason}")
    return spec


_DT = {d.value: d for d in DType}
_NAME_RE = re.compile(
    r"^(?P<norm>layernorm|rmsnorm)_fwd_(?P<x>[a-z0-9]+)"
    r"(?:_w(?P<w>[a-z0-9]+))?"
    r"(?P<xb>_xb)?"
    r"(?:_add(?P<add>[12]))?"
    r"(?:_sm(?P<sm>[a-z0-9]+))?"
    r"(?:_(?P<q>dq|sq)(?P<out>int8|fp8))?"
    r"(?:_sy(?P<sy>[a-z0-9]+))?"
    r"(?:_nb(?P<nb>\d+))?"
    r"_(?P<pipe>1p|2p)_(?P<acc>[vrf])(?P<vec>\d+)"
    r"(?P<mv>_mv)?$"
)


def looks_like_name(name: str) -> bool:
    """Spelled like an instance name (valid or not): what generate.py may treat as its own."""
    return bool(_NAME_RE.match(name))


def parse_name(name: str) -> KernelSpec:
    """The spec a name stands for; raises SpecError for anything that is not a valid name."""
    m = _NAME_RE.match(name)
    if not m:
        raise SpecError(f"{name!r} is not a normgen instance name")
    g = m.groupdict()
    try:
        x = _DT[g["x"]]
        spec = KernelSpec(
            norm=Norm(g["norm"]),
            x=x,
            w=_DT[g["w"]] if g["w"] else x,
            out=_DT[g["out"]] if g["out"] else x,
            fused_add=FusedAdd(int(g["add"] or 0)),
            x_bias=bool(g["xb"]),
            quant=Quant(g["q"]) if g["q"] else Quant.NONE,
            smooth=_DT[g["sm"]] if g["sm"] else None,
            scale=_DT[g["sy"]] if g["sy"] else None,
            save_stats=bool(g["mv"]),
            pipeline=Pipeline(g["pipe"]),
            bucket=int(g["nb"]) if g["nb"] else None,
            vec=int(g["vec"]),
            ragged=g["acc"] == "r",
            framed=g["acc"] == "f",
        )
    except KeyError as e:
        raise SpecError(f"{name!r}: unknown precision {e.args[0]!r}") from None
    if spec.name != name:
        raise SpecError(f"{name!r} is not in canonical form (expected {spec.name!r})")
    return validated(spec)
