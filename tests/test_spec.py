"""The spec model: names round-trip, invalid combinations say why, tiles fit the bucket."""
from dataclasses import replace

import pytest

from normgen import dispatch, tiles
from normgen import recipe as recipe_module
from normgen.recipe import framed_serves, recipe
from normgen.matrix import Selection, select
from normgen.spec import KernelSpec, SpecError, invalid_reason, parse_name
from normgen.types import Cache, DType, Entry, FusedAdd, Norm, Pipeline, Quant

EVERY = select(Selection(include=("*",)))


def test_every_valid_instance_round_trips():
    assert EVERY, "the full matrix is empty"
    names = [s.name for s in EVERY]
    assert len(set(names)) == len(names), "two specs share a name"
    for spec in EVERY:
        assert parse_name(spec.name) == spec
        assert spec.symbol == spec.file_stem == spec.test_id == spec.name
        assert spec.file_name == spec.name + ".cu"
        assert spec.name.isidentifier(), "a name must be a valid C symbol"


def test_example_name():
    spec = KernelSpec(Norm.LAYERNORM, DType.BF16, DType.BF16, DType.BF16, save_stats=True,
                      pipeline=Pipeline.ONE_PASS, bucket=4096, vec=8)
    assert spec.name == "layernorm_fwd_bf16_nb4096_1p_v8_mv"
    assert parse_name("layernorm_fwd_fp16_wfp32_2p_v1").w == DType.FP32


@pytest.mark.parametrize("name", [
    "layernorm_fwd_bf16_nb4096_1p_v8_mv_extra",  # trailing junk
    "layernorm_fwd_fp64_nb4096_1p_v1",  # unknown precision
    "layernorm_fwd_bf16_nb4000_1p_v8",  # not a bucket
    "layernorm_fwd_fp32_nb4096_1p_v8",  # vector wider than 16 bytes
    "layernorm_fwd_bf16_wbf16_nb4096_1p_v8",  # not canonical: w equal to x is implied
    "layernorm_fwd_bf16_nb4096_2p_v8",  # two-pass has no bucket
])
def test_bad_names_are_rejected(name):
    with pytest.raises(SpecError):
        parse_name(name)


@pytest.mark.parametrize("change, words", [
    (dict(x=DType.INT8), "input precision"),
    (dict(w=DType.FP16), "gamma/beta precision"),
    (dict(out=DType.INT8), "without quantization"),
    (dict(smooth=DType.FP32), "smooth scale needs quantization"),
    (dict(quant=Quant.DYNAMIC, out=DType.INT8), "per-row scale precision"),
    (dict(quant=Quant.STATIC, out=DType.FP16), "int8 or fp8"),
    (dict(vec=16), "vector width"),
    (dict(bucket=100), "bucket must be one of"),
    (dict(pipeline=Pipeline.TWO_PASS), "no bucket"),
])
def test_invalid_combinations_say_why(change, words):
    base = dict(norm=Norm.LAYERNORM, x=DType.BF16, w=DType.BF16, out=DType.BF16,
                pipeline=Pipeline.ONE_PASS, bucket=1024, vec=8)
    assert invalid_reason(KernelSpec(**base)) is None
    reason = invalid_reason(KernelSpec(**{**base, **change}))
    assert reason and words in reason, reason


def test_rmsnorm_is_an_instance_wherever_layernorm_is():
    ln = {s.name.replace("layernorm", "rmsnorm", 1) for s in EVERY if s.norm == Norm.LAYERNORM}
    rms = {s.name: s for s in EVERY if s.norm == Norm.RMSNORM}
    # but for framed rows where ragged rows serve RMSNorm faster (recipe.framed_serves)
    as_rms = {name: replace(parse_name(name.replace("rmsnorm", "layernorm", 1)), norm=Norm.RMSNORM)
              for name in ln - set(rms)}
    assert ln and all(s.framed and not framed_serves(s) for s in as_rms.values())
    # and only there, but for LayerNorm + dynamic quant's 1024-thread tile (QUANT_LN_TILES),
    # which cannot take an x-bias beside a residual, and framed rows where LayerNorm's are not
    # the fastest (tiles.FRAMED_BUCKETS)
    only_rms = [rms[name] for name in set(rms) - ln]
    only_framed = [s for s in only_rms if s.framed]
    assert only_framed and all(not framed_serves(replace(s, norm=Norm.LAYERNORM)) for s in only_framed)
    only_rms = [s for s in only_rms if not s.framed]
    assert only_rms and all(s.x_bias and s.fused_add and s.quant == Quant.DYNAMIC for s in only_rms)
    assert all("1024-thread" in invalid_reason(replace(s, norm=Norm.LAYERNORM)) for s in only_rms)


def test_every_fusion_is_an_instance_in_both_pipelines():
    fused = [s for s in EVERY if s.fused_add or s.x_bias or s.quant != Quant.NONE]
    for pipe in Pipeline:
        on = [s for s in fused if s.pipeline == pipe]
        assert {s.fused_add for s in on} == set(FusedAdd) and {s.x_bias for s in on} == {False, True}
        assert {(s.quant, s.out) for s in on if s.quant != Quant.NONE} == {
            (q, o) for q in (Quant.DYNAMIC, Quant.STATIC) for o in (DType.INT8, DType.FP8)}
        assert {s.smooth for s in on} == {None, DType.FP32, DType.FP16, DType.BF16}
        assert {s.scale for s in on} == {None, DType.FP32, DType.FP16, DType.BF16}


@pytest.mark.parametrize("x", [DType.FP32, DType.BF16])
@pytest.mark.parametrize("vec", [1, 2, 4, 8])
@pytest.mark.parametrize("op", [None, recipe_module.Op(), recipe_module.Op(quant=Quant.DYNAMIC), recipe_module.Op(prologue=True),
                                recipe_module.Op(rmsnorm=True), recipe_module.Op(rmsnorm=True, quant=Quant.STATIC)])
def test_one_pass_tiles_cover_their_buckets(x, vec, op):
    if vec > x.vmax:
        return
    for bucket in tiles.ONE_PASS_TILES[x.itemsize]:
        if not recipe_module.has_one_pass(x, bucket, vec):
            assert vec == 1, "only scalar access may run out of registers"
            continue
        t = recipe_module.one_pass_tile(x, bucket, vec, op)
        assert t.threads_per_row * t.cluster * t.vec * t.repeat == bucket
        if bucket in tiles.FITTED_FROM[x.itemsize]:
            assert t.threads_per_row % 32 == 0 and t.rows_per_block == t.cluster == 1, "fitted: whole warps, one row"
            assert t.threads_per_row < 16 * 32, "the warps' partials summed in turn (reduce.cuh)"
        else:
            assert t.threads_per_row & (t.threads_per_row - 1) == 0, "threads per row: a power of two"
        # portable sizes, or 16: non-portable, which runtime._load allows for the kernel
        assert t.cluster in (1, 2, 4, 8, 16), "cluster sizes an H100 launches"
        assert t.cluster == 1 or t.rows_per_block == 1, "a cluster serves one row"
        assert t.block_threads <= 1024 and t.block_threads % 32 == 0
        assert t.repeat * t.vec * x.itemsize >= 16, "at least 16 bytes per thread"


def test_buckets_cover_one_pass_range():
    for x, n_max in tiles.ONE_PASS_MAX_N.items():
        assert n_max == max(tiles.ONE_PASS_TILES[x.itemsize]), f"{x}: one-pass range != buckets"


@pytest.mark.parametrize("name, packed", [
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v4", True),  # quant: past an occupancy step
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8", False),  # staged (tiles.QUANT_LN_TILES)
    ("layernorm_fwd_bf16_add1_nb4096_1p_v8", True),
    ("layernorm_fwd_bf16_nb8192_1p_v8", True),  # unfused, 256 threads: float columns would spill
    ("layernorm_fwd_fp16_nb4096_1p_v8", False),  # unfused, 128 threads: only the conversions
    ("layernorm_fwd_bf16_nb16384_1p_v8", False),  # 512 threads: one block per SM anyway
    ("layernorm_fwd_bf16_dqint8_syfp32_nb16384_1p_v4", True),  # 512 threads keeping outputs: spills else
    ("layernorm_fwd_bf16_wfp32_add1_nb4096_1p_v8", False),  # fp32 columns: nothing to pack
    ("rmsnorm_fwd_bf16_add1_dqfp8_syfp32_nb4096_1p_v8", False),  # gamma alone: 32 floats
    ("rmsnorm_fwd_bf16_xb_add1_dqfp8_syfp32_nb4096_1p_v8", True),  # gamma and x-bias
    ("layernorm_fwd_bf16_add1_nb32768_1p_v8", False),  # staged: columns are not held
    ("layernorm_fwd_bf16_add1_2p_v8", False),
])
def test_which_instances_keep_columns_packed(name, packed):
    assert recipe(parse_name(name)).pack_columns is packed


@pytest.mark.parametrize("name, keeps", [
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8", True),  # in shared memory (staged)
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v4", True),  # in registers
    ("layernorm_fwd_fp32_dqfp8_syfp32_nb16384_1p_v4", True),  # 32 per thread, 512 threads
    ("layernorm_fwd_bf16_dqint8_syfp32_nb131072_1p_v8", True),  # staged over a cluster
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb32768_1p_v8", False),  # 128 KB of floats per block
    ("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8", False),  # streamed: 1024 threads a row
    ("layernorm_fwd_bf16_dqint8_syfp32_nb65536_1p_v8", True),  # streamed over a cluster (STREAMED_KEEP)
    ("layernorm_fwd_fp16_dqint8_syfp32_nb65536_1p_v8", False),  # ... not fp16: its conversions spill
    ("layernorm_fwd_bf16_sqint8_nb8192_1p_v8", False),  # static quant: no maximum
    ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb8192_1p_v8", False),  # the maximum comes with the statistics
    ("layernorm_fwd_bf16_dqint8_syfp32_2p_v8", False),
    # framed rows: where the per-column vectors are loaded per vector, or held as floats in
    # shared memory (float columns), with a fused add or without
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb5120_1p_f8", True),
    ("layernorm_fwd_fp16_add1_smfp32_dqfp8_syfp32_nb2048_1p_f8", True),
    ("layernorm_fwd_bf16_dqint8_syfp32_nb2048_1p_f8", True),
    ("layernorm_fwd_bf16_dqint8_syfp32_nb5120_1p_f8", True),
    ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb2048_1p_f8", True),
    ("rmsnorm_fwd_bf16_smfp32_dqfp8_syfp32_nb2048_1p_f8", False),
])
def test_which_instances_keep_their_outputs(name, keeps):
    assert recipe(parse_name(name)).keep_outputs is keeps


@pytest.mark.parametrize("name, step", [
    ("layernorm_fwd_bf16_dqint8_syfp32_nb16384_1p_v8", 8),  # one block, gamma and beta alone: all at once
    ("layernorm_fwd_fp16_dqfp8_syfp32_nb16384_1p_v8_mv", 8),
    ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb16384_1p_v8", 2),  # kept, with a fused add
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb16384_1p_v8", 2),  # ... a smooth scale
    ("layernorm_fwd_bf16_wfp32_dqint8_syfp32_nb16384_1p_v8", 2),  # ... fp32 columns: more spill
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8", 2),  # 48 registers: more spill
    ("layernorm_fwd_bf16_dqint8_syfp32_nb131072_1p_v8", 2),  # over a cluster: slower
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb32768_1p_v8", 8),  # not kept: all at once
    ("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8", 4),  # streamed: a register row's four
    ("rmsnorm_fwd_fp32_add1_dqfp8_syfp32_nb131072_1p_v1", 4),  # narrow vectors (32 a thread)
])
def test_how_many_vectors_output_passes_take_at_a_time(name, step):
    assert recipe(parse_name(name)).output_step == step


@pytest.mark.parametrize("name, vectors", [
    ("layernorm_fwd_bf16_add1_nb65536_1p_v8", 2),  # staged, with a fused add
    ("rmsnorm_fwd_fp32_add2_nb262144_1p_v4", 2),
    ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb65536_1p_v8", 2),  # one 1024-thread block (QUANT_LN_TILES)
    ("rmsnorm_fwd_bf16_add2_nb32768_1p_v8", 0),  # under 65536: no faster, and this one spills
    ("layernorm_fwd_bf16_nb65536_1p_v8", 0),  # no add: no faster
    ("layernorm_fwd_bf16_add1_nb8192_1p_v8", 0),  # held in registers
    ("layernorm_fwd_bf16_add1_2p_v8", 0),
])
def test_which_staged_rows_prefetch_their_columns(name, vectors):
    assert recipe(parse_name(name)).column_prefetch == vectors


@pytest.mark.parametrize("name, vectors", [
    ("rmsnorm_fwd_bf16_nb65536_1p_v8", 2),  # over a cluster, two blocks an SM
    ("rmsnorm_fwd_fp16_nb524288_1p_v8_mv", 2),
    ("layernorm_fwd_fp32_nb262144_1p_v4", 2),
    ("rmsnorm_fwd_bf16_sqfp8_nb65536_1p_v8", 2),  # a static quant reads gamma once a row
    ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb65536_1p_v8", 4),  # a dynamic one twice
    ("layernorm_fwd_bf16_dqint8_syfp32_nb16384_1p_v8", 4),  # kept, all eight vectors a step
    ("layernorm_fwd_fp16_dqint8_syfp32_nb16384_1p_v8", 0),  # ... fp16: spills
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8", 0),  # ... two a step at 48 registers: spills
    ("layernorm_fwd_bf16_dqint8_syfp32_nb65536_1p_v8", 0),  # LayerNorm + quant not kept: no faster
    ("rmsnorm_fwd_bf16_nb131072_1p_v8", 0),  # six blocks an SM: no faster
    ("layernorm_fwd_bf16_nb262144_1p_v8", 0),  # LayerNorm at 40 registers: spills
    ("rmsnorm_fwd_bf16_nb32768_1p_v8", 0),  # one block: no faster
    ("rmsnorm_fwd_bf16_add1_nb65536_1p_v8", 0),  # a fused add (prefetches into L1)
    ("rmsnorm_fwd_bf16_wfp32_nb65536_1p_v8", 0),  # fp32 columns beside a 16-bit row: not light columns
    ("rmsnorm_fwd_bf16_smfp32_dqfp8_syfp32_nb65536_1p_v8", 0),  # a smooth scale: not light columns
    ("rmsnorm_fwd_bf16_nb8192_1p_v8", 0),  # held in registers
    ("rmsnorm_fwd_bf16_2p_v8", 0),
])
def test_which_staged_rows_load_their_columns_early(name, vectors):
    assert recipe(parse_name(name)).column_registers == vectors


@pytest.mark.parametrize("name, stage_bytes, blocks", [
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8", 32768, 5),  # floats, one 256-thread block per row, 48 registers
    ("layernorm_fwd_bf16_nb131072_1p_v8", 32768, 6),  # plain, clusters of eight: 40 registers
    ("rmsnorm_fwd_fp16_nb262144_1p_v8", 65536, 3),
    ("rmsnorm_fwd_fp16_add1_nb262144_1p_v8", 65536, 2),  # fused: 64 registers
    ("layernorm_fwd_bf16_xb_nb131072_1p_v8", 32768, 2),  # an x-bias: half of that
    ("layernorm_fwd_fp32_nb131072_1p_v4", 65536, 2),  # fp32: 64 registers
    ("layernorm_fwd_fp16_add1_dqfp8_syfp32_nb16384_1p_v8", 65536, 3),  # three fit an SM's shared memory
    ("layernorm_fwd_bf16_dqint8_syfp32_nb131072_1p_v8", 65536, 3),  # an eighth of a row each, as floats
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb32768_1p_v8", 65536, 2),  # one 512-thread block, bf16
    ("layernorm_fwd_bf16_wfp32_dqint8_syfp32_nb65536_1p_v8", 131072, 1),  # one 1024-thread block, bf16
    ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb65536_1p_v8", 65536, 2),  # bf16, half a row each
    ("layernorm_fwd_fp32_nb32768_1p_v4", 131072, 1),  # reads x alone: one 1024-thread block
    ("rmsnorm_fwd_fp32_dqfp8_syfp32_nb32768_1p_v4", 131072, 1),
    ("layernorm_fwd_fp32_add1_nb32768_1p_v4", 65536, 2),  # a fused add: half a row each, cluster of two
    ("layernorm_fwd_fp32_dqint8_syfp32_nb32768_1p_v4", 65536, 2),  # LayerNorm + dynamic quant too
    ("layernorm_fwd_fp32_nb32768_1p_v2", 65536, 2),  # narrower vectors too
    ("layernorm_fwd_bf16_nb8192_1p_v8", 0, 2),  # no quant: registers
    ("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v4", 0, 2),  # narrower vectors: registers
    ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb8192_1p_v8", 0, 2),
])
def test_stage_bytes_and_residency(name, stage_bytes, blocks):
    r = recipe(parse_name(name))
    assert r.tile.stage_bytes == stage_bytes
    assert r.min_blocks_per_sm == blocks


@pytest.mark.parametrize("name, cluster", [
    ("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8", 1),
    ("layernorm_fwd_bf16_dqfp8_syfp16_nb32768_1p_v8_mv", 1),
    ("layernorm_fwd_fp16_dqfp8_syfp16_nb32768_1p_v8_mv", 0),  # fp16: no faster at 32768
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb32768_1p_v8", 0),  # a smooth scale: a third column
    ("layernorm_fwd_bf16_wfp32_dqint8_syfp32_nb32768_1p_v8", 0),  # fp32 columns: twice the bytes
    ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb32768_1p_v8", 0),  # a fused add
    ("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v4", 0),  # half vectors
    ("layernorm_fwd_bf16_dqint8_syfp32_nb65536_1p_v8", 2),  # columns fit beside a stage only halved
    ("layernorm_fwd_fp16_dqfp8_syfp32_nb65536_1p_v8", 2),
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb65536_1p_v8", 0),
    ("rmsnorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8", 0),
])
def test_which_rows_are_streamed(name, cluster):
    """Streamed rows (tiles.STREAMED_TILES): one 1024-thread block an SM (at 65536 a cluster of
    two, each half the row), one wave of them (as many as the device holds), a block's share
    of the row in registers, shared memory for its share of the next row's stage, of gamma and
    of beta, and an mbarrier."""
    spec = parse_name(name)
    r = recipe(spec)
    t = r.tile
    assert bool(t.stream_bytes) is (cluster > 0)
    if cluster:
        share = spec.bucket // cluster * 2
        assert (t.stage_bytes, t.stream_bytes, t.block_threads, t.cluster) == (0, 3 * share + 16, 1024, cluster)
        assert t.shared_bytes == t.stream_bytes and r.min_blocks_per_sm == 1
        assert r.waves == 1 and t.resident == (cluster > 1) and r.fold_shift
        # bf16 clusters keep their outputs (in the whole-row kernel; the other folds its shift)
        assert r.keep_outputs is (cluster > 1 and spec.x == DType.BF16)


@pytest.mark.parametrize("name, cache", [
    ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb65536_1p_v8", Cache.PAST_L1),  # two output passes read the columns
    ("layernorm_fwd_bf16_wfp32_dqint8_syfp32_nb65536_1p_v8", Cache.NORMAL),  # ... but not beside fp32 columns: they spill
    ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb65536_1p_v8", Cache.NORMAL),  # one output pass
    ("layernorm_fwd_bf16_nb131072_1p_v8", Cache.PAST_L1),  # unfused 16-bit, clusters of eight
    ("layernorm_fwd_fp16_wfp32_nb524288_1p_v8_mv", Cache.PAST_L1),
    ("layernorm_fwd_bf16_nb65536_1p_v8", Cache.NORMAL),  # clusters of two
    ("layernorm_fwd_fp32_nb262144_1p_v4", Cache.NORMAL),  # fp32
    ("layernorm_fwd_bf16_add1_nb262144_1p_v8", Cache.NORMAL),  # fused
    ("rmsnorm_fwd_bf16_nb262144_1p_v8", Cache.NORMAL),
    ("layernorm_fwd_bf16_nb4096_1p_v8", Cache.KEEP_L2),  # in registers: evict_last
    ("rmsnorm_fwd_fp32_add1_nb1024_1p_v4", Cache.KEEP_L2),
    ("layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_v8", Cache.NORMAL),  # ... unless quantized
    ("layernorm_fwd_bf16_2p_v8", Cache.NORMAL),
])
def test_where_rows_leave_their_lines(name, cache):
    assert recipe(parse_name(name)).row_cache is cache


@pytest.mark.parametrize("name, resident", [
    ("rmsnorm_fwd_bf16_nb131072_1p_v8", True),  # RMSNorm over clusters of eight or more
    ("rmsnorm_fwd_fp16_add1_dqfp8_syfp32_nb262144_1p_v8", True),
    ("rmsnorm_fwd_fp32_nb524288_1p_v4", True),
    ("rmsnorm_fwd_bf16_nb65536_1p_v8", False),  # clusters of two
    ("rmsnorm_fwd_bf16_nb131072_1p_v4", True),
    ("layernorm_fwd_bf16_nb262144_1p_v8", False),  # LayerNorm is no faster so
    ("rmsnorm_fwd_bf16_2p_v8", False),
])
def test_which_tiles_launch_the_resident_clusters_once(name, resident):
    assert recipe(parse_name(name)).tile.resident is resident


@pytest.mark.parametrize("name, full", [
    ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb32768_1p_v8", True),
    ("layernorm_fwd_bf16_add1_nb262144_1p_v8", True),
    ("layernorm_fwd_bf16_nb16384_1p_v8", False),  # registers: no second kernel
    ("layernorm_fwd_bf16_dqint8_syfp32_nb16384_1p_v8", True),  # staged (tiles.QUANT_LN_TILES)
    ("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8", True),
    ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb32768_1p_v8", False),  # spills, with the add
    ("layernorm_fwd_bf16_smfp32_dqfp8_syfp32_nb65536_1p_v8", False),  # or a smooth scale
    ("layernorm_fwd_bf16_dqfp8_syfp32_nb65536_1p_v4", False),  # or narrower vectors
    ("layernorm_fwd_fp16_dqint8_syfp32_nb32768_1p_v8_mv", False),  # or mean/rstd
    ("layernorm_fwd_fp32_dqint8_syfp32_nb65536_1p_v4", True),
    ("rmsnorm_fwd_bf16_xb_nb65536_1p_v8", False),
    ("rmsnorm_fwd_bf16_add1_dqfp8_syfp32_nb32768_1p_v8", True),  # gamma and the residual
    ("rmsnorm_fwd_bf16_add1_smfp32_dqint8_syfp32_nb65536_1p_v8", False),  # and a smooth scale
    ("rmsnorm_fwd_fp32_add1_dqint8_syfp32_nb131072_1p_v4", False),  # fp32 rows with an add
    ("layernorm_fwd_fp32_dqint8_syfp32_nb65536_1p_v4", True),
    ("layernorm_fwd_bf16_2p_v8", False),
])
def test_which_instances_have_a_whole_row_kernel(name, full):
    spec = parse_name(name)
    r = recipe(spec)
    assert r.whole_row_kernel is full
    assert r.symbol(Entry.WHOLE) == (spec.name + "_full" if full else None)
    assert [s for s, _ in r.kernels] == [spec.symbol] + ([r.symbol(Entry.WHOLE)] if full else [])


def test_rows_no_one_pass_bucket_holds_take_the_two_pass_pipeline():
    scalar = parse_name("layernorm_fwd_bf16_nb16384_1p_v1")  # registers
    assert "sub-word" in invalid_reason(replace(scalar, bucket=32768))  # staged: 32-bit words
    # rows not of whole vectors: framed rows first where a frame of a register bucket holds
    # the row (N + 7 columns of bf16), then ragged rows and narrower vectors in the order
    # recipe.ragged_first gives
    # (tiles.FRAMED_BUCKETS: unfused LayerNorm's framed rows serve the 10240 bucket)
    assert next(dispatch.candidates(scalar, 9001, 1)) == replace(scalar, bucket=10240, vec=8, framed=True)
    assert next(dispatch.candidates(scalar, 10236, 1)) != replace(scalar, bucket=10240, vec=8, framed=True)
    assert next(dispatch.candidates(scalar, 16380, 1)) == replace(scalar, vec=8, ragged=True)
    fp32 = parse_name("layernorm_fwd_fp32_nb8192_1p_v1")
    assert next(dispatch.candidates(fp32, 9001, 1)) == replace(fp32, bucket=10240, vec=4, framed=True)
    # unfused fp32 rows one element an access before ragged rows where their own tile serves
    # the bucket (tiles.NARROW_TILES), a fitted one too
    assert [s for s in dispatch.candidates(fp32, 8190, 1) if s.bucket == 8192][0] == fp32
    assert next(dispatch.candidates(fp32, 5003, 1)) == replace(fp32, bucket=5120)
    fused = replace(fp32, fused_add=FusedAdd.STORE)
    assert [s for s in dispatch.candidates(fused, 8190, 1) if s.bucket == 8192][0] == replace(fused, vec=4, ragged=True)
    assert next(dispatch.candidates(scalar, 20000, 1)) == replace(scalar, bucket=32768, vec=8, ragged=True)
    # gamma and beta not 16-byte aligned: neither framed nor ragged rows
    assert next(dispatch.candidates(scalar, 20000, 1, col_align=1)).pipeline == Pipeline.TWO_PASS
    assert next(dispatch.candidates(scalar, 5003, 1, col_align=1)) == replace(scalar, bucket=8192)


def test_1024_thread_blocks_leave_an_x_bias_with_an_add_to_the_next_instance():
    spec = replace(parse_name("layernorm_fwd_fp32_nb65536_1p_v4"), x_bias=True, fused_add=FusedAdd.NO_STORE)
    wider = replace(spec, bucket=262144)
    for s in (spec, wider):
        assert recipe(s).tile.block_threads == 1024 and "x-bias and a residual" in invalid_reason(s)
    assert next(dispatch.candidates(spec, 40000, 4)).bucket == 131072
    assert next(dispatch.candidates(spec, 200000, 4)).pipeline == Pipeline.TWO_PASS
    assert invalid_reason(replace(spec, fused_add=FusedAdd.NONE)) is None
