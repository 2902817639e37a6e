"""The recipe: one policy for how an instance is built, rendered as the instance's Traits."""
import dataclasses
import re

import pytest

from normgen import codegen, devices, tiles
from normgen.matrix import Selection, select
from normgen.recipe import TABLE_KINDS, Recipe, bucket_tables, recipe
from normgen.spec import KernelSpec, invalid_reason, parse_name, shorter_bucket
from normgen.types import DType, Entry, Pipeline

# the default set, and fusions and precisions beyond it (x-bias, fp32 columns, narrow vectors,
# smooth scales and per-row scales of other precisions)
BEYOND = Selection(axes={"x_bias": ("0", "1"), "fused_add": ("0", "2"), "wprec": ("fp32",),
                         "quant": ("none", "int8"), "smooth": ("none", "bf16"), "scale_prec": ("fp16",),
                         "vec": ("2", "max")})
SAMPLE = select() + select(BEYOND)[::5]

POLICY = ("tile", "op", "whole_row_kernel", "kernels", "pack_columns", "keep_outputs",
          "output_step", "light_columns", "column_prefetch", "column_registers", "fold_shift",
          "column_ahead", "row_cache", "fused", "min_blocks_per_sm", "waves")

_CONSTANT = re.compile(r"static constexpr [\w:]+ (k\w+) = (?:normgen::)?([\w:]+);")
_BOUNDS = re.compile(r"__launch_bounds__\((\d+), (\w+)\)")
_BOUNDS_ANY = re.compile(r"__launch_bounds__\(\d+, (\w+)\)")
_LADDER = re.compile(r"^#(if|elif|else)(.*)\n(?:#define NORMGEN_MIN_BLOCKS (\d+))?", re.M)


def _launch_blocks(text: str) -> dict:
    """Each known architecture's __launch_bounds__ blocks, read as its preprocessor would."""
    assert _BOUNDS_ANY.findall(text)[0] == "NORMGEN_MIN_BLOCKS"
    if not re.search(r"^#if ", text, re.M):
        return dict.fromkeys(devices.KNOWN, int(re.search(r"^#define NORMGEN_MIN_BLOCKS (\d+)", text, re.M)[1]))
    out = {}
    for kind, cond, value in _LADDER.findall(text):
        named = [int(a) // 10 for a in re.findall(r"__CUDA_ARCH__ == (\d+)", cond)]
        archs = named if kind != "else" else list(devices.KNOWN)
        for a in archs:
            out.setdefault(a, int(value))
    return out


_KERNEL = re.compile(r"^(\w+)\(const normgen::Params p\) \{\n  normgen::norm_fwd<Traits, normgen::Entry::(\w+)>\(p\);", re.M)


def _lower(flag: bool) -> str:
    return str(bool(flag)).lower()


def test_the_rendered_traits_are_the_recipe():
    assert {s.pipeline for s in SAMPLE} == set(Pipeline) and len(SAMPLE) > 2000
    for spec in SAMPLE:
        r = recipe(spec)
        t = r.tile
        text = codegen.render_instance(spec)
        traits = dict(_CONSTANT.findall(text))
        assert traits == {
            "kNorm": spec.norm.cpp, "kPipeline": spec.pipeline.cpp, "kFusedAdd": str(int(spec.fused_add)),
            "kXBias": _lower(spec.x_bias), "kQuant": spec.quant.cpp, "kSmooth": _lower(spec.smooth is not None),
            "kSaveStats": _lower(spec.save_stats),
            "kThreadsPerRow": str(t.threads_per_row), "kRowsPerBlock": str(t.rows_per_block),
            "kVec": str(t.vec), "kRepeat": str(t.repeat), "kCluster": str(t.cluster),
            "kStaged": _lower(t.stage_bytes), "kStreamed": _lower(t.stream_bytes), "kLean": _lower(t.lean),
            "kPackColumns": _lower(r.pack_columns), "kKeepOutputs": _lower(r.keep_outputs),
            "kRowCache": r.row_cache.cpp, "kOutputStep": str(r.output_step),
            "kColumnPrefetch": str(r.column_prefetch), "kColumnRegisters": str(r.column_registers),
            "kColumnAhead": str(r.column_ahead), "kFoldShift": _lower(r.fold_shift), "kRagged": _lower(spec.ragged),
            "kFramed": _lower(spec.framed), "kRowImages": str(r.row_images),
            "kResidualBatch": str(r.residual_batch), "kSegmentSteps": _lower(r.segment_steps),
            "kColumnBytes": str(r.column_bytes), "kSumsWhileStaging": _lower(r.sums_while_staging),
            "kStageGroups": _lower(r.stage_groups),
        }, spec.name
        kernels = [(symbol, Entry[entry]) for symbol, entry in _KERNEL.findall(text)]
        assert kernels == list(r.kernels) and kernels[0] == (spec.symbol, Entry.ANY), spec.name
        blocks = _launch_blocks(text)
        assert _BOUNDS.findall(text) == [(str(t.block_threads), "NORMGEN_MIN_BLOCKS")] * len(kernels)
        for arch, dev in devices.KNOWN.items():  # sm_90's the recipe's; elsewhere what the SM's shared memory holds
            held = dev.shared_per_sm // (r.shared_bytes + 1024) if r.shared_bytes else r.min_blocks_per_sm
            assert blocks[arch] == (r.min_blocks_per_sm if arch == 90 else max(1, min(r.min_blocks_per_sm, held))), spec.name
        assert text.count(f"__cluster_dims__({t.cluster}, 1, 1)") == (len(kernels) if t.cluster > 1 else 0)
        assert r.symbol(Entry.WHOLE) == (spec.name + "_full" if r.whole_row_kernel else None)
        assert r.symbol(Entry.ALIKE) == (spec.name + "_alike" if spec.framed else None), spec.name


def test_a_recipe_is_frozen_hashable_and_cached():
    spec = parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb65536_1p_v8")
    r = recipe(spec)
    assert isinstance(r, Recipe) and hash(r) == hash(dataclasses.replace(r))
    assert recipe(parse_name(spec.name)) is r  # equal specs share one recipe
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.output_step = 1
    assert len({recipe(s) for s in SAMPLE[:200]}) > 1


def test_a_spec_holds_identity_only():
    fields = {f.name for f in dataclasses.fields(KernelSpec)}
    assert fields == {"norm", "x", "w", "out", "fused_add", "x_bias", "quant", "smooth", "scale",
                      "save_stats", "pipeline", "bucket", "vec", "ragged", "framed"}
    for spec in (parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8"), parse_name("rmsnorm_fwd_fp32_2p_v1")):
        for attr in POLICY:
            assert not hasattr(spec, attr), attr
        assert spec.symbol == spec.file_stem == spec.test_id == spec.name and spec.file_name == spec.name + ".cu"


def test_tile_tables_hold_shapes():
    tables = (tiles.ONE_PASS_TILES, tiles.QUANT_LN_TILES, tiles.STREAMED_TILES, tiles.LEAN_LN_TILES,
              tiles.NARROW_TILES, tiles.LEAN_PROLOGUE_LN_TILES, tiles.SINGLE_INPUT_TILES, tiles.PLAIN_RMS_TILES,
              tiles.FRAMED_RMS_TILES)
    shapes = [shape for table in tables for entries in table.values() for shape in entries.values()]
    assert shapes and all(isinstance(s, tiles.Shape) and isinstance(s.store, tiles.Store) for s in shapes)
    assert {s.store for s in tiles.STREAMED_TILES[DType.BF16].values()} == {tiles.Store.STREAMED}


def test_fitted_buckets_cut_five_eighths_of_a_one_block_register_row():
    assert tiles.FITTED_FROM == {2: {5120: 8192, 10240: 16384}, 4: {2560: 4096, 5120: 8192, 10240: 16384}}
    for size, cut in tiles.FITTED_FROM.items():
        for bucket, whole in cut.items():
            assert bucket * 8 == whole * tiles.FITTED_EIGHTHS and bucket in tiles.BUCKETS
            assert tiles.ONE_PASS_TILES[size][bucket].threads * 8 == tiles.ONE_PASS_TILES[size][whole].threads * 5
    # a special table's entry for the bucket cut from, fitted: the same repeat, 5/8 the threads
    t, whole = (recipe(parse_name(f"layernorm_fwd_bf16_dqint8_syfp32_nb{b}_1p_v8")).tile for b in (5120, 8192))
    assert (t.threads_per_row, t.repeat, t.registers) == (160, whole.repeat, whole.registers) and t.stage_bytes
    # ... or its own entry: 16-bit LayerNorm's at 10240 lean, not 128 registers in one block an SM
    ln, add, quant = (recipe(parse_name(f"layernorm_fwd_bf16_{f}nb10240_1p_v8"))
                      for f in ("", "add1_", "dqint8_syfp32_"))
    assert (ln.tile.threads_per_row, ln.tile.registers, ln.min_blocks_per_sm, ln.tile.lean) == (320, 64, 3, True)
    assert (add.tile.registers, add.min_blocks_per_sm) == (96, 2)
    assert (quant.tile.threads_per_row, quant.tile.registers, quant.min_blocks_per_sm) == (160, 96, 4)
    assert recipe(parse_name("rmsnorm_fwd_bf16_nb10240_1p_v8")).tile.registers == 128


def test_fitted_buckets_serve_rows_of_whole_16_byte_vectors():
    for name in ("layernorm_fwd_bf16_nb8192_1p_r8", "layernorm_fwd_bf16_nb8192_1p_v1"):
        reason = invalid_reason(dataclasses.replace(parse_name(name), bucket=5120))
        assert "take the bucket it is cut from (8192)" in reason
    for name, shorter in (("layernorm_fwd_bf16_nb8192_1p_v8", 5120), ("layernorm_fwd_bf16_nb8192_1p_r8", 4096),
                          ("layernorm_fwd_bf16_nb8192_1p_v1", 4096), ("layernorm_fwd_bf16_nb5120_1p_v8", 4096),
                          ("layernorm_fwd_fp32_nb4096_1p_v4", 2560), ("rmsnorm_fwd_fp32_nb2560_1p_v4", 2048)):
        assert shorter_bucket(parse_name(name)) == shorter, name


def test_unfused_fp32_narrow_rows_take_sixteen_elements_a_thread_at_64_registers():
    for name, threads in (("layernorm_fwd_fp32_nb2560_1p_v1", 160), ("layernorm_fwd_fp32_nb5120_1p_v1_mv", 320),
                          ("layernorm_fwd_fp32_nb8192_1p_v1", 512), ("rmsnorm_fwd_fp32_nb2048_1p_v1", 128),
                          ("layernorm_fwd_fp32_nb5120_1p_v2", 320)):
        r = recipe(parse_name(name))
        elements = r.tile.repeat * r.tile.vec
        assert (r.tile.threads_per_row, elements, r.tile.registers) == (threads, 16, 64), name
        assert r.min_blocks_per_sm == 65536 // (threads * 64), name
    # a fitted bucket serves them, not ragged rows, fused rows' narrow vectors or 16-bit rows
    assert shorter_bucket(parse_name("layernorm_fwd_fp32_nb8192_1p_v1")) == 5120
    for name in ("layernorm_fwd_fp32_nb8192_1p_r4", "layernorm_fwd_fp32_add1_nb8192_1p_v1",
                 "layernorm_fwd_bf16_nb8192_1p_v1"):
        assert "cut from (8192)" in invalid_reason(dataclasses.replace(parse_name(name), bucket=5120)), name
    # untouched: the buckets without an entry, fused rows, 16-bit rows
    for name in ("layernorm_fwd_fp32_nb16384_1p_v1", "layernorm_fwd_fp32_nb4096_1p_v1",
                 "layernorm_fwd_fp32_add1_nb8192_1p_v1", "layernorm_fwd_bf16_nb8192_1p_v1"):
        assert recipe(parse_name(name)).tile.registers == 128, name


def test_unfused_16_bit_rmsnorm_rows_of_4096_take_256_threads():
    for name in ("rmsnorm_fwd_bf16_nb4096_1p_v8", "rmsnorm_fwd_fp16_wfp32_nb4096_1p_v8_mv"):
        t = recipe(parse_name(name)).tile
        assert (t.threads_per_row, t.repeat) == (256, 2), name
    # not with a fused add or a quant, nor LayerNorm's, nor fp32 rows, nor ragged rows
    for name in ("rmsnorm_fwd_bf16_add1_nb4096_1p_v8", "rmsnorm_fwd_bf16_sqint8_nb4096_1p_v8",
                 "layernorm_fwd_bf16_nb4096_1p_v8", "rmsnorm_fwd_bf16_nb4096_1p_r8"):
        assert recipe(parse_name(name)).tile.threads_per_row == 128, name
    assert recipe(parse_name("rmsnorm_fwd_fp32_nb4096_1p_v4")).tile.repeat == 4


def test_quantized_register_rows_without_a_fused_add_launch_fewer_waves():
    quant = ("layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_v8", "rmsnorm_fwd_bf16_dqfp8_syfp32_nb16384_1p_v8",
             "rmsnorm_fwd_bf16_sqfp8_nb4096_1p_v8", "layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb1024_1p_v8",
             "layernorm_fwd_bf16_dqint8_syfp32_nb5120_1p_f8")  # (the last: framed)
    for name in quant:
        assert recipe(parse_name(name)).waves == tiles.QUANT_WAVES, name
    # not with a fused add (a second row stream), ragged, two-pass or staged in one block,
    # nor without a quant
    for name in ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb4096_1p_v8", "layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_r8",
                 "layernorm_fwd_bf16_dqint8_syfp32_2p_v1", "layernorm_fwd_bf16_dqint8_syfp32_nb16384_1p_v8",
                 "layernorm_fwd_bf16_nb4096_1p_v8"):
        assert recipe(parse_name(name)).waves == tiles.WAVES, name
    assert recipe(parse_name("layernorm_fwd_bf16_nb131072_1p_v8")).waves == tiles.CLUSTER_WAVES
    assert recipe(parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb32768_1p_v8")).waves == 1  # streamed
    assert tiles.QUANT_WAVES < tiles.WAVES


def test_unfused_16_bit_register_rows_of_the_fast_memory_buckets_launch_one_wave_on_such_a_gpu():
    one = ("layernorm_fwd_bf16_nb8192_1p_v8", "layernorm_fwd_fp16_nb16384_1p_v8_mv", "layernorm_fwd_bf16_nb2048_1p_v8",
           "layernorm_fwd_bf16_wfp32_nb4096_1p_v8", "rmsnorm_fwd_bf16_nb16384_1p_v8", "rmsnorm_fwd_fp16_nb8192_1p_v8")
    for name in one:
        r = recipe(parse_name(name))
        assert (r.fast_memory_waves, r.waves) == (tiles.FAST_MEMORY_WAVES, tiles.WAVES), name
    # elsewhere a fast-memory GPU launches what any other does: fused adds, quants, fp32 rows,
    # other buckets, narrow vectors, framed, ragged, staged and two-pass rows
    for name in ("layernorm_fwd_bf16_add1_nb8192_1p_v8", "rmsnorm_fwd_bf16_dqfp8_syfp32_nb16384_1p_v8",
                 "layernorm_fwd_fp32_nb2048_1p_v4", "layernorm_fwd_bf16_nb1024_1p_v8", "rmsnorm_fwd_bf16_nb4096_1p_v8",
                 "rmsnorm_fwd_bf16_nb10240_1p_v8", "layernorm_fwd_bf16_nb16384_1p_v1", "rmsnorm_fwd_bf16_nb5120_1p_f8",
                 "layernorm_fwd_bf16_nb4096_1p_r8", "layernorm_fwd_bf16_nb32768_1p_v8", "layernorm_fwd_bf16_2p_v8"):
        r = recipe(parse_name(name))
        assert r.fast_memory_waves == r.waves, name


def _float_columns_size(name: str, r: Recipe) -> int:
    """A block's float columns: gamma, and LayerNorm's beta, as floats for its threads' vectors."""
    t = r.tile
    return (2 if name.startswith("layernorm") else 1) * t.block_threads * t.repeat * t.vec * 4


def test_quantized_register_rows_of_the_float_column_buckets_read_float_columns_from_shared_memory():
    for name in ("layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_v8", "layernorm_fwd_fp16_dqfp8_syfp32_nb2048_1p_v8",
                 "layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_v8_mv", "rmsnorm_fwd_bf16_dqfp8_syfp32_nb8192_1p_v8",
                 "rmsnorm_fwd_fp16_sqint8_nb8192_1p_v8", "layernorm_fwd_bf16_dqint8_syfp32_nb1024_1p_v8"):
        r = recipe(parse_name(name))
        floats = _float_columns_size(name, r)
        # the packed copies are not kept besides them; the launch takes them as dynamic shared memory
        assert (r.column_bytes, r.shared_bytes, r.pack_columns) == (floats, floats, False), name
    # other buckets, fused prologues, smooth scales, fp32 weights or inputs, unquantized, unaligned
    # or staged rows hold their packed vectors (or none) as before
    for name in ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb4096_1p_v8", "layernorm_fwd_bf16_add1_dqint8_syfp32_nb4096_1p_v8",
                 "layernorm_fwd_bf16_add1_dqint8_syfp32_nb1024_1p_v8",
                 "layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb4096_1p_v8", "layernorm_fwd_bf16_wfp32_dqint8_syfp32_nb4096_1p_v8",
                 "layernorm_fwd_fp32_dqint8_syfp32_nb4096_1p_v4", "layernorm_fwd_bf16_nb4096_1p_v8",
                 "layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_r8",
                 "layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8", "rmsnorm_fwd_bf16_dqfp8_syfp32_nb8192_1p_v4"):
        assert recipe(parse_name(name)).column_bytes == 0, name


def test_framed_quantized_rows_of_the_framed_float_column_buckets_read_float_columns_ahead_of_their_bounce_slots():
    for name in ("layernorm_fwd_bf16_dqint8_syfp32_nb5120_1p_f8", "layernorm_fwd_fp16_dqfp8_syfp32_nb2048_1p_f8",
                 "layernorm_fwd_bf16_add1_dqint8_syfp32_nb5120_1p_f8", "layernorm_fwd_fp16_add1_dqfp8_syfp32_nb2048_1p_f8",
                 "rmsnorm_fwd_bf16_dqfp8_syfp32_nb5120_1p_f8", "rmsnorm_fwd_fp16_add1_sqint8_nb5120_1p_f8",
                 "rmsnorm_fwd_fp16_dqfp8_syfp32_nb2048_1p_f8", "rmsnorm_fwd_fp16_sqint8_nb4096_1p_f8",
                 "rmsnorm_fwd_fp16_add1_dqint8_syfp32_nb4096_1p_f8"):
        r = recipe(parse_name(name))
        floats = _float_columns_size(name, r)
        assert r.column_bytes == floats and r.shared_bytes == r.image_bytes + floats > floats, name
        # rows that start alike pass no bounce slot but read the float columns
        assert (r.launch_bytes(Entry.ANY), r.launch_bytes(Entry.ALIKE)) == (r.shared_bytes, floats), name
        # the packed registers freed, LayerNorm's dynamic quant keeps its outputs, fused add or not
        assert r.keep_outputs == name.startswith("layernorm"), name
    # other framed buckets (bf16's RMSNorm + quant of 2048 and 4096, fp16's of 1024), smooth
    # scales and unquantized rows hold their packed vectors (or none) as before
    for name in ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb2048_1p_f8", "rmsnorm_fwd_bf16_sqint8_nb4096_1p_f8",
                 "rmsnorm_fwd_fp16_dqfp8_syfp32_nb1024_1p_f8", "rmsnorm_fwd_fp16_nb4096_1p_f8",
                 "layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb5120_1p_f8",
                 "layernorm_fwd_fp16_add1_smfp32_dqfp8_syfp32_nb2048_1p_f8", "rmsnorm_fwd_bf16_nb5120_1p_f8"):
        r = recipe(parse_name(name))
        assert r.column_bytes == 0 and r.launch_bytes(Entry.ALIKE) == 0, name


@pytest.mark.parametrize("table, framed", [(tiles.FLOAT_COLUMN_BUCKETS, False), (tiles.FRAMED_FLOAT_COLUMN_BUCKETS, True)])
def test_every_float_column_bucket_names_default_instances(table, framed):
    # an entry whose rows never pass recipe._float_column_bytes' tests would be dead
    floats = {(key, s.bucket, s.norm.value) for s in select() if recipe(s).column_bytes and s.framed == framed
              for key in (s.x.itemsize, s.x.value)}
    for key, kinds in table.items():
        for kind, buckets in kinds.items():
            for b in buckets:
                assert (key, b, kind.split("+")[0]) in floats, (key, kind, b)


def test_framed_rows_of_the_fast_memory_framed_buckets_launch_one_wave_on_such_a_gpu():
    for name in ("rmsnorm_fwd_bf16_nb10240_1p_f8", "rmsnorm_fwd_fp16_nb10240_1p_f8", "layernorm_fwd_bf16_add1_nb5120_1p_f8",
                 "layernorm_fwd_fp16_add1_nb2048_1p_f8", "layernorm_fwd_bf16_add1_nb4096_1p_f8",
                 "rmsnorm_fwd_bf16_add1_nb5120_1p_f8"):
        r = recipe(parse_name(name))
        assert (r.fast_memory_waves, r.waves) == (tiles.FAST_MEMORY_WAVES, tiles.WAVES), name
    for name in ("layernorm_fwd_bf16_add1_dqint8_syfp32_nb1024_1p_f8", "layernorm_fwd_fp16_dqfp8_syfp32_nb2048_1p_f8",
                 "layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb5120_1p_f8"):
        r = recipe(parse_name(name))
        assert r.fast_memory_waves == tiles.FAST_MEMORY_WAVES < r.waves, name  # (four or sixteen: _waves)
    # other framed buckets and operations keep their waves: RMSNorm 1024-5120, add + RMSNorm
    # of 10240, LayerNorm, LayerNorm + quant of 10240, RMSNorm + quant (four waves)
    for name in ("rmsnorm_fwd_bf16_nb1024_1p_f8", "rmsnorm_fwd_bf16_nb4096_1p_f8", "rmsnorm_fwd_bf16_nb5120_1p_f8",
                 "rmsnorm_fwd_bf16_add1_nb10240_1p_f8", "layernorm_fwd_bf16_nb10240_1p_f8",
                 "layernorm_fwd_bf16_add1_nb10240_1p_f8", "layernorm_fwd_bf16_dqint8_syfp32_nb10240_1p_f8",
                 "rmsnorm_fwd_bf16_dqfp8_syfp32_nb5120_1p_f8"):
        r = recipe(parse_name(name))
        assert r.fast_memory_waves == r.waves, name


def test_every_fast_memory_framed_bucket_is_one_framed_rows_serve():
    # a bucket framed rows do not serve would name no instance: the rule would be dead
    for size, kinds in tiles.FAST_MEMORY_FRAMED_BUCKETS.items():
        for kind, buckets in kinds.items():
            assert buckets <= tiles.FRAMED_BUCKETS[size][kind], (size, kind)


@pytest.mark.parametrize("gpu, props, fast", [
    ("H100 SXM", {"memoryClockRate": 2619000, "memoryBusWidth": 5120, "multiProcessorCount": 132,
                  "clockRate": 1980000}, False),
    ("H200", {"memoryClockRate": 3201000, "memoryBusWidth": 6016, "multiProcessorCount": 132,
              "clockRate": 1980000}, True),
    ("a runtime without the memory's fields", {"multiProcessorCount": 132, "clockRate": 1980000}, False),
])
def test_a_launch_takes_the_fast_memory_waves_where_dram_is_fast_for_the_sms(gpu, props, fast):
    built = recipe(parse_name("layernorm_fwd_bf16_nb8192_1p_v8"))
    bytes_a_clock = devices.dram_bytes_per_sm_clock(props)
    assert (bytes_a_clock >= tiles.FAST_MEMORY_BYTES_PER_CLOCK) == fast, (gpu, bytes_a_clock)
    assert devices.launch_waves(built, props) == (built.fast_memory_waves if fast else built.waves), gpu
    assert devices.launch_waves(built, props) == (tiles.FAST_MEMORY_WAVES if fast else tiles.WAVES), gpu


def test_ragged_rows_in_registers_load_through_a_row_image_where_it_fits():
    # 16-bit rows of the 8192 bucket: an image of two rows (at most 40 KB)
    for name in ("layernorm_fwd_bf16_nb8192_1p_r8", "rmsnorm_fwd_bf16_nb8192_1p_r8",
                 "layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb8192_1p_r8"):
        r = recipe(parse_name(name))
        assert r.row_images == 2 and r.shared_bytes == r.image_bytes <= 40 * 1024, name
    # of one row where two pass 40 KB and one fits 96 KB: a fused add's two inputs, fp32's
    # eight vectors a thread, 16-bit rows of 16384, and fused adds and fp32 rows of 16384
    for name in ("rmsnorm_fwd_bf16_add1_nb8192_1p_r8", "layernorm_fwd_fp32_nb8192_1p_r4",
                 "rmsnorm_fwd_bf16_nb16384_1p_r8", "rmsnorm_fwd_bf16_add1_nb16384_1p_r8",
                 "layernorm_fwd_fp32_nb16384_1p_r4"):
        r = recipe(parse_name(name))
        assert r.row_images == 1 and r.shared_bytes == r.image_bytes <= 96 * 1024, name
    # none where one row passes 96 KB, nor on staged or aligned rows
    for name in ("rmsnorm_fwd_bf16_add1_nb32768_1p_r8", "layernorm_fwd_bf16_nb65536_1p_r8",
                 "layernorm_fwd_bf16_nb8192_1p_v8"):
        r = recipe(parse_name(name))
        assert r.row_images == 0 and r.image_bytes == 0, name


def test_staged_ragged_fused_adds_load_their_residual_in_rounds_their_budget_holds():
    def built(name):
        r = recipe(parse_name(name))
        return r.tile.registers, r.residual_batch

    # 64 registers: two vectors a round, one for RMSNorm over clusters (two spilled there)
    assert built("layernorm_fwd_bf16_add1_nb65536_1p_r8") == (64, 2)
    assert built("rmsnorm_fwd_bf16_add1_nb32768_1p_r8") == (64, 2)
    assert built("rmsnorm_fwd_bf16_add1_nb65536_1p_r8") == (64, 1)
    # LayerNorm alone in one block with a fused add keeps 80 (bf16) or 128 registers, and
    # its whole residual at once
    assert built("layernorm_fwd_bf16_add1_nb32768_1p_r8") == (80, 8)
    assert built("layernorm_fwd_fp16_add1_nb32768_1p_r8") == (128, 8)
    # without a fused add there is no residual to batch
    assert built("rmsnorm_fwd_bf16_nb65536_1p_r8") == (64, 1)
    # and LayerNorm alone in one block with a dynamic quant (two spilled on sm_80)
    assert built("layernorm_fwd_bf16_add1_dqint8_syfp32_nb32768_1p_r8") == (64, 1)
    assert built("layernorm_fwd_bf16_add1_dqint8_syfp32_nb65536_1p_r8") == (64, 2)


def test_ragged_rms_fused_adds_through_a_one_row_image_take_three_blocks_an_sm():
    # 80 registers in 256-thread blocks (the 8192 and 16384 buckets): three blocks an SM, against two at 128
    for name in ("rmsnorm_fwd_bf16_add1_nb8192_1p_r8", "rmsnorm_fwd_fp16_add1_sqfp8_nb8192_1p_r8"):
        r = recipe(parse_name(name))
        assert (r.row_images, r.tile.registers, r.min_blocks_per_sm) == (1, 80, 3), name
    # not LayerNorm's (slower at 80), nor 128-thread blocks of two-row images, nor rows without
    # an add (64 alone: test_ragged_rows_of_one_input_through_an_image_take_64_registers_where_they_fit)
    for name in ("layernorm_fwd_bf16_add1_nb8192_1p_r8", "rmsnorm_fwd_bf16_add1_nb4096_1p_r8",
                 "rmsnorm_fwd_bf16_xb_nb8192_1p_r8"):
        assert recipe(parse_name(name)).tile.registers == 128, name


def test_ragged_rms_rows_of_512_threads_through_an_image_take_two_blocks_an_sm():
    # 64 registers: two 512-thread blocks an SM (their 66 KB images let three in), against one
    for name in ("rmsnorm_fwd_bf16_add1_nb16384_1p_r8", "rmsnorm_fwd_fp16_add1_dqint8_syfp32_nb16384_1p_r8",
                 "rmsnorm_fwd_bf16_nb16384_1p_r8"):
        r = recipe(parse_name(name))
        assert (r.tile.block_threads, r.tile.registers, r.min_blocks_per_sm) == (512, 64, 2), name
    # not fp32 rows (they spilled at 64 on sm_100 and sm_120), nor LayerNorm's fused adds
    for name in ("rmsnorm_fwd_fp32_nb16384_1p_r4", "layernorm_fwd_bf16_add1_nb16384_1p_r8"):
        r = recipe(parse_name(name))
        assert r.row_images == 1 and (r.tile.registers, r.min_blocks_per_sm) == (128, 1), name


def test_ragged_steps_are_counted_per_segment_where_that_measured_faster_and_did_not_spill():
    for name in ("rmsnorm_fwd_bf16_nb8192_1p_r8", "layernorm_fwd_bf16_nb4096_1p_r8",
                 "rmsnorm_fwd_bf16_add1_nb1024_1p_r8", "layernorm_fwd_bf16_nb65536_1p_r8"):
        assert recipe(parse_name(name)).segment_steps, name
    # ... and RMSNorm of one 16-bit input through an image in blocks of 256 threads or more,
    # through one row's image or with a quant
    for name in ("rmsnorm_fwd_bf16_nb16384_1p_r8", "rmsnorm_fwd_bf16_dqfp8_syfp32_nb8192_1p_r8",
                 "rmsnorm_fwd_fp16_sqint8_nb16384_1p_r8"):
        assert recipe(parse_name(name)).segment_steps, name
    # nor staged rows with a fused add (they spilled at 64 registers), nor LayerNorm's quant
    # or one-row image (they spilled), nor fp32's one-row image, nor 128-thread blocks with
    # a quant
    for name in ("rmsnorm_fwd_bf16_add1_nb8192_1p_r8", "rmsnorm_fwd_fp32_nb8192_1p_r4", "layernorm_fwd_bf16_nb16384_1p_r8",
                 "rmsnorm_fwd_bf16_add1_nb16384_1p_r8", "rmsnorm_fwd_fp32_nb16384_1p_r4",
                 "rmsnorm_fwd_bf16_add1_nb32768_1p_r8", "layernorm_fwd_bf16_add1_nb131072_1p_r8",
                 "layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_r8", "rmsnorm_fwd_bf16_dqfp8_syfp32_nb4096_1p_r8",
                 "layernorm_fwd_bf16_dqint8_syfp32_nb65536_1p_r8", "layernorm_fwd_bf16_nb8192_1p_v8"):
        assert not recipe(parse_name(name)).segment_steps, name


def _flag_holds(field: str, on: tuple, off: tuple):
    """Recipe.`field` is set for each instance named in `on` and clear for each in `off`."""
    for name in on:
        assert getattr(recipe(parse_name(name)), field), name
    for name in off:
        assert not getattr(recipe(parse_name(name)), field), name


def test_staged_ragged_rows_take_their_sums_as_they_stage_where_that_did_not_spill():
    # not LayerNorm with a fused add or of fp16, nor fused adds loading two residual vectors a
    # round (all spilled at 64 registers), nor rows that are not staged or not ragged
    _flag_holds("sums_while_staging",
                on=("rmsnorm_fwd_bf16_nb65536_1p_r8", "layernorm_fwd_bf16_nb65536_1p_r8",
                    "layernorm_fwd_fp32_nb65536_1p_r4", "layernorm_fwd_bf16_dqint8_syfp32_nb524288_1p_r8",
                    "rmsnorm_fwd_bf16_add1_nb65536_1p_r8", "rmsnorm_fwd_fp16_nb32768_1p_r8"),
                off=("layernorm_fwd_bf16_add1_nb65536_1p_r8", "layernorm_fwd_fp16_nb65536_1p_r8",
                     "rmsnorm_fwd_bf16_add1_nb32768_1p_r8", "rmsnorm_fwd_bf16_nb16384_1p_r8",
                     "layernorm_fwd_bf16_nb65536_1p_v8", "rmsnorm_fwd_bf16_nb10240_1p_f8"))


def test_staged_ragged_rows_wait_for_each_steps_copies_where_a_row_spans_one_or_two_blocks():
    # not over clusters of eight (fewer blocks resident), fp16 LayerNorm (spilled), a fused
    # add (not timed so), nor rows that are not staged or not ragged
    _flag_holds("stage_groups",
                on=("rmsnorm_fwd_bf16_nb65536_1p_r8", "rmsnorm_fwd_fp16_nb32768_1p_r8",
                    "rmsnorm_fwd_fp32_nb65536_1p_r4", "layernorm_fwd_fp32_nb65536_1p_r4",
                    "rmsnorm_fwd_bf16_dqfp8_syfp32_nb65536_1p_r8", "layernorm_fwd_bf16_nb32768_1p_r8"),
                off=("rmsnorm_fwd_bf16_nb131072_1p_r8", "layernorm_fwd_fp16_nb65536_1p_r8",
                     "rmsnorm_fwd_bf16_add1_nb65536_1p_r8", "rmsnorm_fwd_bf16_nb16384_1p_r8",
                     "layernorm_fwd_bf16_nb65536_1p_v8", "rmsnorm_fwd_bf16_nb10240_1p_f8"))


def test_ragged_rows_of_one_input_through_an_image_take_64_registers_where_they_fit():
    # four 256-thread blocks an SM (eight of 128, two of 512) against two (four, one) at 128:
    # RMSNorm with or without a quant, LayerNorm of bf16 or fp32 rows with gamma and beta of
    # x's precision and at most 16 registers of x a thread
    for name, blocks in (("rmsnorm_fwd_bf16_nb8192_1p_r8", 4), ("rmsnorm_fwd_fp16_nb4096_1p_r8", 8),
                         ("rmsnorm_fwd_fp32_nb4096_1p_r4", 4), ("rmsnorm_fwd_bf16_nb16384_1p_r8", 2),
                         ("rmsnorm_fwd_bf16_dqfp8_syfp32_nb8192_1p_r8", 4), ("layernorm_fwd_bf16_nb8192_1p_r8", 4),
                         ("layernorm_fwd_bf16_dqint8_syfp32_nb4096_1p_r8", 8), ("layernorm_fwd_fp32_nb4096_1p_r4", 4)):
        r = recipe(parse_name(name))
        assert (r.tile.registers, r.min_blocks_per_sm) == (64, blocks), name
    # where 64 spilled (NVRTC 13.5, sm_80-sm_120): fp16 LayerNorm, LayerNorm with fp32 or
    # smooth columns, fp32 rows of eight vectors -- 80 (three 256-thread blocks an SM), or
    # the tile's budget in 512-thread blocks, where 80 gains no block
    for name, regs in (("layernorm_fwd_fp16_nb8192_1p_r8", 80), ("layernorm_fwd_bf16_wfp32_nb4096_1p_r8", 80),
                       ("layernorm_fwd_bf16_smfp32_dqint8_syfp32_nb8192_1p_r8", 80),
                       ("layernorm_fwd_fp32_nb8192_1p_r4", 80), ("rmsnorm_fwd_fp32_nb8192_1p_r4", 80),
                       ("layernorm_fwd_fp16_nb16384_1p_r8", 128)):
        assert recipe(parse_name(name)).tile.registers == regs, name
    # not with an x-bias or a fused add (test_ragged_rms_fused_adds_through_a_one_row_image_take_three_blocks_an_sm)
    for name in ("rmsnorm_fwd_bf16_xb_nb8192_1p_r8", "rmsnorm_fwd_bf16_add1_nb4096_1p_r8",
                 "layernorm_fwd_bf16_add1_nb8192_1p_r8"):
        assert recipe(parse_name(name)).tile.registers == 128, name


def test_every_bucket_table_keys_known_kinds():
    # recipe._listed builds a kind from the operation; a table key outside TABLE_KINDS (a typo)
    # would match no instance
    for name, table in bucket_tables().items():
        for key, kinds in table.items():
            assert set(kinds) <= TABLE_KINDS, (name, key, set(kinds) - TABLE_KINDS)
