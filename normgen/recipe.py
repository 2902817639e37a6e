"""How an instance is built: its tile and every knob of templates/instance.cu.j2's Traits,
computed from a spec's identity (normgen.spec.KernelSpec) in this one place. The rules are
stated beside their helpers below; the measurements behind them are in docs/policy.md."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

from . import tiles
from .types import Cache, DType, Entry, FusedAdd, Norm, Pipeline, Quant

if TYPE_CHECKING:
    from .spec import KernelSpec


# ---- tiles: the tables' entries made into an instance's tile -------------------------------
@dataclass(frozen=True)
class Tile:
    threads_per_row: int  # per block
    rows_per_block: int
    vec: int  # elements per access
    repeat: int  # accesses per thread per row (one-pass) or per chunk (two-pass)
    cluster: int = 1  # blocks per row
    stage_bytes: int = 0  # shared memory holding each block's share of the row (0: registers)
    registers: int = 128  # a thread's register budget (min_blocks_per_sm: __launch_bounds__)
    # launched as one wave of exactly the clusters the device holds at once, each striding
    # over many rows, instead of Recipe.waves times as many (see tiles.RESIDENT_MIN_CLUSTER; streamed
    # tiles over clusters, tiles.STREAMED_TILES, too). A device
    # that runs other work beside the kernel holds fewer: the clusters left over then run
    # after the others, and the launch takes up to twice as long
    resident: bool = False
    # shared memory of a streamed block (see tiles.STREAMED_TILES): its next row's stage, then its
    # gamma and beta (0: not streamed). Its row is held in registers (stage_bytes 0)
    stream_bytes: int = 0

    @property
    def shared_bytes(self) -> int:
        """The dynamic shared memory a block is launched with."""
        return self.stage_bytes or self.stream_bytes

    @property
    def lean(self) -> bool:
        """A register-held row built for fewer registers than the default 128 holds nothing
        but its row: no next row loaded ahead, no per-column vectors kept across rows."""
        return not self.shared_bytes and self.registers < 128

    @property
    def block_threads(self) -> int:
        return self.threads_per_row * self.rows_per_block

    @property
    def min_blocks_per_sm(self) -> int:
        """__launch_bounds__' residency target: as many blocks as the register budget lets an
        SM hold, or as its shared memory does, if fewer. Register-held rows get 128
        registers a thread, which keeps two 256-thread blocks on an SM; staged blocks must
        share an SM (that is their point): 64 registers unless the table says otherwise
        (docs/policy.md: min_blocks_per_sm)."""
        return blocks_per_sm(self, self.shared_bytes)


def blocks_per_sm(tile: Tile, shared_bytes: int) -> int:
    """Blocks of a tile an SM holds at its register budget and with shared_bytes of dynamic
    shared memory each (sm_90's shared memory): at least 1."""
    blocks = tiles.REGISTERS_PER_SM // (tile.block_threads * tile.registers)
    if shared_bytes:
        blocks = min(blocks, shared_blocks(shared_bytes))
    return max(blocks, 1)


def shared_blocks(shared_bytes: int, shared_per_sm: int = tiles.SHARED_PER_SM) -> int:
    """Blocks with shared_bytes of dynamic shared memory each (and up to 1 KB of static
    scratch) that an SM's shared_per_sm holds (sm_90's unless given)."""
    return shared_per_sm // (shared_bytes + 1024)


# At most this many accesses per thread in a one-pass row of a 512-thread block (twice as
# many at 256 threads, half at 1024: the register file is shared): each is a register-held
# address and value; past it (only scalar access on the longest rows) registers spill.
MAX_REPEAT = 32


def has_one_pass(x: DType, bucket: int, vec: int) -> bool:
    if bucket not in tiles.ONE_PASS_TILES[x.itemsize]:
        return False
    t = one_pass_tile(x, bucket, vec)
    # staged rows move whole 32-bit words through shared memory
    fits = t.repeat * t.block_threads <= MAX_REPEAT * 512
    return fits and (not t.stage_bytes or vec * x.itemsize >= 4)


# Shared memory a staged block may take to keep its share of the row as floats.
KEEP_STAGE_BYTES = 64 * 1024


def keeps_outputs(tile: Tile, x: DType | None = None) -> bool:
    """Whether a one-pass row can keep its float outputs between a dynamic quant's absolute
    maximum and the stores, instead of computing them twice: in registers (at most 32 per
    thread, in blocks built for 128 registers), staged in shared memory as floats (at most
    KEEP_STAGE_BYTES per block), or, streamed, in registers where the row spans a cluster and
    x is of tiles.STREAMED_KEEP's types (docs/policy.md: keep_outputs)."""
    if tile.stage_bytes:
        return float_stage_bytes(tile) <= KEEP_STAGE_BYTES
    if tile.stream_bytes:
        return tile.cluster > 1 and x in tiles.STREAMED_KEEP
    return tile.repeat * tile.vec <= 32 and tile.block_threads <= 512


def kept_output_step(tile: Tile, light: bool) -> int:
    """The vectors at a time of a staged row's output passes where it keeps its outputs
    (Recipe.output_step): all of them in one-block rows of 64 registers or more whose only
    per-column vectors are gamma and beta of x's precision (`light`), since each step waits
    for its columns from L2; else two, which kept the others from spilling
    (docs/policy.md: output_step)."""
    if light and tile.cluster == 1 and tile.registers >= 64:
        return tile.repeat
    return 2 if tile.repeat % 2 == 0 else tile.repeat


def float_stage_bytes(tile: Tile) -> int:
    """Shared memory of a staged block's share of the row as floats."""
    return tile.threads_per_row * tile.repeat * tile.vec * 4


def pack_columns(tile: Tile, column_vectors: int, fused: bool, keeps: bool) -> bool:
    """Whether a one-pass block keeps its held 16-bit per-column vectors (gamma, beta,
    x-bias, smooth scale: column_vectors of them) as loaded, converting them at each use,
    rather than as floats (twice the registers): where they would push the registers past an
    occupancy step or into spills, in register-held fused rows or rows of 256 threads or
    more, in blocks of at most 256 threads or that keep their outputs (docs/policy.md:
    pack_columns)."""
    floats = column_vectors * tile.repeat * tile.vec
    wanted = fused or tile.threads_per_row >= 256
    return wanted and tile.stage_bytes == 0 and (tile.block_threads <= 256 or keeps) and floats > 32


@dataclass(frozen=True)
class Op:
    """What of an instance's operation its one-pass tile depends on (Recipe.op)."""

    rmsnorm: bool = False  # else LayerNorm
    prologue: bool = False  # a fused add or x-bias: a second input, or a second per-column vector
    quant: Quant = Quant.NONE
    light_columns: bool = False  # gamma and beta of x's precision alone: no smooth scale, no prologue

    @property
    def fused(self) -> bool:
        """A fused prologue or quant, for which tiles.ONE_PASS_TILES' register budgets (set for
        plain rows) do not hold: a fused row holds more a thread."""
        return self.prologue or self.quant != Quant.NONE

    @property
    def quant_ln(self) -> bool:
        """LayerNorm with a dynamic quant: its tile may differ (tiles.QUANT_LN_TILES), and its
        staged rows are kept as floats where they fit (keeps_outputs)."""
        return not self.rmsnorm and self.quant == Quant.DYNAMIC

    @property
    def plain_ln(self) -> bool:
        """Unfused LayerNorm, whose tile may differ too (tiles.LEAN_LN_TILES)."""
        return not self.rmsnorm and not self.fused

    @property
    def prologue_ln(self) -> bool:
        """LayerNorm with a fused add or x-bias and no quant, whose tile may differ too
        (tiles.LEAN_PROLOGUE_LN_TILES)."""
        return not self.rmsnorm and self.prologue and self.quant == Quant.NONE

    @property
    def plain_rms(self) -> bool:
        """Unfused RMSNorm, whose tile may differ too (tiles.PLAIN_RMS_TILES)."""
        return self.rmsnorm and not self.fused

    @property
    def tables(self) -> list:
        """The tables that may replace tiles.ONE_PASS_TILES' entry, first match first."""
        if self.quant_ln:
            own = ([tiles.STREAMED_TILES] if self.light_columns else []) + [tiles.QUANT_LN_TILES]
        elif self.plain_ln:
            own = [tiles.LEAN_LN_TILES]
        elif self.prologue_ln:
            own = [tiles.LEAN_PROLOGUE_LN_TILES]
        elif self.plain_rms:
            own = [tiles.PLAIN_RMS_TILES]
        else:
            own = []
        return own + ([tiles.SINGLE_INPUT_TILES] if not self.prologue and not self.quant_ln else [])

    @property
    def narrow_tables(self) -> list:
        """The tables that may replace tiles.ONE_PASS_TILES' entry for rows of vectors narrower
        than 16 bytes."""
        return [] if self.fused else [tiles.NARROW_TILES]


def entries(table: dict, x: DType) -> dict:
    """A special table's buckets for rows of x: keyed by x where the two 16-bit types differ
    (tiles.STREAMED_TILES), else by its element bytes."""
    return table.get(x) or table.get(x.itemsize, {})


def table_entry(table: dict, x: DType, bucket: int) -> Optional[tiles.Shape]:
    """A special table's shape for a bucket of rows of x: its own entry, or for a fitted
    bucket without one, the entry of the bucket it is cut from, fitted (tiles.fitted)."""
    own = entries(table, x)
    cut_from = tiles.FITTED_FROM[x.itemsize].get(bucket)
    return own.get(bucket) or (tiles.fitted(own[cut_from]) if cut_from in own else None)


def first_entry(tables: list, x: DType, bucket: int) -> Optional[tiles.Shape]:
    """The shape of the first of `tables` that has the bucket (table_entry), or None."""
    return next(filter(None, (table_entry(t, x, bucket) for t in tables)), None)


def one_pass_tile(x: DType, bucket: int, vec: int, op: Op | None = None) -> Tile:
    """The one-pass tile of a bucket for `op` (None: tiles.ONE_PASS_TILES' entry as it stands).
    The special tables serve whole 16-byte vectors (Op.tables, a fitted bucket by their entry
    for the bucket it is cut from: tiles.fitted) or narrower ones (Op.narrow_tables); RMSNorm's
    rows over large clusters are resident (tiles.RESIDENT_MIN_CLUSTER)."""
    tables = (op.tables if vec == x.vmax else op.narrow_tables) if op else []
    entry = first_entry(tables, x, bucket)
    shape = entry or tiles.ONE_PASS_TILES[x.itemsize][bucket]
    threads, rows, cluster = shape.threads, shape.rows, shape.cluster
    staged, streamed = shape.store == tiles.STAGED, shape.store == tiles.STREAMED
    # tiles.ONE_PASS_TILES' budgets hold for plain rows only; a special table's for its op
    budgeted = shape.registers is not None and (entry or not (op and op.fused))
    registers = shape.registers if budgeted else 64 if staged else 128
    per_thread = bucket // (threads * cluster)
    # a streamed block's shared memory: its share of the row's stage (x), of gamma and of beta
    # (light columns: x's precision), and the stage's mbarrier
    stream = 3 * bucket // cluster * x.itemsize + 16 if streamed else 0
    # streamed blocks launch one wave (recipe's _waves), which over clusters must be of the clusters
    # the device holds at once (of single blocks: its blocks per SM times its SMs)
    resident = streamed and cluster > 1 or bool(op and op.rmsnorm) and cluster >= tiles.RESIDENT_MIN_CLUSTER
    t = Tile(threads, rows, vec, per_thread // vec, cluster, bucket // cluster * x.itemsize if staged else 0,
             registers, resident, stream)
    keep = staged and op and op.quant_ln and keeps_outputs(t)
    return replace(t, stage_bytes=float_stage_bytes(t)) if keep else t


def two_pass_tile(vec: int, x: DType) -> Tile:
    # Keep the bytes in flight per chunk the same whatever the vector width.
    return Tile(tiles.TWO_PASS_THREADS, 1, vec, tiles.TWO_PASS_UNROLL * x.vmax // vec)


# ---- the recipe ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Recipe:
    """Everything of an instance that is chosen rather than named: what the instance template
    renders besides the spec's fields, and what the launch needs."""

    tile: Tile
    op: Op  # what of the operation the one-pass tile depends on
    whole_row_kernel: bool  # a second kernel, for rows of exactly the bucket's length
    kernels: tuple[tuple[str, Entry], ...]  # (symbol, the rows it serves) per kernel
    min_blocks_per_sm: int  # __launch_bounds__' residency target
    pack_columns: bool
    keep_outputs: bool
    row_cache: Cache
    output_step: int
    column_prefetch: int
    column_registers: int
    column_ahead: int
    fold_shift: bool
    # rows a ragged register row's shared-memory image holds (ragged_rows.cuh): 2, this row and the
    # next in flight; 1, the next copied in once this one is read; 0, no image
    row_images: int
    image_bytes: int  # ... the dynamic shared memory those images (or framed rows' bounce slots) take (0: none)
    residual_batch: int  # staged ragged rows with a fused add: the residual's vectors loaded at a time (else 1)
    # ragged rows: steps counted per warp segment (those past the row's end skip its last
    # step, those before it take it whole), else per row (ragged.cuh: RaggedCols)
    segment_steps: bool
    waves: int  # the launch's blocks (clusters) per block the device holds at once, where rows suffice
    fast_memory_waves: int  # ... on a GPU whose DRAM is fast for its SMs (devices.launch_waves)
    # register rows' held gamma and beta as floats in dynamic shared memory (kernels/columns.cuh:
    # FloatColumns), its bytes a block (0: the packed vectors in registers serve the outputs)
    column_bytes: int = 0
    # staged ragged rows: the row's sums taken as each vector is put into the stage (and
    # LayerNorm's shift once the row's copies are in flight), not in a pass over the stage
    sums_while_staging: bool = False
    # staged ragged rows without a fused add: each step's copies waited for in turn (cp.async
    # groups), not the row's all at once
    stage_groups: bool = False

    @property
    def shared_bytes(self) -> int:
        """The dynamic shared memory a block is launched with: its stage, its streamed
        rows', or its row images (framed rows' bounce slots) and float columns."""
        return self.tile.shared_bytes or self.image_bytes + self.column_bytes

    def symbol(self, entry: Entry) -> Optional[str]:
        """The symbol of the kernel for `entry`'s rows; None where the file has none."""
        return next((symbol for symbol, e in self.kernels if e == entry), None)

    def launch_bytes(self, entry: Entry) -> int:
        """The dynamic shared memory the kernel for `entry` is launched with: an ALIKE
        kernel's rows never go through the bounce slots, which follow the float columns."""
        return self.column_bytes if entry == Entry.ALIKE else self.shared_bytes


@functools.cache
def recipe(spec: KernelSpec) -> Recipe:
    """The recipe of a spec (cached: a pure function of the spec and the tile tables)."""
    op = _op(spec)
    if spec.ragged:
        return _ragged_recipe(spec, op)
    if spec.framed:
        return _framed_recipe(spec, op)
    tile = _tile(spec, op)
    keep = _keep_outputs(spec, op, tile)
    step = _output_step(spec, op, tile, keep)
    blocks = _min_blocks_per_sm(spec, op, tile)
    column_bytes = _column_bytes(spec, op, tile)
    fold = _fold_shift(spec, op, tile, keep)
    whole = _whole_row_kernel(spec, tile)
    return Recipe(
        tile=tile,
        op=op,
        whole_row_kernel=whole,
        kernels=((spec.symbol, Entry.ANY),) + (((spec.name + "_full", Entry.WHOLE),) if whole else ()),
        min_blocks_per_sm=blocks,
        pack_columns=_pack_columns(spec, op, tile, keep) and not column_bytes,
        keep_outputs=keep,
        row_cache=_row_cache(spec, op, tile),
        output_step=step,
        column_prefetch=_column_prefetch(spec, tile),
        column_registers=_column_registers(spec, op, tile, keep, step, blocks),
        column_ahead=_column_ahead(tile, fold),
        fold_shift=fold,
        row_images=0,
        image_bytes=0,
        residual_batch=1,
        segment_steps=False,
        waves=_waves(spec, op, tile),
        fast_memory_waves=_fast_memory_waves(spec, op, tile),
        column_bytes=column_bytes,
    )


# Framed rows take the aligned instance's tile (their body is the aligned rows' accesses) or,
# where that one is staged (LayerNorm + dynamic quant), the bucket's plain tile; unfused
# RMSNorm its own where one is listed (tiles.FRAMED_RMS_TILES); at least _framed_registers,
# and as many blocks an SM as that budget holds (not the lean fp32 rows' two 512-thread
# blocks at 16384, which spill). None of the aligned pipelines' other knobs: framed_rows.cuh
# loads each row's columns realigned and keeps no outputs. Two kernels (Entry.ANY, and
# Entry.ALIKE without the bounce slots). Tiles staged either way (or over a cluster) have no
# framed rows (docs/policy.md: framed rows).
def _framed_registers(spec: KernelSpec, op: Op) -> int:
    """A framed row's least register budget: tiles.FRAMED_MIN_REGISTERS, or
    FRAMED_SPILL_REGISTERS for unfused 16-bit LayerNorm of 10240, where 64 spilled (ptxas,
    NVRTC 13.5: 8-96 bytes with saved statistics or fp32 weights on sm_90, without them on
    sm_80-89)."""
    spills = op.plain_ln and spec.x.itemsize == 2 and spec.bucket == 10240
    return tiles.FRAMED_SPILL_REGISTERS if spills else tiles.FRAMED_MIN_REGISTERS


def _framed_recipe(spec: KernelSpec, op: Op) -> Recipe:
    aligned = recipe(replace(spec, framed=False))
    tile = aligned.tile
    if tile.shared_bytes:
        tile = one_pass_tile(spec.x, spec.bucket, spec.vec)
    table = tiles.FRAMED_RMS_TILES if op.rmsnorm and not op.fused else {}
    shape = table_entry(table, spec.x, spec.bucket)
    if shape is not None:
        tile = replace(tile, threads_per_row=shape.threads, rows_per_block=shape.rows,
                       repeat=spec.bucket // (shape.threads * spec.vec), registers=shape.registers or 128)
    tile = replace(tile, registers=max(tile.registers, _framed_registers(spec, op)))
    # each warp's bounce slots (framed_rows.cuh: store_unlike): 33 16-byte slots a step
    bounce = tile.block_threads // 32 * tile.repeat * 33 * 16 if tile.threads_per_row % 32 == 0 else 0
    kernels = ((spec.symbol, Entry.ANY), (spec.name + "_alike", Entry.ALIKE))
    column_bytes = _framed_column_bytes(spec, op, tile)
    return replace(aligned, tile=tile, whole_row_kernel=False, kernels=kernels, image_bytes=bounce,
                   min_blocks_per_sm=tile.min_blocks_per_sm, pack_columns=False,
                   keep_outputs=_framed_keep_outputs(spec, op, tile, column_bytes),
                   row_cache=_row_cache(spec, op, tile), output_step=tile.repeat, column_prefetch=0,
                   column_registers=0, column_ahead=0, fold_shift=False, waves=_waves(spec, op, tile),
                   fast_memory_waves=_fast_memory_waves(spec, op, tile), column_bytes=column_bytes)


# Framed LayerNorm + dynamic quant keeps its row as floats less the mean, then its outputs
# (x converted once, the outputs computed once), where its 128 registers hold them: rows that
# load their per-column vectors per vector (more than 128 bytes of them a thread: a smooth
# scale, an x-bias, fp32 weights), and rows whose held columns are floats in shared memory,
# which frees their packed registers; rows holding them packed spilled so in the 5120 bucket
# and with a fused add (docs/policy.md: keep_outputs).
def _framed_keep_outputs(spec: KernelSpec, op: Op, tile: Tile, column_bytes: int) -> bool:
    return op.quant_ln and (not _holds_columns(spec, tile) or column_bytes > 0)


# Ragged rows take their bucket's plain tile (tiles.ONE_PASS_TILES) and none of the aligned
# pipelines' knobs; staged blocks the register budget of _ragged_staged_registers.
def _ragged_recipe(spec: KernelSpec, op: Op) -> Recipe:
    tile = one_pass_tile(spec.x, spec.bucket, spec.vec)
    if tile.stage_bytes:
        tile = replace(tile, registers=_ragged_staged_registers(spec, op, tile))
    else:
        tile = replace(tile, registers=_ragged_image_registers(spec, op, tile))
    images = _ragged_row_images(spec, tile)
    image_bytes = _ragged_images_bytes(spec, tile)
    return Recipe(tile=tile, op=op, whole_row_kernel=False, kernels=((spec.symbol, Entry.ANY),),
                  min_blocks_per_sm=blocks_per_sm(tile, tile.shared_bytes or image_bytes), pack_columns=False,
                  keep_outputs=False,
                  row_cache=Cache.NORMAL, output_step=_ragged_output_step(spec, op, tile), column_prefetch=0,
                  column_registers=0, column_ahead=0, fold_shift=False, row_images=images, image_bytes=image_bytes,
                  residual_batch=_ragged_residual_batch(spec, op, tile),
                  segment_steps=_ragged_segment_steps(spec, op, tile), waves=_waves(spec, op, tile),
                  fast_memory_waves=_fast_memory_waves(spec, op, tile),
                  sums_while_staging=_ragged_sums_while_staging(spec, op, tile),
                  stage_groups=_ragged_stage_groups(spec, op, tile))


# Ragged rows count their steps per warp segment, but per row through a one-row image (fused
# adds, fp32's eight vectors, 16-bit rows of 16384) and with a quant, where the per-lane
# branches measured slower, and staged with a fused add, where they spilled 4-8 bytes at 64
# registers (NVRTC 13.5: RMSNorm + add 32768 on sm_90, LayerNorm + add 131072 on sm_120).
# RMSNorm of one 16-bit input through an image in blocks of 256 threads or more counts per
# segment whatever its image or quant: at 64 registers that measured as fast or faster
# (LayerNorm's quant and one-row images spilled so; docs/policy.md: ragged rows).
def _ragged_segment_steps(spec: KernelSpec, op: Op, tile: Tile) -> bool:
    if _one_input_image(spec, op, tile) and op.rmsnorm and spec.x != DType.FP32 and tile.block_threads >= 256:
        return True
    staged_add = tile.stage_bytes > 0 and spec.fused_add != FusedAdd.NONE
    return _ragged_row_images(spec, tile) != 1 and spec.quant == Quant.NONE and not staged_add


# Staged ragged rows take their sums as they put each vector, but where ptxas spilled so at
# 64 registers (NVRTC 13.5, sm_90: 8-44 bytes): LayerNorm with a fused add or of fp16, and
# fused adds that load two residual vectors a round.
def _ragged_sums_while_staging(spec: KernelSpec, op: Op, tile: Tile) -> bool:
    if not tile.stage_bytes:
        return False
    if not op.rmsnorm and (spec.fused_add != FusedAdd.NONE or spec.x == DType.FP16):
        return False
    return _ragged_residual_batch(spec, op, tile) == 1


# Staged ragged rows without a fused add wait for each step's copies in turn (a cp.async
# group a step) and join a step while the later ones are in flight, where a row spans one or
# two blocks: over clusters of eight, RMSNorm lost 0.03 of copy (fewer blocks resident), and
# fp16 LayerNorm spilled 16 bytes at 64 registers (NVRTC 13.5, sm_90). docs/policy.md.
def _ragged_stage_groups(spec: KernelSpec, op: Op, tile: Tile) -> bool:
    if not tile.stage_bytes or spec.fused_add != FusedAdd.NONE or tile.cluster > 2:
        return False
    return op.rmsnorm or spec.x != DType.FP16


# A staged fused add's residual vectors loaded a round: all at once at 80-128 registers; at
# 64, two where they fit, else one. Two spilled (NVRTC 13.5) in RMSNorm over clusters (8
# bytes on sm_90) and in LayerNorm alone in one block with a dynamic quant (4-12 on sm_80).
def _ragged_residual_batch(spec: KernelSpec, op: Op, tile: Tile) -> int:
    if not tile.stage_bytes or spec.fused_add == FusedAdd.NONE:
        return 1
    if tile.registers > 64:
        return tile.repeat
    if op.rmsnorm:
        return 1 if tile.cluster > 1 else 2
    return 1 if tile.cluster == 1 and spec.quant == Quant.DYNAMIC else 2


# Staged ragged rows are built for 64 registers -- two 512-thread blocks an SM,
# four of 256 -- with a fused add's residual loaded a few vectors a round, except where 64
# spilled (NVRTC 13.5), which keep 80 (bf16 without a smooth scale) or 128: LayerNorm alone
# in one block with a fused add (the shift's values beside the residual, sm_90) or a dynamic
# quant (sm_80), and fp16 with a dynamic quant and no add.
def _ragged_staged_registers(spec: KernelSpec, op: Op, tile: Tile) -> int:
    add, dynamic = spec.fused_add != FusedAdd.NONE, spec.quant == Quant.DYNAMIC
    lone_ln = not op.rmsnorm and tile.cluster == 1 and ((add and spec.quant == Quant.NONE) or (dynamic and not add))
    if not (lone_ln or (spec.x == DType.FP16 and dynamic and not add)):
        return 64
    return 80 if spec.x == DType.BF16 and spec.smooth is None else 128


# Shared memory a ragged register row's image of one row takes: a 16-byte slot per
# thread and vector, and one more per warp, for x and for a fused add's residual.
def _ragged_image_bytes(spec: KernelSpec, tile: Tile) -> int:
    t = tile.threads_per_row
    inputs = 1 + (spec.fused_add != FusedAdd.NONE)
    return inputs * tile.repeat * (t + t // 32) * 16


# Ragged rows in registers copy their chunks into a shared-memory image (cp.async) instead of
# holding the next row's in registers, where a block serves one row of whole warps: of two
# rows where they fit in TWO_ROW_IMAGE_BYTES, the next row's copies in flight while this one
# is waited for; else of one, where it fits in IMAGE_BYTES (docs/policy.md: ragged rows).
def _ragged_row_images(spec: KernelSpec, tile: Tile) -> int:
    if tile.stage_bytes or tile.threads_per_row < 32 or tile.rows_per_block != 1:
        return 0
    one = _ragged_image_bytes(spec, tile)
    if 2 * one <= TWO_ROW_IMAGE_BYTES:
        return 2
    return 1 if one <= IMAGE_BYTES else 0


# The shared memory all of a block's row images take (0: none).
def _ragged_images_bytes(spec: KernelSpec, tile: Tile) -> int:
    return _ragged_row_images(spec, tile) * _ragged_image_bytes(spec, tile)


# A block's row images, in dynamic shared memory, take at most IMAGE_BYTES: what sm_86 and
# sm_89 let a block opt into (99 KB), less its static reduction scratch. Two rows' images
# take at most 40 KB: two of 64 KB (fused adds and fp32 rows of 8192) measured slower than one.
IMAGE_BYTES = 96 * 1024
TWO_ROW_IMAGE_BYTES = 40 * 1024


# Ragged rows in registers keep their tile's budget, but rows loaded through an image:
# - RMSNorm of 16-bit rows without an x-bias in 512-thread blocks (the 16384 bucket, fused adds
#   too), 64 registers: two blocks an SM, against one at 80 or 128;
# - rows of one input (no fused add or x-bias), 64 (four 256-thread blocks an SM, eight of 128)
#   where ptxas fits them there -- RMSNorm, and LayerNorm of bf16 or fp32 rows with gamma and
#   beta of x's precision, whose x takes at most 16 registers a thread -- else 80 in blocks of
#   up to 256 threads (three an SM);
# - RMSNorm's fused adds through one row's image in 256-thread blocks, 80 (three, as many as
#   the image lets in) against two at 128.
# LayerNorm's fused adds and fp32 rows of 16384 spilled at 64 (RMSNorm's on sm_100 and sm_120)
# (docs/policy.md: ragged rows).
def _ragged_image_registers(spec: KernelSpec, op: Op, tile: Tile) -> int:
    images = _ragged_row_images(spec, tile)
    if images and op.rmsnorm and spec.x != DType.FP32 and not spec.x_bias and tile.block_threads >= 512:
        return 64
    if _one_input_image(spec, op, tile):
        small_x = tile.repeat * tile.vec * spec.x.itemsize <= 64
        if small_x and (op.rmsnorm or (op.light_columns and spec.x != DType.FP16)):
            return min(64, tile.registers)
        return 80 if tile.block_threads <= 256 else tile.registers
    one_row_add = spec.fused_add != FusedAdd.NONE and images == 1
    if op.rmsnorm and one_row_add and tile.block_threads == 256:
        return 80
    return tile.registers


# Whether ragged rows load one input (no fused add or x-bias) through a row image: the rows
# the budgets and step counts above single out.
def _one_input_image(spec: KernelSpec, op: Op, tile: Tile) -> bool:
    return _ragged_row_images(spec, tile) > 0 and not op.prologue


# Ragged output loops take all of a thread's vectors at once, but staged rows with a fused add
# (its chunks and x's come through registers: one at a time within 64 registers) and fp16
# LayerNorm staged in one block, two at a time (at 32768 eight spilled 8 bytes on sm_90, four
# 24 bytes on sm_80).
def _ragged_output_step(spec: KernelSpec, op: Op, tile: Tile) -> int:
    if not tile.stage_bytes:
        return tile.repeat
    if spec.fused_add != FusedAdd.NONE:
        return 1
    if spec.x == DType.FP16 and not op.rmsnorm and tile.cluster == 1:
        return 2
    return tile.repeat


def framed_serves(spec: KernelSpec) -> bool:
    """Whether framed rows serve the rows of spec's bucket that are not 16-byte aligned, ahead
    of ragged rows and narrower vectors: the buckets of tiles.FRAMED_BUCKETS, where they
    measured faster than both (docs/policy.md: framed rows)."""
    return _listed(tiles.FRAMED_BUCKETS, spec, _op(spec))


# The operation kinds a bucket table keys (_listed): the norm, then "+quant" for a quant,
# else "+prologue" for a fused add or x-bias.
_NORM_KINDS, _EXTRA_KINDS = ("layernorm", "rmsnorm"), ("", "+prologue", "+quant")
TABLE_KINDS = frozenset(norm + extra for norm in _NORM_KINDS for extra in _EXTRA_KINDS)


def _table_kind(op: Op) -> str:
    return _NORM_KINDS[op.rmsnorm] + _EXTRA_KINDS[2 if op.quant != Quant.NONE else 1 if op.prologue else 0]


def bucket_tables() -> dict[str, dict]:
    """tiles' bucket tables, by name: those keyed by x's element size (or precision's name) and
    then TABLE_KINDS, which _listed reads."""
    return {name: table for name, table in vars(tiles).items() if name.endswith("BUCKETS") and isinstance(table, dict)}


def _listed(table: dict, spec: KernelSpec, op: Op) -> bool:
    """Whether a bucket table (bucket_tables) lists spec's bucket for x's element size or
    precision and the operation's kind."""
    kind = _table_kind(op)
    return any(spec.bucket in table.get(key, {}).get(kind, frozenset()) for key in (spec.x.itemsize, spec.x.value))


def ragged_first(call: KernelSpec, bucket: int) -> bool:
    """Whether a call (a spec of its semantics) whose rows are not 16-byte aligned takes
    ragged rows before narrower aligned vectors in a bucket: everywhere but unfused LayerNorm
    held in registers without a row image of at most TWO_ROW_IMAGE_BYTES, and the buckets
    with a narrow rows' tile (Op.narrow_tables), where narrower accesses measured faster
    (docs/policy.md: ragged rows, narrow rows)."""
    tile = one_pass_tile(call.x, bucket, call.x.vmax)
    op = _op(call)
    if first_entry(op.narrow_tables, call.x, bucket):
        return False
    image = _ragged_images_bytes(call, tile)
    return not (op.plain_ln and not tile.shared_bytes and not 0 < image <= TWO_ROW_IMAGE_BYTES)


def fitted_serves(spec: KernelSpec) -> bool:
    """Whether a fitted bucket serves a spec's rows: those of whole 16-byte vectors, and
    narrower aligned ones (not ragged) where the op's narrow table has the bucket."""
    whole = spec.vec == spec.x.vmax and not spec.ragged
    narrow = spec.vec < spec.x.vmax and first_entry(_op(spec).narrow_tables, spec.x, spec.bucket) is not None
    return whole or narrow


def _one_pass(spec: KernelSpec) -> bool:
    return spec.pipeline == Pipeline.ONE_PASS


# The tile depends on the operation only through Op: a fused add or x-bias (a second input),
# the quant, and whether gamma and beta of x's precision are the only per-column vectors.
def _op(spec: KernelSpec) -> Op:
    prologue = spec.fused_add != FusedAdd.NONE or spec.x_bias
    return Op(spec.norm == Norm.RMSNORM, prologue, spec.quant,
                    not prologue and spec.smooth is None and spec.w == spec.x)


# One-pass rows take their bucket's tile for the op (one_pass_tile); two-pass rows
# stream fixed chunks whatever N is.
def _tile(spec: KernelSpec, op: Op) -> Tile:
    if _one_pass(spec):
        return one_pass_tile(spec.x, spec.bucket, spec.vec, op)
    return two_pass_tile(spec.vec, spec.x)


# Staged and streamed rows get a second kernel for rows of exactly the bucket's length, which
# issues all of a pass's loads ahead of its arithmetic; not with an x-bias, nor for a dynamic
# quant with two or more extra loads per vector, which spill under the staged register budget.
def _whole_row_kernel(spec: KernelSpec, tile: Tile) -> bool:
    staged = _one_pass(spec) and tile.shared_bytes > 0
    wide_columns = spec.w.itemsize > spec.x.itemsize and tile.block_threads == 1024
    loads = ((spec.fused_add != FusedAdd.NONE) + (spec.smooth is not None) + (spec.vec * spec.x.itemsize < 16)
             + spec.save_stats + (spec.norm == Norm.LAYERNORM or spec.x.itemsize == 4) + wide_columns)
    busy_quant = spec.quant == Quant.DYNAMIC and loads >= 2
    return staged and not busy_quant and not spec.x_bias


# One-pass blocks keep their held 16-bit per-column vectors packed where floats would cost an
# occupancy step or spills (the rule is pack_columns').
def _pack_columns(spec: KernelSpec, op: Op, tile: Tile, keep: bool) -> bool:
    if not _one_pass(spec):
        return False
    return pack_columns(tile, sum(d.itemsize == 2 for d in _column_dtypes(spec)), op.fused, keep)


def _register_row(spec: KernelSpec, tile: Tile) -> bool:
    """Whether spec's rows are aligned one-pass rows held in registers by one block (not
    ragged, framed, staged, streamed or over a cluster)."""
    return _one_pass(spec) and not (spec.ragged or spec.framed or tile.shared_bytes or tile.cluster > 1)


def _column_bytes(spec: KernelSpec, op: Op, tile: Tile) -> int:
    """The dynamic shared memory of a register row's float columns (kernels/columns.cuh:
    FloatColumns), 0 for none: register rows of one block without a fused add in the buckets
    of tiles.FLOAT_COLUMN_BUCKETS (docs/policy.md: float columns)."""
    listed = _register_row(spec, tile) and not op.prologue and _listed(tiles.FLOAT_COLUMN_BUCKETS, spec, op)
    return _float_column_bytes(spec, tile) if listed else 0


def _framed_column_bytes(spec: KernelSpec, op: Op, tile: Tile) -> int:
    """The dynamic shared memory of a framed row's float columns, ahead of its bounce slots
    (framed_rows.cuh), 0 for none: in the buckets of tiles.FRAMED_FLOAT_COLUMN_BUCKETS, with
    a fused add or without."""
    return _float_column_bytes(spec, tile) if _listed(tiles.FRAMED_FLOAT_COLUMN_BUCKETS, spec, op) else 0


def _float_column_bytes(spec: KernelSpec, tile: Tile) -> int:
    """A block's float copy of its held columns, 0 where it has none to copy: rows of 16-byte
    vectors that hold their 16-bit gamma and beta and no other per-column vector (an x-bias,
    a smooth scale). The template asserts its layout's size equal (columns.cuh: FloatColumns)."""
    only_weights = not (spec.x_bias or spec.smooth) and spec.w.itemsize == 2 and tile.vec * spec.x.itemsize == 16
    held = _holds_columns(spec, tile) and only_weights
    return tile.block_threads * tile.repeat * tile.vec * len(_column_dtypes(spec)) * 4 if held else 0


def _holds_columns(spec: KernelSpec, tile: Tile) -> bool:
    """Whether a register-held or framed row holds its per-column vectors across rows (the
    templates' kHold): a tile that is not lean, with at most 32 words of them a thread."""
    return not tile.lean and tile.repeat * tile.vec * sum(d.itemsize for d in _column_dtypes(spec)) <= 128


def _column_dtypes(spec: KernelSpec) -> list[DType]:
    """The precisions of the per-column vectors a row reads (the template's Columns): gamma,
    LayerNorm's beta, an x-bias, a smooth scale."""
    held = [spec.w] * (1 + (spec.norm == Norm.LAYERNORM)) + [spec.x] * spec.x_bias + [spec.smooth]
    return [d for d in held if d is not None]


# LayerNorm's dynamic quant keeps the outputs it computes for the row's maximum for the stores
# where the tile has room (keeps_outputs); RMSNorm's maximum comes with its statistics.
def _keep_outputs(spec: KernelSpec, op: Op, tile: Tile) -> bool:
    return op.quant_ln and _one_pass(spec) and keeps_outputs(tile, spec.x)


# The output passes take all of a thread's vectors a step, but staged rows take four over
# more than eight (more spill), and rows that keep their outputs kept_output_step's.
def _output_step(spec: KernelSpec, op: Op, tile: Tile, keep: bool) -> int:
    p = tile.repeat
    if not _one_pass(spec) or not tile.stage_bytes:
        return p
    if keep:
        return kept_output_step(tile, op.light_columns)
    return 4 if p > 8 else p


# Staged rows of 65536 or more with a fused add prefetch two vectors' gamma and beta into L1
# while their statistics are reduced; shorter or unfused rows gain nothing so.
def _column_prefetch(spec: KernelSpec, tile: Tile) -> int:
    staged = _one_pass(spec) and tile.stage_bytes
    return 2 if staged and spec.fused_add != FusedAdd.NONE and spec.bucket >= 65536 else 0


# Staged rows with light columns load their first step's columns into registers before the
# reduction where an SM holds few blocks to hide that wait, and where it does not spill.
def _column_registers(spec: KernelSpec, op: Op, tile: Tile, keep: bool, step: int,
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
def _fold_shift(spec: KernelSpec, op: Op, tile: Tile, keep: bool) -> bool:
    one_block = tile.cluster == 1 or tile.stream_bytes  # (streamed clusters: a block's pass as one block's)
    return bool(op.quant_ln and _one_pass(spec) and tile.shared_bytes and one_block
                and (not keep or tile.stream_bytes) and op.light_columns)


# Staged rows that fold their shift load each vector's columns one vector ahead: ptxas does
# not move a load above an earlier store that might alias it.
def _column_ahead(tile: Tile, fold: bool) -> int:
    return 1 if fold and tile.stage_bytes else 0


def _waves(spec: KernelSpec, op: Op, tile: Tile) -> int:
    """Blocks (clusters) launched per block the device holds at once, where rows suffice: more,
    shorter-lived blocks balance the tail and mix the phases of memory-bound rows (tiles.WAVES),
    while one-pass register rows with a quant and no fused add, bound by their instructions,
    lose more to each block's start than to a longer tail (tiles.QUANT_WAVES); staged rows
    over a cluster take tiles.CLUSTER_WAVES, streamed blocks one wave (docs/policy.md: waves)."""
    if tile.stream_bytes:
        return 1
    if tile.stage_bytes:
        return tiles.CLUSTER_WAVES if tile.cluster > 1 else tiles.WAVES
    quant_bound = _one_pass(spec) and not spec.ragged and op.quant != Quant.NONE and spec.fused_add == FusedAdd.NONE
    return tiles.QUANT_WAVES if quant_bound else tiles.WAVES


def _fast_memory_waves(spec: KernelSpec, op: Op, tile: Tile) -> int:
    """The launch's waves, in place of _waves', on a GPU whose DRAM gives an SM
    tiles.FAST_MEMORY_BYTES_PER_CLOCK or more (an H200): one for the aligned register rows
    (16-byte vectors) of tiles.FAST_MEMORY_BUCKETS and the framed rows of
    FAST_MEMORY_FRAMED_BUCKETS, which run below DRAM's bound there at tiles.WAVES
    (docs/policy.md: waves); _waves' for the others."""
    if spec.framed:
        fast = _listed(tiles.FAST_MEMORY_FRAMED_BUCKETS, spec, op)
    else:
        aligned = _register_row(spec, tile) and tile.vec * spec.x.itemsize == 16
        fast = aligned and _listed(tiles.FAST_MEMORY_BUCKETS, spec, op)
    return tiles.FAST_MEMORY_WAVES if fast else _waves(spec, op, tile)


# Register-held rows keep x in L2 (evict_last) unless quantized; staged rows load past L1,
# leaving it to the per-column vectors every row reads again, where that pays and does not spill.
def _row_cache(spec: KernelSpec, op: Op, tile: Tile) -> Cache:
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
def _min_blocks_per_sm(spec: KernelSpec, op: Op, tile: Tile) -> int:
    narrow = spec.quant == Quant.DYNAMIC and tile.vec * spec.x.itemsize < 8
    if tile.stage_bytes and (spec.x_bias or narrow):
        return max(tile.min_blocks_per_sm // 2, 1)
    if (not tile.stage_bytes and not op.fused and spec.norm == Norm.LAYERNORM and spec.x.itemsize == 4
            and tile.block_threads == 512 and tile.repeat * tile.vec == 32):
        return 2
    return tile.min_blocks_per_sm
