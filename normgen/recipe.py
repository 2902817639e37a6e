"""How an instance is built: its tile and every knob of templates/instance.cu.j2's Traits,
computed from a spec's identity (normgen.spec.KernelSpec) in this one place. The rules are
stated beside their helpers below; the measurements behind them are in docs/policy.md."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from . import tiles
from .types import Cache, DType, FusedAdd, Norm, Pipeline, Quant

if TYPE_CHECKING:
    from .spec import KernelSpec


@dataclass(frozen=True)
class Recipe:
    """Everything of an instance that is chosen rather than named: what the instance template
    renders besides the spec's fields, and what the launch needs."""

    tile: tiles.Tile
    op: tiles.Op  # what of the operation the one-pass tile depends on
    whole_row_kernel: bool  # a second kernel, for rows of exactly the bucket's length
    kernels: tuple[tuple[str, bool], ...]  # (symbol, serves only rows of the bucket's length) per kernel
    min_blocks_per_sm: int  # __launch_bounds__' residency target
    pack_columns: bool
    keep_outputs: bool
    row_cache: Cache
    output_step: int
    column_prefetch: int
    column_registers: int
    column_ahead: int
    fold_shift: bool

    @property
    def full_symbol(self) -> Optional[str]:
        """The whole-row kernel's symbol; None where the file has none."""
        return next((symbol for symbol, full in self.kernels if full), None)


@functools.cache
def recipe(spec: KernelSpec) -> Recipe:
    """The recipe of a spec (cached: a pure function of the spec and the tile tables)."""
    op = _op(spec)
    tile = _tile(spec, op)
    keep = _keep_outputs(spec, op, tile)
    step = _output_step(spec, op, tile, keep)
    blocks = _min_blocks_per_sm(spec, op, tile)
    fold = _fold_shift(spec, op, tile, keep)
    whole = _whole_row_kernel(spec, tile)
    return Recipe(
        tile=tile,
        op=op,
        whole_row_kernel=whole,
        kernels=((spec.symbol, False),) + (((spec.name + "_full", True),) if whole else ()),
        min_blocks_per_sm=blocks,
        pack_columns=_pack_columns(spec, op, tile, keep),
        keep_outputs=keep,
        row_cache=_row_cache(spec, op, tile),
        output_step=step,
        column_prefetch=_column_prefetch(spec, tile),
        column_registers=_column_registers(spec, op, tile, keep, step, blocks),
        column_ahead=_column_ahead(tile, fold),
        fold_shift=fold,
    )


def _one_pass(spec: KernelSpec) -> bool:
    return spec.pipeline == Pipeline.ONE_PASS


# The tile depends on the operation only through Op: a fused add or x-bias (a second input),
# the quant, and whether gamma and beta of x's precision are the only per-column vectors.
def _op(spec: KernelSpec) -> tiles.Op:
    prologue = spec.fused_add != FusedAdd.NONE or spec.x_bias
    return tiles.Op(spec.norm == Norm.RMSNORM, prologue, spec.quant,
                    not prologue and spec.smooth is None and spec.w == spec.x)


# One-pass rows take their bucket's tile for the op (tiles.one_pass_tile); two-pass rows
# stream fixed chunks whatever N is.
def _tile(spec: KernelSpec, op: tiles.Op) -> tiles.Tile:
    if _one_pass(spec):
        return tiles.one_pass_tile(spec.x, spec.bucket, spec.vec, op)
    return tiles.two_pass_tile(spec.vec, spec.x)


# Staged and streamed rows get a second kernel for rows of exactly the bucket's length, which
# issues all of a pass's loads ahead of its arithmetic; not with an x-bias, nor for a dynamic
# quant with two or more extra loads per vector, which spill under the staged register budget.
def _whole_row_kernel(spec: KernelSpec, tile: tiles.Tile) -> bool:
    staged = _one_pass(spec) and tile.shared_bytes > 0
    wide_columns = spec.w.itemsize > spec.x.itemsize and tile.block_threads == 1024
    loads = ((spec.fused_add != FusedAdd.NONE) + (spec.smooth is not None) + (spec.vec * spec.x.itemsize < 16)
             + spec.save_stats + (spec.norm == Norm.LAYERNORM or spec.x.itemsize == 4) + wide_columns)
    busy_quant = spec.quant == Quant.DYNAMIC and loads >= 2
    return staged and not busy_quant and not spec.x_bias


# One-pass blocks keep their held 16-bit per-column vectors packed where floats would cost an
# occupancy step or spills (the rule is tiles.pack_columns').
def _pack_columns(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile, keep: bool) -> bool:
    if not _one_pass(spec):
        return False
    held = [spec.w] * (1 + (spec.norm == Norm.LAYERNORM)) + [spec.x] * spec.x_bias + [spec.smooth]
    return tiles.pack_columns(tile, sum(d is not None and d.itemsize == 2 for d in held), op.fused, keep)


# LayerNorm's dynamic quant keeps the outputs it computes for the row's maximum for the stores
# where the tile has room (tiles.keeps_outputs); RMSNorm's maximum comes with its statistics.
def _keep_outputs(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile) -> bool:
    return op.quant_ln and _one_pass(spec) and tiles.keeps_outputs(tile, spec.x)


# The output passes take all of a thread's vectors a step, but staged rows take four over
# more than eight (more spill), and rows that keep their outputs tiles.kept_output_step's.
def _output_step(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile, keep: bool) -> int:
    p = tile.repeat
    if not _one_pass(spec) or not tile.stage_bytes:
        return p
    if keep:
        return tiles.kept_output_step(tile, op.light_columns)
    return 4 if p > 8 else p


# Staged rows of 65536 or more with a fused add prefetch two vectors' gamma and beta into L1
# while their statistics are reduced; shorter or unfused rows gain nothing so.
def _column_prefetch(spec: KernelSpec, tile: tiles.Tile) -> int:
    staged = _one_pass(spec) and tile.stage_bytes
    return 2 if staged and spec.fused_add != FusedAdd.NONE and spec.bucket >= 65536 else 0


# Staged rows with light columns load their first step's columns into registers before the
# reduction where an SM holds few blocks to hide that wait, and where it does not spill.
def _column_registers(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile, keep: bool, step: int,
                      blocks: int) -> int:
    if not _one_pass(spec) or not tile.stage_bytes or not op.light_columns:
        return 0
    if keep:
        light_step = tile.cluster == 1 and step == tile.repeat
        return min(4, step) if light_step and spec.x == DType.BF16 else 0
    crowded = blocks > 4
    lean_layernorm = spec.norm == Norm.LAYERNORM and tile.registers < 64
    if op.quant_ln or tile.cluster == 1 or crowded or lean_layernorm:
        return 0
    return min(4 if spec.quant == Quant.DYNAMIC else 2, step)


# LayerNorm's dynamic quant on one-block staged (or streamed) rows that compute their outputs
# twice from light columns folds the shift into the normalize chain's constant (rows near
# zero): those rows are bound by their instructions.
def _fold_shift(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile, keep: bool) -> bool:
    one_block = tile.cluster == 1 or tile.stream_bytes  # (streamed clusters: a block's pass as one block's)
    return bool(op.quant_ln and _one_pass(spec) and tile.shared_bytes and one_block
                and (not keep or tile.stream_bytes) and op.light_columns)


# Staged rows that fold their shift load each vector's columns one vector ahead: ptxas does
# not move a load above an earlier store that might alias it.
def _column_ahead(tile: tiles.Tile, fold: bool) -> int:
    return 1 if fold and tile.stage_bytes else 0


# Register-held rows keep x in L2 (evict_last) unless quantized; staged rows load past L1,
# leaving it to the per-column vectors every row reads again, where that pays and does not spill.
def _row_cache(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile) -> Cache:
    if not _one_pass(spec):
        return Cache.NORMAL
    if not tile.stage_bytes:
        return Cache.KEEP_L2 if spec.quant == Quant.NONE else Cache.NORMAL
    dynamic_ln = op.quant_ln and spec.w.itemsize == spec.x.itemsize
    plain_ln = op.plain_ln and spec.x.itemsize == 2 and tile.cluster >= 8
    return Cache.PAST_L1 if dynamic_ln or plain_ln else Cache.NORMAL


# The tile's residency (its register budget), halved for staged blocks with an x-bias or a
# dynamic quant over narrow vectors (they spill at 64 registers); unfused fp32 LayerNorm rows
# of 32 elements a thread in 512-thread blocks fit two blocks an SM.
def _min_blocks_per_sm(spec: KernelSpec, op: tiles.Op, tile: tiles.Tile) -> int:
    narrow = spec.quant == Quant.DYNAMIC and tile.vec * spec.x.itemsize < 8
    if tile.stage_bytes and (spec.x_bias or narrow):
        return max(tile.min_blocks_per_sm // 2, 1)
    if (not tile.stage_bytes and not op.fused and spec.norm == Norm.LAYERNORM and spec.x.itemsize == 4
            and tile.block_threads == 512 and tile.repeat * tile.vec == 32):
        return 2
    return tile.min_blocks_per_sm
