"""One frozen spec per kernel instance: the source of truth for its name, file, kernel
symbol, registry key, cache key and test id."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Optional

from . import tiles
from .types import FLOAT_INPUTS, QUANT_OUTPUTS, Cache, DType, FusedAdd, Norm, Pipeline, Quant


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

    # ---- everything below derives from the fields ------------------------------------
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
        parts += [self.pipeline.value, f"v{self.vec}"]
        if self.save_stats:
            parts.append("mv")
        return "_".join(parts)

    # The kernel symbol, file stem, registry value and pytest id are all the name.
    symbol = file_stem = test_id = name

    @property
    def whole_row_kernel(self) -> bool:
        """Whether the file has a second kernel, built for rows of exactly the bucket's
        length: with no padding possible, every pass issues all its loads (shared memory,
        per-column vectors) ahead of its arithmetic. Staged (and streamed) one-pass
        instances only.
        Measured on an H100 (bf16): RMSNorm + fp8 at 32768 / 65536 0.79 / 0.74 -> 0.90-0.92 /
        0.87-0.89 of copy, LayerNorm + int8 or fp8 0.65 / 0.60 -> 0.71-0.72 / 0.65, LayerNorm
        and RMSNorm at 131072 and 262144 +0.01-0.02. Not for register-held rows (within noise
        there, and fp16 LayerNorm spills), nor for instances with an x-bias, nor for a
        dynamic quant with two or more of: a fused add, a smooth scale, vectors under 16
        bytes, mean/rstd written, either LayerNorm's beta or fp32 rows (half the elements
        per address), and fp32 columns beside a 16-bit row in a 1024-thread block (64
        registers whatever the residency). Those spill under the staged 64-register budget
        (ptxas: LayerNorm with an add or smooth scale 8-28 bytes, with mean/rstd 4-8,
        RMSNorm with both 220-332, fp32 RMSNorm with either 4, LayerNorm with fp32 columns
        at 65536 8 under NVRTC 13.5)."""
        t = self.tile
        staged = self.pipeline == Pipeline.ONE_PASS and t.shared_bytes > 0
        wide_columns = self.w.itemsize > self.x.itemsize and t.block_threads == 1024
        loads = ((self.fused_add != FusedAdd.NONE) + (self.smooth is not None) + (self.vec * self.x.itemsize < 16)
                 + self.save_stats + (self.norm == Norm.LAYERNORM or self.x.itemsize == 4) + wide_columns)
        busy_quant = self.quant == Quant.DYNAMIC and loads >= 2
        return staged and not busy_quant and not self.x_bias

    @property
    def full_symbol(self) -> Optional[str]:
        return self.name + "_full" if self.whole_row_kernel else None

    @property
    def kernels(self) -> tuple[tuple[str, bool], ...]:
        """(symbol, serves only rows of the bucket's length) of each kernel in the file."""
        return ((self.symbol, False),) + (((self.full_symbol, True),) if self.whole_row_kernel else ())

    @property
    def file_name(self) -> str:
        return self.name + ".cu"

    @property
    def key(self) -> tuple:
        """Registry key: the field values, in field order (what the dispatcher builds)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    @property
    def tile(self) -> tiles.Tile:
        if self.pipeline == Pipeline.ONE_PASS:
            return tiles.one_pass_tile(self.x, self.bucket, self.vec, self.op)
        return tiles.two_pass_tile(self.vec, self.x)

    @property
    def pack_columns(self) -> bool:
        """One-pass blocks keep the 16-bit per-column vectors they hold packed (see tiles)."""
        if self.pipeline != Pipeline.ONE_PASS:
            return False
        held = [self.w] * (1 + (self.norm == Norm.LAYERNORM)) + [self.x] * self.x_bias + [self.smooth]
        return tiles.pack_columns(self.tile, sum(d is not None and d.itemsize == 2 for d in held), self.fused,
                                  self.keep_outputs)

    @property
    def keep_outputs(self) -> bool:
        """LayerNorm's dynamic quant keeps the outputs it computes for the row's absolute
        maximum for the stores, in registers or shared memory, where the tile has room (see
        tiles). RMSNorm's maximum comes with its statistics (merged_max in the template):
        nothing to keep. Streamed rows keep theirs in the whole-row kernel only; the file's
        other kernel folds its shift instead (fold_shift holds for both: the template's
        one_pass picks per kernel)."""
        return self.op.quant_ln and self.pipeline == Pipeline.ONE_PASS and tiles.keeps_outputs(self.tile, self.x)

    @property
    def output_step(self) -> int:
        """How many of a thread's vectors a row's output passes (its absolute maximum, its
        stores) take at a time: the loads of a step (the staged row, the per-column vectors)
        are issued together, ahead of its arithmetic. All of them, but in staged rows four
        over narrow vectors (more than 8 a thread: fp32 RMSNorm with an add and a dynamic
        quant spilled 8 bytes unrolled) and where outputs are kept (tiles.kept_output_step)."""
        p = self.tile.repeat
        if self.pipeline != Pipeline.ONE_PASS or not self.tile.stage_bytes:
            return p
        if self.keep_outputs:
            return tiles.kept_output_step(self.tile, self.light_columns)
        return 4 if p > 8 else p

    @property
    def light_columns(self) -> bool:
        """Whether a row's only per-column vectors are gamma (and beta) of x's precision: no
        x-bias or fused add, no smooth scale."""
        return self.op.light_columns

    @property
    def column_prefetch(self) -> int:
        """How many of a thread's vectors of a staged row have their gamma and beta prefetched
        into L1 before the row's statistics are reduced (the template's prefetch_columns):
        two, the first output step's or part of it, in rows of 65536 elements or more with a
        fused add. Measured on an H100 (tune_tiles.py "colpf" groups, seventeenth session,
        alternating three times, without / with): add + LayerNorm bf16 65536 0.942-0.943 /
        0.957-0.960, fp16 0.939-0.946 / 0.959-0.965, fp32 0.945-0.947 / 0.949-0.954, 131072
        0.911-0.915 / 0.918-0.923, 262144 0.867-0.875 / 0.895-0.905; add + RMSNorm bf16 65536
        0.957-0.958 / 0.965-0.968, fp32 0.958-0.959 / 0.965-0.966, 131072 0.924-0.931 /
        0.928-0.935, 262144 0.900-0.910 / 0.924-0.927; add + LayerNorm + int8 65536
        0.836-0.839 / 0.866-0.867. Not at 32768 (add + LayerNorm 0.965-0.966 / 0.967-0.968, +
        int8 0.918-0.920 / 0.907-0.924; RMSNorm with a fused add not stored spilled 8-16 bytes
        with it, NVRTC 13.0 and 13.5), nor without an add: LayerNorm 65536 0.924-0.926 /
        0.921-0.925, RMSNorm 0.944 / 0.946, LayerNorm + int8 16384 0.873-0.882 / 0.871 (all
        eight vectors: 0.854), fp16 0.905-0.911 / 0.890, 65536 0.718-0.727 / 0.718, RMSNorm +
        fp8 65536 0.894-0.898 / 0.893."""
        staged = self.pipeline == Pipeline.ONE_PASS and self.tile.stage_bytes
        return 2 if staged and self.fused_add != FusedAdd.NONE and self.bucket >= 65536 else 0

    @property
    def column_registers(self) -> int:
        """How many of a thread's vectors of a staged row have their gamma (and beta) loaded
        into registers before the row's statistics are reduced, for its first output step
        (the template's EarlyColumns): the loads' wait then overlaps the reduction's barriers.
        It pays where an SM holds few blocks to cover that wait, and rows with light columns
        only (light_columns: others were not measured). Measured on an H100 (tune_tiles.py
        "colreg" groups, eighteenth session, bf16 unless said, without / with, outputs
        bit-identical; ranges over two or three alternations):
        - RMSNorm over clusters, two: 65536 0.938-0.946 / 0.944-0.957, fp16 0.947-0.948 /
          0.953-0.955, fp32 0.934-0.937 / 0.951-0.953; 262144 0.913-0.917 / 0.927-0.931,
          fp16 0.909-0.910 / 0.923-0.926; 524288 0.867-0.868 / 0.900, fp16 0.848-0.861 /
          0.890-0.900 (four or eight: 65536 0.942-0.949). With a static quant: fp8 65536
          0.918-0.924 / 0.935, 262144 0.882-0.891 / 0.889-0.898.
        - LayerNorm over clusters, two: 65536 0.916-0.927 / 0.927-0.935, fp16 0.916-0.926 /
          0.932; fp32 131072 0.877-0.883 / 0.889-0.901, 262144 0.766-0.769 / 0.808.
        - RMSNorm + dynamic quant over clusters (its gamma read twice a row), four: fp8 65536
          0.887-0.899 / 0.907-0.919, fp16 0.881-0.902 / 0.918; 131072 0.829-0.855 /
          0.879-0.882, 262144 0.819-0.832 / 0.851-0.857, fp16 0.833-0.836 / 0.848-0.853,
          524288 0.775 / 0.800 (two at 65536 0.906-0.910, eight 0.918-0.920).
        - LayerNorm + dynamic quant's bf16 kept one-block rows (16384, all eight vectors a
          step), four: int8 0.882-0.886 / 0.907-0.922, fp8 0.878-0.886 / 0.899-0.921.
        Not elsewhere: six blocks an SM (16-bit RMSNorm 131072) even (0.907-0.916 /
        0.914-0.917, fp16 0.912-0.925 / 0.913-0.925), and spilled 8 bytes with mean/rstd
        (NVRTC 13.0); one-block rows at 32768 even (RMSNorm 0.963-0.979 / 0.966-0.981,
        RMSNorm + fp8 0.965-0.976 / 0.957-0.975); fp16 kept rows spilled 16 bytes with four
        (NVRTC 13.0; 0.904-0.915 / 0.908-0.929) and ran even with two (0.904-0.905 /
        0.906-0.913); LayerNorm + quant's other rows spilled 8-16 bytes with one or two
        (NVRTC 13.5) and ran even or slower (32768 0.833 / 0.814, 65536 0.727 / 0.730);
        16-bit LayerNorm at 40 registers spilled 28 bytes with two and ran slower at 262144
        (0.881-0.883 / 0.847), with one even there and slower at 524288 (0.821-0.831 /
        0.805-0.810); fused adds, which prefetch into L1 instead (column_prefetch), even (add
        + RMSNorm 65536 0.960-0.971 / 0.971)."""
        if self.pipeline != Pipeline.ONE_PASS or not self.tile.stage_bytes or not self.light_columns:
            return 0
        if self.keep_outputs:
            light_step = self.tile.cluster == 1 and self.output_step == self.tile.repeat
            return min(4, self.output_step) if light_step and self.x == DType.BF16 else 0
        crowded = self.min_blocks_per_sm > 4
        lean_layernorm = self.norm == Norm.LAYERNORM and self.tile.registers < 64
        if self.op.quant_ln or self.tile.cluster == 1 or crowded or lean_layernorm:
            return 0
        return min(4 if self.quant == Quant.DYNAMIC else 2, self.output_step)

    @property
    def fold_shift(self) -> bool:
        """Whether a staged (or streamed) row's output passes take h as held, with the shift
        folded into the normalize chain's constant (the template's `folded`), for rows whose
        mean lies within a standard deviation of zero: an instruction an element fewer in each
        pass. Where it pays: LayerNorm's dynamic quant on one-block staged (or streamed) rows
        that compute their outputs twice (not kept) from light columns, the rows bound by
        their instructions. With column_ahead, measured on an H100 (tune_tiles.py "fold" groups, twentieth
        session, the kernel before (nofold) / this, alternating twice): int8 bf16 32768
        0.825-0.835 / 0.853-0.861, 65536 0.717-0.730 / 0.749-0.757; fp8 bf16 32768
        0.819-0.835 / 0.849-0.858, 65536 0.717-0.734 / 0.748-0.757; int8 fp16 32768
        0.829-0.842 / 0.870-0.874, 65536 0.721-0.729 / 0.731-0.734. Rows of 1000 + N(0, 1),
        all unfolded: 32768 162.5-162.8 / 165.4-166.1 us, 65536 189.1-189.2 / 189.7 us. Not
        where timing patches that folded every row ran even: kept rows (int8 16384
        0.886-0.890 / 0.892-0.896, 8192 0.877-0.886 / 0.883-0.886), add + LayerNorm + int8
        65536 (0.831 / 0.836), plain LayerNorm 65536 and 262144 (0.947 / 0.948-0.949,
        0.887-0.890 / 0.889-0.890)."""
        t = self.tile
        one_block = t.cluster == 1 or t.stream_bytes  # (streamed clusters: a block's pass as one block's)
        return bool(self.op.quant_ln and self.pipeline == Pipeline.ONE_PASS and t.shared_bytes and one_block
                    and (not self.keep_outputs or t.stream_bytes) and self.light_columns)

    @property
    def column_ahead(self) -> int:
        """How many vectors ahead of their use a row's output passes load the per-column
        vectors they load per vector (the template's output_step): in a pass that stores,
        ptxas does not move a load above an earlier store that might alias it, so each
        vector's gamma and beta were loaded just before their use. One on the rows that fold
        their shift (fold_shift, measured with it: two ran no faster, three spilled 8 bytes
        under NVRTC 13.5). Alone it shortened the stores' pass (LayerNorm + int8 bf16 65536:
        4.14 -> 3.51 us a row, 32768 3.24 -> 2.21; scripts/trace_rows.py --phases) but not
        the rows (0.709-0.718 / 0.720-0.725, 0.818-0.834 / 0.826-0.836)."""
        return 1 if self.fold_shift and self.tile.stage_bytes else 0

    @property
    def row_cache(self) -> Cache:
        """Where the row's loads leave their lines (types.Cache). Register-held rows load x
        with L2's evict_last policy (KEEP_L2), as torch.compile's kernels load theirs, except
        under a quant (more instructions than bytes: no faster). Measured on an H100
        (tune_tiles.py, 1024-16384, against NORMAL): LayerNorm bf16 / fp16 / fp32
        +0.009-0.04 (bf16 0.958-0.975 -> 0.978-0.994, fp32 0.929-0.956 -> 0.956-0.981),
        RMSNorm and add + LayerNorm / RMSNorm bf16 +0.014-0.031; RMSNorm + fp8 and LayerNorm +
        int8 -0.01 to +0.003. Staged rows are loaded past L1 (PAST_L1) where that leaves L1,
        which their shared memory shrinks, to the per-column vectors that every row reads
        again:
        - LayerNorm's dynamic quant, whose two output passes read gamma and beta, where they
          are of x's precision (elsewhere ptxas spilled 4-8 bytes for it: add + LayerNorm and
          RMSNorm at 65536-262144, RMSNorm's quant with an add, fp32 columns beside a 16-bit
          row);
        - unfused 16-bit LayerNorm over clusters of eight or more (131072 up: 32 KB or 64 KB
          of a row a block, three to six blocks an SM). Measured on an H100 (tune_tiles.py
          "xl2" groups, thirteenth session, committed / past L1): bf16 131072 0.897 / 0.908,
          262144 0.867 / 0.882, 524288 0.825 / 0.835; fp16 0.889 / 0.906, 0.862 / 0.877, 0.822
          / 0.840. Not elsewhere: one-block 16-bit rows at 32768 0.96 -> 0.89, RMSNorm past
          262144 -0.01-0.02 (and 8 bytes spilled), add + LayerNorm at 131072-262144 -0.01,
          fp32 and 65536 within 0.01."""
        if self.pipeline != Pipeline.ONE_PASS:
            return Cache.NORMAL
        if not self.tile.stage_bytes:
            return Cache.KEEP_L2 if self.quant == Quant.NONE else Cache.NORMAL
        dynamic_ln = self.op.quant_ln and self.w.itemsize == self.x.itemsize
        plain_ln = self.op.plain_ln and self.x.itemsize == 2 and self.tile.cluster >= 8
        return Cache.PAST_L1 if dynamic_ln or plain_ln else Cache.NORMAL

    @property
    def op(self) -> tiles.Op:
        """What of the operation the one-pass tile depends on."""
        prologue = self.fused_add != FusedAdd.NONE or self.x_bias
        return tiles.Op(self.norm == Norm.RMSNORM, prologue, self.quant,
                        not prologue and self.smooth is None and self.w == self.x)

    @property
    def fused(self) -> bool:
        """A fused prologue or epilogue: residual add, x-bias or quant."""
        return self.op.fused

    @property
    def min_blocks_per_sm(self) -> int:
        """__launch_bounds__' residency target: the tile's (its register budget, see
        tiles.Tile.min_blocks_per_sm). Staged blocks with an x-bias loaded beside each
        batch, or a dynamic quant over narrow vectors (many addresses per thread), spilled
        8-36 bytes at 64 registers (ptxas, every norm and precision), so those instances are
        built for half as many blocks. Unfused fp32 LayerNorm rows of 32 elements per thread
        in a 512-thread block hold neither their per-column vectors nor a prefetched row
        (the template's register budgets), and fit the 64 registers of two blocks per SM: at
        16384 on an H100, 0.91 -> 0.945 of copy (every fused variant, and RMSNorm, spills
        there)."""
        t = self.tile
        narrow = self.quant == Quant.DYNAMIC and t.vec * self.x.itemsize < 8
        if t.stage_bytes and (self.x_bias or narrow):
            return max(t.min_blocks_per_sm // 2, 1)
        if (not t.stage_bytes and not self.fused and self.norm == Norm.LAYERNORM and self.x.itemsize == 4
                and t.block_threads == 512 and t.repeat * t.vec == 32):
            return 2
        return t.min_blocks_per_sm

    def __str__(self) -> str:
        return self.name


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
        if not tiles.has_one_pass(s.x, s.bucket, s.vec):
            return (f"a one-pass row of {s.bucket} in {s.vec}-element accesses needs more "
                    "accesses per thread than its register share holds, or sub-word "
                    "shared-memory staging; the two-pass instance serves it")
        if s.tile.block_threads == 1024 and s.x_bias and s.fused_add != FusedAdd.NONE:
            return ("a 1024-thread block (64 registers a thread) cannot also load an x-bias and a "
                    "residual without spilling; the next bucket or the two-pass instance serves it")
    if s.pipeline == Pipeline.TWO_PASS and s.bucket is not None:
        return "a two-pass instance serves every N and has no bucket"
    return None


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
    r"_(?P<pipe>1p|2p)_v(?P<vec>\d+)"
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
        )
    except KeyError as e:
        raise SpecError(f"{name!r}: unknown precision {e.args[0]!r}") from None
    if spec.name != name:
        raise SpecError(f"{name!r} is not in canonical form (expected {spec.name!r})")
    return validated(spec)
