"""Time alternative one-pass tile shapes, grid sizes and kernel changes for chosen (benchmark
op, dtype, N) on the GPU, without touching the committed table or template: each candidate
is rendered into a scratch folder and dispatched from there. Usage (GPU machine):
python scripts/tune_tiles.py [--rows K] [--offset V] [NAME ...] (names of CANDIDATES' groups;
all by default), over M x N = 2^27 elements as the benchmark, or K times as many rows, of V +
N(0, 1) with --offset (--check: each candidate's outputs compared bit for bit with its
group's first candidate's). With
--ptxas (no GPU needed) each candidate is compiled instead, and its registers and spills
printed.

A candidate is (threads per row, rows per block, cluster, staged, grid, *patches) (staged
False: held in registers, True: staged, tiles.STREAMED: streamed (the table's tiles.Shape
store), "2p": the two-pass pipeline, in blocks of that many threads, at any N): grid is
"full" (one block or cluster per row group), "rK" (about K row groups per block, at least
one wave), "gK" (K row groups: blocks or clusters), "res" (exactly the clusters the device
holds at once: runtime.resident_clusters) or a number of waves (blocks the device holds at
once; tiles.Tile.waves, or "res" for Tile.resident, is the committed choice); patches name
PATCHES entries, text
replacements in the rendered header for trying a kernel change before making it, or are
"bK": the kernel built for K resident blocks per SM (__launch_bounds__' second argument)
instead of the spec's choice, and the tile's register budget so (a register-held tile built
for fewer than 128 is lean: tiles.Tile.lean), "keepK": LayerNorm + quant's staged rows kept
as floats where they take at most K KB a block, "sK": launched with K KB of shared memory
per block (fewer blocks per SM), "cK": launched preferring K% of L1 + shared memory as
shared memory (fewer blocks per SM, the same L1 per block), "nokeep": LayerNorm + quant's
staged rows not kept as floats, "keepuK": LayerNorm + quant's kept rows' output passes K
vectors at a time (tiles.kept_output_step), "colregK": staged rows' first K vectors'
per-column vectors loaded before the reduction (Recipe.column_registers; colreg0: none),
"colaheadK": the output passes' per-column vectors loaded K vectors ahead
(Recipe.column_ahead), or "nofold": the shift not folded into the output passes
(Recipe.fold_shift) and no columns ahead: the kernel before fold_shift was committed.
Without a bK patch a candidate's tile gets
Tile.registers' default budget (64 registers staged, 128 in registers). Clusters of more
than 8 blocks (16: non-portable) are allowed at load (runtime._load).
CANDIDATES holds the last experiment run."""
import contextlib
import json
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from normgen import bench, codegen, compile, dispatch, runtime, tiles  # noqa: E402
from normgen.recipe import recipe  # noqa: E402
from normgen.types import DType, FusedAdd, Pipeline, Quant  # noqa: E402


def _fused_quant(x, g, b, **kw):
    import normgen
    return {"normgen": lambda: normgen.layernorm(x, g, b, quant="int8", **kw)}


def _smooth(n):
    import torch
    return torch.linspace(0.5, 1.5, n, device="cuda")


def _static_fp8(x, g):
    import normgen
    import torch
    scale = torch.full((), 0.01, dtype=torch.float32, device="cuda")
    return {"normgen": lambda: normgen.rmsnorm(x, g, eps=1e-6, quant="fp8_e4m3", quant_scale=scale)}


# Calls the benchmark does not time: LayerNorm + int8 with a fused add or a smooth scale,
# RMSNorm + static fp8. op -> (bench op whose spec it changes, the spec's fields beyond that
# op's, the call as bench.OPS' third entry, the bytes that must move as its fourth: x (and
# the residual) in, the sum, codes and scales out)
EXTRA_OPS = {
    "add+layernorm+int8": ("layernorm+int8", dict(fused_add=FusedAdd.STORE),
                           lambda x, r, g, b: _fused_quant(x, g, b, residual=r),
                           lambda m, n, isz: m * n * (3 * isz + 1) + 4 * m + 2 * n * isz),
    "smooth+layernorm+int8": ("layernorm+int8", dict(smooth=DType.FP32),
                              lambda x, r, g, b: _fused_quant(x, g, b, smooth_scale=_smooth(x.shape[-1])),
                              lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz + 4 * n),
    "rmsnorm+fp8static": ("rmsnorm+fp8", dict(quant=Quant.STATIC, scale=None), lambda x, r, g, b: _static_fp8(x, g),
                          lambda m, n, isz: m * n * (isz + 1) + n * isz),
}


def call_spec(op, x):
    """bench.call_spec, for EXTRA_OPS too."""
    if op in EXTRA_OPS:
        return replace(bench.call_spec(EXTRA_OPS[op][0], x), **EXTRA_OPS[op][1])
    return bench.call_spec(op, x)


def call(op, ins):
    """op's normgen call on the inputs (tune_tiles.inputs)."""
    return (EXTRA_OPS[op][2] if op in EXTRA_OPS else bench.OPS[op][2])(*ins)["normgen"]


def moved(op, m, n, itemsize):
    """The bytes op must move over m rows of n elements."""
    return (EXTRA_OPS[op][3] if op in EXTRA_OPS else bench.OPS[op][3])(m, n, itemsize)

F = "full"
KEEP_STAGE_BYTES = tiles.KEEP_STAGE_BYTES
KEPT_OUTPUT_STEP = tiles.kept_output_step
KEEPS_OUTPUTS = tiles.keeps_outputs
_PREFERRED_SHARED_MEMORY_CARVEOUT = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (percent)


def cands(shapes, grids, *patches):
    """Unstaged single-block candidates: each (threads, rows) shape at each grid."""
    return [(t, r, 1, False, g, *patches) for t, r in shapes for g in grids]


def sweep(x, n, grids=(1, 4)):
    """4, 2 and 1 vectors per thread, in blocks of at least 128 threads, at each grid."""
    out = []
    for per_thread in (4 * x.vmax, 2 * x.vmax, x.vmax):
        t = n // per_thread
        if 32 <= t <= 1024:
            out += cands([(t, max(1, 128 // t))], grids)
    return out


def quant_cands(n):
    """LayerNorm + dynamic quant tiles at N: threads per row x blocks per SM built for. Run on
    the H100 (2026-11-23): every shape with more threads than the committed one was slower
    (the committed tiles 0.80-0.92, the others 0.43-0.83): more warps per row cost more in
    the reductions than the higher occupancy gave."""
    shapes = {1024: [(32, 4, ()), (64, 2, ("b4", "b6", "b8")), (128, 1, ("b4", "b8"))],
              2048: [(64, 2, ()), (128, 1, ("b4", "b6", "b8")), (256, 1, ("b2", "b4"))],
              4096: [(128, 1, ()), (256, 1, ("b2", "b3", "b4")), (512, 1, ("b1", "b2"))],
              8192: [(256, 1, ()), (512, 1, ("b1", "b2"))],
              16384: [(512, 1, ())]}[n]
    return [(t, r, 1, False, 16, *((b,) if b else ())) for t, r, bs in shapes for b in (bs or (None,))]


BLOCKS = re.compile(r"b(\d+)$")  # a residency patch: "b2" = built for 2 blocks per SM
SHARED = re.compile(r"s(\d+)$")  # launched with this many KB of shared memory (to hold fewer blocks per SM)
CARVEOUT = re.compile(r"c(\d+)$")  # launched preferring this percentage of L1 + shared memory as shared memory
NOKEEP = "nokeep"  # LayerNorm + quant's staged rows not kept as floats (tiles.KEEP_STAGE_BYTES 0)
TWO_PASS = "2p"  # in a candidate's `staged` place: the two-pass pipeline, `threads` a block
KEEP = re.compile(r"keep(\d+)$")  # ... kept as floats up to this many KB a block (tiles.KEEP_STAGE_BYTES)
COLUMN_REGISTERS = re.compile(r"colreg(\d+)$")  # staged rows load K vectors' columns early (Recipe.column_registers)
COLUMN_AHEAD = re.compile(r"colahead(\d+)$")  # output passes load columns K vectors ahead (Recipe.column_ahead)
NOFOLD = "nofold"  # the shift not folded into the output passes (Recipe.fold_shift), no columns ahead
SNOKEEP = "snokeep"  # streamed rows do not keep their outputs in registers (tiles.keeps_outputs)
KEPT_STEP = re.compile(r"keepu(\d+)$")  # ... whose output passes take this many vectors at a time (tiles.kept_output_step)


def committed(op, x, n, *patches, grid=None):
    """The committed tile of op's instance at N as a candidate: its grid (or `grid`), its
    register budget where the table gives one (as a "bK" patch, the tile's residency, unless
    `patches` name one), with `patches` after it. The candidate's spec then builds it as the
    committed spec does (Recipe.min_blocks_per_sm: a bK patch would override that)."""
    spec = replace(call_spec(op, x), pipeline=Pipeline.ONE_PASS, bucket=n, vec=x.vmax)
    t = recipe(spec).tile
    default = t.registers == (64 if t.stage_bytes else 128)  # Tile.registers' default: no budget to pass
    budget = () if default or any(map(BLOCKS.match, patches)) else (f"b{t.min_blocks_per_sm}",)
    kind = tiles.STREAMED if t.stream_bytes else bool(t.stage_bytes)
    return (t.threads_per_row, t.rows_per_block, t.cluster, kind,
            grid or ("res" if t.resident else t.waves), *budget, *patches)


def patch_groups(prefix: str, runs, rows) -> dict:
    """CANDIDATES groups, one per (op, dtype, N) of `rows`, named prefix + op + dtype + N: the
    committed candidate with each of `runs`' patch tuples in turn."""
    return {f"{prefix}{op}{x.value}{n}": (op, x, n, [committed(op, x, n, *p) for p in runs]) for op, x, n in rows}


CANDIDATES = {  # name: (bench op, dtype, N, candidates)
    # Staged rows in fewer blocks per row. H100, 2026-11-23 (two runs, copy 2963-2985 GB/s;
    # the committed tile first, then alternatives): 16-bit 32768 cluster of two 256-thread
    # blocks against one 512-thread block (16 waves): LayerNorm 0.933 / 0.950-0.956, RMSNorm
    # 0.952 / 0.980, add + LayerNorm 0.942-0.946 / 0.965, add + RMSNorm 0.958 / 0.984,
    # RMSNorm + fp8 0.925 / 0.958, LayerNorm + int8 0.728 / 0.795-0.809 (8 waves 0.809, 32
    # 0.793), + fp8 0.738 / 0.795; one 256-thread block (16 vectors per thread) 0.751 (LayerNorm),
    # 0.762-0.770 (+ int8), one 1024-thread block + int8 0.657. 65536 LayerNorm + int8 cluster
    # of two 512 0.663, two 256 0.686-0.693, one 1024 0.699-0.718, one 512 0.629; + fp8 0.668 /
    # one 1024 0.690; LayerNorm two 512 0.910-0.926, two 256 0.742, one 1024 0.903; RMSNorm
    # two 256 0.778 against 0.933-0.946; add + LayerNorm two 256 0.851 / 0.946. 131072
    # LayerNorm eight 256 0.875-0.889, four 256 0.717, four 512 0.862, two 1024 0.869; RMSNorm
    # eight 256 0.888, four 512 0.892. 262144 LayerNorm eight 512 0.828-0.837, eight 256 0.672,
    # four 1024 0.802, four 512 0.615; RMSNorm eight 512 0.868-0.872, eight 256 0.727. fp32
    # 32768 one 1024 in registers 0.916-0.923, two 512 staged 0.948-0.953, two 256 0.779,
    # four 256 0.920; fp32 65536 eight 256 0.911-0.918, four 256 0.737, four 512 0.906, two
    # 1024 0.921-0.935; fp32 131072 eight 512 0.868, four 1024 0.844. Patch batch8 (8 vectors
    # a batch): within 0.006 everywhere. A third run, one 1024-thread block against the
    # committed tile at 65536: RMSNorm 0.946 / 0.937, + fp8 0.894 / 0.876, add + LayerNorm
    # 0.948 / 0.917, add + RMSNorm 0.964 / 0.940; 131072 two 1024-thread blocks: RMSNorm
    # 0.896 / 0.899, LayerNorm + int8 0.623 / 0.614. A fourth: fp32 262144 (two-pass, 0.55)
    # over eight 1024-thread blocks (128 KB each) 0.782-0.786, eight of 512 (P = 16) 0.614;
    # bf16 262144 eight 1024-thread blocks 0.718 / 0.810, 131072 four 1024-thread 0.744 / 0.871.
    # Committed (tiles.py): one 512-thread block at 16-bit 32768; fp32 two 512-thread blocks
    # at 32768, two 1024-thread blocks at 65536, eight at 262144.
    #
    # Eighth session, H100, two runs (copy 2980-2984 GB/s), the committed tile first: unfused
    # LayerNorm with its held 16-bit columns packed (packcols; packb: beta only), bf16 4096
    # 0.975 / 0.975 (packb 0.960), 8192 0.956-0.958 / 0.959-0.964 (packb 0.967), fp16 8192
    # 0.948-0.969 / 0.953-0.971 (packb 0.955): committed (tiles.pack_columns). Built for more
    # blocks per SM (bK: fewer registers): LayerNorm + int8 8192 b5 0.863-0.871 / 0.886-0.895,
    # + fp8 0.866 / 0.899, b6 0.818 (spills); + int8 / fp8 32768 b3 0.780 / 0.709, 0.779 /
    # 0.744; + int8 65536 b3 0.658 / 0.621; 65536 LayerNorm b3 0.892-0.919 / 0.884-0.887,
    # RMSNorm 0.924-0.937 / 0.929-0.938, add + LayerNorm 0.936 / 0.934, fp32 LayerNorm b2
    # 0.912 / 0.907; 131072 LayerNorm 0.871-0.881 / b5 0.889-0.892 / b6 0.883-0.887 / b8
    # 0.888, RMSNorm 0.888-0.903 / 0.908-0.915 / 0.907-0.910 / 0.903, fp32 LayerNorm 0.859 /
    # b3 0.875 / b4 0.878; 262144 LayerNorm 0.796 / b3 0.847-0.855 / b4 0.853, fp16 0.836 /
    # 0.851 / 0.863, RMSNorm 0.871-0.872 / 0.901-0.904 / 0.902, fp32 0.799 / b2 0.786.
    # A third run (copy 2968 GB/s), the committed tile against its columns as floats
    # (nopack): bf16 1024 0.977 / 0.981, 2048 0.976 / 0.982, 4096 0.983 / 0.984, 8192 0.971
    # / 0.966, fp16 2048 0.979 / 0.983; 40 registers at two blocks per SM (b3 + s100: 100 KB
    # of shared memory a block) against the committed 64: 65536 LayerNorm 0.924 / 0.875,
    # RMSNorm 0.946 / 0.908, 32768 LayerNorm 0.968 / 0.921, + int8 0.788 / 0.716; fp32 65536
    # b2 0.924 / 0.923. Committed: 40 registers for plain 16-bit rows over clusters of eight,
    # 48 for LayerNorm + quant at 8192, unfused columns packed from 256 threads a row.
    # A fourth (copy 2986 GB/s), where torch.compile led the benchmark (fp32 1024-16384
    # 0.99-1.01, 16-bit 8192-16384 0.97-0.98): the committed tile first. fp32 1024 0.972, 32
    # x 4 0.967, 128 x 1 0.974; 4096 0.957, stcs 0.959, ldcs 0.807, 128 threads 0.936, 512
    # 0.961, 1024 0.716; 8192 0.956, stcs 0.972, 512 0.901, 1024 0.875; 16384 0.955, stcs
    # 0.964; bf16 8192 0.960, 512 0.838, 128 0.957; 16384 0.957, stcs 0.952, 256 0.954; fp16
    # 16384 0.953, 256 0.953. Nothing committed: the tiles stand, streaming stores gain fp32
    # 0.00-0.016 (within two runs' spread) and lose bf16 0.005. A fifth (copy 2981 GB/s), 65536
    # over a cluster of four 256-thread blocks (b6: 40 registers, six per SM; b4: 56, four)
    # against the committed two of 512: LayerNorm 0.910-0.919 / 0.883 / 0.877, RMSNorm 0.930
    # / 0.923 / 0.917, add + LayerNorm 0.942 / b4 0.927, fp32 four 512-thread blocks (b3)
    # 0.925 / 0.883. Not committed. A sixth (copy 2984 GB/s), the committed tiles launched
    # with more shared memory than they use (sK: less L1 for the per-column vectors, same
    # two blocks per SM): LayerNorm + int8 32768 0.788 / s80 0.757 / s96 0.755 / s112 0.696,
    # 65536 0.666 / s96 0.645 / s112 0.584, LayerNorm 32768 0.957 / s112 0.886. (A kernel
    # keeping 6 of 8 vectors of a LayerNorm + quant row as floats, 112 KB a block, ran 0.70 /
    # 0.61 at 32768 / 65536, its L1 loss larger than the recompute it saved: not committed.)
    # Ninth session, H100 (copy 2957-2974 GB/s), the committed tile first. 65536, one
    # 1024-thread block (f"{op}{dtype}" groups, two runs) against the committed cluster of two
    # 512-thread blocks: LayerNorm bf16 0.911-0.931 / 0.875-0.889, fp16 0.892-0.922 /
    # 0.866-0.891, RMSNorm bf16 0.937-0.945 / 0.921-0.926, fp16 0.932-0.954 / 0.926-0.929, add +
    # LayerNorm 0.939-0.940 / 0.905-0.913, add + RMSNorm 0.956-0.961 / 0.928-0.929, RMSNorm +
    # fp8 0.885-0.887 / 0.856-0.864, LayerNorm + int8 0.668-0.670 / 0.695-0.705, + fp8
    # 0.653-0.671 / 0.706-0.707 (two earlier calls alike, and the seventh session's): committed
    # for LayerNorm + quant only (QUANT_LN_TILES). 16384 LayerNorm + int8 / fp8 (staged floats kept, three blocks
    # per SM): c58 (two blocks, L1 124 KB) 0.776 / 0.773, nokeep (bf16 stage, four blocks)
    # 0.863-0.877 / 0.867-0.870, nokeep + b5 0.845 / 0.844-0.845, against 0.866 / 0.867;
    # 8192 nokeep 0.821-0.824, nokeep + b6 0.835-0.838, against 0.888-0.889. Template
    # changes tried as patches and reverted, figures in docs/perf-notes.md "Ninth session".
    # Tenth session, H100 (copy 2968 GB/s): a staged block's next row (its share) prefetched
    # into L2 by one bulk prefetch after its row is staged (l2pf), the committed tile without
    # it in the middle: LayerNorm bf16 65536 0.746-0.748 / 0.904, 131072 0.744-0.752 / 0.895,
    # 262144 0.739-0.740 / 0.867, RMSNorm 65536 0.779-0.781 / 0.952, 262144 0.769 / 0.907, add
    # + LayerNorm 65536 0.744-0.745 / 0.942, RMSNorm + fp8 65536 0.830-0.833 / 0.899, fp32
    # LayerNorm 131072 0.726 / 0.876, LayerNorm + int8 16384 0.832-0.844 / 0.876, 32768
    # 0.821-0.823 / 0.822, 65536 0.710-0.720 / 0.710, + fp8 65536 0.720 / 0.709: rejected.
    # Register budgets where torch.compile leads (committed first): fp32 1024 0.979, b8 0.701,
    # nopf + b8 0.857, nopf + b12 0.513, nopf + nohold + b16 0.632; 2048 0.968, b6 0.904, b8
    # 0.711, nopf + b8 0.842, nopf + nohold + b16 0.701; 4096 0.963, b3 0.883, b4 0.697, nopf +
    # b4 0.836, nopf + nohold + b8 0.690; 8192 0.962, b4 0.944, nopf + b4 0.944, nopf + nohold
    # + b6 0.655; 16384 0.961, nopf + b3 0.624, nopf + nohold + b4 0.469; fp16 8192 0.971, b3
    # 0.941, nopf + b4 0.901, nopf + nohold + b6 0.903; 16384 0.968, b2 0.405, nopf + b2 0.469,
    # nopf + nohold + b3 0.899. The committed budgets stand.
    # Rows in registers over a cluster (staged=False), as the 16-bit rows up to 16384 are held
    # in one block (32 elements a thread), against the committed staged tiles (H100, copy 2980
    # GB/s; committed first): LayerNorm bf16 65536 0.918 / 512 x 4 0.647 / 256 x 8 0.674;
    # RMSNorm 65536 0.945 / 0.758 / 0.791; LayerNorm 131072 0.896 / 512 x 8 0.608 / 256 x 8
    # 0.826; LayerNorm + int8 16384 0.873 / 256 x 2 0.485 / 128 x 4 0.477, 32768 0.833 / 512 x
    # 2 0.442 / 256 x 4 0.458, 65536 0.704 / 512 x 4 0.394 / 256 x 8 0.426. (512 x 4 with b2,
    # 1024 x 2 and 1024 x 4 spilled 296 bytes under NVRTC 13.5: not run.) Rejected.
    **{f"reg{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + [(t, 1, c, False, 16, *p) for t, c, p in cs])
       for op, x, n, cs in [
           ("layernorm", DType.BF16, 65536, [(512, 4, ()), (256, 8, ())]),
           ("rmsnorm", DType.BF16, 65536, [(512, 4, ()), (256, 8, ())]),
           ("layernorm", DType.BF16, 131072, [(512, 8, ()), (256, 8, ())]),
           ("layernorm+int8", DType.BF16, 16384, [(256, 2, ()), (128, 4, ())]),
           ("layernorm+int8", DType.BF16, 32768, [(512, 2, ()), (256, 4, ())]),
           ("layernorm+int8", DType.BF16, 65536, [(512, 4, ()), (256, 8, ())])]},
    # The L2 prefetch again, only the next row's first batch (half the row) and issued after
    # the statistics (l2pfout), with and without streaming stores (stcs), the committed tile
    # first and last (H100, copy 2978 GB/s): LayerNorm bf16 65536 0.913-0.921 / l2pfout 0.779
    # / stcs 0.916 / both 0.811; 131072 0.889-0.895 / 0.873 / 0.895 / 0.880; 262144
    # 0.863-0.865 / 0.849 / 0.860 / 0.841; RMSNorm 65536 0.926-0.951 / 0.937 / 0.946 / 0.943;
    # LayerNorm + int8 16384 0.874-0.875 / 0.863 / 0.873 / 0.883; 32768 0.831-0.834 / 0.832 /
    # 0.833 / 0.836; 65536 0.706-0.707 / 0.715 / 0.707 / 0.715. Rejected: no gain beyond a
    # run's spread anywhere, large losses on the cluster rows.
    **patch_groups("pf2", ((), ("l2pfout",), ("stcs",), ("l2pfout", "stcs"), ()),
                   [("layernorm", DType.BF16, 65536), ("layernorm", DType.BF16, 131072),
                    ("layernorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 65536),
                    ("layernorm+int8", DType.BF16, 16384), ("layernorm+int8", DType.BF16, 32768),
                    ("layernorm+int8", DType.BF16, 65536)]),
    # Grids for the staged rows: one cluster (block) per row (full), about two rows each (r2)
    # or 8 waves, against the committed waves (first and last; H100, copy 2984 GB/s): LayerNorm
    # bf16 65536 0.908-0.909 / full 0.892 / r2 0.899 / 8 0.906; 131072 0.889-0.893 / 0.808 /
    # 0.893 / 0.897; 262144 0.856-0.857 / 0.794 / 0.852 / 0.853; RMSNorm 131072 0.915-0.918 /
    # 0.831 / 0.912 / 0.913; 262144 0.905-0.906 / 0.834 / 0.892 / 0.872; fp32 LayerNorm 262144
    # 0.805-0.807 / 0.754 / 0.804 / 0.798; LayerNorm + int8 32768 0.831-0.832 / 0.826 / 0.804 /
    # 0.813; 65536 0.701-0.703 / 0.694 / 0.713 / 0.722 (8 waves: two rows a block; r2 is
    # nearly the same grid at 0.713, so within a run's spread). The committed grids stand.
    **{f"grid{op}{x.value}{n}": (op, x, n, [committed(op, x, n, grid=g) for g in (None, F, "r2", 8, None)])
       for op, x, n in [("layernorm", DType.BF16, 65536), ("layernorm", DType.BF16, 131072),
                        ("layernorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 131072),
                        ("rmsnorm", DType.BF16, 262144), ("layernorm", DType.FP32, 262144),
                        ("layernorm+int8", DType.BF16, 32768), ("layernorm+int8", DType.BF16, 65536)]},
    # Eleventh session, H100 (copy 2961-2988 GB/s), the committed tile first. Staged rows
    # streamed (streamK: patches/one_pass_streamed.cuh): persistent blocks (grid 1), a ring of
    # bulk copies of K pieces a row (one thread issues each, an mbarrier completes it)
    # refilled as the output pass frees each piece, the sums taken in a pass over the ring,
    # and a block's columns contiguous so that its gamma and beta can stay in L1 (one
    # 1024-thread block per SM: a 96 KB ring beside ~160 KB of L1 for 128 KB of columns).
    # Predicted: DRAM streams through the reductions and output passes, LayerNorm + quant
    # toward 0.85-0.90. Measured: slower everywhere. LayerNorm + int8 32768 0.818-0.834 / 1024
    # threads s96 0.662, s128 0.614, stream2 0.636 / 512 threads b2 s64 0.675-0.680, s80 0.672,
    # stream2 0.716 (grid 4: 0.695 / 0.729; 16: 0.651 / 0.683; these 512-thread kernels spill
    # 16 bytes under NVRTC 13.5) / 256 threads b3 0.637; + fp8
    # 0.818 / 0.660; 65536 (clusters of two) 0.699-0.707 / 1024 threads 0.476, g64 0.464, s128
    # 0.470 / 512 threads b2 s64 0.577, s80 0.563; + fp8 0.717 / 0.477; RMSNorm + fp8 65536
    # 0.899 / 0.704; LayerNorm 65536 0.903-0.912 / 1024 threads 0.842 / 512 threads b2 s64
    # stream8 0.797, stream2 0.863 (grid 4: 0.876); RMSNorm 65536 0.932-0.938 / 0.788 / 0.843;
    # LayerNorm 131072 0.899 / clusters of four 0.497; 262144 0.853-0.862 / 0.475-0.612. One
    # 1024-thread block per SM streamed ran as fast as the same block staged by its own
    # threads (0.662 / 0.657 at 32768 + int8): not the loads but the block's barriers and
    # reductions, with nothing else on the SM, set its pace; at two blocks per SM each
    # piece's barrier cost more than the copies saved (stream2 faster than stream8). Rejected.
    **{f"stream{op}{n}": (op, DType.BF16, n, [committed(op, DType.BF16, n)] + cs)
       for op, n, cs in [
           ("layernorm+int8", 32768, [(1024, 1, 1, True, 1, "b1", "s96", "stream4"),
                                      (512, 1, 1, True, 1, "b2", "s64", "stream8"),
                                      (512, 1, 1, True, 1, "b2", "s64", "stream2"),
                                      (512, 1, 1, True, 4, "b2", "s64", "stream2")]),
           ("layernorm+int8", 65536, [(1024, 1, 2, True, 1, "b1", "s96", "stream4"),
                                      (512, 1, 2, True, 1, "b2", "s64", "stream8")]),
           ("layernorm", 65536, [(1024, 1, 2, True, 1, "b1", "s96", "stream4"),
                                 (512, 1, 2, True, 4, "b2", "s64", "stream2")])]},
    # Rows per launch: the committed tiles over the benchmark's rows and four times as many
    # (--rows 4; two runs each, H100, copy 2973-2988 GB/s), x1 / x4: LayerNorm bf16 65536
    # 0.904-0.913 / 0.916-0.942, 131072 0.888-0.892 / 0.904, 262144 0.855-0.862 / 0.878-0.879;
    # RMSNorm 262144 0.892-0.896 / 0.943-0.949; fp32 LayerNorm 65536 0.911-0.924 / 0.943-0.949;
    # LayerNorm + int8 32768 0.824-0.829 / 0.852-0.856, 65536 0.699-0.706 / 0.747-0.752;
    # RMSNorm + fp8 65536 0.891-0.896 / 0.944-0.951. A cost of 7-14 us per launch (time(4M) -
    # 4 time(M), over 3) in a ~200 us call: the last rows' tail -- a staged block's row takes
    # ~10-18 us, with 17-45 MB of rows in flight -- which the copy, in 16-byte pieces, does
    # not pay.
    **{f"rows{op}{x.value}{n}": (op, x, n, [committed(op, x, n)])
       for op, x, n in [("layernorm", DType.BF16, 65536), ("layernorm", DType.BF16, 131072),
                        ("layernorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 262144),
                        ("layernorm", DType.FP32, 65536), ("layernorm+int8", DType.BF16, 32768),
                        ("layernorm+int8", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 65536)]},
    # Against that tail, grids of exactly the clusters the device holds at once (gK, K from
    # cuOccupancyMaxActiveClusters: 132 at 65536, 92 at 131072, 45 at 262144, 66 for fp32
    # 65536) and 2-4 times as many, the committed 4 waves first and last (H100, copy 2966
    # GB/s): LayerNorm bf16 65536 0.881-0.905 / x1 0.834 / x2 0.894 / x3 0.884 / x4 0.904;
    # RMSNorm 65536 0.931-0.934 / 0.923 / 0.933 / 0.922 / 0.931; LayerNorm 131072 0.889 /
    # 0.882 / 0.887 / 0.890 / 0.891; 262144 0.867-0.868 / 0.865 / 0.873 / 0.876 / 0.878;
    # RMSNorm 262144 0.898-0.905 / 0.918 / 0.911 / 0.918 / 0.911; RMSNorm + fp8 65536
    # 0.891-0.894 / 0.884 / 0.895 / 0.883 / 0.892; fp32 LayerNorm 65536 0.919-0.922 / 0.914 /
    # 0.922 / 0.925 / 0.922; add + LayerNorm 65536 0.947-0.952 / 0.935 / 0.950 / 0.942 / 0.945:
    # within a run's spread but RMSNorm 262144 (+0.01-0.02, one run). And fewer rows in
    # flight, each over more blocks (clusters of 4 at 65536, 16 -- non-portable -- at
    # 131072-262144): LayerNorm bf16 262144 0.850-0.861 / 16 x 512 0.830 / 16 x 256 0.867;
    # RMSNorm 262144 0.881 / 16 x 512 0.854; LayerNorm 131072 0.886 / 8 x 512 0.858 / 16 x 256
    # 0.866; 65536 0.895-0.920 / 4 x 512 b2 0.865, b3 0.881; RMSNorm 65536 0.941 / 0.914; add +
    # LayerNorm 65536 0.942 / 0.908; fp32 LayerNorm 65536 0.933 / 4 x 512 0.910; fp32 262144
    # 0.800 / 16 x 1024 0.679: larger clusters' barriers cost more than the shorter tail
    # saves. Nothing committed.
    **{f"wide{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs)
       for op, x, n, cs in [
           ("layernorm", DType.BF16, 262144, [(512, 1, 16, True, 4, "b3"), (256, 1, 16, True, 4, "b6")]),
           ("rmsnorm", DType.BF16, 262144, [(512, 1, 16, True, 4, "b3")]),
           ("layernorm", DType.BF16, 131072, [(512, 1, 8, True, 4, "b3"), (256, 1, 16, True, 4, "b6")]),
           ("layernorm", DType.BF16, 65536, [(512, 1, 4, True, 4, "b2"), (512, 1, 4, True, 4, "b3")]),
           ("layernorm", DType.FP32, 65536, [(512, 1, 4, True, 4, "b2")])]},
    # torch.compile's kernels where it leads (fp32 1024-16384, bf16 8192; Triton source, PTX
    # and autotuned configs dumped on the H100): one row per program over a grid of every row,
    # 512 threads (1024 at 16384) holding 8-16 elements each, a few dozen registers, x loaded
    # with L2's evict_last policy (and again, evict_first, for the outputs). Our kernel shaped
    # alike (threads per row, blocks per SM built for, 16 waves or full grid, without the
    # next-row prefetch or held columns where those spill under NVRTC 13.5), the committed
    # tile first (H100, copy 2944 GB/s): fp32 1024 0.976 / 256 threads b4 0.717 / 128 b8 0.979
    # / 256 full 0.629; 2048 0.983 / 512 b4 0.846 / 256 b4 0.949 / 512 full 0.795; 4096 0.961 /
    # 512 b2 0.958, full 0.853, full nopf 0.852 / 1024 0.733, full 0.676; 8192 0.958 / 1024
    # 0.880, full 0.723; 16384 0.965 / 1024 nohold 0.859, nopf + nohold 0.926, full 0.911;
    # bf16 8192 0.971 / 1024 0.788, full 0.522. Our kernel needs more registers than Triton's
    # (8 elements a thread spill at 32), so its shape does not transfer. The load policy does:
    **{f"triton{x.value}{n}": ("layernorm", x, n,
                               [committed("layernorm", x, n)] + [(t, 1, 1, False, g, *p) for t, g, p in cs])
       for x, n, cs in [
           (DType.FP32, 1024, [(256, 16, ("b4", "nopf")), (128, 16, ("b8", "nopf")), (256, F, ("b4", "nopf"))]),
           (DType.FP32, 2048, [(512, 16, ("b4", "nopf")), (256, 16, ("b4", "nopf")), (512, F, ("b4", "nopf"))]),
           (DType.FP32, 4096, [(512, 16, ("b2",)), (512, F, ("b2",)), (512, F, ("b2", "nopf")),
                               (1024, 16, ("b2", "nopf")), (1024, F, ("b2", "nopf"))]),
           (DType.FP32, 8192, [(1024, 16, ("b1",)), (1024, F, ("b1",))]),
           (DType.FP32, 16384, [(1024, 16, ("b1", "nohold")), (1024, 16, ("b1", "nopf", "nohold")),
                                (1024, F, ("b1", "nohold"))]),
           (DType.BF16, 8192, [(1024, 16, ("b1",)), (1024, F, ("b1",))])]},
    # the "hint" groups (run before one_pass loaded its rows Cache::KEEP_L2, so ldlast then
    # covered x as well; committed first and last, H100, copy 2953 GB/s): LayerNorm fp32 1024
    # 0.970-0.974 / ldlast 0.971 / ldfirst 0.917 / ldl1na 0.869; 4096 0.961-0.962 / 0.974 /
    # 0.875 / 0.782; 16384 0.963-0.966 / 0.975 / 0.860 / 0.740; bf16 8192 0.970-0.976 / 0.990 /
    # 0.957 / 0.933; staged: 65536 0.915-0.938 / 0.917 / 0.885 / 0.884; RMSNorm 262144
    # 0.910-0.925 / 0.895 / 0.891 / 0.892; LayerNorm + int8 32768 0.825-0.830 / 0.801 / 0.811 /
    # 0.792. Then register-held rows' x with evict_last (Cache::KEEP_L2) against without
    # (nokeepl2), committed first and last (H100, copy 2956-2971 GB/s): LayerNorm bf16 1024
    # 0.991-0.993 / 0.969, 2048 0.992-0.994 / 0.975, 4096 0.992 / 0.964, 8192 0.984-0.985 /
    # 0.958, 16384 0.978-0.982 / 0.961; fp16 0.989-0.991 / 0.980, 0.990-0.992 / 0.971,
    # 0.985-0.990 / 0.957, 0.969-0.987 / 0.946, 0.968-0.976 / 0.953; fp32 0.974-0.976 / 0.956,
    # 0.974-0.981 / 0.946, 0.962-0.967 / 0.929, 0.956-0.959 / 0.939, 0.965-0.969 / 0.952;
    # RMSNorm bf16 1024 0.989-0.990 / 0.975, 4096 0.990-0.992 / 0.966, 16384 0.989 / 0.975; add
    # + LayerNorm 4096 0.985-0.994 / 0.963, 16384 0.988-0.989 / 0.964; add + RMSNorm 4096
    # 0.991-0.992 / 0.960; but RMSNorm + fp8 4096 0.984-0.991 / 0.993, 16384 0.927-0.933 /
    # 0.930, LayerNorm + int8 1024 0.944-0.954 / 0.960, 4096 0.901-0.908 / 0.911 (then with
    # evict_last; keepl2q restores it). Committed: KEEP_L2 for register-held rows without a
    # quant (template, one_pass).
    **{f"keepl2{op}{x.value}{n}": (op, x, n, [committed(op, x, n, *p) for p in (
        (), ("keepl2q" if call_spec(op, x).quant != Quant.NONE else "nokeepl2",), ())])
       for op, x, n in [(op, x, n) for x in (DType.BF16, DType.FP16, DType.FP32) for op, n in
                        [("layernorm", 1024), ("layernorm", 2048), ("layernorm", 4096), ("layernorm", 8192),
                         ("layernorm", 16384)]] +
       [("rmsnorm", DType.BF16, n) for n in (1024, 4096, 16384)] +
       [("add+layernorm", DType.BF16, n) for n in (4096, 16384)] + [("add+rmsnorm", DType.BF16, 4096),
        ("rmsnorm+fp8", DType.BF16, 4096), ("rmsnorm+fp8", DType.BF16, 16384),
        ("layernorm+int8", DType.BF16, 1024), ("layernorm+int8", DType.BF16, 4096)]},
    **{f"hint{op}{x.value}{n}": (op, x, n, [committed(op, x, n, *p)
                                            for p in ((), ("ldlast",), ("ldfirst",), ("ldl1na",), ())])
       for op, x, n in [("layernorm", DType.FP32, 1024), ("layernorm", DType.FP32, 4096),
                        ("layernorm", DType.FP32, 16384), ("layernorm", DType.BF16, 8192),
                        ("layernorm", DType.BF16, 65536), ("rmsnorm", DType.BF16, 262144),
                        ("layernorm+int8", DType.BF16, 32768)]},
    # Twelfth session, H100, two runs (copy 2986 GB/s), the committed tile first. LayerNorm +
    # dynamic quant rows kept as floats (outputs computed once, gamma and beta read once a
    # row) over clusters: all slower. 65536 + int8 / fp8 0.695-0.698 / 0.700-0.704, two
    # 1024-thread blocks (keep128) 0.549-0.556 / 0.552-0.556, two 512 (keep128) 0.544-0.550 /
    # 0.547-0.553, four 512 0.533-0.536 / 0.533-0.539, four 256 0.650-0.654 / 0.649, eight 256
    # 0.569-0.570 / 0.570-0.578; 32768 + int8 0.827-0.831, one 1024 (keep128) 0.716-0.725, one
    # 512 (keep128) 0.702-0.709, two 512 0.612-0.616, two 256 0.707-0.724 (+ fp8 0.741), four
    # 256 0.597; 16384 + int8 0.855-0.867, one 512 (keep128) 0.785-0.795, two 256 0.668-0.670,
    # two 128 0.734-0.744.
    **{f"qkeep{op}{n}": (op, DType.BF16, n, [committed(op, DType.BF16, n)] + cs)
       for op in ("layernorm+int8", "layernorm+fp8") for n, cs in [
           (65536, [(1024, 1, 2, True, 4, "keep128"), (512, 1, 2, True, 4, "keep128"), (512, 1, 4, True, 4),
                    (256, 1, 4, True, 4), (256, 1, 8, True, 4)]),
           (32768, [(1024, 1, 1, True, 16, "keep128"), (512, 1, 1, True, 16, "keep128"), (512, 1, 2, True, 4),
                    (256, 1, 2, True, 4), (256, 1, 4, True, 4)]),
           (16384, [(512, 1, 1, True, 16, "keep128"), (256, 1, 2, True, 4), (128, 1, 2, True, 4)])]},
    # Register rows built lean (tiles.Tile.lean: no next-row prefetch, no held columns) in
    # larger blocks at fewer registers, as torch.compile's, against the ONE_PASS_TILES tile
    # at 128 registers (listed second: 64 x 2, 128, 256, 256 threads); noredo (unsafe)
    # bounds what a far-row pass costing no registers could give. Before LEAN_LN_TILES
    # (first figure: the ONE_PASS_TILES tile): fp32 1024 0.980 / 128 threads b12 0.986 / 256
    # b8 noredo 0.980; 2048 0.969-0.982 / 256 b6 0.983-0.987 / noredo 0.996 / 512 b4 noredo
    # 0.978; 4096 0.966-0.974 / 512 b3 0.985 / b3 noredo 0.992 / b4 noredo 0.991-0.999 / 1024
    # b2 noredo 0.915; 8192 0.960-0.966 / 512 b2 0.987 / 512 b3 noredo 0.984 / 1024 b1 0.762 /
    # 1024 b2 noredo 0.991-0.998; 16384 0.972 / 1024 b1 0.933. bf16 1024 0.995 / 128 b12
    # 0.869 / 64 x 2 b8 0.982 / 128 b16 noredo 0.947; 2048 0.993 / 128 b8 0.979 / 256 b8
    # noredo 0.872; 4096 0.987 / 512 b4 noredo 0.874 / 256 b6 noredo 0.995; 8192 0.988 / 1024
    # b2 noredo 0.816 / 512 b3 noredo 0.988; 16384 0.978 / 1024 b1 0.788 / b2 noredo 0.963;
    # RMSNorm bf16 4096 0.992 / 512 b4 0.988 / 256 b6 0.989, 8192 0.995 / 1024 b2 0.922 / 512
    # b3 0.979. Committed: LEAN_LN_TILES (fp32 1024-8192). At 32 registers LayerNorm spills
    # (ptxas, NVRTC 13.5: 12-28 bytes), also with the far-row pass summed from the registers,
    # as a second turn of the sums' loop, or in a branch of its own that also normalizes the
    # row from memory (16-64 bytes); without it (noredo) it does not.
    **{f"lean{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs)
       for op, x, n, cs in [
           ("layernorm", DType.FP32, 1024, [(64, 2, 1, False, 16, "b4"), (256, 1, 1, False, 16, "b8", "noredo")]),
           ("layernorm", DType.FP32, 2048, [(128, 1, 1, False, 16, "b4"), (256, 1, 1, False, 16, "b6", "noredo")]),
           ("layernorm", DType.FP32, 4096, [(256, 1, 1, False, 16, "b2"), (512, 1, 1, False, 16, "b4", "noredo")]),
           ("layernorm", DType.FP32, 8192, [(256, 1, 1, False, 16, "b2"), (1024, 1, 1, False, 16, "b2", "noredo")]),
           ("layernorm", DType.FP32, 16384, [(1024, 1, 1, False, 16, "b1")]),
           ("layernorm", DType.BF16, 4096, [(256, 1, 1, False, 16, "b6", "noredo")]),
           ("layernorm", DType.BF16, 8192, [(512, 1, 1, False, 16, "b3", "noredo")])]},
    # The committed 16-bit register tiles built lean at fewer registers (same threads and
    # vectors, more blocks per SM; committed first, H100, copy 2970 GB/s): LayerNorm bf16
    # 1024 0.984 / b8 0.980, 2048 0.982 / 0.971, 4096 0.984 / b8 0.979 / b6 0.968, 8192 0.974 /
    # b4 0.980 / b3 0.953, 16384 0.976 / b2 0.971 / b3 0.901; fp16 0.984 / 0.979, 0.990 /
    # 0.983, 0.989 / 0.965 / 0.966, 0.982 / 0.975 / 0.966, 0.975 / 0.980 / 0.912; RMSNorm bf16
    # 0.994 / 0.987, 0.989 / 0.990, 0.981 / 0.993 / 0.993, 0.998 / 0.991 / 0.992, 0.973 /
    # 0.986 / 0.993; fp16 0.994 / 0.983, 0.982 / 0.985, 0.986 / 0.982 / 0.982, 0.985 / 0.979 /
    # 0.977, 0.981 / 0.978 / 0.980. Within the spread: nothing committed.
    **{f"lean2{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs)
       for op, x, n, cs in [
           (op, x, n, [(*(t if isinstance(t, tuple) else (t, 1)), 1, False, 16, b) for t, b in tb])
           for op in ("layernorm", "rmsnorm") for x in (DType.BF16, DType.FP16) for n, tb in [
               (1024, [((32, 4), "b8")]), (2048, [((64, 2), "b8")]),
               (4096, [(128, "b8"), (128, "b6")]), (8192, [(256, "b4"), (256, "b3")]),
               (16384, [(512, "b2"), (512, "b3")])]]},
    # Two-pass rows (staged "2p"), H100, copy 2969-2984 GB/s. Their output vectors' stores
    # as NVVM split them (tpsplit) against whole (store_words' intrinsic, committed), built
    # for one block per SM (the spec's), two (b2) or three (b3), and with the first pass
    # loaded evict_last (tpkeepl2). N = 2^19: LayerNorm bf16 0.258 / 0.634 / b2 0.637 / b3
    # 0.636 / b2 + tpkeepl2 0.626; RMSNorm bf16 0.266 / 0.635; fp16 0.272 / 0.633; fp32 0.611
    # / 0.612; add + LayerNorm 0.610 / 0.610; LayerNorm + int8 0.403 / 0.402; 2^20 bf16 0.355
    # / 0.531. At one-pass sizes, against the committed one-pass tile (first): LayerNorm fp32
    # 16384 0.963 / two-pass 0.804-0.820, 1024 threads b2 + tpkeepl2 0.885; 32768 0.947 /
    # 0.709-0.769; bf16 16384 0.975 / (split) 0.364, b3 + tpkeepl2 0.947; 32768 0.962 /
    # 0.754-0.910; 65536 0.901 / 0.671-0.756; RMSNorm 65536 0.942 / 0.688-0.802.
    **{f"twopass{op}{x.value}{n}": (op, x, n, [(512, 1, 1, TWO_PASS, 16, *p) for p in (
        ("tpsplit",), (), ("b2",), ("b3",), ("b2", "tpkeepl2"))])
       for op, x, n in [("layernorm", DType.BF16, 524288), ("rmsnorm", DType.BF16, 524288),
                        ("layernorm", DType.FP16, 524288), ("layernorm", DType.FP32, 524288),
                        ("add+layernorm", DType.BF16, 524288), ("layernorm+int8", DType.BF16, 524288),
                        ("layernorm", DType.BF16, 1048576)]},
    # One-pass rows of 2^19, staged over clusters of 8 (1024 threads, 128 KB a block, as fp32
    # 262144) or 16 (non-portable), against the two-pass pipeline (first). H100, copy 2955
    # GB/s: LayerNorm bf16 0.637 / eight 1024 0.747 / sixteen 512 0.756 / b3 0.820; fp16
    # 0.630 / 0.714 / 0.765; RMSNorm bf16 0.644 / 0.777 / 0.806 / b3 0.844; fp32 0.616 /
    # sixteen 1024 0.680. Committed: sixteen 512-thread blocks at 40 registers (16-bit),
    # sixteen of 1024 (fp32).
    **{f"big{op}{x.value}": (op, x, 524288, [(512, 1, 1, TWO_PASS, 16)] + cs)
       for op, x, cs in [
           ("layernorm", DType.BF16, [(1024, 1, 8, True, 4), (512, 1, 16, True, 4), (512, 1, 16, True, 4, "b3")]),
           ("layernorm", DType.FP16, [(1024, 1, 8, True, 4), (512, 1, 16, True, 4)]),
           ("rmsnorm", DType.BF16, [(1024, 1, 8, True, 4), (512, 1, 16, True, 4), (512, 1, 16, True, 4, "b3")]),
           ("layernorm", DType.FP32, [(1024, 1, 16, True, 4)])]},
    # Clusters of two at 65536 built for three blocks per SM (b3: 40 registers, no spills under
    # NVRTC 13.5), with and without x past L1, the committed tile (b2) first and last. H100,
    # fourteenth session (copy 2962 GB/s): RMSNorm bf16 0.944 / b3 0.939 / b3 + xl2 0.950 /
    # 0.949, fp16 0.946 / 0.949 / 0.948 / 0.955; LayerNorm bf16 0.928 / 0.896 / 0.910 / 0.919;
    # RMSNorm + fp8 0.895 / 0.822 / 0.858 (16 bytes spilled) / 0.905. Within the spread for
    # RMSNorm, slower for the rest: the tiles stand.
    **{f"b3{op}{x.value}65536": (op, x, 65536, [committed(op, x, 65536), committed(op, x, 65536, "b3"),
                                                 committed(op, x, 65536, "b3", "xl2"), committed(op, x, 65536)])
       for op, x in [("rmsnorm", DType.BF16), ("rmsnorm", DType.FP16), ("layernorm", DType.BF16),
                     ("rmsnorm+fp8", DType.BF16)]},
    # Staged rows' per-column vectors kept in L1 for a thread's first K vectors (l1vK: by
    # vector index, at compile time in these fully unrolled passes), the rest past L1, the
    # committed tile first and last. H100, fourteenth session (copy 2977 GB/s), bf16:
    # LayerNorm + int8 65536 0.703 / l1v2 0.705 / l1v3 0.700 / l1v4 0.696 / 0.690 (l1v3 and
    # l1v4 spill 8 bytes under NVRTC 13.5); + fp8 0.692 / l1v3 0.693 / 0.692; LayerNorm
    # 65536 0.902 / xl2 + l1v2 0.906 / l1v3 0.892 / l1v4 0.898 / 0.903; RMSNorm 0.931 / xl2 +
    # l1v4 0.947 / l1v6 0.947 / 0.947; add + LayerNorm 0.938 / xl2 + l1v3 0.930 / 0.936.
    # Within the spread or slower: L1 residency of the columns is not what bounds these rows
    # (LayerNorm + quant reads gamma and beta twice a row from L2, 4.2 times x's bytes, and
    # runs as fast). Rejected.
    # The bound on a cheaper cluster exchange: `nocl` (timing only) skips it, the committed
    # tile first and last.
    # The cluster exchange of rows over clusters: its pushed forms against the committed
    # barrier and remote loads. H100, fifteenth session (copy 2965-2978 GB/s; each form
    # measured as the template, in calls of their own: committed / push / committed, then
    # committed / push0 / committed / push0): RMSNorm bf16 65536 0.946 / 0.940 / 0.943,
    # 0.944 / 0.902 / 0.937 / 0.941; 131072 0.919 / 0.907 / 0.917, 0.917 / 0.908 / 0.912 /
    # 0.909; 262144 0.904 / 0.882 / 0.904, 0.910 / 0.869 / 0.900 / 0.884; 524288 0.846 / 0.860
    # / 0.846, 0.852 / 0.840 / 0.844 / 0.851; RMSNorm + fp8 65536 0.904 / 0.896 / 0.902, 0.887
    # / 0.887 / 0.893 / 0.914; add + RMSNorm 0.962 / 0.955 / 0.960, 0.961 / 0.948 / 0.955 /
    # 0.964; LayerNorm 65536 0.928 / 0.924 / 0.927, 0.921 / 0.910 / 0.919 / 0.918; 262144
    # 0.885 / 0.870 / 0.872, 0.885 / 0.873 / 0.877 / 0.877; add + LayerNorm 0.951 / 0.942 /
    # 0.942, 0.940 / 0.941 / 0.945 / 0.954; fp32 LayerNorm 65536 0.929 / 0.924 / 0.924, 0.927
    # / 0.916 / 0.927 / 0.933. No exchange skipped entirely (nocl, timing only; committed /
    # nocl / committed): RMSNorm 65536 0.934 / 0.951 / 0.937, 262144 0.883 / 0.899 / 0.889,
    # add + LayerNorm 0.932 / 0.947 / 0.939, LayerNorm 65536 0.907 / 0.940 / 0.873, 262144
    # 0.864 / 0.887 / 0.872, RMSNorm + fp8 0.890 / 0.930 / 0.889. The exchange costs 1-4%, but
    # a push gains none of it (262144 loses 0.02): what a block waits for is its partners'
    # partials, later than its own, not the barrier. The GPU tests of every cluster instance
    # passed with push (245). Rejected. (The patches, patches/cluster_push.json, left the tree
    # in the twenty-third session, when streamed rows over clusters took up the pushed
    # exchange: the template's PushSlots; git history up to 902ab4e has them.)
    # Clusters of 16 smaller blocks at 131072-262144 (as quack's RMSNorm: 32 KB a block, six per
    # SM), the committed tile first and last. H100, fifteenth session (copy 2954 GB/s):
    # RMSNorm bf16 262144 0.891 / 16 x 256 b6 0.905 / at 2 waves 0.863 / b5 0.899 / 0.899;
    # fp16 0.902 / 0.894 / 0.902; LayerNorm bf16 0.886 / 0.891 / 0.875; RMSNorm bf16 131072
    # 0.926 / 16 x 128 b12 0.891 / 16 x 256 (P = 4) b12 0.934 / 0.925. Within the spread of
    # the committed tiles (RMSNorm 262144 ran 0.876-0.910 in this session's calls): the
    # tiles stand.
    # The fixed cost of a launch of rows over clusters (scripts/rows_probe.py: ~10 us at 262144,
    # ~4.5 at 65536, most of it in the first waves, whose clusters start together) against
    # the first wave's odd clusters started 2, 4 or 8 us late (stagK, timing only), the
    # committed tile first and last. H100, fifteenth session (copy 2981 GB/s): RMSNorm bf16
    # 262144 0.898 / 0.891 / 0.885 / 0.895 / 0.899; 65536 0.947 / 0.944 / 0.944 / 0.945 /
    # 0.947; 131072 0.918 / 0.916 / 0.919 / 0.917 / 0.918; LayerNorm 262144 0.868 / 0.864 /
    # 0.863 / 0.874 / 0.878. No gain: phases started apart do not stay apart, or their lockstep
    # is not what the first waves lose.
    # fp32 rows of 32768: the committed cluster of two 512-thread blocks (first and last)
    # against three blocks per SM (b3), one 1024-thread block (128 KB, one per SM), clusters
    # of four 256-thread blocks and 8 waves. H100, fifteenth session (copy 2953 GB/s; the
    # group twice): LayerNorm 0.952 / 0.925 / 1024 0.968 / 0.904 / 0.943 / 0.940, then 0.930 /
    # 0.909 / 0.952 / 0.905 / 0.940 / 0.934; in a third call 0.945 / 0.914 / 0.943 / 0.906 /
    # 0.944 / 0.945. One 1024-thread block, other ops (committed / 1024 / committed, two
    # calls): RMSNorm 0.958 / 0.985 / 0.954 and 0.946 / 0.980 / 0.951; RMSNorm + fp8 0.899 /
    # 0.919 / 0.898; add + LayerNorm 0.964 / 0.962 / 0.966 and 0.966 / 0.971 / 0.971; add +
    # RMSNorm 0.970 / 0.964 / 0.973; LayerNorm + int8 / fp8 spill 8 bytes. Then f32ab, the
    # two alternating three times (copy 2980 GB/s): LayerNorm 0.938-0.939 / 0.946-0.953,
    # RMSNorm 0.936-0.943 / 0.967-0.971, RMSNorm + fp8 0.886-0.888 / 0.906-0.913. Committed
    # (tiles.SINGLE_INPUT_TILES) for the rows that read x alone, but LayerNorm + dynamic quant.
    **{f"f32{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs + [committed(op, x, n)])
       for op, x, n, cs in [
           ("layernorm", DType.FP32, 32768, [(512, 1, 2, True, 4, "b3"), (1024, 1, 1, True, 16, "b1"),
                                             (256, 1, 4, True, 4, "b6"), (512, 1, 2, True, 8, "b2")])]
       + [(op, DType.FP32, 32768, [(1024, 1, 1, True, 16, "b1")])
          for op in ("rmsnorm", "add+layernorm", "add+rmsnorm", "layernorm+int8", "rmsnorm+fp8")]},
    # 16-bit rows of 65536 in one 1024-thread block (128 KB, one per SM), as fp32 32768 gained
    # (f32 groups), with and without x past L1; the committed cluster of two first and last.
    # H100, fifteenth session (copy 2985 GB/s): RMSNorm bf16 0.935 / 0.936 / 0.919 / 0.941,
    # fp16 0.931 / 0.925 / 0.923 / 0.944; RMSNorm + fp8 0.896 / 0.869 / 0.879 / 0.897; add +
    # LayerNorm 0.932 / 0.905 / 0.905 / 0.936; LayerNorm 0.918 / 0.899 / 0.887 / 0.917. As
    # the seventh session found: 16-bit rows, with more instructions per byte, want the
    # second block an SM.
    # RMSNorm and LayerNorm rows over clusters of eight or more: a grid of exactly the clusters
    # the device holds (runtime.resident_clusters, each cluster striding over the rows; now
    # the committed grid of RMSNorm's, Tile.resident) against 4 waves of clusters. H100,
    # fifteenth session, the two alternating (4 waves / resident), two calls (copy 2960 and
    # 2978 GB/s): RMSNorm bf16 262144 0.893-0.899 / 0.908-0.920 (45 clusters), fp16 0.896-0.898 /
    # 0.912-0.917, bf16 524288 0.841-0.844 / 0.868-0.869 (21), 131072 0.916-0.917 / 0.919-0.921
    # (92), fp16 131072 0.888-0.908 / 0.914-0.917; RMSNorm + fp8 262144 0.806-0.809 /
    # 0.833-0.835; add + RMSNorm 262144 0.892-0.895 / 0.893-0.910; LayerNorm bf16 131072 0.912 /
    # 0.901-0.902, 262144 0.878-0.879 / 0.875-0.881, 524288 0.832-0.836 / 0.830-0.843, fp16
    # 262144 0.882-0.884 / 0.879-0.882, fp32 131072 0.855-0.861 / 0.842-0.876, 262144
    # 0.809-0.813 / 0.808-0.815, 524288 0.677-0.680 / 0.697-0.704. Committed for RMSNorm
    # (tiles.RESIDENT_MIN_CLUSTER).
    **{f"res{op}{x.value}{n}": (op, x, n, [committed(op, x, n, grid=4), committed(op, x, n, grid="res")] * 2
                                + [committed(op, x, n, grid=4)])
       for op, x, n in [("rmsnorm", DType.BF16, 131072), ("rmsnorm", DType.BF16, 262144),
                        ("rmsnorm", DType.FP16, 262144), ("rmsnorm", DType.BF16, 524288),
                        ("rmsnorm", DType.FP16, 131072), ("rmsnorm+fp8", DType.BF16, 262144),
                        ("add+rmsnorm", DType.BF16, 262144), ("layernorm", DType.BF16, 131072),
                        ("layernorm", DType.BF16, 262144), ("layernorm", DType.BF16, 524288),
                        ("layernorm", DType.FP16, 262144), ("layernorm", DType.FP32, 131072),
                        ("layernorm", DType.FP32, 262144), ("layernorm", DType.FP32, 524288)]},
    **{f"one{op}{x.value}{n}": (op, x, n, [committed(op, x, n), (1024, 1, 1, True, 16, "b1"),
                                            (1024, 1, 1, True, 16, "b1", "xl2"), committed(op, x, n)])
       for op, x, n in [("rmsnorm", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 65536),
                        ("add+layernorm", DType.BF16, 65536), ("layernorm", DType.BF16, 65536),
                        ("rmsnorm", DType.FP16, 65536)]},
    **{f"f32ab{op}{x.value}{n}": (op, x, n, [committed(op, x, n), (1024, 1, 1, True, 16, "b1")] * 3
                                  + [committed(op, x, n)])
       for op, x, n in [("layernorm", DType.FP32, 32768), ("rmsnorm", DType.FP32, 32768),
                        ("rmsnorm+fp8", DType.FP32, 32768), ("layernorm+fp8", DType.FP32, 32768)]},
    **{f"stag{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + [committed(op, x, n, f"stag{k}")
                                                                      for k in (20, 40, 80)] + [committed(op, x, n)])
       for op, x, n in [("rmsnorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 65536),
                        ("layernorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 131072)]},
    **{f"w16{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs + [committed(op, x, n)])
       for op, x, n, cs in [
           ("rmsnorm", DType.BF16, 262144, [(256, 1, 16, True, 4, "b6"), (256, 1, 16, True, 2, "b6"),
                                            (256, 1, 16, True, 4, "b5")]),
           ("rmsnorm", DType.FP16, 262144, [(256, 1, 16, True, 4, "b6")]),
           ("layernorm", DType.BF16, 262144, [(256, 1, 16, True, 4, "b6")]),
           ("rmsnorm", DType.BF16, 131072, [(128, 1, 16, True, 4, "b12"), (256, 1, 16, True, 4, "b12")])]},
    **{f"nocl{op}{x.value}{n}": (op, x, n, [committed(op, x, n), committed(op, x, n, "nocl"), committed(op, x, n)])
       for op, x, n in [("rmsnorm", DType.BF16, 65536), ("rmsnorm", DType.BF16, 262144),
                        ("add+layernorm", DType.BF16, 65536), ("layernorm", DType.BF16, 65536),
                        ("layernorm", DType.BF16, 262144), ("rmsnorm+fp8", DType.BF16, 65536)]},
    **{f"l1v{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + [committed(op, x, n, *p) for p in ps]
                                + [committed(op, x, n)])
       for op, x, n, ps in [
           ("layernorm+int8", DType.BF16, 65536, [("l1v2",), ("l1v3",), ("l1v4",)]),
           ("layernorm+fp8", DType.BF16, 65536, [("l1v3",)]),
           ("layernorm", DType.BF16, 65536, [("xl2", "l1v2"), ("xl2", "l1v3"), ("xl2", "l1v4")]),
           ("rmsnorm", DType.BF16, 65536, [("xl2", "l1v4"), ("xl2", "l1v6")]),
           ("add+layernorm", DType.BF16, 65536, [("xl2", "l1v3")])]},
    # Staged rows' columns partly kept in L1 (l1colsK), their x loaded past L1 (xl2), with a
    # carveout leaving L1 the rest of the SM (cK); the committed tile first and last. H100,
    # thirteenth session (copy 2971 GB/s), bf16: LayerNorm 65536 0.924 / xl2 0.923 / + l1cols0
    # 0.783 / l1cols3 0.766 / l1cols4 c58 0.764 / l1cols8 c58 0.766 / l1cols4 alone 0.786 /
    # 0.908; RMSNorm 65536 0.932 / 0.945 / 0.938 / l1cols8 0.945 / c58 0.943 / 0.944; add +
    # LayerNorm 0.936 / 0.928 / l1cols3 0.815 / l1cols4 c58 0.818 / 0.941; LayerNorm 131072
    # 0.887 / 0.910 / l1cols0 0.903 / l1cols2 0.902 / 0.898; 262144 0.863 / 0.878 / 0.831 /
    # 0.832 / 0.862; LayerNorm + int8 65536 0.697 / l1cols0 0.547 / l1cols3 0.567 / l1cols4
    # c58 0.543 / 0.694. A column test per vector (a branch around each load of gamma and
    # beta) costs LayerNorm far more than L1 could give back, even where every column takes
    # the same branch (l1cols0, l1cols8); x past L1 is the only gain (below).
    **{f"l1c{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + [committed(op, x, n, *p) for p in ps]
                                 + [committed(op, x, n)])
       for op, x, n, ps in [
           ("layernorm", DType.BF16, 65536, [("xl2",), ("xl2", "l1cols0"), ("xl2", "l1cols3"),
                                              ("xl2", "l1cols4", "c58"), ("xl2", "l1cols8", "c58"), ("l1cols4",)]),
           ("rmsnorm", DType.BF16, 65536, [("xl2",), ("xl2", "l1cols0"), ("xl2", "l1cols8"),
                                            ("xl2", "l1cols8", "c58")]),
           ("add+layernorm", DType.BF16, 65536, [("xl2",), ("xl2", "l1cols3"), ("xl2", "l1cols4", "c58")]),
           ("layernorm", DType.BF16, 131072, [("xl2",), ("xl2", "l1cols0"), ("xl2", "l1cols2")]),
           ("layernorm", DType.BF16, 262144, [("xl2",), ("xl2", "l1cols0"), ("xl2", "l1cols2")]),
           ("layernorm+int8", DType.BF16, 65536, [("l1cols0",), ("l1cols3",), ("l1cols4", "c58")])]},
    # Staged rows' x loaded past L1 (xl2), the committed tile first and last. H100, thirteenth
    # session (copy 2973 GB/s), committed / xl2 / committed: LayerNorm bf16 32768 0.959 / 0.886
    # / 0.957, 65536 0.895 / 0.910 / 0.903, 131072 0.897 / 0.908 / 0.896, 262144 0.867 /
    # 0.882 / 0.866, 524288 0.824 / 0.835 / 0.825; fp16 0.955 / 0.969 / 0.967, 0.908 / 0.911 /
    # 0.914, 0.887 / 0.906 / 0.890, 0.864 / 0.877 / 0.860, 0.818 / 0.840 / 0.826; fp32 within
    # 0.002 at every N; RMSNorm bf16 0.976 / 0.910 / 0.974, 0.946 / 0.948 / 0.939, 0.906 /
    # 0.918 / 0.908, 0.902 / 0.887 / 0.895, 0.849 / 0.830 / 0.848 (8 bytes spilled at 40
    # registers from 131072); fp16 0.979 / 0.961 / 0.979, 0.936 / 0.945 / 0.940, 0.913 / 0.923
    # / 0.913, 0.893 / 0.896 / 0.901, 0.848 / 0.834 / 0.837; fp32 within 0.005; add +
    # LayerNorm 0.967 / 0.964, 0.949 / 0.943, 0.918 / 0.903 / 0.913, 0.865 / 0.850; add +
    # RMSNorm and RMSNorm + fp8 within 0.01, mostly below. Committed (Recipe.row_cache):
    # unfused 16-bit LayerNorm over clusters of eight or more.
    **{f"xl2{op}{x.value}{n}": (op, x, n, [committed(op, x, n), committed(op, x, n, "xl2"), committed(op, x, n)])
       for op, x, n in [(op, x, n) for op in ("layernorm", "rmsnorm") for x in (DType.BF16, DType.FP16, DType.FP32)
                        for n in (32768, 65536, 131072, 262144, 524288)]
       + [(op, DType.BF16, n) for op in ("add+layernorm", "add+rmsnorm", "rmsnorm+fp8")
          for n in (32768, 65536, 131072, 262144)]},
    # RMSNorm without its per-element weight_offset add (nooff: 2 of the ~23 instructions an
    # element of RMSNorm + fp8 65536's whole-row kernel), the committed kernel first, the two
    # alternating. H100, sixteenth session (copy 2985 GB/s), committed / nooff twice: RMSNorm
    # + fp8 65536 0.895 / 0.894, 0.891 / 0.891; 16384 0.927 / 0.929, 0.917 / 0.921; RMSNorm
    # bf16 65536 0.928 / 0.930, 0.929 / 0.932; fp16 0.927 / 0.933, 0.930 / 0.933; 131072
    # 0.911 / 0.918, 0.913 / 0.910; 262144 0.906 / 0.914, 0.912 / 0.913; 524288 0.849 /
    # 0.846, 0.852 / 0.844; add + RMSNorm 65536 0.949 / 0.949 twice. Within the spread: these
    # rows are not bound by their arithmetic, and the add stays.
    **{f"off{op}{x.value}{n}": (op, x, n, [committed(op, x, n), committed(op, x, n, "nooff")] * 2)
       for op, x, n in [("rmsnorm+fp8", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 16384),
                        ("rmsnorm", DType.BF16, 65536), ("rmsnorm", DType.FP16, 65536),
                        ("rmsnorm", DType.BF16, 131072), ("rmsnorm", DType.BF16, 262144),
                        ("rmsnorm", DType.BF16, 524288), ("add+rmsnorm", DType.BF16, 65536)]},
    # 16-bit rows of 65536 over clusters of four 256-thread blocks (32 KB staged each; quack's
    # shape at 64K), as 131072's committed tile (eight of 256) holds its rows, against the
    # committed cluster of two 512-thread blocks (first and last). H100, sixteenth session
    # (copy 2961 GB/s), committed / four 256 b6 / b4 / b6 res / committed: RMSNorm bf16 0.934
    # / 0.917 / 0.915 / 0.917 / 0.939, fp16 0.941 / b6 0.917 / 0.944; RMSNorm + fp8 0.889 /
    # 0.815 / 0.854 / 0.895; add + RMSNorm 0.953 / b4 0.942 / 0.955; LayerNorm 0.925 / 0.892
    # / 0.879 / 0.918; add + LayerNorm 0.944 / b4 0.924 / 0.944; LayerNorm + int8 (one
    # 1024-thread block committed) 0.699 / b4 (kept as floats, 64 KB) 0.652 / b4 nokeep 0.670
    # / two 512 0.672 / 0.709. Slower everywhere: the committed tiles stand.
    **{f"c4{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs + [committed(op, x, n)])
       for op, x, n, cs in [
           ("rmsnorm", DType.BF16, 65536, [(256, 1, 4, True, 4, "b6"), (256, 1, 4, True, 4, "b4"),
                                           (256, 1, 4, True, "res", "b6")]),
           ("rmsnorm", DType.FP16, 65536, [(256, 1, 4, True, 4, "b6")]),
           ("rmsnorm+fp8", DType.BF16, 65536, [(256, 1, 4, True, 4, "b6"), (256, 1, 4, True, 4, "b4")]),
           ("add+rmsnorm", DType.BF16, 65536, [(256, 1, 4, True, 4, "b4")]),
           ("layernorm", DType.BF16, 65536, [(256, 1, 4, True, 4, "b6"), (256, 1, 4, True, 4, "b4")]),
           ("add+layernorm", DType.BF16, 65536, [(256, 1, 4, True, 4, "b4")]),
           ("layernorm+int8", DType.BF16, 65536, [(256, 1, 4, True, 4, "b4"), (256, 1, 4, True, 4, "b4", "nokeep"),
                                                  (512, 1, 2, True, 4, "b2")])]},
    # LayerNorm + quant's kept outputs over more vectors at a time (keepuK; the committed
    # choice, tiles.kept_output_step, was two before the seventeenth session). H100, copy
    # 2968-2980 GB/s, committed (since: all eight) / keepu2 / keepu4 / keepu8 / committed:
    # LayerNorm + int8 bf16 16384 0.882 / 0.871 / 0.887 / 0.886 / 0.887, + fp8 0.888 / 0.873
    # / 0.889 / 0.888 / 0.888, + int8 fp16 0.906 / 0.858 / 0.896 / 0.902 / 0.903 (earlier
    # calls at two: 0.865-0.872, 0.864-0.869, 0.851; one at a time 0.849-0.853; b2, two
    # blocks an SM, 0.814-0.823); add + LayerNorm + int8 0.779-0.781 / 0.761 / 0.768 / 0.780
    # and smooth 0.656-0.657 / 0.663 / 0.647 / 0.657 (in a call beside a compile job; a
    # fused add stays at two: at eight its fp16 instances without the store spilled under
    # NVRTC 13.0);
    # bf16 131072 0.620-0.627 / 0.626 / 0.598, fp32 131072 0.634-0.635 / 0.621 / 0.603, fp32
    # 32768 0.803-0.811 / 0.816 / 0.805 (these at two then).
    **patch_groups("keepu", ((), ("keepu2",), ("keepu4",), ("keepu8",), ()),
                   [("layernorm+int8", DType.BF16, 16384), ("layernorm+fp8", DType.BF16, 16384),
                    ("layernorm+int8", DType.FP16, 16384), ("add+layernorm+int8", DType.BF16, 16384),
                    ("smooth+layernorm+int8", DType.BF16, 16384), ("layernorm+int8", DType.BF16, 131072),
                    ("layernorm+int8", DType.FP32, 32768), ("layernorm+int8", DType.FP32, 131072)]),
    # gamma and beta prefetched into L1 before the statistics' reduction (colpfK), the
    # committed tile first and last
    **patch_groups("colpf", ((), ("colpf2",), ("colpf4",), ("colpf8",), ()),
                   [("layernorm+int8", DType.BF16, 16384), ("layernorm+int8", DType.FP16, 16384),
                    ("layernorm+int8", DType.BF16, 32768), ("layernorm+int8", DType.BF16, 65536),
                    ("rmsnorm+fp8", DType.BF16, 65536), ("layernorm", DType.BF16, 65536),
                    ("rmsnorm", DType.BF16, 65536), ("add+layernorm", DType.BF16, 65536)]),
    **patch_groups("colpfab", ((), ("colpf2",)) * 3,
                   [("add+layernorm", DType.BF16, 65536), ("add+rmsnorm", DType.BF16, 65536),
                    ("rmsnorm", DType.BF16, 65536), ("layernorm", DType.BF16, 65536),
                    ("add+layernorm", DType.BF16, 32768), ("add+layernorm", DType.BF16, 131072),
                    ("add+rmsnorm", DType.BF16, 131072), ("add+layernorm", DType.BF16, 262144),
                    ("add+rmsnorm", DType.BF16, 262144), ("add+layernorm", DType.FP16, 65536),
                    ("add+layernorm", DType.FP32, 65536), ("add+rmsnorm", DType.FP32, 65536),
                    ("add+layernorm+int8", DType.BF16, 65536), ("add+layernorm+int8", DType.BF16, 32768)]),
    # Rows in pairs (pairU: patches/one_pass_paired.cuh): each block stages two rows in
    # 16-bit and loads each vector's gamma and beta once for both, one reduction for both;
    # the committed tile first and last. Grids: one block (cluster) per pair. H100,
    # seventeenth session (copy 2975-2984 GB/s; --check: outputs bit-identical to the
    # committed tile's where the reduction's order is the same, one 256-thread block at
    # 16384): LayerNorm + int8 16384 0.868-0.875 / pair4 (three blocks an SM) 0.784-0.788 /
    # b3 pair2 0.776-0.781 / 512 threads 0.799-0.800 / two blocks an SM (c58: L1 124 KB for
    # the 64 KB of columns) pair4 0.766, pair8 0.791, pair2 0.754; 32768 0.835 / clusters of
    # two 256-thread blocks 0.699 / of 512 0.657; 65536 0.715 / clusters of four 256 0.658 /
    # 512 0.612; RMSNorm + fp8 65536 0.895-0.896 / 0.774 / 0.779; RMSNorm 65536 0.944-0.945 /
    # 0.828; LayerNorm 65536 0.925-0.927 / 0.828. Slower everywhere: a block's two rows load,
    # reduce and store in step, and the SM loses the phase overlap of two independent
    # blocks, which the halved column loads do not repay. Rejected.
    **{f"pair{op}{x.value}{n}": (op, x, n, [committed(op, x, n)] + cs + [committed(op, x, n)])
       for op, x, n, cs in [
           ("layernorm+int8", DType.BF16, 16384, [(256, 1, 1, True, "g4096", "nokeep", "s64", "b2", "pair4"),
                                                  (256, 1, 1, True, "g4096", "nokeep", "s64", "b3", "pair2"),
                                                  (512, 1, 1, True, "g4096", "nokeep", "s64", "b2", "pair4"),
                                                  (256, 1, 1, True, "g4096", "nokeep", "s64", "b2", "c58", "pair4"),
                                                  (256, 1, 1, True, "g4096", "nokeep", "s64", "b2", "c58", "pair8"),
                                                  (256, 1, 1, True, "g4096", "nokeep", "s64", "b2", "c58", "pair2")]),
           ("layernorm+int8", DType.BF16, 32768, [(256, 1, 2, True, "g2048", "nokeep", "s64", "b2", "pair4"),
                                                  (512, 1, 2, True, "g2048", "nokeep", "s64", "b2", "pair2")]),
           ("layernorm+int8", DType.BF16, 65536, [(256, 1, 4, True, "g1024", "nokeep", "s64", "b2", "pair4"),
                                                  (512, 1, 4, True, "g1024", "nokeep", "s64", "b2", "pair2")]),
           ("rmsnorm+fp8", DType.BF16, 65536, [(256, 1, 4, True, "g1024", "s64", "b2", "pair4"),
                                               (512, 1, 4, True, "g1024", "s64", "b2", "pair1")]),
           ("rmsnorm", DType.BF16, 65536, [(256, 1, 4, True, "g1024", "s64", "b2", "pair4")]),
           ("layernorm", DType.BF16, 65536, [(256, 1, 4, True, "g1024", "s64", "b2", "pair4")])]},
    # Early columns (colregK: the template's EarlyColumns, committed as Recipe.column_registers):
    # a staged row loads the per-column vectors of its first output step's first K vectors
    # into registers before its statistics' reduction; colreg0, none (the committed choice
    # before). H100, eighteenth session (copy 2969-2986 GB/s; --check: outputs bit-identical
    # throughout), none / 2 / 4 / 8 / none:
    # RMSNorm bf16 65536 0.937-0.940 / 0.951-0.954 / 0.947-0.949 / 0.942-0.943 / 0.945-0.950,
    # fp16 0.943-0.946 / 0.955-0.956 / 0.948-0.951 / 0.943-0.945 / 0.950-0.955; RMSNorm + fp8
    # 65536 0.896-0.900 / 0.906-0.910 / 0.915-0.919 / 0.918-0.920 / 0.898-0.899, fp16 0.881 /
    # - / 0.918 / - / 0.902; LayerNorm 65536 0.916-0.930 / 0.931-0.934 / - / - / 0.921-0.932,
    # fp16 0.926 / 0.932 / - / - / 0.916; LayerNorm + int8 16384 0.888-0.890 / 0.905-0.912 /
    # 0.908-0.909 / - / 0.884-0.891, fp16 0.909-0.912 / 0.899-0.920 / 0.908-0.929 / - /
    # 0.898-0.915 (spilled 16 bytes at four under NVRTC 13.0); add + RMSNorm 65536 0.971 /
    # 0.971-0.972 / 0.961 / - / 0.960-0.966, add + LayerNorm 0.956-0.957 / 0.950-0.962 / - /
    # - / 0.954-0.963; RMSNorm 131072 0.907-0.910 / 0.914-0.917 / - / - / 0.914-0.916,
    # 262144 0.909 / 0.923-0.927 / - / - / 0.914-0.916, 524288 0.868 / 0.900 / - / - / 0.867,
    # 32768 0.963-0.975 / 0.966-0.976 / 0.963-0.978 / 0.966-0.981 / 0.965-0.979; RMSNorm +
    # fp8 32768 0.976 / 0.975 / 0.957 / 0.964 / 0.965, 131072 0.844 / 0.856 / - / - / 0.841,
    # 262144 0.815 / 0.822 / - / - / 0.813; LayerNorm 131072 0.897 / 0.912 / - / - / 0.909
    # (28 bytes spilled at two, NVRTC 13.5), 262144 0.883 / 0.847 / - / - / 0.881 (28
    # bytes); LayerNorm + int8 32768 0.833 / 0.814 / - / - / 0.834 (8 bytes), 65536 0.727 /
    # 0.730 / - / - / 0.727 (8 bytes); fp32 RMSNorm 65536 0.934 / 0.951 / 0.953 / - / 0.937,
    # LayerNorm 0.929 / 0.933 / - / - / 0.931; add + LayerNorm + int8 65536 0.861 / 0.881 /
    # - / - / 0.838.
    **{f"colreg{op}{x.value}{n}": (op, x, n, [committed(op, x, n, f"colreg{k}") for k in (0, *ks, 0)])
       for op, x, n, ks in [("rmsnorm", DType.BF16, 65536, (2, 4, 8)), ("rmsnorm", DType.FP16, 65536, (2, 4, 8)),
                            ("rmsnorm+fp8", DType.BF16, 65536, (2, 4, 8)), ("layernorm", DType.BF16, 65536, (2,)),
                            ("layernorm+int8", DType.BF16, 16384, (2, 4)),
                            ("layernorm+int8", DType.FP16, 16384, (2, 4)),
                            ("add+rmsnorm", DType.BF16, 65536, (2, 4)), ("add+layernorm", DType.BF16, 65536, (2,)),
                            ("rmsnorm", DType.BF16, 131072, (2,)), ("rmsnorm", DType.BF16, 262144, (2,)),
                            ("rmsnorm", DType.BF16, 32768, (2, 4, 8)),
                            ("layernorm", DType.FP16, 65536, (2,)), ("layernorm", DType.BF16, 131072, (2,)),
                            ("layernorm", DType.BF16, 262144, (2,)), ("rmsnorm", DType.BF16, 524288, (2,)),
                            ("rmsnorm+fp8", DType.BF16, 32768, (2, 4, 8)), ("rmsnorm+fp8", DType.BF16, 131072, (2,)),
                            ("rmsnorm+fp8", DType.BF16, 262144, (2,)), ("rmsnorm+fp8", DType.FP16, 65536, (4,)),
                            ("layernorm+int8", DType.BF16, 32768, (2,)), ("layernorm+int8", DType.BF16, 65536, (2,)),
                            ("rmsnorm", DType.FP32, 65536, (2, 4)), ("layernorm", DType.FP32, 65536, (2,)),
                            ("add+layernorm+int8", DType.BF16, 65536, (2,))]},
    # The same, alternating three times, none / K: RMSNorm bf16 65536 (2) 0.938-0.946 /
    # 0.944-0.957, fp16 (2) 0.947-0.948 / 0.953-0.955; RMSNorm + fp8 65536 (4) 0.887-0.899 /
    # 0.907-0.919; LayerNorm 65536 (2) 0.916-0.927 / 0.927-0.935; LayerNorm + int8 16384 (4)
    # 0.882-0.886 / 0.907-0.922, + fp8 0.878-0.886 / 0.899-0.921, fp16 + int8 0.904-0.913 /
    # 0.908-0.929; RMSNorm 262144 (2) 0.913-0.917 / 0.927-0.931.
    **{f"colregab{op}{x.value}{n}": (op, x, n, [committed(op, x, n, p) for p in ("colreg0", f"colreg{k}") * 3])
       for op, x, n, k in [("rmsnorm", DType.BF16, 65536, 2), ("rmsnorm", DType.FP16, 65536, 2),
                           ("rmsnorm+fp8", DType.BF16, 65536, 4), ("layernorm", DType.BF16, 65536, 2),
                           ("layernorm+int8", DType.BF16, 16384, 4), ("layernorm+fp8", DType.BF16, 16384, 4),
                           ("layernorm+int8", DType.FP16, 16384, 4), ("rmsnorm", DType.BF16, 262144, 2)]},
    # The committed choice (Recipe.column_registers) against none on rows the groups above did
    # not time, twice: LayerNorm fp32 131072 0.889-0.901 / 0.877-0.883, 262144 0.808 /
    # 0.766-0.769; RMSNorm + fp8 131072 0.879-0.882 / 0.829-0.855, 262144 0.851-0.857 /
    # 0.819-0.832, 524288 0.800 / 0.775, fp16 262144 0.848-0.853 / 0.833-0.836; RMSNorm +
    # static fp8 65536 0.935 / 0.918-0.924, 262144 0.889-0.898 / 0.882-0.891; RMSNorm fp16
    # 262144 0.923-0.926 / 0.909-0.910, 524288 0.890-0.900 / 0.848-0.861. Timed under a first
    # choice that the committed one changed to none (even, or spilled under NVRTC 13.0):
    # RMSNorm fp16 131072 with two 0.913-0.925 / 0.912-0.922, LayerNorm + fp8 fp16 16384 with
    # four 0.911-0.924 / 0.906-0.910.
    **patch_groups("colregv", ((), ("colreg0",)) * 2,
                   [("layernorm", DType.FP32, 131072), ("layernorm", DType.FP32, 262144),
                    ("rmsnorm+fp8", DType.BF16, 131072), ("rmsnorm+fp8", DType.BF16, 262144),
                    ("rmsnorm+fp8", DType.BF16, 524288), ("rmsnorm+fp8static", DType.BF16, 65536),
                    ("rmsnorm+fp8static", DType.BF16, 262144), ("rmsnorm", DType.FP16, 262144),
                    ("rmsnorm", DType.FP16, 524288), ("rmsnorm", DType.FP16, 131072),
                    ("layernorm+fp8", DType.FP16, 16384), ("rmsnorm+fp8", DType.FP16, 262144)]),
    # LayerNorm + int8's kept rows at 8192 (48 registers, five blocks an SM, two vectors a
    # step) with early columns, and at 64 registers (four blocks). H100, eighteenth session,
    # committed / colreg2 / keepu4 / keepu4 colreg2 / keepu4 colreg4 / b4 keepu4 / b4 keepu4
    # colreg2 / committed: 0.901 / 0.922 / 0.828 / 0.928 / 0.825 / 0.896 / 0.888 / 0.912. Every
    # candidate at 48 registers with more vectors a step or early columns spilled (NVRTC 13.0:
    # 24-96 bytes; 13.5: 40-72), b4 keepu4 too (24 bytes); b4 keepu4 colreg2, which did not,
    # ran no faster. Nothing committed.
    "colreg8192": ("layernorm+int8", DType.BF16, 8192,
                   [committed("layernorm+int8", DType.BF16, 8192, *p)
                    for p in ((), ("colreg2",), ("keepu4",), ("keepu4", "colreg2"), ("keepu4", "colreg4"),
                              ("b4", "keepu4"), ("b4", "keepu4", "colreg2"), ())]),
    # one vector's columns early (colreg1) where two spilled, or two where four did, the
    # committed tile first, alternating twice. H100, eighteenth session: LayerNorm bf16 262144
    # 0.877-0.878 / 0.877-0.878, fp16 0.879 / 0.879, 524288 0.821-0.831 / 0.805-0.810;
    # LayerNorm + int8 fp16 16384 (two) 0.904-0.905 / 0.906-0.913; 8192 (one; spilled 32
    # bytes under NVRTC 13.0, none under 13.5) 0.904-0.905 / 0.843-0.846. Even or slower;
    # LayerNorm + int8 at 32768 and 65536 and LayerNorm 131072 spilled with one under 13.5
    # (8-16 bytes), not timed. Nothing committed.
    **{f"colreg1{op}{x.value}{n}": (op, x, n, [committed(op, x, n, *p) for p in ((), (f"colreg{k}",)) * 2])
       for op, x, n, k in [("layernorm", DType.BF16, 262144, 1), ("layernorm", DType.BF16, 524288, 1),
                           ("layernorm", DType.FP16, 262144, 1), ("layernorm+int8", DType.FP16, 16384, 2),
                           ("layernorm+int8", DType.BF16, 8192, 1)]},
    # early columns (committed) with the rest of the first output step's columns prefetched
    # into L1 (colpfK), the committed tile first and last. H100, eighteenth session, committed /
    # colpf4 / colpf8 / committed: RMSNorm 65536 0.951 / 0.924 / 0.910 / 0.939, RMSNorm + fp8
    # 0.919 / 0.904 / 0.910 / 0.907, LayerNorm 0.934 / 0.927 / 0.846 / 0.925, LayerNorm + int8
    # 16384 0.917 / 0.903 / 0.900 / 0.918. Slower everywhere; not kept.
    **{f"colpfreg{op}{x.value}{n}": (op, x, n, [committed(op, x, n, *p) for p in ((), ("colpf4",), ("colpf8",), ())])
       for op, x, n in [("rmsnorm", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 65536),
                        ("layernorm", DType.BF16, 65536), ("layernorm+int8", DType.BF16, 16384)]},
    # LayerNorm + int8's tiles at 32768 and 65536 again, on the eighteenth session's kernel:
    # the committed tile first and last, then clusters (kept as floats where a block's float
    # row takes at most 64 KB, or with keep128). H100, nineteenth session (copy 2982 GB/s),
    # in the order listed: 65536 0.694 / 0.664 / 0.654 (kept) / 0.535 (kept) / 0.492 / 0.548
    # (kept) / 0.571 (kept) / 0.701; 32768 0.821 / 0.682 / 0.746 (kept; 24 bytes spilled
    # under NVRTC 13.5) / 0.734 (kept) / 0.620 (kept) / 0.602 (kept) / 0.822. The committed
    # tiles stay.
    "lnqtiles65536": ("layernorm+int8", DType.BF16, 65536,
                      [committed("layernorm+int8", DType.BF16, 65536), (512, 1, 2, True, 4), (256, 1, 4, True, 4),
                       (512, 1, 4, True, 4), (1024, 1, 2, True, 4), (1024, 1, 2, True, 4, "keep128"),
                       (256, 1, 8, True, 4), committed("layernorm+int8", DType.BF16, 65536)]),
    "lnqtiles32768": ("layernorm+int8", DType.BF16, 32768,
                      [committed("layernorm+int8", DType.BF16, 32768), (1024, 1, 1, True, 16),
                       (1024, 1, 1, True, 16, "keep128"), (256, 1, 2, True, 4), (512, 1, 2, True, 4),
                       (256, 1, 4, True, 4), committed("layernorm+int8", DType.BF16, 32768)]),
    # gamma and beta always loaded (nonull, timing only: what passing a buffer of ones or
    # zeros for an absent gamma or beta would give), alternating twice, committed first.
    # H100, nineteenth session (copy 2954 GB/s; NVRTC 13.0 spilled nothing, 13.5 8-16 bytes
    # at LayerNorm + int8 16384-65536), committed / nonull: LayerNorm + int8 65536
    # 0.715-0.716 / 0.734-0.735, 32768 0.832-0.837 / 0.837-0.847, 16384 0.918-0.921 /
    # 0.908-0.909, + fp8 16384 0.919-0.922 / 0.909-0.911, + int8 8192 0.910-0.911 /
    # 0.903-0.904; LayerNorm 65536 0.935-0.937 / 0.933-0.936, 262144 0.884 / 0.882; RMSNorm
    # 65536 0.957-0.958 / 0.956-0.957, RMSNorm + fp8 65536 0.919-0.921 / 0.911-0.912. A gain
    # at LayerNorm + int8 65536 alone (+0.02), slower elsewhere: not worth a host buffer of
    # ones and zeros for absent columns.
    # staged rows' stage on a 128-byte line (patch a128) against the committed 16-byte
    # alignment, alternating twice. H100, twenty-second session: no difference beyond the
    # spread (the stage is written by st.shared, not bulk copies): LayerNorm + int8 32768
    # 0.840-0.851 / 0.844-0.853, 65536 0.742-0.748 / 0.739-0.748, RMSNorm + fp8 32768
    # 0.971-0.976 / 0.976-0.977, 65536 0.931-0.932 / 0.931-0.932, LayerNorm 65536 0.945-0.949
    # / 0.948, 262144 0.892 / 0.883-0.892, RMSNorm 65536 0.938-0.955 / 0.935-0.936, add +
    # LayerNorm 65536 0.960-0.961 / 0.956-0.961; outputs identical
    **patch_groups("a128", ((), ("a128",)) * 2,
                   [("layernorm+int8", DType.BF16, 32768), ("layernorm+int8", DType.BF16, 65536),
                    ("rmsnorm+fp8", DType.BF16, 32768), ("rmsnorm+fp8", DType.BF16, 65536),
                    ("layernorm", DType.BF16, 65536), ("layernorm", DType.BF16, 262144),
                    ("rmsnorm", DType.BF16, 65536), ("add+layernorm", DType.BF16, 65536)]),
    **patch_groups("nonull", ((), ("nonull",)) * 2,
                   [("layernorm+int8", DType.BF16, 32768), ("layernorm+int8", DType.BF16, 65536),
                    ("layernorm+int8", DType.BF16, 16384), ("layernorm+fp8", DType.BF16, 16384),
                    ("layernorm+int8", DType.BF16, 8192), ("layernorm", DType.BF16, 65536),
                    ("layernorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 65536),
                    ("rmsnorm+fp8", DType.BF16, 65536)]),
    # every warp combining the cluster's partials (warpcl), alternating three times. H100,
    # nineteenth session (copy 2980 GB/s; outputs bit-identical), committed / warpcl: RMSNorm
    # 65536 0.935-0.943 / 0.941-0.943, RMSNorm + fp8 0.914-0.915 / 0.915-0.919, LayerNorm
    # 0.928-0.934 / 0.923-0.928, RMSNorm 262144 0.911-0.929 / 0.926, LayerNorm 262144
    # 0.877-0.878 / 0.858-0.860, add + RMSNorm 65536 0.966-0.969 / 0.962-0.966. The block
    # barrier it saves was not what the cluster exchange costs: not kept.
    **patch_groups("warpcl", ((), ("warpcl",)) * 3,
                   [("rmsnorm", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 65536),
                    ("layernorm", DType.BF16, 65536), ("rmsnorm", DType.BF16, 262144),
                    ("layernorm", DType.BF16, 262144), ("add+rmsnorm", DType.BF16, 65536)]),
    # cluster barriers with the release fence in every warp (allrel: the kernel before), with
    # none (relaxed, timing only: unsafe), and in the first warp alone (committed since,
    # cluster_sync). H100, nineteenth session (copy 2971 GB/s), allrel / relaxed / first warp:
    # RMSNorm 65536 0.955 / 0.966 / 0.953, 0.953 / 0.954 (outputs differed) / 0.939; RMSNorm +
    # fp8 0.897 / 0.951 / 0.935, 0.920 / 0.950 / 0.934; LayerNorm 0.927 / 0.950 / 0.952, then
    # relaxed crashed (unspecified launch failure) and the call ended. The fence of 15 warps of
    # 16 costs most of what the fence costs.
    **patch_groups("relax", (("allrel",), ("relaxed",), ()) * 2,
                   [("rmsnorm", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 65536),
                    ("layernorm", DType.BF16, 65536), ("rmsnorm", DType.BF16, 262144),
                    ("layernorm", DType.BF16, 262144), ("layernorm", DType.BF16, 131072)]),
    # the release fence in every warp (allrel) against the first warp's alone (committed since:
    # cluster_sync), alternating twice. H100, nineteenth session (copy 2962 GB/s; outputs
    # bit-identical): RMSNorm bf16 65536 0.950-0.953 / 0.957-0.959, fp16 0.951-0.957 /
    # 0.959-0.960, + fp8 0.912-0.914 / 0.927-0.933, 262144 0.844-0.855 / 0.863-0.867;
    # LayerNorm bf16 65536 0.927-0.933 / 0.945-0.948, fp16 0.930-0.933 / 0.949-0.950, fp32
    # 0.924-0.925 / 0.938; add + LayerNorm 65536 0.963-0.967 / 0.963-0.964, add + RMSNorm
    # 0.964-0.971 / 0.971-0.975; RMSNorm 131072 0.911-0.914 / 0.913-0.914, 262144 0.918-0.926
    # / 0.924-0.938, 524288 0.883-0.892 / 0.907-0.914; LayerNorm 131072 0.907-0.908 / 0.914,
    # 262144 0.877-0.881 / 0.888-0.897, 524288 0.824-0.826 / 0.833-0.836, fp32 262144
    # 0.822-0.826 / 0.820-0.822; add + LayerNorm + int8 65536 (one block a row: no cluster)
    # 0.851-0.860 / 0.852-0.853.
    **patch_groups("w0r", (("allrel",), ()) * 2,
                   [("rmsnorm", DType.BF16, 65536), ("rmsnorm", DType.FP16, 65536),
                    ("rmsnorm+fp8", DType.BF16, 65536), ("layernorm", DType.BF16, 65536),
                    ("layernorm", DType.FP16, 65536), ("add+layernorm", DType.BF16, 65536),
                    ("add+rmsnorm", DType.BF16, 65536), ("rmsnorm", DType.BF16, 131072),
                    ("rmsnorm", DType.BF16, 262144), ("rmsnorm", DType.BF16, 524288),
                    ("layernorm", DType.BF16, 131072), ("layernorm", DType.BF16, 262144),
                    ("layernorm", DType.BF16, 524288), ("layernorm", DType.FP32, 65536),
                    ("layernorm", DType.FP32, 262144), ("rmsnorm+fp8", DType.BF16, 262144),
                    ("add+layernorm+int8", DType.BF16, 65536)]),
    # The next row ahead (aheadK: patches/row_ahead.json): a staged row loads the next row's
    # first K vectors (and LayerNorm's pilot) into registers before its own reduction, so
    # that their DRAM wait overlaps this row's barriers and output passes (as register-held
    # rows' next row does). The committed tile first and last. H100, nineteenth session
    # (copy 2972 GB/s; --check: outputs bit-identical), committed / K / K' / committed:
    # RMSNorm 65536 (2, 4) 0.942 / 0.930 / 0.935 / 0.946, RMSNorm + fp8 65536 0.904 / 0.872 /
    # 0.856 / 0.906, LayerNorm + int8 65536 (one block an SM) 0.702 / 0.681 / 0.656 / 0.702,
    # 32768 0.815 / 0.764 / 0.772 / 0.814, LayerNorm 65536 0.925 / 0.927 / 0.906 / 0.926,
    # RMSNorm 131072 (40 registers) 0.910 / 0.917 / 0.856 / 0.915, add + LayerNorm 65536 (1,
    # 2) 0.957 / 0.930 / 0.755 / 0.952. Under NVRTC 13.5, spilled: LayerNorm + int8 16384's
    # kept rows (44-60 bytes), LayerNorm 65536 with four (16), 262144 at 40 registers
    # (16-80), add + LayerNorm with two (160). Even or slower everywhere: nothing kept. The
    # loads held across the reduction and output passes take registers the output passes'
    # own loads ahead of their arithmetic need, and the other block on the SM already
    # overlaps this one's barriers.
    **{f"ahead{op}{x.value}{n}": (op, x, n, [committed(op, x, n, *p) for p in ((), *((f"ahead{k}",) for k in ks), ())])
       for op, x, n, ks in [("rmsnorm", DType.BF16, 65536, (2, 4)), ("rmsnorm+fp8", DType.BF16, 65536, (2, 4)),
                            ("layernorm", DType.BF16, 65536, (2, 4)), ("layernorm+int8", DType.BF16, 65536, (2, 4)),
                            ("layernorm+int8", DType.BF16, 32768, (2, 4)), ("layernorm+int8", DType.BF16, 16384, (2, 4)),
                            ("rmsnorm", DType.BF16, 131072, (2, 4)), ("layernorm", DType.BF16, 262144, (2, 4)),
                            ("add+layernorm", DType.BF16, 65536, (1, 2))]},
    # Twentieth session, H100 (copy 2959-2983 GB/s), on the nineteenth session's kernel. The
    # output passes' per-column vectors loaded A vectors ahead (colaheadA; committed since
    # with the shift's fold: Recipe.column_ahead), without / with, outputs bit-identical:
    # LayerNorm + int8 32768 0.818-0.834 / 0.826-0.836 (one and two ahead alike), 65536
    # 0.716-0.718 / 0.718-0.725; + fp8 32768 0.830 / 0.837, 65536 0.721 / 0.725; add +
    # LayerNorm + int8 65536 0.853 / 0.786 (two); LayerNorm 65536 0.954 / 0.952, RMSNorm
    # 0.952 / 0.952, RMSNorm + fp8 0.938 / 0.939 (one). It shortened the stores' pass
    # (trace_rows.py --phases, int8 65536 4.14 -> 3.51 us a row, 32768 3.24 -> 2.21) but the
    # rows not: the other phases took the time.
    **patch_groups("ca", (("nofold",), ("nofold", "colahead1"), ("nofold", "colahead2")) * 2,
                   [("layernorm+int8", DType.BF16, 32768), ("layernorm+int8", DType.BF16, 65536)]),
    **patch_groups("ca", (("nofold",), ("nofold", "colahead2")),
                   [("layernorm+fp8", DType.BF16, 32768), ("layernorm+fp8", DType.BF16, 65536),
                    ("add+layernorm+int8", DType.BF16, 65536)]),
    **patch_groups("ca", ((), ("colahead1",)),
                   [("layernorm", DType.BF16, 65536), ("rmsnorm", DType.BF16, 65536), ("rmsnorm+fp8", DType.BF16, 65536)]),
    # LayerNorm + int8 where an SM's share of gamma and beta fits its L1: rows in registers (no
    # stage), or over clusters not kept as floats (each SM hosts blocks of one rank: its part
    # of the columns). Twentieth session, H100 (copy 2965 GB/s), in the order listed: 32768
    # 0.825 / 0.769 / 0.653 / 0.597 / 0.764 / 0.836; 65536 0.711 / 0.615 / 0.513 / 0.689 /
    # 0.699 / 0.715. Columns that fit L1 do not repay what these shapes cost: rejected.
    "l1fit32768": ("layernorm+int8", DType.BF16, 32768,
                   [committed("layernorm+int8", DType.BF16, 32768), (512, 1, 1, False, 16, "b2"),
                    (512, 1, 1, False, 16, "b1"), (512, 1, 2, True, 4, "nokeep"), (256, 1, 2, True, 4, "nokeep"),
                    committed("layernorm+int8", DType.BF16, 32768)]),
    "l1fit65536": ("layernorm+int8", DType.BF16, 65536,
                   [committed("layernorm+int8", DType.BF16, 65536), (1024, 1, 1, False, 16, "b1"),
                    (512, 1, 4, True, 4, "nokeep"), (256, 1, 4, True, 4, "nokeep"), (512, 1, 2, True, 4, "nokeep"),
                    committed("layernorm+int8", DType.BF16, 65536)]),
    # Fewer instructions in LayerNorm + quant's output passes. Measured first as timing patches
    # on the nineteenth session's kernel (twentieth session, H100): every row's output passes
    # taking h with the shift folded into the chain's constant (a patch since removed: it
    # lost precision for rows far from zero), gamma and beta without null tests (nonull), the
    # columns one or two vectors ahead (colaheadA). Committed / fold / fold + nonull / fold +
    # nonull + two ahead, alternating: int8 32768 0.814-0.828 / 0.851 / 0.837 / 0.870-0.871,
    # 65536 0.712-0.713 / 0.732 / 0.736 / 0.763-0.764; committed / fold + two ahead / fold +
    # one ahead / fold + nonull + two ahead: 32768 0.830-0.832 / 0.853-0.859 / 0.861 / 0.864,
    # 65536 0.690-0.709 / 0.733-0.753 / 0.754 / 0.744; fold + two ahead: fp8 32768 0.806 /
    # 0.853, 65536 0.710 / 0.753, fp16 int8 32768 0.844 / 0.842, 65536 0.730 / 0.758, add +
    # LayerNorm + int8 65536 0.831 / 0.836; fold alone: kept rows (int8 16384 0.886-0.890 /
    # 0.892-0.896, 8192 0.877-0.886 / 0.883-0.886) and LayerNorm 65536 / 262144 even. The
    # committed form (Recipe.fold_shift, Recipe.column_ahead) folds only rows whose mean lies
    # within a deviation of zero; the others keep the shift, two vectors a step. "fold"
    # groups: the nineteenth session's kernel (nofold) against it.
    **patch_groups("fold", (("nofold",), ()) * 2,
                   [("layernorm+int8", DType.BF16, 32768), ("layernorm+int8", DType.BF16, 65536),
                    ("layernorm+fp8", DType.BF16, 32768), ("layernorm+fp8", DType.BF16, 65536),
                    ("layernorm+int8", DType.FP16, 32768), ("layernorm+int8", DType.FP16, 65536)]),
    # LayerNorm + quant at 32768 streamed (tiles.STREAMED_TILES: the row in registers, the next
    # one brought into shared memory by the copy engine, gamma and beta in shared memory)
    # against the twentieth session's one staged 512-thread block (fold, a vector ahead),
    # alternating twice. H100, twenty-second session, as committed (two calls): bf16 int8
    # 0.837-0.850 / 0.903-0.919, fp8 0.838-0.850 / 0.896-0.918, fp16 int8 0.870-0.872 /
    # 0.857-0.874 (so fp16 stays staged: STREAMED_TILES has bf16 alone); with --offset 1000
    # (rows that keep their shift) bf16 int8 0.807-0.814 / 0.752-0.763. Before the stage was put
    # on a 128-byte line and those rows' passes rolled: streamed 0.846-0.856 (bf16 fp8
    # 0.837-0.852, fp16 int8 0.858-0.863); the stand-alone probe's kernel body run by the
    # streamed instance (a timing patch since removed: bf16 int8 only) 0.907-0.918.
    **{f"streamed{op}{x.value}32768": (op, x, 32768, [(512, 1, 1, True, 16), (1024, 1, 1, tiles.STREAMED, 1, "b1")] * 2)
       for op, x in (("layernorm+int8", DType.BF16), ("layernorm+fp8", DType.BF16), ("layernorm+int8", DType.FP16))},
    # LayerNorm + quant at 65536 streamed over clusters of two (each block half the row, its
    # half of gamma and beta in shared memory, the reductions' totals pushed to each other)
    # against the one staged 1024-thread block it replaces, alternating twice. H100,
    # twenty-third session (committed, in three calls): bf16 int8 0.735-0.745 / 0.803-0.811,
    # fp8 0.732-0.742 / 0.805-0.820; fp16 int8 0.734-0.739 / 0.765-0.769; with --offset 1000
    # (rows that keep their shift: the rolled passes) bf16 int8 0.713-0.714 / 0.688-0.689.
    **{f"streamed{op}{x.value}65536": (op, x, 65536, [(1024, 1, 1, True, 16), (1024, 1, 2, tiles.STREAMED, "res", "b1")] * 2)
       for op, x in (("layernorm+int8", DType.BF16), ("layernorm+fp8", DType.BF16), ("layernorm+int8", DType.FP16))},
    # LayerNorm + quant at 65536 streamed over clusters of two 1024-thread blocks (one an SM),
    # four of 512 (two an SM) or eight of 256 (four an SM): the same registers and shared
    # memory a row, more blocks an SM to run while one waits at its barriers. H100,
    # twenty-third session: int8 0.806 / 0.720 / 0.703-0.706, fp8 0.812-0.820 / 0.724-0.725 /
    # 0.702-0.706: only 62 clusters of four or eight are resident (124 SMs), and the other
    # blocks of an SM did not make up for it.
    **{f"sclusters{op}{x.value}65536": (op, x, 65536, [(1024, 1, 2, tiles.STREAMED, "res", "b1"),
                                                      (512, 1, 4, tiles.STREAMED, "res", "b2"),
                                                      (256, 1, 8, tiles.STREAMED, "res", "b4")] * 2)
       for op, x in (("layernorm+int8", DType.BF16), ("layernorm+fp8", DType.BF16))},
    # The pieces of the streamed template over clusters of two (65536), timing patches each.
    # H100, twenty-third session (the pilot read from global memory where the shift is needed,
    # as committed then; since the twenty-fourth the clusters shift by zero): 0.810-0.812, srsqrt 0.823, srn 0.803 (the IEEE intrinsics no cheaper),
    # snoagain 0.798, snofar 0.791, spilot0 0.868, all four 0.889. The pilot copied into
    # shared memory with the row (a version not kept) ran as the committed one (0.803 against
    # spilot0's 0.868): what a zero shift saves is instructions (no subtraction, no far
    # rows), not the pilot's load. The rest is the two exchanges (scripts/trace_rows.py
    # --phases layernorm+int8 65536 2048 sphases: a block's row 5.18 us against 4.45 at 32768
    # in one block; the statistics' phase 1.76 against 1.42 us, the maximum's 1.59 against
    # 1.35, the stage's wait 0.67 against 0.50).
    **patch_groups("sc2", ((), ("srsqrt",), ("srn",), ("snoagain",), ("snofar",), ("spilot0",),
                           ("srsqrt", "snoagain", "snofar", "spilot0"), ()),
                   [("layernorm+int8", DType.BF16, 65536)]),
    # The streamed template's pieces, timing patches each (twenty-second session, H100, bf16
    # int8 32768, the stage on a 128-byte line, the far rows' passes then unrolled inline):
    # committed 0.851-0.857, sk0 0.874, snoagain 0.892, sinvn 0.855, srsqrt 0.884 (spills),
    # the far rows' passes not built 0.917-0.920, nor the far-row pass 0.911-0.913, all five
    # 0.865-0.867, only the far rows' (unfolded) passes built 0.888-0.889, the probe's body
    # 0.913-0.917. So code never run cost the folded rows 0.06; the far rows' passes went out
    # of line (0.815: a call's spills in the loop), to a copy in local memory (0.897; far rows
    # 0.53), then to rolled passes over the registers (committed). sfar: those passes (snofar:
    # not built) with and without --offset 1000: 0.896-0.913 / 0.899-0.918, far rows 0.696
    # (one vector a step), 0.752-0.763 (two: committed)
    # Streamed rows shifted by zero over clusters (65536) and far rows summed again from their
    # registers (as committed), against the pilot's shift and far rows from global memory
    # (sagainmem; before the twenty-fourth session) and the pilot alone. H100, twenty-fourth
    # session: bf16 int8 65536 0.878-0.880 / 0.812-0.814 / 0.816-0.817, fp8 0.870-0.876 /
    # 0.803-0.805 / 0.815-0.821, fp16 int8 0.840-0.853 / 0.773-0.784 / 0.789-0.790; bf16 int8
    # 32768 (one block: the far rows' source alone changes) 0.930-0.932 / 0.924-0.927 /
    # 0.931-0.932. --offset 1000 (every row far from zero): 65536 0.560 / 0.683-0.684 /
    # 0.681-0.684, 32768 0.775-0.777 / 0.761-0.763 / 0.775. The timing patches on the way (each
    # alone on the committed kernel then, int8 65536): the shift a constant zero 0.862-0.879,
    # and its far rows 0.440-0.449 when summed again from global memory; each warp's own shift
    # (warp_shift, wrongly combined: timing only) 0.825; zero only where the pilot's 16 bytes
    # lie within two of their deviations of zero (a branch) 0.826-0.830, far rows 0.668.
    **patch_groups("sx", ((), ("spilot", "sagainmem"), ("spilot",)) * 2,
                   [("layernorm+int8", DType.BF16, 65536), ("layernorm+fp8", DType.BF16, 65536),
                    ("layernorm+int8", DType.FP16, 65536), ("layernorm+int8", DType.BF16, 32768)]),
    # Streamed clusters keeping their outputs in registers (committed: tiles.STREAMED_KEEP)
    # against not (snokeep), and without their exchanges (timing only). H100, twenty-fourth
    # session, kept outputs then a patch (ptxas spilled 4-8 bytes in the whole-row kernel, 144
    # in the other, until that one folded instead and the fetch's piece was read afresh):
    # before the zero shift, not kept / no exchange / kept / kept without exchange
    # 0.798-0.802 / 0.844 / 0.824 / 0.842; after it 0.885-0.886 / 0.849 / 0.918-0.921 / 0.849-0.857.
    # Kept at 32768 (one block) 0.849-0.858 against 0.894-0.914.
    **patch_groups("sx2", ((), ("snokeep",), ("snoexch",), ("snokeep", "snoexch"), ()),
                   [("layernorm+int8", DType.BF16, 65536), ("layernorm+fp8", DType.BF16, 65536)]),
    **patch_groups("sbis", ((), ("sk0",), ("snoagain",), ("sinvn",), ("srsqrt",), ()),
                   [("layernorm+int8", DType.BF16, 32768)]),
    **patch_groups("sfar", ((), ("snofar",)) * 2, [("layernorm+int8", DType.BF16, 32768)]),
}


def l2_prefetch(before: str, fraction: str) -> list:
    """Patches by which a staged block, just before the text `before`, prefetches into L2
    its share of the first `fraction` of its next row (x's and the residual's), with one
    bulk prefetch each (cp.async.bulk.prefetch.L2; 16-byte aligned words inside the range)."""
    section = "// ---- thread-block clusters (rows split over C blocks) ---"
    helper = (
        "__device__ __forceinline__ void prefetch_l2(const void* p, i64 bytes) {\n"
        "  const i64 a = static_cast<i64>(__cvta_generic_to_global(p));\n"
        "  const i64 lo = (a + 15) & ~i64{15}, hi = (a + bytes) & ~i64{15};\n"
        "  if (hi > lo) asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" ::\"l\"(lo),"
        " \"r\"(static_cast<unsigned>(hi - lo)) : \"memory\");\n}\n")
    prefetch = (
        "    if (const i64 next = row + (C > 1 ? cluster_count() : gridDim.x); threadIdx.x == 0 && next < p.rows) {\n"
        f"      const i64 bytes = static_cast<i64>(n) * sizeof(X){fraction}, rank = C > 1 ? cluster_rank() : 0;\n"
        "      const i64 lo = bytes * rank / C, hi = bytes * (rank + 1) / C;\n"
        "      prefetch_l2(reinterpret_cast<const char*>(static_cast<const X*>(p.x) +\n"
        "                                                row_offset(next, p.inner, p.x_so, p.x_si)) + lo, hi - lo);\n"
        "      if constexpr (kAdd)\n"
        "        prefetch_l2(reinterpret_cast<const char*>(static_cast<const X*>(p.residual) +\n"
        "                                                  row_offset(next, p.inner, p.r_so, p.r_si)) + lo, hi - lo);\n"
        "    }\n")
    return [(section, helper + section), (before, prefetch + before)]


def streamed(pieces: int) -> list:
    """Patches by which staged rows run one_pass_streamed (an experiment kept outside the
    template, in patches/) with a block's share of a row in `pieces` pieces."""
    section = "// ---- two-pass: statistics over the streamed row"
    text = (Path(__file__).parent / "patches" / "one_pass_streamed.cuh").read_text().replace("PIECES", str(pieces))
    return [(section, text + section), ("one_pass_staged<K, kFull>(q);", "one_pass_streamed<K, kFull>(q);")]


def paired(u: int) -> list:
    """Patches by which staged rows run one_pass_paired (an experiment kept outside the
    template, in patches/): two rows a block, `u` vectors at a time in the output passes."""
    section = "// ---- two-pass: statistics over the streamed row"
    text = (Path(__file__).parent / "patches" / "one_pass_paired.cuh").read_text().replace("PAIRU", str(u))
    return [(section, text + section), ("one_pass_staged<K, kFull>(q);", "one_pass_paired<K, kFull>(q);")]


def column_prefetch(k: int) -> list:
    """Patches by which a staged row prefetches into L1 the gamma and beta of a thread's first
    k vectors before its statistics' reduction (the template's prefetch_columns, which
    Recipe.column_prefetch commits for rows with a fused add)."""
    at = "    const Stats st = share_stats<K, P, V, T, 1, C>(p, k, s1, s2, m, load, cols, sh_stats[ph], sh_again[ph]);"
    return [(at, f"    prefetch_columns<K, (P < {k} ? P : {k})>(p, cols);  // tune_tiles colpf\n" + at)]


def row_ahead(k: int) -> list:
    """The replacements of patches/row_ahead.json (an experiment kept outside the template)
    by which a staged row loads the next row's first k vectors (and LayerNorm's pilot) into
    registers before its own reduction."""
    pairs = json.loads((Path(__file__).parent / "patches" / "row_ahead.json").read_text())["ahead"]
    return [(old, new.replace("AHEAD", str(k))) for old, new in pairs]


def load_hint(policy: str = "", l1: str = "") -> list:
    """Patches by which the 16-byte loads of global memory made with Cache::NORMAL (the
    per-column vectors, staged rows' x; not those of shared memory) carry an L2 eviction
    policy (createpolicy: evict_last, evict_first) and / or an L1 qualifier (no_allocate)."""
    make = f'asm("createpolicy.fractional.L2::{policy}.b64 %0, 1.0;" : "=l"(pol)); ' if policy else ""
    hint, arg = (".L2::cache_hint", ", %5") if policy else ("", "")
    l1q = f".L1::{l1}" if l1 else ""
    load = ("uint4 q; if (kCache == Cache::PAST_L1) { q = __ldcg(at); } else if (kCache == Cache::KEEP_L2) { "
            "q = load_keep_l2(at); } else if (!__isGlobal(at)) { q = *at; } else { "
            f"unsigned long long pol = 0; {make}"
            f'asm("ld.global{l1q}{hint}.v4.u32 {{%0, %1, %2, %3}}, [%4]{arg};" : "=r"(q.x), "=r"(q.y), "=r"(q.z), '
            f'"=r"(q.w) : "l"(__cvta_generic_to_global(at)), "l"(pol)); }}')
    old = "const uint4 q = kCache == Cache::PAST_L1 ? __ldcg(at) : kCache == Cache::KEEP_L2 ? load_keep_l2(at) : *at;"
    return [(old, load)]


def l1_columns(eighths: int) -> list:
    """Patches by which gamma and beta are kept in L1 only for the first `eighths` eighths of
    the row's columns (the rest loaded past L1, ld.global.cg): a part that fits in L1 beside
    shared memory, instead of all of them taking turns there."""
    out = []
    for v in ("g", "b"):
        ptr = f"static_cast<const W*>(p.{'gamma' if v == 'g' else 'beta'}) + col"
        out.append((f"{v}.load(i, {ptr});",
                    f"if (col * 8 < static_cast<i64>(p.n) * {eighths}) {v}.load(i, {ptr}); "
                    f"else {v}.template load<Cache::PAST_L1>(i, {ptr});"))
    return out


def l1_vectors(k: int) -> list:
    """Patches by which the per-column vectors (gamma, beta, smooth scale) of a thread's first
    k vectors of a row are loaded into L1 and the rest past it (ld.global.cg), decided by the
    vector's index: at compile time in passes unrolled over the vectors, where l1colsK tests
    each column at run time."""
    head = "__device__ __forceinline__ void load_epilogue(const Params& p, int i, i64 col) {"
    out = [(head, "template <Cache kColCache = Cache::NORMAL> " + head)]
    for v, name in (("g", "gamma"), ("b", "beta")):
        ptr = f"static_cast<const W*>(p.{name}) + col"
        out.append((f"{v}.load(i, {ptr});", f"{v}.template load<kColCache>(i, {ptr});"))
    ring = "ahead[b % (A + 1)]"
    out.append((f"{ring}.load_epilogue(p, 0, cols(i0 + b));",
                f"{{ if (i0 + b < {k}) {ring}.template load_epilogue<Cache::NORMAL>(p, 0, cols(i0 + b)); "
                f"else {ring}.template load_epilogue<Cache::PAST_L1>(p, 0, cols(i0 + b)); }}"))
    return out


PATCHES = {  # name: [(old, new), ...]
    # streamed rows (tiles.STREAMED_TILES): the copy of the next row issued without the proxy
    # fences before it (timing only: unsafe)
    "snofence": [('    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");\n', "")],
    # streamed rows' phases stamped (with "phases", after it: scripts/trace_rows.py --phases OP N
    # ROWS sphases): the row's start, its stage read (and the next row's copy issued), the
    # statistics, the maximum (phases' own), the row's end
    "sphases": [("    if constexpr (kStream) {  // this row from the stage, then the next one into it\n",
                 "    if constexpr (kStream) {  // this row from the stage, then the next one into it\n"
                 "      phase_stamp<C>(row, 0, global_timer());\n      phase_stamp<C>(row, 2, clock64());\n"),
                ("Stream<K>::fetch(row_x(base + stride), n, q);\n",
                 "Stream<K>::fetch(row_x(base + stride), n, q);\n"
                 "      phase_stamp<C>(row, 3, clock64());\n      phase_stamp<C>(row, 7, clock64(), blockDim.x - 32);\n"),
                ("    bool fold = false;  // as in one_pass_staged", "    phase_stamp<C>(row, 4, clock64());\n"
                 "    bool fold = false;  // as in one_pass_staged"),
                ("kept, qmul, row, live,\n                                                          lane == 0);\n    }\n",
                 "kept, qmul, row, live,\n                                                          lane == 0);\n    }\n"
                 "    phase_stamp<C>(row, 6, clock64());\n    phase_stamp<C>(row, 1, global_timer());\n")],
    # (timing only) rstd by rsqrtf; register rows' shift 0 instead of each warp's
    "srsqrt": [("  const float rstd = 1.f / sqrtf(var + eps);", "  const float rstd = rsqrtf(var + eps);")],
    "sk0": [("      k = warp_shift<T, P>(in.x);", "      k = 0.f;")],
    # (timing only) no far-row pass (share_stats' second sums); 1 / n as 32768's constant
    "snoagain": [("    if (again) {\n      // rounded once", "    if (false) {\n      // rounded once")],
    # (timing only) streamed rows that keep their shift not finished (their passes not built)
    "snofar": [("      finish_row<K, P, V, false, false, false, T, R, C, (P % 2 ? 1 : 2)>(p, st, held,",
                "      if (false) finish_row<K, P, V, false, false, false, T, R, C, (P % 2 ? 1 : 2)>(p, st, held,")],
    "sinvn": [("  const float inv_n = 1.f / static_cast<float>(n);", "  const float inv_n = 1.f / 32768.f;")],
    # rstd by the IEEE intrinsics (the same bits as 1 / sqrtf: both round once each)
    "srn": [("  const float rstd = 1.f / sqrtf(var + eps);", "  const float rstd = __frcp_rn(__fsqrt_rn(var + eps));")],
    # (timing only, wrong results) streamed clusters' blocks exchange nothing: each pushes no
    # totals, waits for none and takes its own twice
    "snoexch": [("          if (r != me) push_cluster(&sh.recv[phase][me][k], &sh.barrier, r, v[k]);", "          ;"),
                ("    wait_parity<true>(shared_address(&sh.barrier), phase);\n", ""),
                ('      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"\n'
                 '                   ::"r"(shared_address(&sh.barrier)), "r"((C - 1) * K * 4) : "memory");\n', ""),
                ("      float t = me == 0 ? v[k] : sh.recv[phase][0][k];", "      float t = v[k];"),
                ("r == me ? v[k] : sh.recv[phase][r][k]);", "v[k]);")],
    # streamed clusters shifted by the pilot again (before the twenty-fourth session), and
    # streamed rows' far rows summed again from global memory instead of their registers
    "spilot": [("    } else if constexpr (kLN && !kStream) {\n      if (live) k = Pilot",
                "    } else if constexpr (kLN) {\n      if (live) k = Pilot")],
    "sagainmem": [("      if constexpr (kStream) {\n        held(i, d);", "      if constexpr (false) {\n        held(i, d);")],
    # (timing only) rows over a cluster without the pilot's shift (0 instead; streamed
    # clusters take 0 since the twenty-fourth session, so only staged ones change)
    "spilot0": [("      if (live) k = Pilot<K, V>::shift(p, row_x(row), row_r(row), n);", "      k = 0.f;")],
    # staged rows' x loaded past L1 (as LayerNorm + quant's), leaving L1 to the columns
    "xl2": [("load_in<K, kBatch, V, K::kRowCache>", "load_in<K, kBatch, V, Cache::PAST_L1>")],
    # gamma and beta of the first K eighths of a row kept in L1, the rest loaded past it
    **{f"l1cols{k}": l1_columns(k) for k in range(9)},
    # the per-column vectors of a thread's first K vectors of a row kept in L1, the rest past it
    **{f"l1v{k}": l1_vectors(k) for k in range(9)},
    # two-pass rows stored as plain vector stores (as before store_words' intrinsic), and their
    # first pass loaded with L2's evict_last policy
    "tpsplit": [(f"normalize_row<K, P, V, false, false, P, true>(p, st, load, cols, none, {m}, row * n);",
                 f"normalize_row<K, P, V, false, false, P, false>(p, st, load, cols, none, {m}, row * n);")
                for m in ("qmul", "static_mul")],
    "tpkeepl2": [("      for (int i = 0; i < P; ++i) load_in<K, P, V>(in, i, xr, rr, cols(i), cols.inside(i));",
                  "      for (int i = 0; i < P; ++i) { if (store_sum) load_in<K, P, V, Cache::KEEP_L2>(in, i, xr, rr, "
                  "cols(i), cols.inside(i)); else load_in<K, P, V>(in, i, xr, rr, cols(i), cols.inside(i)); }")],
    # staged rows loaded in batches of 8 vectors (4 with a residual) instead of 4 (2)
    "batch8": [("constexpr int kPerBatch = kAdd ? 2 : 4;", "constexpr int kPerBatch = kAdd ? 4 : 8;")],
    # timing only (unsafe): LayerNorm never sums a row again around a better shift
    "noredo": [("bool again = st.far;", "bool again = false;")],
    # timing only (unsafe): cluster barriers without the release fence (MEMBAR.ALL.GPU), in
    # the first warp too
    "relaxed": [("barrier.cluster.arrive.release.aligned", "barrier.cluster.arrive.relaxed.aligned")],
    # y stored with the streaming hint (st.global.cs)
    "stcs": [("*reinterpret_cast<Pack<T, A>*>(p + c) = r;",
              "if constexpr (sizeof(r) == 16) __stcs(reinterpret_cast<uint4*>(p + c), *reinterpret_cast<uint4*>(&r));"
              " else *reinterpret_cast<Pack<T, A>*>(p + c) = r;")],
    # x loaded with the streaming hint (ld.global.cs)
    "ldcs": [("kCache == Cache::KEEP_L2 ? load_keep_l2(at) : *at;",
              "kCache == Cache::KEEP_L2 ? load_keep_l2(at) : __ldcs(at);")],
    # rows keep their held 16-bit columns as floats (unless the compiler packs them itself)
    "nopack": [("if constexpr (kHold && K::kPackColumns) c.keep_packed();", "")],
    # unfused rows keep their held 16-bit columns packed too (tiles.pack_columns): all, or beta only
    "packcols": [("if constexpr (kHold && K::kPackColumns) c.keep_packed();", "if constexpr (kHold) c.keep_packed();")],
    "packb": [("if constexpr (kHold && K::kPackColumns) c.keep_packed();", "if constexpr (kHold) c.keep_packed();"),
              ('asm volatile("" : "+r"(g.w[k]));', "")],
    # a staged block prefetches its next row (its share) into L2 once its row is staged
    "l2pf": l2_prefetch("    auto load = [&](int i, float (&d)[V]) {\n      if constexpr (kKeep) {\n", ""),
    # as l2pf, only the next row's first batch of loads, issued after the statistics (just
    # before the output passes): a shorter prefetch distance, half the bytes
    "l2pfout": l2_prefetch("    bool fold = false;", " * kBatch / P"),
    # staged rows streamed by persistent blocks through a ring of bulk copies, a block's share
    # of a row in 2, 4 or 8 pieces (patches/one_pass_streamed.cuh; launch with grid 1 and "sK")
    **{f"stream{k}": streamed(k) for k in (2, 4, 8)},
    # staged rows two a block, sharing each vector's per-column loads and each reduction
    # (patches/one_pass_paired.cuh; launch with twice the stage ("sK") and a grid of pairs)
    **{f"pair{u}": paired(u) for u in (1, 2, 4, 8)},
    # loads with an L2 eviction policy, as Triton's (evict_last), or the opposite; or not kept in L1
    "ldlast": load_hint("evict_last"),
    "ldfirst": load_hint("evict_first"),
    "ldl1na": load_hint(l1="no_allocate"),
    # register-held rows' x loaded without L2's evict_last policy (Cache::NORMAL)
    "nokeepl2": [("load_in<K, P, V, K::kRowCache>", "load_in<K, P, V, Cache::NORMAL>")],
    # ... and with it under a quant too
    "keepl2q": [("load_in<K, P, V, K::kRowCache>", "load_in<K, P, V, Cache::KEEP_L2>")],
    # timing only (unsafe): a cluster's blocks skip the exchange of their partials, each
    # keeping its own: the bound on a cheaper exchange
    "nocl": [("    cluster_sync();\n    if (threadIdx.x < 32) {\n      float t[K];\n#pragma unroll\n"
              "      for (int k = 0; k < K; ++k) t[k] = load_cluster(&sh.block[k], threadIdx.x % C);",
              "    __syncwarp();\n    if (threadIdx.x < 32) {\n      float t[K];\n#pragma unroll\n"
              "      for (int k = 0; k < K; ++k) t[k] = sh.block[k];")],
    # a staged row loads the next row's first K vectors (and LayerNorm's pilot) into registers
    # before its own reduction (patches/row_ahead.json, an experiment kept outside the template)
    **{f"ahead{k}": row_ahead(k) for k in (1, 2, 4)},
    # the first wave's clusters of odd index start K00 ns late (timing only): their phases off
    # those of their neighbours' from the launch's start
    **{f"stag{k}": [("    constexpr bool kSumsWhileStaging = K::kNorm == Norm::LAYERNORM;",
                     "    if (row == cluster_index() && row % 2 == 1 && row < cluster_count() / 4) "
                     f"__nanosleep({k}00);\n"
                     "    constexpr bool kSumsWhileStaging = K::kNorm == Norm::LAYERNORM;")] for k in (20, 40, 80)},
    # every warp's arrival at a cluster barrier with release semantics (the kernel before the
    # nineteenth session; committed since: the first warp's alone, cluster_sync)
    "allrel": [("  if (threadIdx.x < 32) {  // (a whole warp: `aligned` holds)\n"
                "    asm volatile(\"barrier.cluster.arrive.release.aligned;\" ::: \"memory\");\n  } else {\n"
                "    asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\");\n  }\n",
                "  asm volatile(\"barrier.cluster.arrive.release.aligned;\" ::: \"memory\");\n")],
    # every warp combines the cluster's block partials itself (remote loads by each warp's
    # first C lanes) instead of the first warp, which a block barrier then hands the total to
    "warpcl": [("    if (threadIdx.x < 32) {\n      float t[K];\n#pragma unroll\n"
                "      for (int k = 0; k < K; ++k) t[k] = load_cluster(&sh.block[k], threadIdx.x % C);",
                "    {\n      float t[K];\n#pragma unroll\n"
                "      for (int k = 0; k < K; ++k) t[k] = load_cluster(&sh.block[k], threadIdx.x % C);"),
               ("      if (threadIdx.x == 0) {\n#pragma unroll\n        for (int k = 0; k < K; ++k) sh.cluster[k] = t[k];\n"
                "      }\n    }\n    __syncthreads();\n#pragma unroll\n    for (int k = 0; k < K; ++k) v[k] = sh.cluster[k];",
                "#pragma unroll\n      for (int k = 0; k < K; ++k) v[k] = t[k];\n    }")],
    # timing only (unsafe without both): gamma and beta loaded without testing for null
    "nonull": [("if (p.gamma != nullptr) {\n      g.load", "if (true) {\n      g.load"),
               ("if (p.beta != nullptr) {\n        b.load", "if (true) {\n        b.load")],
    # no prefetch of the next row
    "nopf": [("constexpr bool kPrefetchRow = !kStream &&", "constexpr bool kPrefetchRow = false &&")],
    # per-column vectors loaded per row, not held in registers
    "nohold": [("constexpr bool kHold = !kStream &&", "constexpr bool kHold = false &&")],
    # timing only (wrong for a weight_offset other than 0): RMSNorm's gamma taken as is,
    # without adding weight_offset to every element
    # staged rows prefetch the first K of a thread's vectors' gamma and beta into L1 before
    # the statistics' reduction, so that the output pass after it waits less for them (the
    # committed choice for rows with a fused add: Recipe.column_prefetch)
    **{f"colpf{k}": column_prefetch(k) for k in (2, 4, 8)},
    "nooff": [("out[j] = d[j] * st.rstd * (g + p.weight_offset);", "out[j] = d[j] * st.rstd * g;")],
    # staged rows' timeline (scripts/trace_rows.py): each block's thread 0 records the global
    # timer at the start and end of every row it takes, and its SM, in normgen_trace
    "trace": [("template <class K, bool kFull>\n__device__ __forceinline__ void one_pass_staged(",
               "extern \"C\" __device__ unsigned long long normgen_trace[4 << 15];\n"
               "template <class K, bool kFull>\n__device__ __forceinline__ void one_pass_staged("),
              ("       row += C > 1 ? cluster_count() : gridDim.x, ph = (ph + 1) % S) {\n",
               "       row += C > 1 ? cluster_count() : gridDim.x, ph = (ph + 1) % S) {\n"
               "    unsigned long long trace_t0;\n"
               "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(trace_t0));\n"),
              ("          p, st, load, cols, Columns<K, 1, V>{}, sh_max[ph], floats, qmul, row, true, lane == 0, early);\n    }\n",
               "          p, st, load, cols, Columns<K, 1, V>{}, sh_max[ph], floats, qmul, row, true, lane == 0, early);\n    }\n"
               "    if (threadIdx.x == 0 && (row + 1) * C <= (1 << 15)) {\n"
               "      unsigned long long t1;\n"
               "      unsigned sm;\n"
               "      asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t1));\n"
               "      asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
               "      unsigned long long* e = normgen_trace + 4 * (row * C + (C > 1 ? cluster_rank() : 0));\n"
               "      e[0] = trace_t0, e[1] = t1, e[2] = sm, e[3] = blockIdx.x;\n"
               "    }\n")],
    # per-column vectors (gamma, beta, x-bias, smooth) loaded through the read-only path
    # (ld.global.nc): ptxas may then issue them ahead of the output pass's earlier stores,
    # which a plain load, that might alias y, may not pass
    "ldg": [("enum class Cache { NORMAL, PAST_L1, KEEP_L2 };", "enum class Cache { NORMAL, PAST_L1, KEEP_L2, READ_ONLY };"),
            ("kCache == Cache::KEEP_L2 ? load_keep_l2(at) : *at;",
             "kCache == Cache::KEEP_L2 ? load_keep_l2(at) : kCache == Cache::READ_ONLY ? __ldg(at) : *at;"),
            ("      const uint2 q = *reinterpret_cast<const uint2*>(p);",
             "      const uint2 q = kCache == Cache::READ_ONLY ? __ldg(reinterpret_cast<const uint2*>(p))\n"
             "                                                 : *reinterpret_cast<const uint2*>(p);"),
            ("      w[i] = *reinterpret_cast<const uint32_t*>(p);",
             "      w[i] = kCache == Cache::READ_ONLY ? __ldg(reinterpret_cast<const unsigned int*>(p))\n"
             "                                        : *reinterpret_cast<const uint32_t*>(p);"),
            ("      const uint32_t bits = *reinterpret_cast<const unsigned short*>(p);",
             "      const uint32_t bits = kCache == Cache::READ_ONLY ? __ldg(reinterpret_cast<const unsigned short*>(p))\n"
             "                                                       : *reinterpret_cast<const unsigned short*>(p);"),
            ("bias.load(i, static_cast<const typename K::X*>(p.x_bias) + col);",
             "bias.template load<Cache::READ_ONLY>(i, static_cast<const typename K::X*>(p.x_bias) + col);"),
            ("      g.load(i, static_cast<const W*>(p.gamma) + col);",
             "      g.template load<Cache::READ_ONLY>(i, static_cast<const W*>(p.gamma) + col);"),
            ("        b.load(i, static_cast<const W*>(p.beta) + col);",
             "        b.template load<Cache::READ_ONLY>(i, static_cast<const W*>(p.beta) + col);"),
            ("sm.load(i, static_cast<const typename K::SM*>(p.smooth) + col);",
             "sm.template load<Cache::READ_ONLY>(i, static_cast<const typename K::SM*>(p.smooth) + col);")],
    # rows that keep their shift beside folded ones (Recipe.fold_shift) take their output
    # passes two vectors at a time instead of four
    "farstep2": [("constexpr int kFarStep = K::kFoldShift ? 4 : U;", "constexpr int kFarStep = K::kFoldShift ? 2 : U;")],
    # a staged block's phases, row by row (scripts/trace_rows.py --phases): thread 0 stores
    # the global timer at the row's start and end (for the clock's rate) and the SM's clock
    # at its start, the end of its own staging, after the statistics' reduction, after the
    # maximum's, at its end; the last warp's first lane its own end of staging. Each stamp is
    # stored at once: held in registers to the row's end, they spilled LayerNorm + int8.
    "phases": [("template <class K, int P, int V, bool kHeld, bool kKeep, bool kCentred, int T, int R, int C, int U, class Load,",
                "extern \"C\" __device__ long long normgen_phase[8 << 15];\n"
                "template <int C>\n"
                "__device__ __forceinline__ void phase_stamp(i64 row, int k, long long v, unsigned thread = 0) {\n"
                "  const i64 at = row * C + (C > 1 ? cluster_rank() : 0);\n"
                "  if (threadIdx.x == thread && at < (1 << 15)) normgen_phase[8 * at + k] = v;\n"
                "}\n"
                "__device__ __forceinline__ long long global_timer() {\n"
                "  long long t;\n"
                "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
                "  return t;\n"
                "}\n"
                "template <class K, int P, int V, bool kHeld, bool kKeep, bool kCentred, int T, int R, int C, int U, class Load,"),
               ("    row_reduce<Max, T, R, C, 1>(m, sh_max);\n",
                "    row_reduce<Max, T, R, C, 1>(m, sh_max);\n"
                "    phase_stamp<C>(row, 5, clock64());\n"),
               ("       row += C > 1 ? cluster_count() : gridDim.x, ph = (ph + 1) % S) {\n",
                "       row += C > 1 ? cluster_count() : gridDim.x, ph = (ph + 1) % S) {\n"
                "    phase_stamp<C>(row, 0, global_timer());\n"
                "    phase_stamp<C>(row, 2, clock64());\n"),
               ("    auto load = [&](int i, float (&d)[V]) {\n      if constexpr (kKeep) {\n        floats.get(i, d);",
                "    phase_stamp<C>(row, 3, clock64());\n"
                "    phase_stamp<C>(row, 7, clock64(), blockDim.x - 32);\n"
                "    auto load = [&](int i, float (&d)[V]) {\n      if constexpr (kKeep) {\n        floats.get(i, d);"),
               ("    bool fold = false;",
                "    phase_stamp<C>(row, 4, clock64());\n"
                "    bool fold = false;"),
               ("          p, st, load, cols, Columns<K, 1, V>{}, sh_max[ph], floats, qmul, row, true, lane == 0, early);\n    }\n",
                "          p, st, load, cols, Columns<K, 1, V>{}, sh_max[ph], floats, qmul, row, true, lane == 0, early);\n    }\n"
                "    phase_stamp<C>(row, 6, clock64());\n"
                "    phase_stamp<C>(row, 1, global_timer());\n")],
    # staged rows' shared memory on a 128-byte line (the static scratch before it left the
    # stage 16-112 bytes past one; scripts/stream_probe.py's STATIC variants)
    "a128": [("extern __shared__ uint4 stage_words[];", "extern __shared__ __align__(128) uint4 stage_words[];")],
}


def patched(files: dict, names) -> dict:
    """The rendered files with PATCHES' replacements (each must apply) in the header, and
    a residency patch's launch bounds, a colregK patch's early columns, a colaheadK patch's
    columns ahead and nofold's unfolded shift in the instances."""
    files = dict(files)
    header = files[codegen.HEADER]

    def in_instances(pattern, repl):
        for f in files:
            if f.endswith(".cu"):
                files[f] = re.sub(pattern, repl, files[f])

    for name in names:
        if SHARED.match(name) or CARVEOUT.match(name) or name in (NOKEEP, SNOKEEP) or KEEP.match(name) or KEPT_STEP.match(name):
            continue  # applied at launch, or to the tile (time_candidate)
        if m := COLUMN_REGISTERS.match(name):
            early = f"({m[1]} < kOutputStep ? {m[1]} : kOutputStep)"  # at most a step
            in_instances(r"kColumnRegisters = \d+;", f"kColumnRegisters = {early};")
            continue
        if m := BLOCKS.match(name):
            in_instances(r"__launch_bounds__\((\d+), \d+\)", rf"__launch_bounds__(\1, {m[1]})")
            continue
        if m := COLUMN_AHEAD.match(name):
            in_instances(r"kColumnAhead = \d+;", f"kColumnAhead = {m[1]};")
            continue
        if name == NOFOLD:
            in_instances(r"kFoldShift = true;", "kFoldShift = false;")
            in_instances(r"kColumnAhead = \d+;", "kColumnAhead = 0;")
            continue
        for old, new in PATCHES[name]:
            assert old in header, (name, old)
            header = header.replace(old, new)
    return {**files, codegen.HEADER: header}


@contextlib.contextmanager
def candidate(op, x, n, cand):
    """(spec, rendered files) of a candidate, with the tile tables set to it until exit
    (recipes are cached: the cache is cleared on entry and exit)."""
    threads, rows, cluster, staged, grid, *patch = cand
    if staged == TWO_PASS:
        saved, tiles.TWO_PASS_THREADS = tiles.TWO_PASS_THREADS, threads
        recipe.cache_clear()
        try:
            spec = replace(call_spec(op, x), pipeline=Pipeline.TWO_PASS, bucket=None, vec=x.vmax)
            yield spec, patched(codegen.outputs([spec]), patch)
        finally:
            tiles.TWO_PASS_THREADS = saved
            recipe.cache_clear()
        return
    special = (tiles.STREAMED_TILES, tiles.QUANT_LN_TILES, tiles.LEAN_LN_TILES, tiles.SINGLE_INPUT_TILES)
    saved = (tiles.ONE_PASS_TILES[x.itemsize].get(n), [dict(tiles.entries(t, x)) for t in special],
             tiles.ONE_PASS_MAX_N[x], tiles.BUCKETS)
    tiles.BUCKETS = tuple(sorted({*tiles.BUCKETS, n}))  # a candidate may be a bucket of its own
    # a bK patch is the tile's register budget too (a register-held one under 128 is lean)
    budget = [tiles.REGISTERS_PER_SM // (threads * rows * int(m[1])) for m in map(BLOCKS.match, patch) if m]
    store = tiles.STREAMED if staged == tiles.STREAMED else tiles.STAGED if staged is True else tiles.REGISTERS
    entry = tiles.Shape(threads, rows, cluster, store, budget[0] if budget else None)
    tiles.ONE_PASS_TILES[x.itemsize][n] = entry
    tiles.ONE_PASS_MAX_N[x] = max(saved[2], n)  # a candidate may take a row past the one-pass range
    for t in special:  # the candidate serves every op; in an op's own table its budget holds for fused ops too
        if n in tiles.entries(t, x):
            tiles.entries(t, x)[n] = entry
    if NOKEEP in patch:
        tiles.KEEP_STAGE_BYTES = 0
    for m in filter(None, map(KEEP.match, patch)):
        tiles.KEEP_STAGE_BYTES = int(m[1]) * 1024
    for m in filter(None, map(KEPT_STEP.match, patch)):
        tiles.kept_output_step = lambda tile, light, k=int(m[1]): k
    if SNOKEEP in patch:
        tiles.keeps_outputs = lambda t, x=None: KEEPS_OUTPUTS(t, x) and not t.stream_bytes
    recipe.cache_clear()
    try:
        spec = replace(call_spec(op, x), pipeline=Pipeline.ONE_PASS, bucket=n, vec=x.vmax)
        yield spec, patched(codegen.outputs([spec]), patch)
    finally:
        if saved[0]:
            tiles.ONE_PASS_TILES[x.itemsize][n] = saved[0]
        else:
            del tiles.ONE_PASS_TILES[x.itemsize][n]
        for t, kept in zip(special, saved[1]):
            tiles.entries(t, x).update(kept)
        tiles.ONE_PASS_MAX_N[x], tiles.BUCKETS = saved[2], saved[3]
        tiles.KEEP_STAGE_BYTES = KEEP_STAGE_BYTES
        tiles.kept_output_step = KEPT_OUTPUT_STEP
        tiles.keeps_outputs = KEEPS_OUTPUTS
        recipe.cache_clear()


def describe(op, x, n, cand, spec) -> str:
    threads, rows, cluster, staged, grid, *patch = cand
    return (f"{op:14s} {x.value} N={n:6d} threads={threads:4d} rows={rows} cluster={cluster} "
            f"staged={staged.value if staged == tiles.STREAMED else staged if staged == TWO_PASS else int(staged)} "
            f"grid={grid!s:4s} {'+'.join(patch):10s} P={recipe(spec).tile.repeat:2d}")


def ptxas_candidate(op, x, n, cand):
    """A candidate's registers and spills as ptxas reports them (CPU only: NVRTC)."""
    with candidate(op, x, n, cand) as (spec, files):
        folder = Path(tempfile.mkdtemp())
        codegen.write(folder, files)
        res = compile.compile_file(folder / spec.file_name).resources
        r = recipe(spec)
        print(f"{describe(op, x, n, cand, spec)} keep={r.keep_outputs:d} stage={r.tile.stage_bytes >> 10:3d} KB "
              f"regs={res['registers']:3d} spills={res['spill_stores']}/{res['spill_loads']}", flush=True)


@contextlib.contextmanager
def dispatched(op, x, n, cand):
    """A candidate's spec, rendered into a scratch folder that dispatch calls it from until
    exit (its kernel then unloaded)."""
    with candidate(op, x, n, cand) as (spec, files):
        folder = Path(tempfile.mkdtemp())
        codegen.write(folder, files)
        dispatch.use_generated(folder, registry={spec.key: spec.name})
        try:
            yield spec
        finally:
            runtime._loaded.clear()
            runtime._module.cache_clear()


def inputs(x, n, rows):
    """A bench op's arguments (x, residual, gamma, beta), random, on the GPU."""
    import torch

    dtype = {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP32: torch.float32}[x]
    return ([torch.randn(rows, n, device="cuda", dtype=dtype) for _ in range(2)]
            + [torch.randn(n, device="cuda", dtype=dtype) for _ in range(2)])


def time_candidate(op, x, n, cand, ins, ceiling, check=None):
    """Times a candidate; with `check` (a list), also compares its outputs with check[0]'s
    (the first candidate's, which it records), bit for bit."""
    with dispatched(op, x, n, cand) as spec:
        time_dispatched(op, x, n, cand, ins, ceiling, spec)
        if check is not None:
            import torch
            got = [t for t in _as_tuple(call(op, ins)()) if t is not None]
            if not check:
                check.append(got)
            else:
                same = all(a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                           for a, b in zip(got, check[0]))
                print(f"  outputs {'identical to' if same else 'DIFFER from'} the first candidate's", flush=True)


def _as_tuple(out):
    return tuple(out) if isinstance(out, tuple) else (out,)


def time_dispatched(op, x, n, cand, ins, ceiling, spec):
    import torch
    threads, rows, cluster, staged, grid, *patch = cand
    fn = call(op, ins)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    load = runtime._load

    def load_with_shared(*args):  # "sK" applies from the first launch (a kernel may need it)
        kernel = load(*args)
        for m in filter(None, map(SHARED.match, patch)):
            kernel.smem = int(m[1]) * 1024
            runtime.driver.funcSetAttribute(kernel.func, runtime._MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.smem)
            blocks = runtime.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.func, kernel.block, kernel.smem)
            kernel.max_groups = max(blocks * sms // kernel.cluster, 1) * recipe(spec).tile.waves
        return kernel

    runtime._load = load_with_shared
    try:
        fn()
    finally:
        runtime._load = load
    (kernel,) = runtime._loaded.values()
    for m in filter(None, map(CARVEOUT.match, patch)):  # undone below: CuPy reuses the module
        runtime.driver.funcSetAttribute(kernel.func, _PREFERRED_SHARED_MEMORY_CARVEOUT, int(m[1]))
    m = ins[0].shape[0]
    # (not from max_groups: clusters round it down, and the eighth session's runs printed 2
    # for 262144's three blocks per SM)
    per_sm = runtime.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.func, kernel.block, kernel.smem)
    held = max(max(per_sm, 1) * sms // kernel.cluster, 1)  # row groups the device holds, clusters unpacked
    if grid == F:
        kernel.max_groups = 1 << 30
    elif grid == "res":  # the clusters the device holds at once
        kernel.max_groups = runtime.resident_clusters(kernel.func, recipe(spec).tile)
    elif isinstance(grid, str) and grid[0] == "g":  # "gK": K row groups (blocks or clusters)
        kernel.max_groups = int(grid[1:])
    elif isinstance(grid, str):  # "rK": about K row groups per block, at least one wave
        kernel.max_groups = max(held, -(-m // rows // int(grid[1:])))
    else:  # grid times the blocks the device holds
        kernel.max_groups = held * grid
    dispatch._plans.clear()  # plans keep the grid they were made with
    regs = runtime.driver.funcGetAttribute(4, kernel.func)  # CU_FUNC_ATTRIBUTE_NUM_REGS
    ms = bench.time_events(fn)
    if any(map(CARVEOUT.match, patch)):
        runtime.driver.funcSetAttribute(kernel.func, _PREFERRED_SHARED_MEMORY_CARVEOUT, -1)  # the default
    print(f"{describe(op, x, n, cand, spec)} regs={regs:3d} blocks/SM={per_sm:2d} groups={kernel.max_groups}: "
          f"{ms * 1e3:7.1f} us {moved(op, m, n, x.itemsize) / ms / 1e6 / ceiling:5.3f}", flush=True)


def main(names, rows_times=1, ptxas=False, check=False, offset=0.0):
    if ptxas:
        for name in names or CANDIDATES:
            op, x, n, cands = CANDIDATES[name]
            for cand in cands:
                ptxas_candidate(op, x, n, cand)
        return
    ceiling = bench.copy_gbps()
    print(f"copy {ceiling:.0f} GB/s")
    for name in names or CANDIDATES:
        op, x, n, cands = CANDIDATES[name]
        m = (1 << 27) // n * rows_times
        ins = inputs(x, n, m)
        ins[0] += offset  # rows of offset + N(0, 1): LayerNorm's far rows (the shift kept)
        first = [] if check else None
        for cand in cands:
            time_candidate(op, x, n, cand, ins, ceiling, first)


if __name__ == "__main__":
    args = sys.argv[1:]
    times = int(args.pop(args.index("--rows") + 1)) if "--rows" in args else 1
    offset = float(args.pop(args.index("--offset") + 1)) if "--offset" in args else 0.0
    flags = ("--rows", "--offset", "--ptxas", "--check")
    main([a for a in args if a not in flags], times, "--ptxas" in args, "--check" in args, offset)
