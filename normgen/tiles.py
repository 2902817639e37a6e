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

from dataclasses import dataclass, replace

from .types import DType, Quant

# element bytes -> bucket (largest N served) -> (threads per row per block, rows per block,
# blocks per row (cluster size), staged[, registers a thread of a plain row: Tile.registers'
# default where left out]). Threads per row are a power of two (32-lane warps). Staged tiles
# keep each block's share of the row in shared memory instead of registers (32-128 KB):
# blocks then need few registers, several fit on an SM, and one block's barrier waits
# overlap another's memory traffic. Staged rows take as few blocks per row as fit: a block
# barrier costs less than a cluster's. Measured on an H100 (scripts/tune_tiles.py, M x N =
# 2^27, ratio to copy): 16-bit 32768 in one 512-thread block against a cluster of two
# 256-thread blocks, LayerNorm 0.933 -> 0.950-0.956, RMSNorm 0.952 -> 0.980, add + LayerNorm
# 0.946 -> 0.965, add + RMSNorm 0.958 -> 0.984, RMSNorm + fp8 0.925 -> 0.958, LayerNorm +
# int8 0.728 -> 0.795-0.809; fp32 LayerNorm 32768 over two 512-thread blocks 0.948-0.953
# against one 1024-thread block in registers 0.916-0.923, 65536 over two 1024-thread blocks
# 0.921-0.935 against eight of 256 0.911-0.918, 262144 over eight 1024-thread blocks (128 KB
# each) 0.782-0.786 against two-pass 0.55. Each thread stages 8 vectors: at 16 (half the
# threads) every op fell to 0.61-0.78, one more batch of loads (one more DRAM round trip)
# per row. 1024-thread blocks have 64 registers a thread: with an x-bias and a fused add
# they spill (spec.invalid_reason sends those to the next instance).
#
# Plain rows (no fused add, x-bias or quant) over clusters of eight of 16-bit types are
# built for 40 registers a thread instead of 64 (for three 512-thread or six 256-thread
# blocks per SM, as many as their shared memory allows): LayerNorm bf16 262144 0.796 ->
# 0.847-0.855, fp16 0.836 -> 0.851, RMSNorm 0.871 -> 0.904; 131072 LayerNorm 0.871-0.881 ->
# 0.883-0.887, RMSNorm 0.888-0.903 -> 0.907-0.910 (two runs; 32 registers within noise of
# 40; ncu at 262144: 30 -> 45 clusters resident, achieved occupancy 48 -> 69%). Fused rows
# keep 64: at 40, ptxas (NVRTC 13.0) spilled 8-264 bytes with an add, 8-16 with LayerNorm's
# dynamic quant; so did fp32 RMSNorm at 131072 (8 bytes; fp32 LayerNorm 0.859 -> 0.875
# there), and fp32 262144's 1024-thread blocks, one per SM either way, ran 0.799 -> 0.786 at
# 32: fp32 keeps 64. At 65536 and 32768 (clusters of two, one block) more blocks per SM were
# no faster: LayerNorm + int8 32768 0.78 -> 0.71, 65536 LayerNorm 0.892-0.919 ->
# 0.884-0.887.
#
# Rows of 2^19 over clusters of 16 (non-portable on an H100: runtime._load allows them per
# kernel), each block staging 64 KB (16-bit, 512 threads at 40 registers) or 128 KB (fp32,
# 1024 threads), instead of the two-pass pipeline's three passes over DRAM. Twelfth session
# (tune_tiles "big" groups): LayerNorm bf16 0.637 -> 0.820 (clusters of eight 1024-thread
# blocks 0.747; 16 x 512 at 64 registers 0.756), fp16 0.630 -> 0.765 (at 64 registers),
# RMSNorm bf16 0.644 -> 0.844, fp32 LayerNorm 0.616 -> 0.680.
ONE_PASS_TILES: dict[int, dict[int, tuple]] = {
    2: {
        64: (8, 16, 1, False),
        128: (16, 8, 1, False),
        256: (32, 4, 1, False),
        512: (32, 4, 1, False),
        1024: (32, 4, 1, False),
        2048: (64, 2, 1, False),
        4096: (128, 1, 1, False),
        8192: (256, 1, 1, False),
        16384: (512, 1, 1, False),
        32768: (512, 1, 1, True),
        65536: (512, 1, 2, True),
        131072: (256, 1, 8, True, 40),
        262144: (512, 1, 8, True, 40),
        524288: (512, 1, 16, True, 40),
    },
    4: {
        64: (16, 8, 1, False),
        128: (32, 4, 1, False),
        256: (32, 4, 1, False),
        512: (32, 4, 1, False),
        1024: (64, 2, 1, False),
        2048: (128, 1, 1, False),
        4096: (256, 1, 1, False),
        8192: (256, 1, 1, False),
        16384: (512, 1, 1, False),
        32768: (512, 1, 2, True),
        65536: (1024, 1, 2, True),
        131072: (512, 1, 8, True),
        262144: (1024, 1, 8, True),
        524288: (1024, 1, 16, True),
    },
}
BUCKETS: tuple[int, ...] = tuple(sorted(set().union(*ONE_PASS_TILES.values())))

# LayerNorm + dynamic quant over whole 16-byte vectors: buckets whose rows are staged in
# shared memory (as floats, which the outputs then replace: keeps_outputs) by one block each,
# instead of held in registers. Registers held these rows in one or two blocks per SM (118-128
# registers); staged, three or four blocks share an SM. Measured on an H100 (bf16, int8 and
# fp8, tune_tiles.py): 8192 0.86 -> 0.88-0.89, 16384 0.79-0.81 -> 0.87-0.88 of copy; at
# 4096 no gain (0.92 -> 0.91), 512 threads at 8192 / 16384 0.67 / 0.80. At 8192 built for
# 48 registers, five blocks per SM instead of four: int8 0.863-0.871 -> 0.886-0.895, fp8
# 0.866 -> 0.899 (40 registers, six blocks: 0.818, and spills). At 65536 the row is staged
# in bf16 by one 1024-thread block (128 KB of shared memory, one per SM) instead of a
# cluster of two 512-thread blocks: no cluster barriers, and L1 keeps 124 KB beside the
# stage. Seventh session: int8 0.663 -> 0.699-0.718, fp8 0.668 -> 0.690, set aside for a
# spill with fp32 weights; ninth, three device calls (six passes, two of them over a kernel
# variant since reverted): int8 0.659-0.671 -> 0.692-0.707, fp8 0.647-0.671 -> 0.700-0.707,
# and that spill (the whole-row kernel's, under NVRTC 13.5) avoided by spec.whole_row_kernel.
QUANT_LN_TILES: dict[int, dict[int, tuple]] = {
    2: {8192: (256, 1, 1, True, 48), 16384: (256, 1, 1, True), 65536: (1024, 1, 1, True)},
}

# LayerNorm + dynamic quant rows whose only per-column vectors are gamma and beta of x's
# precision (Op.light_columns), streamed (STREAMED in a table's `staged` place;
# Tile.stream_bytes): one 1024-thread block an SM, on a grid of one block an SM, holds its
# row in registers while the copy engine brings its next row into shared memory, and keeps
# the row's gamma and beta in shared memory, copied once. The next row's DRAM reads then
# overlap this row's reductions and output passes, which one block an SM left idle, and the
# two output passes read the columns from shared memory instead of L2 (~256 KB of L2 reads a
# row at 32768). Measured on an H100 (tune_tiles.py "streamed" groups, twenty-second
# session, the one-block staged kernel it replaces in the same runs): bf16 int8 32768
# 0.837-0.850 -> 0.896-0.919, fp8 0.838-0.850 -> 0.896-0.918; rows that keep their shift
# (1000 + N(0, 1)) 0.800-0.814 -> 0.752-0.763. At 32768 bf16 only (the table is keyed by the
# type, see entries): fp16 int8 ran no faster (0.870-0.872 -> 0.857-0.874; not looked into).
# Two things the template's version needed that the stand-alone probe
# (scripts/stream_probe.py) had: the stage on a 128-byte line (bulk copies into one 48 bytes
# past it ran 0.815 against 0.912), and the passes of the rare rows that keep their shift
# rolled (see the template's one_pass). At 65536 the columns (256 KB) do not fit beside a
# stage: the row spans a cluster of two such blocks (one an SM), each streaming its half of
# the row beside its half of gamma and beta, which push their reductions' totals to each
# other (the template's PushSlots: over the cluster barrier the probe ran 0.718, pushed
# 0.873-0.890). Twenty-third session (tune_tiles.py "streamed...65536" groups, against the
# staged block it replaces): bf16 int8 0.735-0.745 -> 0.803-0.811, fp8 0.732-0.742 ->
# 0.805-0.820, fp16 int8 0.734-0.739 -> 0.765-0.769; rows of 1000 + N(0, 1) 0.713-0.714 ->
# 0.688-0.689. The exchanges are what it pays over the 32768 rows' 0.91 (a block's row 5.18
# against 4.45 us: scripts/trace_rows.py --phases); clusters of four 512-thread blocks (two
# an SM) or eight of 256 (four) ran slower (0.720 / 0.703-0.706: 62 clusters resident).
# Twenty-fourth session ("sx" groups): the clusters sum around a shift of zero instead of the
# row's first 16 bytes, and far rows (mean more than a deviation from zero) sum again from
# their registers: bf16 int8 0.812-0.817 -> 0.878-0.880, fp8 0.803-0.821 -> 0.870-0.876,
# fp16 int8 0.773-0.790 -> 0.840-0.853; rows of 1000 + N(0, 1) 0.681-0.684 -> 0.560 (their
# second sums and exchange). Without any exchange (a timing patch) the rows ran 0.84: the
# pushed exchanges cost little beside the shift's instructions.
STREAMED = "streamed"
# Streamed rows over clusters of these types keep their outputs in registers between the
# maximum and the stores (keeps_outputs), in their whole-row kernel (the template's
# one_pass): bf16 int8 65536 0.878-0.886 -> 0.918-0.921 (tune_tiles.py "sx2" groups,
# twenty-fourth session). Not fp16 (its conversions' registers: ptxas spilled 72 bytes), nor
# at 32768 in one block (0.849-0.858 against 0.894-0.914, before the zero shift).
STREAMED_KEEP = frozenset({DType.BF16})
STREAMED_TILES: dict[DType, dict[int, tuple]] = {
    DType.BF16: {32768: (1024, 1, 1, STREAMED, 64), 65536: (1024, 1, 2, STREAMED, 64)},
    DType.FP16: {65536: (1024, 1, 2, STREAMED, 64)},
}

# Unfused LayerNorm rows of fp32 over whole 16-byte vectors (no fused add, x-bias or quant),
# as torch.compile's Triton kernels hold them: 8-16 elements a thread in blocks of 128-512
# threads built for 40-64 registers, several blocks per SM, built lean (Tile.lean: no
# next-row prefetch, no held per-column vectors) instead of 16-32 elements a thread at 128
# registers. Measured on an H100 (tune_tiles.py "lean" groups, twelfth session, against the
# tiles of ONE_PASS_TILES): 1024 0.980 -> 0.986 (128 threads, 12 blocks per SM), 2048 0.982
# -> 0.987 (256, 6), 4096 0.974 -> 0.985 (512, 3), 8192 0.966 -> 0.987 (512 at 64
# registers, 2); 16384 in 1024-thread blocks 0.933 against 0.972. 16-bit rows and RMSNorm
# gained nothing so (bf16 1024-16384 0.869-0.982 against 0.978-0.995), and at 32 registers
# (four 512-thread blocks) LayerNorm spills, its far-row pass (share_stats) holding the
# registers: without it (timing only) fp32 4096 ran 0.999, 8192 (1024 threads) 0.998.
LEAN_LN_TILES: dict[int, dict[int, tuple]] = {
    4: {1024: (128, 1, 1, False, 40), 2048: (256, 1, 1, False, 40), 4096: (512, 1, 1, False, 40),
        8192: (512, 1, 1, False, 64)},
}

# fp32 rows of 32768 that read x alone (no fused add or x-bias), LayerNorm's dynamic quant
# aside (it spills 8 bytes there), staged in one 1024-thread block (128 KB, one an SM)
# instead of over a cluster of two 512-thread blocks: no cluster exchange. Measured on an
# H100 (tune_tiles.py "f32ab" groups, fifteenth session, the two alternating three times):
# RMSNorm 0.936-0.943 -> 0.967-0.971, RMSNorm + fp8 0.886-0.888 -> 0.906-0.913, LayerNorm
# 0.937-0.939 -> 0.946-0.953 (in two other calls +0.02 and -0.002). With a fused add no
# faster (add + LayerNorm 0.964-0.971 / 0.962-0.971, add + RMSNorm 0.970-0.973 / 0.964).
SINGLE_INPUT_TILES: dict[int, dict[int, tuple]] = {4: {32768: (1024, 1, 1, True)}}

# RMSNorm rows over clusters of eight or more (131072 up) launch one wave of exactly the
# clusters the device holds at once (Tile.resident; runtime.resident_clusters: 92 / 45 / 21
# at 131072 / 262144 / 524288 on an H100), each striding over the rows, instead of 4 waves
# of clusters launched as others finish: a launch's cost beyond its steady state (~10 us at
# 262144, rows_probe.py) is its slower first rows and the SMs idle while its last rows end
# (trace_rows.py, sixteenth session). Measured on an H100 (tune_tiles.py
# "res" groups, fifteenth session, the two grids alternating): RMSNorm bf16 262144
# 0.893-0.899 -> 0.908-0.920, fp16 0.896-0.898 -> 0.912-0.917, bf16 524288 0.841-0.844 ->
# 0.868-0.869, 131072 0.916-0.917 -> 0.919-0.921 (fp16 0.888-0.908 -> 0.914-0.917), RMSNorm +
# fp8 262144 0.806-0.809 -> 0.833-0.835, add + RMSNorm 262144 0.892-0.895 -> 0.893-0.910.
# LayerNorm no faster: bf16 131072 0.912 -> 0.901-0.902, 262144 0.878-0.879 -> 0.875-0.881,
# 524288 0.832-0.836 -> 0.830-0.843, fp16 262144 0.882-0.884 -> 0.879-0.882, fp32 131072
# 0.855-0.861 -> 0.842-0.876, 262144 0.809-0.813 -> 0.808-0.815 (524288 0.677-0.680 ->
# 0.697-0.704). Clusters of two (65536) ran slower so (eleventh session: RMSNorm 0.931-0.934
# -> 0.923, LayerNorm 0.881-0.905 -> 0.834). fp32 RMSNorm was not timed; fp32 LayerNorm on
# the same tiles ran even or faster.
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
        blocks that stride over many rows finish unevenly and leave SMs idle at the end,
        and a block's rows run in lockstep phases (load, reduce, store); more, shorter-lived
        blocks let the block scheduler balance the tail and mix the phases on each SM.
        Measured on an H100 (scripts/tune_tiles.py, bf16, M x N = 2^27): 16 waves of
        register-held rows reach 0.95-0.98 of copy where one wave reached 0.88-0.92, and
        4 waves of cluster-staged rows 0.80-0.88 where one reached 0.58-0.85. Staged rows of
        one block (QUANT_LN_TILES) want 16 too: LayerNorm + int8 at 8192 0.81 with 4, 0.85
        with 16 (128 threads), 16384 0.85 -> 0.88 (256 threads). (Resident tiles launch one
        wave of the clusters the device holds: runtime.resident_clusters. Streamed blocks
        launch one wave: each streams its next row while it works on this one.)"""
        if self.stream_bytes:
            return 1
        return 4 if self.stage_bytes and self.cluster > 1 else 16

    @property
    def min_blocks_per_sm(self) -> int:
        """__launch_bounds__' residency target: as many blocks as the register budget lets an
        SM hold, or as its shared memory does, if fewer. Register-held rows get 128
        registers a thread (512 resident threads), which keeps two 256-thread blocks on an
        SM: left free, ptxas gave unfused LayerNorm at 8192 134 registers, one block per SM,
        0.97 -> 0.82 of copy on an H100. Staged blocks must share an SM (that is their
        point): 64 registers (1024 resident threads) unless the table says otherwise."""
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
    thread, in blocks built for 128 registers), or, staged, in shared memory as floats (at
    most KEEP_STAGE_BYTES per block: three blocks per SM). Measured on an H100 (bf16, 16
    waves): LayerNorm + int8 at 8192 (256 threads) 0.56 without, 0.59 with (before packed
    columns); at 16384 (512 threads, with packed columns) + int8 0.63 -> 0.65, + fp8 0.66 ->
    0.71-0.72. Staged over a cluster of two at 32768 no faster (0.74 -> 0.73: 3 blocks per SM
    instead of 4); the float rows are what QUANT_LN_TILES' one-block rows are built on.
    Streamed rows (in registers, 32 floats a thread at 64 registers) where they span a
    cluster and x is of STREAMED_KEEP's types."""
    if tile.stage_bytes:
        return float_stage_bytes(tile) <= KEEP_STAGE_BYTES
    if tile.stream_bytes:
        return tile.cluster > 1 and x in STREAMED_KEEP
    return tile.repeat * tile.vec <= 32 and tile.block_threads <= 512


def kept_output_step(tile: Tile, light: bool) -> int:
    """The vectors at a time of a staged row's output passes where it keeps its outputs
    (spec.output_step). Rows of one block built for 64 registers or more whose only
    per-column vectors are gamma and beta of x's precision (`light`) take all of them at
    once: each step waits for its gamma and beta from L2, and fewer steps a row mean fewer
    such waits. Measured on an H100 (tune_tiles.py "keepu" groups, seventeenth session), two
    at a time / four / all eight: LayerNorm + int8 bf16 16384 0.865-0.872 / 0.887-0.893 /
    0.889-0.896, + fp8 0.864-0.869 / 0.894 / 0.890, + int8 fp16 0.851 / 0.904 / 0.912 (one at
    a time: 0.849-0.853). Elsewhere two: at 8192's 48 registers more spilled (ptxas, NVRTC
    13.5), so did 16384 with fp32 columns (NVRTC 13.0 and 13.5) and fp16 with a fused add
    not stored (13.0); with a smooth scale no faster (0.657-0.663 / 0.647 / 0.657); and
    rows over clusters ran slower so (bf16 131072 0.620-0.627 / 0.626 / 0.598, fp32 131072
    0.634-0.635 / 0.621 / 0.603, fp32 32768 0.803-0.811 / 0.816 / 0.805)."""
    if light and tile.cluster == 1 and tile.registers >= 64:
        return tile.repeat
    return 2 if tile.repeat % 2 == 0 else tile.repeat


def float_stage_bytes(tile: Tile) -> int:
    """Shared memory of a staged block's share of the row as floats."""
    return tile.threads_per_row * tile.repeat * tile.vec * 4


def pack_columns(tile: Tile, column_vectors: int, fused: bool, keeps: bool) -> bool:
    """Whether a one-pass block keeps its held 16-bit per-column vectors (gamma, beta,
    x-bias, smooth scale: column_vectors of them) as loaded, converting them at each use,
    rather than letting the compiler keep them as floats: twice the registers. Worth it where
    they push the registers past an occupancy step or into spills. Measured on an H100
    (tune_tiles.py and the benchmark, 16 waves): LayerNorm + int8 at 8192, 165 -> 128
    registers, 1 -> 2 blocks per SM, 0.54 -> 0.74 of copy; add + LayerNorm at 8192 0.86 ->
    0.97; LayerNorm + fp8 0.80-0.85 -> 0.86-0.91 up to 4096. Unfused rows pack from 256
    threads a row (8192): there float columns took all 128 registers and the device's NVRTC
    13.0 spilled 4 bytes, packed ran no slower (0.956-0.966 -> 0.959-0.971); at 1024-2048
    packing cost 0.004-0.006 (0.981-0.983 -> 0.976-0.979), at 4096 nothing (0.975-0.984).
    Blocks of 512 threads, which fit one per SM either way, pay the conversions (LayerNorm +
    int8 at 16384: 0.63 -> 0.59) -- unless they keep outputs (`keeps`), which spill 64 bytes
    with float columns."""
    floats = column_vectors * tile.repeat * tile.vec
    wanted = fused or tile.threads_per_row >= 256
    return wanted and tile.stage_bytes == 0 and (tile.block_threads <= 256 or keeps) and floats > 32


@dataclass(frozen=True)
class Op:
    """What of an instance's operation its one-pass tile depends on (spec.op)."""

    rmsnorm: bool = False  # else LayerNorm
    prologue: bool = False  # a fused add or x-bias: a second input, or a second per-column vector
    quant: Quant = Quant.NONE
    light_columns: bool = False  # gamma and beta of x's precision alone: no smooth scale, no prologue

    @property
    def fused(self) -> bool:
        """A fused prologue or quant, for which ONE_PASS_TILES' register budgets (measured on
        plain rows) do not hold."""
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
    threads, rows, cluster, kind, *budget = entry or ONE_PASS_TILES[x.itemsize][bucket]
    staged, streamed = kind is True, kind == STREAMED
    registers = budget[0] if budget and (entry or not (op and op.fused)) else 64 if staged else 128
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
