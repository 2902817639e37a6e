"""Tile configurations as data: how a row is spread over threads, per N bucket.

A one-pass instance holds its whole row in registers: threads_per_row threads (times
`cluster` thread blocks, for the largest rows) each hold bucket / (threads_per_row * cluster)
elements, as `repeat` vectors of `vec` elements. Each thread keeps at least 64 bytes of its
row in flight (32 elements of a 2-byte type, 16 of fp32): enough loads outstanding per SM to
cover DRAM latency. Small buckets pack several rows into one block. Rows too long for one block's
registers are split over a thread-block cluster whose blocks combine their partial sums
through distributed shared memory, so no row is read twice from DRAM.

The tables depend on N, the element size (STREAMED_TILES: the type) and (QUANT_LN_TILES,
STREAMED_TILES, LEAN_LN_TILES, SINGLE_INPUT_TILES) the operation, never on the number of
rows, so a row's result does not depend on the batch it is in.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Optional

from .types import DType, Quant


class Store(enum.Enum):
    """Where a one-pass block keeps its share of the row between the statistics and the outputs."""

    REGISTERS = "registers"
    # in shared memory (32-128 KB a block): blocks need few registers and share an SM
    STAGED = "staged"
    # in registers, while the copy engine brings the block's next row into shared memory (Tile.stream_bytes)
    STREAMED = "streamed"


@dataclass(frozen=True)
class Shape:
    """A tile table's entry: how a bucket's row is spread over threads and blocks."""

    threads: int  # threads per row per block: a power of two (32-lane warps)
    rows: int = 1  # rows per block
    cluster: int = 1  # blocks per row (a thread-block cluster's size)
    store: Store = Store.REGISTERS
    # a thread's register budget (of a plain row, in ONE_PASS_TILES); None: Tile.registers' default
    registers: Optional[int] = None


REGISTERS, STAGED, STREAMED = Store.REGISTERS, Store.STAGED, Store.STREAMED

# element bytes -> bucket (largest N served) -> Shape. Rows past one block's registers are
# staged in shared memory, by as few blocks as hold them (a block barrier costs less than a
# cluster's); plain 16-bit rows over clusters of eight or more are built for 40 registers.
ONE_PASS_TILES: dict[int, dict[int, Shape]] = {
    2: {
        64: Shape(8, rows=16),
        128: Shape(16, rows=8),
        256: Shape(32, rows=4),
        512: Shape(32, rows=4),
        1024: Shape(32, rows=4),
        2048: Shape(64, rows=2),
        4096: Shape(128),
        8192: Shape(256),
        16384: Shape(512),
        32768: Shape(512, store=STAGED),
        65536: Shape(512, cluster=2, store=STAGED),
        131072: Shape(256, cluster=8, store=STAGED, registers=40),
        262144: Shape(512, cluster=8, store=STAGED, registers=40),
        524288: Shape(512, cluster=16, store=STAGED, registers=40),
    },
    4: {
        64: Shape(16, rows=8),
        128: Shape(32, rows=4),
        256: Shape(32, rows=4),
        512: Shape(32, rows=4),
        1024: Shape(64, rows=2),
        2048: Shape(128),
        4096: Shape(256),
        8192: Shape(256),
        16384: Shape(512),
        32768: Shape(512, cluster=2, store=STAGED),
        65536: Shape(1024, cluster=2, store=STAGED),
        131072: Shape(512, cluster=8, store=STAGED),
        262144: Shape(1024, cluster=8, store=STAGED),
        524288: Shape(1024, cluster=16, store=STAGED),
    },
}
BUCKETS: tuple[int, ...] = tuple(sorted(set().union(*ONE_PASS_TILES.values())))

# LayerNorm + dynamic quant's 16-bit rows staged by one block (as floats where they fit:
# keeps_outputs) where registers would hold them in one or two blocks an SM.
QUANT_LN_TILES: dict[int, dict[int, Shape]] = {
    2: {
        8192: Shape(256, store=STAGED, registers=48),
        16384: Shape(256, store=STAGED),
        65536: Shape(1024, store=STAGED),
    },
}

# LayerNorm + dynamic quant rows with light columns (Op.light_columns), streamed: one block
# an SM holds its row in registers while its next row is copied into shared memory beside
# gamma and beta (at 65536 over a cluster of two, each block half the row).
STREAMED_TILES: dict[DType, dict[int, Shape]] = {
    DType.BF16: {
        32768: Shape(1024, store=STREAMED, registers=64),
        65536: Shape(1024, cluster=2, store=STREAMED, registers=64),
    },
    DType.FP16: {
        65536: Shape(1024, cluster=2, store=STREAMED, registers=64),
    },
}
# Streamed rows over clusters of these types keep their outputs in registers between the
# maximum and the stores (keeps_outputs), in their whole-row kernel.
STREAMED_KEEP = frozenset({DType.BF16})

# Unfused fp32 LayerNorm rows over whole 16-byte vectors, held lean (Tile.lean) in smaller
# shares a thread and more blocks an SM, as torch.compile's kernels hold them.
LEAN_LN_TILES: dict[int, dict[int, Shape]] = {
    4: {
        1024: Shape(128, registers=40),
        2048: Shape(256, registers=40),
        4096: Shape(512, registers=40),
        8192: Shape(512, registers=64),
    },
}

# fp32 rows of 32768 that read x alone (LayerNorm's dynamic quant aside) are staged in one
# 1024-thread block instead of a cluster of two: no cluster exchange.
SINGLE_INPUT_TILES: dict[int, dict[int, Shape]] = {
    4: {
        32768: Shape(1024, store=STAGED),
    },
}

# RMSNorm rows over clusters of at least this many blocks launch one wave of exactly the
# clusters the device holds at once (Tile.resident), each striding over the rows.
RESIDENT_MIN_CLUSTER = 8

# Two-pass: one row per block, streamed in chunks of threads * vec * repeat elements.
TWO_PASS_THREADS = 512
TWO_PASS_UNROLL = 2

# Largest N served by the one-pass pipeline, per input precision (above it: two-pass).
ONE_PASS_MAX_N: dict[DType, int] = {x: max(ONE_PASS_TILES[x.itemsize]) for x in (DType.FP32, DType.FP16, DType.BF16)}


# Shared memory of an SM (H100: 228 KB, 1 KB of it reserved per block), and its registers.
SHARED_PER_SM = 228 * 1024
REGISTERS_PER_SM = 64 * 1024


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
    # over many rows, instead of `waves` times as many (see RESIDENT_MIN_CLUSTER; streamed
    # tiles over clusters, STREAMED_TILES, too). A device
    # that runs other work beside the kernel holds fewer: the clusters left over then run
    # after the others, and the launch takes up to twice as long
    resident: bool = False
    # shared memory of a streamed block (see STREAMED_TILES): its next row's stage, then its
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
    def waves(self) -> int:
        """Blocks launched per block the device holds at once (when there are rows enough):
        blocks that stride over many rows finish unevenly and leave SMs idle at the end, and
        more, shorter-lived blocks let the scheduler balance the tail and mix the phases
        (load, reduce, store) on each SM. Resident tiles launch one wave of the clusters the
        device holds (runtime.resident_clusters); streamed blocks one wave, each streaming
        its next row while it works on this one (docs/policy.md: tile waves)."""
        if self.stream_bytes:
            return 1
        return 4 if self.stage_bytes and self.cluster > 1 else 16

    @property
    def min_blocks_per_sm(self) -> int:
        """__launch_bounds__' residency target: as many blocks as the register budget lets an
        SM hold, or as its shared memory does, if fewer. Register-held rows get 128
        registers a thread, which keeps two 256-thread blocks on an SM; staged blocks must
        share an SM (that is their point): 64 registers unless the table says otherwise
        (docs/policy.md: min_blocks_per_sm)."""
        blocks = REGISTERS_PER_SM // (self.block_threads * self.registers)
        if self.shared_bytes:
            blocks = min(blocks, SHARED_PER_SM // (self.shared_bytes + 1024))
        return max(blocks, 1)


# At most this many accesses per thread in a one-pass row of a 512-thread block (twice as
# many at 256 threads, half at 1024: the register file is shared): each is a register-held
# address and value; past it (only scalar access on the longest rows) registers spill.
MAX_REPEAT = 32


def has_one_pass(x: DType, bucket: int, vec: int) -> bool:
    if bucket not in ONE_PASS_TILES[x.itemsize]:
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
    x is of STREAMED_KEEP's types (docs/policy.md: keep_outputs)."""
    if tile.stage_bytes:
        return float_stage_bytes(tile) <= KEEP_STAGE_BYTES
    if tile.stream_bytes:
        return tile.cluster > 1 and x in STREAMED_KEEP
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
        """A fused prologue or quant, for which ONE_PASS_TILES' register budgets (set for
        plain rows) do not hold: a fused row holds more a thread."""
        return self.prologue or self.quant != Quant.NONE

    @property
    def quant_ln(self) -> bool:
        """LayerNorm with a dynamic quant: its tile may differ (QUANT_LN_TILES), and its
        staged rows are kept as floats where they fit (keeps_outputs)."""
        return not self.rmsnorm and self.quant == Quant.DYNAMIC

    @property
    def plain_ln(self) -> bool:
        """Unfused LayerNorm, whose tile may differ too (LEAN_LN_TILES)."""
        return not self.rmsnorm and not self.fused

    @property
    def tables(self) -> list:
        """The tables that may replace ONE_PASS_TILES' entry, first match first."""
        streamed = [STREAMED_TILES] if self.quant_ln and self.light_columns else []
        own = streamed + [QUANT_LN_TILES] if self.quant_ln else [LEAN_LN_TILES] if self.plain_ln else []
        return own + ([SINGLE_INPUT_TILES] if not self.prologue and not self.quant_ln else [])


def entries(table: dict, x: DType) -> dict:
    """A special table's buckets for rows of x: keyed by x where the two 16-bit types differ
    (STREAMED_TILES), else by its element bytes."""
    return table.get(x) or table.get(x.itemsize, {})


def one_pass_tile(x: DType, bucket: int, vec: int, op: Op | None = None) -> Tile:
    """The one-pass tile of a bucket for `op` (None: ONE_PASS_TILES' entry as it stands).
    The special tables (Op.tables) serve whole 16-byte vectors only; RMSNorm's rows over
    large clusters are resident (RESIDENT_MIN_CLUSTER)."""
    tables = op.tables if op and vec == x.vmax else []
    entry = next(filter(None, (entries(t, x).get(bucket) for t in tables)), None)
    shape = entry or ONE_PASS_TILES[x.itemsize][bucket]
    threads, rows, cluster = shape.threads, shape.rows, shape.cluster
    staged, streamed = shape.store == STAGED, shape.store == STREAMED
    # ONE_PASS_TILES' budgets hold for plain rows only; a special table's for its op
    budgeted = shape.registers is not None and (entry or not (op and op.fused))
    registers = shape.registers if budgeted else 64 if staged else 128
    per_thread = bucket // (threads * cluster)
    # a streamed block's shared memory: its share of the row's stage (x), of gamma and of beta
    # (light columns: x's precision), and the stage's mbarrier
    stream = 3 * bucket // cluster * x.itemsize + 16 if streamed else 0
    # streamed blocks launch one wave (Tile.waves), which over clusters must be of the clusters
    # the device holds at once (of single blocks: its blocks per SM times its SMs)
    resident = streamed and cluster > 1 or bool(op and op.rmsnorm) and cluster >= RESIDENT_MIN_CLUSTER
    t = Tile(threads, rows, vec, per_thread // vec, cluster, bucket // cluster * x.itemsize if staged else 0,
             registers, resident, stream)
    keep = staged and op and op.quant_ln and keeps_outputs(t)
    return replace(t, stage_bytes=float_stage_bytes(t)) if keep else t


def two_pass_tile(vec: int, x: DType) -> Tile:
    # Keep the bytes in flight per chunk the same whatever the vector width.
    return Tile(TWO_PASS_THREADS, 1, vec, TWO_PASS_UNROLL * x.vmax // vec)
