"""Tile configurations as data: how a row is spread over threads, per N bucket. The rules
that read these tables, and every other choice of how an instance is built, are in
normgen/recipe.py.

A one-pass instance holds its whole row in registers: threads_per_row threads (times
`cluster` thread blocks, for the largest rows) each hold bucket / (threads_per_row * cluster)
elements, as `repeat` vectors of `vec` elements. Each thread keeps at least 64 bytes of its
row in flight (32 elements of a 2-byte type, 16 of fp32): enough loads outstanding per SM to
cover DRAM latency. Small buckets pack several rows into one block. Rows too long for one block's
registers are split over a thread-block cluster whose blocks combine their partial sums
through distributed shared memory, so no row is read twice from DRAM.

Between powers of two, fitted buckets cut a one-block register row's shape to 5/8 of its
threads (`fitted`), for rows of whole 16-byte vectors just past half a bucket (and for the
narrower rows of NARROW_TILES, from entries of their own).

The tables depend on N, the element size (STREAMED_TILES: the type) and (QUANT_LN_TILES,
STREAMED_TILES, LEAN_LN_TILES, NARROW_TILES, LEAN_PROLOGUE_LN_TILES, PLAIN_RMS_TILES,
SINGLE_INPUT_TILES) the operation, never on the number of rows, so a row's result does not
depend on the batch it is in.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from .types import DType


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

    threads: int  # threads per row per block: a power of two, or whole warps in a fitted bucket
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


# Fitted buckets: FITTED_EIGHTHS / 8 of a power-of-two bucket whose row one block of plain
# register rows holds, on that bucket's shape (in whichever table serves the op) with as
# many eighths of its threads, where those are whole warps. A row just past half a bucket
# fills half its tile: the threads past the row's end still take the row's reductions and
# the block's place on the SM. Fitted buckets serve rows of whole 16-byte vectors, and
# narrower ones where NARROW_TILES has the bucket (docs/policy.md: fitted buckets).
FITTED_EIGHTHS = 5


def fitted(shape: Shape) -> Optional[Shape]:
    """A power-of-two bucket's shape cut to its fitted bucket, or None where it has none."""
    threads = shape.threads * FITTED_EIGHTHS // 8
    whole = shape.rows == 1 and shape.cluster == 1 and threads % 32 == 0
    return Shape(threads, store=shape.store, registers=shape.registers) if whole else None


# element bytes -> fitted bucket -> the power-of-two bucket it is cut from: under plain
# register rows only (not where the bucket's plain rows are staged or span a cluster).
FITTED_FROM: dict[int, dict[int, int]] = {
    size: {b * FITTED_EIGHTHS // 8: b for b, s in table.items() if s.store == REGISTERS and fitted(s)}
    for size, table in ONE_PASS_TILES.items()
}
ONE_PASS_TILES = {size: dict(sorted({**table, **{b: fitted(table[p]) for b, p in FITTED_FROM[size].items()}}.items()))
                  for size, table in ONE_PASS_TILES.items()}

BUCKETS: tuple[int, ...] = tuple(sorted(set().union(*ONE_PASS_TILES.values())))

# LayerNorm + dynamic quant's 16-bit rows staged by one block (as floats where they fit:
# keeps_outputs) where registers would hold them in one or two blocks an SM.
QUANT_LN_TILES: dict[int, dict[int, Shape]] = {
    2: {
        8192: Shape(256, store=STAGED, registers=48),
        10240: Shape(160, store=STAGED, registers=96),  # (fitted from 16384's at 64: 4-36 bytes spilled)
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

# Unfused LayerNorm rows over whole 16-byte vectors, held lean (Tile.lean) in smaller
# shares a thread and more blocks an SM: fp32 rows as torch.compile's kernels hold them;
# 16-bit rows of the fitted buckets: 10240 three blocks an SM, where 128 registers held one;
# 5120 at 80 (at 128, saving the statistics spilled under NVRTC 13.0).
LEAN_LN_TILES: dict[int, dict[int, Shape]] = {
    2: {
        5120: Shape(160, registers=80),
        10240: Shape(320, registers=64),
    },
    4: {
        1024: Shape(128, registers=40),
        2048: Shape(256, registers=40),
        2560: Shape(320, registers=48),  # (fitted from 4096's at 40: spilled)
        4096: Shape(512, registers=40),
        8192: Shape(512, registers=64),
    },
}

# Unfused fp32 rows (LayerNorm and RMSNorm) that are not 16-byte aligned, one element an
# access (or two, on rows of 8-byte vectors): sixteen elements a thread at 64 registers, three
# to eight blocks an SM, where the aligned tile's share a thread at 128 registers held two.
# The fitted buckets have entries of their own: narrow rows take them too
# (recipe.fitted_serves). Not 4096: there ragged rows ran near this tile on an H200 and far
# ahead of one element an access on an H100 (docs/policy.md: narrow rows).
NARROW_TILES: dict[int, dict[int, Shape]] = {
    4: {
        2048: Shape(128, registers=64),
        2560: Shape(160, registers=64),
        5120: Shape(320, registers=64),
        8192: Shape(512, registers=64),
    },
}

# 16-bit LayerNorm rows of the fitted 10240 bucket with a fused add or x-bias and no quant,
# held lean two blocks an SM, where 128 registers held one.
LEAN_PROLOGUE_LN_TILES: dict[int, dict[int, Shape]] = {
    2: {
        10240: Shape(320, registers=96),
    },
}

# Unfused 16-bit RMSNorm rows of 4096 over whole 16-byte vectors, two vectors a thread: each
# warp's chain of instructions half as long as at 128 threads, which a lone row waits on.
PLAIN_RMS_TILES: dict[int, dict[int, Shape]] = {
    2: {
        4096: Shape(256),
    },
}

# Framed rows (kernels/framed_rows.cuh) of unfused RMSNorm, over fewer threads than
# the aligned tile and more vectors each: a row's fixed work (its skew, its edges, the
# columns' realignment) over fewer warps, more blocks an SM. The 8192 and 16384 entries
# serve the buckets fitted from them (5120, 10240); framed rows serve neither 8192 nor 16384
# itself (FRAMED_BUCKETS).
FRAMED_RMS_TILES: dict[int, dict[int, Shape]] = {
    2: {
        4096: Shape(128, registers=96),
        8192: Shape(128, registers=96),
        16384: Shape(256),
    },
}
# The buckets whose rows that are not 16-byte aligned framed rows serve (recipe.framed_serves),
# by x's element size and the operation: where they measured ahead of ragged rows and of one
# element an access, at each N tried in the bucket or on average over them (docs/policy.md:
# framed rows). Unmeasured operations (fp32 with a fused add, an x-bias or a quant) take
# ragged rows.
FRAMED_BUCKETS: dict[int, dict[str, frozenset[int]]] = {
    2: {
        "layernorm": frozenset({10240}),
        "rmsnorm": frozenset({1024, 2048, 4096, 5120, 10240}),
        "layernorm+prologue": frozenset({1024, 2048, 4096, 5120, 10240}),
        "rmsnorm+prologue": frozenset({1024, 2048, 4096, 5120, 10240}),
        "layernorm+quant": frozenset({1024, 2048, 5120, 10240}),
        "rmsnorm+quant": frozenset({1024, 2048, 4096, 5120, 10240}),
    },
    4: {
        "layernorm": frozenset({10240}),
        "rmsnorm": frozenset({512, 1024, 2048, 10240, 16384}),
    },
}
# Framed rows' least register budget: the aligned tiles' lean fp32 budgets (40, 48) spill
# the frame's edges.
FRAMED_MIN_REGISTERS = 64
# ... and unfused LayerNorm's where 64 spilled (recipe._framed_registers).
FRAMED_SPILL_REGISTERS = 80

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

# Blocks (clusters) launched per block the device holds at once, where rows suffice; which
# rows take which is recipe._waves' rule.
WAVES = 16
CLUSTER_WAVES = 4
QUANT_WAVES = 4

# A GPU whose DRAM gives each SM at least FAST_MEMORY_BYTES_PER_CLOCK bytes an SM clock (an
# H200: 18.4; an H100 SXM: 12.8; devices.dram_bytes_per_sm_clock) launches these buckets'
# aligned register rows (16-byte vectors), by x's element size and the operation as
# FRAMED_BUCKETS keys it, in FAST_MEMORY_WAVES waves instead: there they run below DRAM's
# bound at WAVES, each block's start unhidden, where an H100 runs them near it
# (recipe._fast_memory_waves; docs/policy.md, waves).
FAST_MEMORY_BYTES_PER_CLOCK = 18.0
FAST_MEMORY_WAVES = 1
FAST_MEMORY_BUCKETS: dict[int, dict[str, frozenset[int]]] = {
    2: {"layernorm": frozenset({2048, 4096, 8192, 16384}), "rmsnorm": frozenset({8192, 16384})},
}
# Framed rows (recipe.framed_serves) of these buckets, keyed alike, take FAST_MEMORY_WAVES on
# such a GPU too: the buckets where one wave ran faster on an H200 at the N tried, or on
# average over the operations the key lumps together (docs/policy.md, waves).
FAST_MEMORY_FRAMED_BUCKETS: dict[int, dict[str, frozenset[int]]] = {
    2: {
        "rmsnorm": frozenset({10240}),
        "layernorm+prologue": frozenset({2048, 4096, 5120}),
        "rmsnorm+prologue": frozenset({5120}),
        "layernorm+quant": frozenset({1024, 2048, 5120}),
    },
}

# The buckets whose held 16-bit gamma and beta are converted once a block into shared memory as
# floats (recipe.column_bytes; kernels/columns.cuh: FloatColumns), by x's element size and
# the operation (recipe._listed): quantized register rows without a prologue or smooth
# scale, which an H200 runs bound by their instructions (docs/policy.md: float columns).
FLOAT_COLUMN_BUCKETS: dict[int, dict[str, frozenset[int]]] = {
    2: {"layernorm+quant": frozenset({1024, 2048, 4096}), "rmsnorm+quant": frozenset({8192})},
}

# The framed buckets whose held 16-bit gamma and beta are so converted, each time a block's
# frame moves (framed_rows.cuh), with a fused add or without, freeing the registers in which
# LayerNorm + dynamic quant then keeps its outputs (recipe._framed_keep_outputs). Keyed by
# x's element size or, where only one 16-bit precision gained, its name: fp16's RMSNorm +
# quant rows convert each held half with an instruction of its own, bf16's with a shift
# (docs/policy.md: float columns).
FRAMED_FLOAT_COLUMN_BUCKETS: dict[int | str, dict[str, frozenset[int]]] = {
    2: {"layernorm+quant": frozenset({1024, 2048, 5120, 10240}), "rmsnorm+quant": frozenset({5120, 10240})},
    "fp16": {"rmsnorm+quant": frozenset({2048, 4096})},
}

# Two-pass: one row per block, streamed in chunks of threads * vec * repeat elements.
TWO_PASS_THREADS = 512
TWO_PASS_UNROLL = 2

# Largest N served by the one-pass pipeline, per input precision (above it: two-pass).
ONE_PASS_MAX_N: dict[DType, int] = {x: max(ONE_PASS_TILES[x.itemsize]) for x in (DType.FP32, DType.FP16, DType.BF16)}


# Shared memory of an SM (H100: 228 KB, 1 KB of it reserved per block), and its registers.
SHARED_PER_SM = 228 * 1024
REGISTERS_PER_SM = 64 * 1024
