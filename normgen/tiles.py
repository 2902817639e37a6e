"""Tile configurations as data: how a row is spread over threads, per N bucket.

A one-pass instance holds its whole row in registers: threads_per_row threads each hold
bucket / threads_per_row elements (as `repeat` vectors of `vec` elements). Small buckets
pack several rows into one block so a block still has enough threads. The table depends on
N only, never on the number of rows, so a row's result does not depend on the batch size.
"""
from __future__ import annotations

from dataclasses import dataclass

from .types import DType

# bucket (largest N served) -> (threads per row, rows per block), 32-lane warps.
ONE_PASS_TILES: dict[int, tuple[int, int]] = {
    64: (8, 16),
    128: (16, 8),
    256: (32, 4),
    512: (64, 2),
    1024: (128, 1),
    2048: (256, 1),
    4096: (512, 1),
    8192: (512, 1),
}
BUCKETS: tuple[int, ...] = tuple(sorted(ONE_PASS_TILES))

# Two-pass: one row per block, streamed in chunks of threads * vec * TWO_PASS_UNROLL elements.
TWO_PASS_THREADS = 512
TWO_PASS_UNROLL = 2

# Largest N served by the one-pass pipeline, per input precision (above it: two-pass).
ONE_PASS_MAX_N: dict[DType, int] = {
    DType.FP32: 8192,
    DType.FP16: 8192,
    DType.BF16: 8192,
}


@dataclass(frozen=True)
class Tile:
    threads_per_row: int
    rows_per_block: int
    vec: int  # elements per access
    repeat: int  # accesses per thread per row (one-pass) or per chunk (two-pass)

    @property
    def block_threads(self) -> int:
        return self.threads_per_row * self.rows_per_block


def one_pass_tile(bucket: int, vec: int) -> Tile:
    threads, rows = ONE_PASS_TILES[bucket]
    per_thread = bucket // threads
    return Tile(threads, rows, vec, max(per_thread // vec, 1))


def two_pass_tile(vec: int, x: DType) -> Tile:
    # Keep the bytes in flight per chunk the same whatever the vector width.
    return Tile(TWO_PASS_THREADS, 1, vec, TWO_PASS_UNROLL * x.vmax // vec)
