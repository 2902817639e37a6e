"""GPU: the dispatcher's contract beyond one instance: input kinds, streams, strides,
errors, batch invariance, 64-bit offsets."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import normgen
from normgen import dispatch, reference
from normgen.codegen import GENERATED
from normgen.recipe import recipe
from normgen.types import DType, Entry

from .gpu import default_registry  # noqa: F401 (autouse: each test from the shipped folder)
from .gpu import (
    cuda_torch,
    Case, assert_bits_equal, assert_close, assert_codes, assert_scales, call_args, case_seed, expected,
    poisoned_allocations, requires_gpu, semantics, shift_columns,
)

pytestmark = requires_gpu


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_in_torch_out_on_torch_stream(dtype, seed):
    torch = cuda_torch()
    import cupy

    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(37, 2 * 1000, device="cuda", dtype=tdt, generator=gen)[:, :1000]
    g = torch.randn(1000, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(1000, device="cuda", dtype=tdt, generator=gen)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y, _, _, mean, rstd = normgen.layernorm(x, g, b, eps=1e-5, return_mean_rstd=True)
    stream.synchronize()
    assert isinstance(y, torch.Tensor) and y.dtype == tdt and y.shape == x.shape
    assert y.device == x.device and mean.shape == (37,) and mean.dtype == torch.float32
    host = [cupy.asnumpy(cupy.from_dlpack(t.contiguous())) for t in (x, g, b)]
    want = reference.layernorm(*host, 1e-5)
    assert_close(cupy.from_dlpack(y), cupy.asarray(want), {"float32": DType.FP32,
                 "float16": DType.FP16, "bfloat16": DType.BF16}[dtype], "torch")
    # torch's own layer_norm agrees to its precision
    ref = torch.nn.functional.layer_norm(x.float(), (1000,), g.float(), b.float(), 1e-5)
    assert torch.allclose(y.float(), ref, atol=5e-2, rtol=1e-2)


def test_cuda_array_interface_input_gives_cupy(seed):
    import cupy

    e = expected(Case(DType.FP16, DType.FP16, 256, 5, "normal", 0, seed))
    (x, g, b), ref_y = e.xgb, cupy.asarray(e.ref.y)

    class Foreign:  # any object exposing __cuda_array_interface__
        def __init__(self, a):
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    y = normgen.layernorm(Foreign(x), Foreign(g), Foreign(b))
    assert isinstance(y, cupy.ndarray)
    assert_close(y, ref_y, DType.FP16, "CAI input")


def test_leading_dims_and_non_collapsible_views(seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    base = rng.standard_normal((4, 9, 2, 300), dtype=cupy.float32).astype(cupy.float16)
    g = rng.standard_normal(300, dtype=cupy.float32).astype(cupy.float16)
    for x in (base, base[:, 2:7, 1, :], base[1:3, :, :, :], base[:, ::2, 0]):
        with poisoned_allocations():
            y = normgen.layernorm(x, g, None)
        assert y.shape == x.shape
        want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, 1e-5)
        assert_close(y, cupy.asarray(want), DType.FP16, f"view {x.shape} {x.strides}")
    with pytest.raises(ValueError, match="two strides"):
        normgen.layernorm(base[:, ::2], g, None)  # (4, 5, 2, 300): three separate strides


def test_row_result_does_not_depend_on_batch(seed):
    import cupy

    for n in (1000, 4096, 8192, 12288, 65536):
        x, g, b = expected(Case(DType.BF16, DType.BF16, n, 1000, "normal", 0, seed)).xgb
        batch = normgen.layernorm(x, g, b)
        for r in (0, 517, 999):
            alone = normgen.layernorm(x[r : r + 1], g, b)
            assert cupy.array_equal(alone[0].view(cupy.uint16), batch[r].view(cupy.uint16)), (n, r)


def test_resident_clusters_stride_over_the_rows(seed):
    """RMSNorm rows over clusters of eight or more launch exactly the clusters the device
    holds (tiles.RESIDENT_MIN_CLUSTER), each taking several rows of a batch: every row
    matches the reference, and a row alone gives the same bits as in the batch."""
    import cupy

    from normgen import runtime

    n, m = 131072, 300
    x, g, _ = expected(Case(DType.BF16, DType.BF16, n, m, "normal", 0, seed)).xgb
    before = set(dispatch._kernels)
    y = normgen.rmsnorm(x, g)
    (key,) = set(dispatch._kernels) - before
    kernel = dispatch._kernels[key]
    assert recipe(kernel.spec).tile.resident and recipe(kernel.spec).tile.cluster >= 8
    assert kernel.max_groups == runtime.resident_clusters(kernel.func, recipe(kernel.spec).tile) < m
    want = reference.rmsnorm(cupy.asnumpy(x), cupy.asnumpy(g), 1e-6)
    assert_close(y, cupy.asarray(want), DType.BF16, f"N={n} rows={m}")
    for r in (0, kernel.max_groups, m - 1):  # the first and a second row of cluster 0, the last
        alone = normgen.rmsnorm(x[r : r + 1], g)
        assert cupy.array_equal(alone[0].view(cupy.uint16), y[r].view(cupy.uint16)), r


@pytest.mark.parametrize("quant", ["int8", "fp8_e4m3"])
def test_streamed_rows_stride_over_the_rows(quant, seed):
    """LayerNorm + dynamic quant's streamed rows (tiles.STREAMED_TILES: one block an SM, or at
    65536 a cluster of two, each taking many rows of a batch, the next one copied into shared
    memory while it works on this one): every row of a batch of strided rows, contiguous ones
    and ragged lengths matches the reference, and a row alone gives the same bits as in the
    batch."""
    import cupy

    # rows of the bucket's length (the whole-row kernel) and shorter ones (32776: the second
    # block of a cluster holds 8 columns); "offset" rows keep their shift (their mean lies far
    # from zero: the rolled passes); fp16 rows stream at 65536 only
    bf16, fp16 = DType.BF16, DType.FP16
    for x_type, n, pad, kind in ((bf16, 32768, 0, "normal"), (bf16, 32768, 8, "offset"), (bf16, 30000, 8, "offset"),
                                 (bf16, 65536, 0, "normal"), (bf16, 65536, 8, "offset"), (bf16, 50000, 0, "offset"),
                                 (bf16, 32776, 8, "normal"), (fp16, 65536, 8, "offset"), (fp16, 40000, 0, "normal")):
        m = 300
        x, g, b = expected(Case(x_type, x_type, n, m, kind, pad, seed)).xgb
        dispatch._kernels.clear()
        out = normgen.layernorm(x, g, b, quant=quant)
        (kernel,) = dispatch._kernels.values()
        assert recipe(kernel.spec).tile.stream_bytes and kernel.max_groups < m, kernel.spec.name
        # one wave of as many blocks as the device holds at once (one an SM), each taking many rows
        sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
        assert sms // 2 < kernel.max_groups * kernel.cluster <= sms, (kernel.spec.name, kernel.max_groups, sms)
        host = [cupy.asnumpy(v) for v in (x, g, b)]
        want = reference.layernorm(*host, 1e-5, quant=quant)
        y64 = reference.normalized("layernorm", *host, 1e-5)
        what = f"{x_type.value} N={n} rows={m} pad={pad}"
        assert_scales(out.scale, want.scale, what)
        assert_codes(out.y, y64 / cupy.asnumpy(out.scale).astype(np.float64)[:, None],
                     DType.INT8 if quant == "int8" else DType.FP8, what)
        for r in (0, kernel.max_groups, m - 1):  # the first and a second row of block (cluster) 0, the last
            alone = normgen.layernorm(x[r : r + 1], g, b, quant=quant)
            assert cupy.array_equal(alone.y[0].view(cupy.uint8), out.y[r].view(cupy.uint8)), (what, r)
            assert cupy.array_equal(alone.scale[0], out.scale[r]), (what, r)


@pytest.mark.parametrize("norm, n, quant", [("layernorm", 1024, "int8"), ("rmsnorm", 16384, "fp8_e4m3")])
def test_quantized_register_rows_stride_over_the_rows(norm, n, quant, seed):
    """Register rows with a quant launch tiles.QUANT_WAVES waves (Recipe.waves), fewer than
    other register rows, so that a batch of as many rows as the launch's blocks hold gives each
    block (each row slot of a block) several rows: every row matches the reference, and a row
    alone gives the same bits as in the batch."""
    import cupy

    from normgen import tiles

    probe = expected(Case(DType.BF16, DType.BF16, n, 1, "normal", 0, seed)).xgb
    dispatch._kernels.clear()
    call = normgen.layernorm if norm == "layernorm" else normgen.rmsnorm
    columns = probe[1:] if norm == "layernorm" else probe[1:2]
    call(probe[0], *columns, quant=quant)
    (kernel,) = dispatch._kernels.values()
    r = recipe(kernel.spec)
    assert r.waves == tiles.QUANT_WAVES and not r.tile.shared_bytes, kernel.spec.name
    slots = kernel.max_groups * kernel.rows_per_block
    m = 2 * slots + 7  # every slot takes two or three rows
    x, g, b = expected(Case(DType.BF16, DType.BF16, n, m, "normal", 0, seed)).xgb
    columns = (g, b) if norm == "layernorm" else (g,)
    out = call(x, *columns, quant=quant)
    host = [cupy.asnumpy(v) for v in (x, *columns)]
    eps = 1e-5 if norm == "layernorm" else 1e-6
    want = getattr(reference, norm)(*host, eps, quant=quant)
    y64 = reference.normalized(norm, *host, *([] if norm == "layernorm" else [None]), eps)
    what = f"{norm} N={n} rows={m} slots={slots}"
    assert_scales(out.scale, want.scale, what)
    assert_codes(out.y, y64 / cupy.asnumpy(out.scale).astype(np.float64)[:, None],
                 DType.INT8 if quant == "int8" else DType.FP8, what)
    for row in (0, slots, 2 * slots, m - 1):  # a slot's first, second and third rows, the last
        alone = call(x[row : row + 1], *columns, quant=quant)
        assert cupy.array_equal(alone.y[0].view(cupy.uint8), out.y[row].view(cupy.uint8)), (what, row)
        assert cupy.array_equal(alone.scale[0], out.scale[row]), (what, row)


@pytest.mark.parametrize("norm, n", [("layernorm", 8192), ("rmsnorm", 16384), ("rmsnorm", 9001)])
def test_register_rows_launch_the_waves_of_their_device_and_stride_over_the_rows(norm, n, seed):
    """Unfused 16-bit register rows of tiles.FAST_MEMORY_BUCKETS, and framed rows of
    FAST_MEMORY_FRAMED_BUCKETS (RMSNorm 9001), launch one wave where DRAM is
    fast for the SMs (an H200), tiles.WAVES elsewhere (devices.launch_waves): the kernel's grid
    is that many times the blocks an SM holds on every SM (framed rows': rounded down to a
    multiple of their vector's width, runtime.load), and with a batch of twice as many
    rows as the grid's row slots and more, each slot takes two or three rows: every row matches
    the reference, and a row alone gives the same bits as in the batch."""
    import cupy
    from cupy.cuda import driver

    from normgen import devices, tiles

    call = normgen.layernorm if norm == "layernorm" else normgen.rmsnorm
    probe = expected(Case(DType.BF16, DType.BF16, n, 1, "normal", 0, seed)).xgb
    columns = probe[1:] if norm == "layernorm" else probe[1:2]
    dispatch._kernels.clear()
    call(probe[0], *columns)
    (kernel,) = dispatch._kernels.values()
    r = recipe(kernel.spec)
    assert (r.waves, r.fast_memory_waves) == (tiles.WAVES, tiles.FAST_MEMORY_WAVES), kernel.spec.name
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.func, kernel.block, kernel.smem)
    waves = devices.launch_waves(r, props)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    measured = {"H200": tiles.FAST_MEMORY_WAVES, "H100": tiles.WAVES}  # the GPUs the rule was measured on
    assert waves == next((w for gpu, w in measured.items() if gpu in name), waves), (name, waves)
    groups = per_sm * props["multiProcessorCount"] * waves
    if kernel.spec.framed:  # a multiple of vec blocks, whose rows of a dense batch share one skew
        groups -= groups % kernel.spec.vec
    assert kernel.max_groups == groups, (kernel.max_groups, per_sm, waves)
    slots = kernel.max_groups * kernel.rows_per_block
    m = 2 * slots + 7  # every slot takes two or three rows
    x, g, b = expected(Case(DType.BF16, DType.BF16, n, m, "normal", 0, seed)).xgb
    columns = (g, b) if norm == "layernorm" else (g,)
    y = call(x, *columns)
    host_columns = [cupy.asnumpy(v) for v in columns]
    for row in (0, slots, 2 * slots, m - 1):  # a slot's first, second and third rows, the last
        what = f"{norm} N={n} rows={m} slots={slots} waves={waves}, row {row}"
        want = getattr(reference, norm)(cupy.asnumpy(x[row : row + 1]), *host_columns,
                                        1e-5 if norm == "layernorm" else 1e-6)
        assert_close(y[row : row + 1], cupy.asarray(want), DType.BF16, what)
        assert_bits_equal(call(x[row : row + 1], *columns), y[row : row + 1], what)


def test_rows_of_the_bucket_length_run_the_whole_row_kernel(seed):
    """A staged one-pass instance has a kernel built for rows of exactly its bucket's length
    and one for any shorter row; each serves its own N, and both match the reference."""
    import cupy

    for n in (65536, 65000):
        x, g, b = expected(Case(DType.BF16, DType.BF16, n, 16, "offset", 0, seed)).xgb
        before = set(dispatch._kernels)
        y = normgen.layernorm(x, g, b)
        (key,) = set(dispatch._kernels) - before
        kernel = dispatch._kernels[key]
        assert kernel.spec.bucket == 65536 and recipe(kernel.spec).tile.stage_bytes
        assert kernel.symbol == (recipe(kernel.spec).symbol(Entry.WHOLE) if n == 65536 else kernel.spec.symbol), n
        want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), cupy.asnumpy(b), 1e-5)
        assert_close(y, cupy.asarray(want), DType.BF16, f"N={n}")


def test_repeated_calls_reuse_the_checked_plan(seed):
    """A call is checked in full once per signature; a repeat on other arrays of the same
    signature reuses the plan and reads its own inputs; another alignment, dtype or shape is
    checked afresh (a plan never serves, nor hides the error of, a call it was not made for)."""
    import cupy

    rng = cupy.random.default_rng(seed)
    g = (1 + rng.standard_normal(1024, dtype=cupy.float32)).astype(cupy.float16)

    def check(x):
        want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, 1e-5)
        assert_close(normgen.layernorm(x, g), cupy.asarray(want), DType.FP16, str(x.shape))

    dispatch._plans.clear()
    buf = rng.standard_normal(2 * 8 * 1024 + 8, dtype=cupy.float32).astype(cupy.float16)
    check(buf[: 8 * 1024].reshape(8, 1024))
    check(buf[8 * 1024 : 16 * 1024].reshape(8, 1024))  # other data, same signature
    assert len(dispatch._plans) == 1
    check(buf[1 : 8 * 1024 + 1].reshape(8, 1024))  # 2-byte aligned: a v1 instance, its own plan
    check(buf[: 4 * 1024].reshape(4, 1024))  # fewer rows
    assert len(dispatch._plans) == 3
    with pytest.raises(TypeError, match="gamma must have dtype"):
        normgen.layernorm(buf[: 8 * 1024].reshape(8, 1024), g.astype(cupy.float64))
    with pytest.raises(ValueError, match="eps must be a positive finite float32"):
        normgen.layernorm(buf[: 8 * 1024].reshape(8, 1024), g, eps=-1.0)


def test_plans_launch_on_each_calls_current_stream(seed):
    """A plan made on one stream launches on the current stream of each later call: here,
    a side stream captured into a CUDA graph (a launch on any other stream would break the
    capture, or leave the replayed output unwritten)."""
    torch = cuda_torch()

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    g = torch.randn(4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    want = normgen.layernorm(x, g)  # the plan, made on the default stream
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        y = normgen.layernorm(x, g)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, want)


def test_beta_none_and_fp32_weights(seed):
    import cupy

    x, g, b = expected(Case(DType.BF16, DType.FP32, 2048, 16, "offset", 8, seed)).xgb
    y = normgen.layernorm(x, g)
    want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, 1e-5)
    assert_close(y, cupy.asarray(want), DType.BF16, "beta None, fp32 gamma")


@pytest.mark.parametrize("x_type", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("given", ["gamma", "beta", "neither"])
def test_quant_rows_of_32768_up_without_gamma_or_beta(given, x_type, seed):
    """LayerNorm + dynamic quant at 32768 and 65536 with gamma or beta left out: no scale, no
    shift. Streamed rows (bf16 at both, fp16 at 65536) read gamma and beta from copies in
    shared memory, ones and zeros for absent ones; staged rows (fp16 at 32768) load them per
    vector, or stand ones and zeros in. Whole rows and ragged ones."""
    import cupy

    for n in (32768, 30000, 65536, 40000):
        x, g, b = expected(Case(x_type, x_type, n, 24, "offset", 0, seed)).xgb
        g, b = (g if given == "gamma" else None), (b if given == "beta" else None)
        out = normgen.layernorm(x, g, b, quant="int8")
        host = [None if v is None else cupy.asnumpy(v) for v in (x, g, b)]
        want = reference.layernorm(*host, 1e-5, quant="int8")
        y64 = reference.normalized("layernorm", host[0], host[1], host[2], 1e-5)
        what = f"N={n}, {given} given"
        assert_scales(out.scale, want.scale, what)
        assert_codes(out.y, y64 / cupy.asnumpy(out.scale).astype(np.float64)[:, None], DType.INT8, what)


def test_two_pass_row_whose_first_chunk_is_far_is_summed_again():
    """The two-pass pipeline's shift is its first chunk's mean. A row whose first chunk lies
    far from the rest (here 1000 there, 0.3 after: c^2 / var = N / chunk - 1) is summed
    again around its mean: around the far shift alone every term's square rounds alike and
    s2 / n - c^2 cancels, so the mean and rstd would lose digits (docs/perf-notes.md:
    "Pipeline: two-pass rows")."""
    import cupy
    from normgen.spec import parse_name

    chunk = len(shift_columns(parse_name("layernorm_fwd_bf16_2p_v8"), 1 << 20))
    for n in (1 << 20, 1 << 23):  # both two-pass
        x = cupy.full((1, n), 0.3, dtype=cupy.float32)
        x[0, :chunk] = 1000.0
        x = x.astype(DType.BF16.numpy)
        out = normgen.layernorm(x, None, None, return_mean_rstd=True)
        x64 = cupy.asnumpy(x).astype(np.float64)
        mean, var = x64.mean(axis=1), x64.var(axis=1)
        np.testing.assert_allclose(cupy.asnumpy(out.mean), mean, rtol=1e-7, err_msg=f"N={n}")
        np.testing.assert_allclose(cupy.asnumpy(out.rstd), 1 / np.sqrt(var + 1e-5), rtol=2e-6, err_msg=f"N={n}")


def test_misaligned_pointer_uses_a_narrower_instance(seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    buf = rng.standard_normal(3 * 1025, dtype=cupy.float32).astype(cupy.float16)
    x = buf[1:3073].reshape(3, 1024)  # 2-byte aligned: only v1 fits
    g = cupy.ones(1024, dtype=cupy.float16)
    assert dispatch._vec_align(dispatch.arrays.view(x, "x"), 1024, ()) == 1
    want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, 1e-5)
    assert_close(normgen.layernorm(x, g), cupy.asarray(want), DType.FP16, "misaligned")


def test_constant_rows_give_zero_not_nan():
    import cupy

    x = cupy.full((4, 4096), 1000.0, dtype=cupy.float32)
    y, _, _, mean, rstd = normgen.layernorm(x, cupy.ones(4096, cupy.float32), None, return_mean_rstd=True)
    assert bool((y == 0).all()) and bool((mean == 1000).all())
    assert np.allclose(cupy.asnumpy(rstd), 1 / np.sqrt(1e-5), rtol=1e-6)


def test_more_than_2_to_the_31_elements(seed):
    import cupy

    n, m = 4096, (1 << 31) // 4096 + 3  # 2**31 + 12288 elements: offsets need 64 bits
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((m, n), dtype=cupy.float32).astype(cupy.float16)
    g = (1 + rng.standard_normal(n, dtype=cupy.float32)).astype(cupy.float16)
    y = normgen.layernorm(x, g, None)
    rows = [0, m // 2, m - 2, m - 1]
    want = reference.layernorm(cupy.asnumpy(x[rows]), cupy.asnumpy(g), None, 1e-5)
    assert_close(y[rows], cupy.asarray(want), DType.FP16, ">2**31 elements")
    del x, y
    cupy.get_default_memory_pool().free_all_blocks()


def test_zero_rows_return_empty_outputs_without_launch():
    import cupy

    x = cupy.empty((0, 3, 512), dtype=cupy.float16)
    dispatch._kernels.clear()
    y, _, _, mean, rstd = normgen.layernorm(x, cupy.ones(512, cupy.float16), None, return_mean_rstd=True)
    assert y.shape == (0, 3, 512) and mean.shape == rstd.shape == (0, 3)
    assert not dispatch._kernels, "no kernel should be resolved for M = 0"


# ---- bad input ------------------------------------------------------------------------------
def _args():
    import cupy

    return cupy.ones((4, 64), cupy.float16), cupy.ones(64, cupy.float16), cupy.zeros(64, cupy.float16)


@pytest.mark.parametrize("mutate, error, words", [
    (lambda x, g, b: (x.astype("float64"), g, b), TypeError, "x must have dtype"),
    (lambda x, g, b: (x.astype("int32"), g, b), TypeError, "x must have dtype"),
    (lambda x, g, b: (x, g[:32], b), ValueError, "gamma must have shape (64,)"),
    (lambda x, g, b: (x, g, b[:32]), ValueError, "beta must have shape (64,)"),
    (lambda x, g, b: (x, g.astype("float64"), b), TypeError, "gamma must have dtype"),
    (lambda x, g, b: (x, g, b.astype("float32")), TypeError, "beta must have dtype"),
    (lambda x, g, b: (x.T, g[:4], b[:4]), ValueError, "last dimension must be contiguous"),
    (lambda x, g, b: (x[:, :0], g[:0], b[:0]), ValueError, "between 1 and"),
    (lambda x, g, b: (x.get(), g, b), TypeError, "x must be a CUDA array"),
    (lambda x, g, b: (x, g.get(), b), TypeError, "gamma must be a CUDA array"),
])
def test_bad_input_is_a_clear_error(mutate, error, words):
    x, g, b = mutate(*_args())
    with pytest.raises(error) as info:
        normgen.layernorm(x, g, b)
    assert words in str(info.value)


def test_bad_eps_and_strided_gamma():
    import cupy

    x, g, b = _args()
    for eps in (0.0, -1e-5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps must be a positive"):
            normgen.layernorm(x, g, b, eps=eps)
    wide = cupy.ones(128, cupy.float16)
    with pytest.raises(ValueError, match="gamma must be contiguous"):
        normgen.layernorm(x, wide[::2], b)


def test_torch_cpu_tensor_is_refused():
    torch = cuda_torch()
    with pytest.raises(TypeError, match=r"x.cuda\(\)"):
        normgen.layernorm(torch.ones(2, 8), torch.ones(8, device="cuda"), None)


def test_strict_missing_instance_names_the_command_that_adds_it(tmp_path):
    import cupy

    from click.testing import CliRunner
    from normgen.cli import main

    assert CliRunner().invoke(main, ["--prec", "fp32", "--out", str(tmp_path)]).exit_code == 0
    fp32 = {p.name for p in tmp_path.glob("*.cu")}
    dispatch.use_generated(tmp_path)
    x = cupy.ones((2, 100), cupy.float16)
    normgen.set_strict(True)
    try:
        with pytest.raises(dispatch.MissingInstanceError) as info:
            normgen.layernorm(x, cupy.ones(100, cupy.float16), None)
    finally:
        normgen.set_strict(False)
    msg = str(info.value)
    assert "python generate.py --add --filter 'layernorm_fwd_fp16_nb128_1p_v4'" in msg
    assert f"--out {tmp_path}" in msg
    # the command it names adds an instance that serves the call, and removes nothing
    args = [a.strip("'") for a in msg.split("python generate.py ")[1].split()]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert fp32 < {p.name for p in tmp_path.glob("*.cu")}
    dispatch.use_generated(tmp_path)
    assert normgen.layernorm(x, cupy.ones(100, cupy.float16), None).shape == (2, 100)


# ---- the fused calls ------------------------------------------------------------------------
def test_fused_outputs_kinds_and_named_tuple(seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((6, 2 * 1024), dtype=cupy.float32).astype(cupy.float16)[:, :1024]
    r = rng.standard_normal((6, 1024), dtype=cupy.float32).astype(cupy.float16)
    g = cupy.ones(1024, cupy.float16)
    hx, hg, hr = cupy.asnumpy(x), cupy.asnumpy(g), cupy.asnumpy(r)
    with warnings.catch_warnings():  # fadd=2 is outside the default set: generated on demand
        warnings.simplefilter("ignore", normgen.NormgenWarning)
        y = normgen.layernorm(x, g, residual=r, store_residual=False)
    want = reference.layernorm(hx, hg, None, residual=hr, store_residual=False)
    assert_close(y, cupy.asarray(want), DType.FP16, "fadd=2")
    out = normgen.layernorm(x, g, residual=r, quant="fp8_e4m3")
    assert isinstance(out, normgen.NormOutput) and out.mean is None and out.rstd is None
    assert out.y.dtype == cupy.uint8 and out.y.shape == x.shape  # e4m3 bits, for CuPy users
    assert out.scale.dtype == cupy.float32 and out.scale.shape == (6,)
    assert out.residual.dtype == cupy.float16
    want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, residual=cupy.asnumpy(r),
                               quant="fp8_e4m3")
    assert_bits_equal(out.residual, want.residual, "residual")
    with warnings.catch_warnings():  # bf16 scales are outside the default set: generated on demand
        warnings.simplefilter("ignore", normgen.NormgenWarning)
        out = normgen.layernorm(x, g, quant="int8", scale_dtype="bfloat16")
    want = reference.layernorm(hx, hg, None, quant="int8", scale_dtype="bf16")
    assert_scales(out.scale, want.scale, "bf16 scales")
    y64 = reference.normalized("layernorm", hx, hg, None, 1e-5)
    assert_codes(out.y, y64 / cupy.asnumpy(out.scale).astype(np.float64)[:, None], DType.INT8, "bf16 scales")


def test_fused_torch_types(seed):
    torch = cuda_torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(5, 4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    r = torch.randn(5, 4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    g = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    out = normgen.layernorm(x, g, residual=r, quant="fp8_e4m3", smooth_scale=torch.ones(4096, device="cuda"),
                            scale_dtype=torch.float32)
    assert out.y.dtype == torch.float8_e4m3fn and out.scale.dtype == torch.float32
    assert torch.equal(out.residual, x + r)  # one rounding of the float32 sum, as torch does
    deq = out.y.float() * out.scale.float()[:, None]
    ref = torch.nn.functional.layer_norm((x + r).float(), (4096,), g.float(), None, 1e-5)
    assert torch.allclose(deq, ref, rtol=0.07, atol=0.02 * float(out.scale.max()))
    with warnings.catch_warnings():  # static LayerNorm quant is outside the default set: generated on demand
        warnings.simplefilter("ignore", normgen.NormgenWarning)
        q = normgen.layernorm(x, g, quant="int8", quant_scale=torch.tensor([0.05], device="cuda"))
    ref = torch.nn.functional.layer_norm(x.float(), (4096,), g.float(), None, 1e-5)
    assert q.dtype == torch.int8 and q.shape == x.shape  # codes within one of torch's float32 sequence
    assert float((q.float() - torch.clamp(torch.round(ref / 0.05), -128, 127)).abs().max()) <= 1


def _fused_args():
    import cupy

    return cupy.ones((4, 64), cupy.float16), cupy.ones(64, cupy.float16)


@pytest.mark.parametrize("kwargs, error, words", [
    (lambda c: dict(residual=c.ones((4, 32), c.float16)), ValueError, "residual must have x's shape"),
    (lambda c: dict(residual=c.ones((4, 64), c.float32)), TypeError, "residual must have x's dtype"),
    (lambda c: dict(x_bias=c.ones(32, c.float16)), ValueError, "x_bias must have shape (64,)"),
    (lambda c: dict(x_bias=c.ones(64, c.float32)), TypeError, "x_bias must have dtype"),
    (lambda c: dict(quant="int4"), ValueError, "quant must be None, 'int8' or 'fp8_e4m3'"),
    (lambda c: dict(smooth_scale=c.ones(64, c.float32)), ValueError, "smooth_scale applies to quantized"),
    (lambda c: dict(quant_scale=c.ones(1, c.float32)), ValueError, "quant_scale applies to quantized"),
    (lambda c: dict(scale_dtype="float16"), ValueError, "scale_dtype applies to quantized"),
    (lambda c: dict(quant="int8", scale_dtype="int8"), ValueError, "scale_dtype must be float32"),
    (lambda c: dict(quant="int8", quant_scale=c.ones(2, c.float32)), ValueError, "quant_scale must be a float32"),
    (lambda c: dict(quant="int8", quant_scale=c.ones(1, c.float16)), ValueError, "quant_scale must be a float32"),
    (lambda c: dict(quant="int8", quant_scale=c.ones(1, c.float32), scale_dtype="fp16"), ValueError, "drop scale_dtype"),
    (lambda c: dict(quant="int8", smooth_scale=c.ones(64, c.float64)), TypeError, "smooth_scale must have dtype"),
])
def test_bad_fused_input_is_a_clear_error(kwargs, error, words):
    import cupy

    x, g = _fused_args()
    with pytest.raises(error) as info:
        normgen.layernorm(x, g, **kwargs(cupy))
    assert words in str(info.value)


def test_strided_residual_and_zero_rows(seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((3, 4, 512), dtype=cupy.float32).astype(DType.BF16.numpy)
    wide = rng.standard_normal((3, 8, 512), dtype=cupy.float32).astype(x.dtype)
    r = wide[:, ::2]  # two strides, grouped like x's rows
    x[1] = 0
    r[1] = 0
    g = cupy.ones(512, x.dtype)
    with poisoned_allocations():
        out = normgen.layernorm(x, g, residual=r, quant="int8")
    want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, residual=cupy.asnumpy(r), quant="int8")
    assert_bits_equal(out.residual, want.residual, "strided residual")
    assert bool((out.y[1] == 0).all()) and bool((out.scale[1] > 0).all()), "zero rows: zero codes, scale > 0"
    assert not bool(cupy.isnan(out.scale.astype(cupy.float32)).any())


# ---- RMSNorm ----------------------------------------------------------------------------------
def test_rmsnorm_torch_matches_reference_and_torch(seed):
    torch = cuda_torch()
    import cupy

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(7, 2 * 4096, device="cuda", dtype=torch.bfloat16, generator=gen)[:, :4096]
    g = torch.randn(4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    y = normgen.rmsnorm(x, g)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == x.shape
    host = [cupy.asnumpy(cupy.from_dlpack(t.contiguous())) for t in (x, g)]
    assert_close(cupy.from_dlpack(y), cupy.asarray(reference.rmsnorm(*host, 1e-6)), DType.BF16, "torch rmsnorm")
    ref = torch.nn.functional.rms_norm(x.float(), (4096,), g.float(), 1e-6)
    assert torch.allclose(y.float(), ref, atol=2e-2, rtol=1e-2)


def test_rmsnorm_gamma_none_offset_and_rstd(seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((5, 1000), dtype=cupy.float32).astype(cupy.float16)
    g = (0.1 * rng.standard_normal(1000, dtype=cupy.float32)).astype(cupy.float16)
    hx, hg = cupy.asnumpy(x), cupy.asnumpy(g)
    assert_close(normgen.rmsnorm(x), cupy.asarray(reference.rmsnorm(hx)), DType.FP16, "gamma None")
    y = normgen.rmsnorm(x, g, weight_offset=1.0, eps=1e-5)
    want = reference.rmsnorm(hx, hg, 1e-5, weight_offset=1.0)
    assert_close(y, cupy.asarray(want), DType.FP16, "weight_offset 1")
    out = normgen.rmsnorm(x, g, return_rstd=True)  # the plain RMSNorm family's _mv instance
    want = reference.rmsnorm(hx, hg, return_rstd=True)
    assert_close(out.y, cupy.asarray(want.y), DType.FP16, "return_rstd y")
    np.testing.assert_allclose(cupy.asnumpy(out.rstd), want.rstd, rtol=1e-5)
    with pytest.raises(ValueError, match="gamma is None"):
        normgen.rmsnorm(x, weight_offset=1.0)
    with pytest.raises(ValueError, match="weight_offset must be a finite"):
        normgen.rmsnorm(x, g, weight_offset=float("nan"))
    with pytest.raises(TypeError, match="gamma must have dtype"):
        normgen.rmsnorm(x, g.astype(cupy.float64))


def test_vllm_and_ck_calls_are_served_by_the_default_set(seed):
    """The README's table: each inference engine call maps to one normgen call that the
    default set serves, with the reference's results."""
    import cupy

    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((9, 4096), dtype=cupy.float32).astype(DType.BF16.numpy)
    r = rng.standard_normal((9, 4096), dtype=cupy.float32).astype(x.dtype)
    g = (1 + 0.5 * rng.standard_normal(4096, dtype=cupy.float32)).astype(x.dtype)
    qs = cupy.asarray([0.02], cupy.float32)
    hx, hr, hg = cupy.asnumpy(x), cupy.asnumpy(r), cupy.asnumpy(g)
    # vLLM fused_add_rms_norm (ck fadd=1): the sum and the normalized sum
    out = normgen.rmsnorm(x, g, residual=r)
    want = reference.rmsnorm(hx, hg, residual=hr)
    assert_bits_equal(out.residual, want.residual, "fused_add_rms_norm residual")
    assert_close(out.y, cupy.asarray(want.y), DType.BF16, "fused_add_rms_norm y")
    # vLLM rms_norm_static_fp8_quant: codes only
    y64 = reference.normalized("rmsnorm", hx, hg, None, 1e-6)
    q = normgen.rmsnorm(x, g, quant="fp8_e4m3", quant_scale=qs)
    assert q.dtype == cupy.uint8 and q.shape == x.shape
    assert_codes(q, y64 / float(cupy.asnumpy(qs)[0]), DType.FP8, "rms_norm_static_fp8_quant")
    # vLLM rms_norm_dynamic_per_token_quant, with the residual (ck fadd=1 + fquant dynamic)
    y64 = reference.normalized("rmsnorm", reference.fused_input(hx, hr), hg, None, 1e-6)
    for quant, out_dt in (("fp8_e4m3", DType.FP8), ("int8", DType.INT8)):
        out = normgen.rmsnorm(x, g, residual=r, quant=quant)
        want = reference.rmsnorm(hx, hg, residual=hr, quant=quant)
        assert_bits_equal(out.residual, want.residual, quant)
        assert_scales(out.scale, want.scale, quant)
        scale = cupy.asnumpy(out.scale).astype(np.float64)[:, None]
        assert_codes(out.y, y64 / scale, out_dt, f"rms_norm_dynamic_per_token_quant {quant}")


def test_rows_summed_again_keep_one_shift():
    """A LayerNorm row whose warp's shift lies more than a deviation from its mean is summed
    again around shift + c (share_stats): the sums and the shift they are recorded with must
    be one float (__fadd_rn: a plain addition may be contracted into an FMA in one copy and
    not the other), or such a row's outputs come out an ulp of its mean off. The data
    replayed: fp16 rows of 1000 + N(0, 1), a far row's mean next to a midpoint between floats
    (docs/perf-notes.md: "Statistics and the shift"). (Since warp_shift averages several
    lanes' vectors, those rows are most likely not far any more; every LayerNorm instance's
    "lead" case still sums rows again.)"""
    from normgen.spec import parse_name

    spec = parse_name("layernorm_fwd_fp16_smfp32_dqint8_syfp32_nb2048_1p_v8")
    n, m = 2040, 256
    case = Case(DType.FP16, DType.FP16, n, m, "offset", 8, case_seed(1395409002, n, m, "offset"), semantics(spec))
    e = expected(case)
    _, args, kw = call_args(spec, e.inputs, case)
    assert dispatch.choose(semantics(spec), n, spec.vec) == spec
    out = normgen.layernorm(*args, **kw)
    assert_scales(out.scale, e.ref.scale, "rows summed again around their mean")


def test_threads_racing_for_a_new_instance_share_one_module(seed):
    """Eight threads make the first call of an instance at once. Each once loaded a module of
    its own and all but one were dropped (and unloaded) while plans still launched their
    functions: CUDA_ERROR_INVALID_HANDLE on later calls (found by the two-GPU test). Loads
    are serialized now, and a plan's launch keeps its kernel's module."""
    import gc
    import threading

    import cupy

    from normgen import runtime

    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((33, 3000), dtype=cupy.float32)  # fp32 at 3000: a bucket of its own here
    g = cupy.ones(3000, cupy.float32)
    dispatch.use_generated(GENERATED)  # no plans or kernels kept from other tests
    runtime._loaded.clear()
    runtime._module.cache_clear()
    start, outs, errors = threading.Barrier(8), [], []

    def call():
        try:
            start.wait(timeout=60)
            with cupy.cuda.Stream(non_blocking=True) as s:
                outs.append(normgen.rmsnorm(x, g))
                s.synchronize()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    gc.collect()  # a dropped module would be unloaded here
    want = cupy.asarray(reference.rmsnorm(cupy.asnumpy(x), cupy.asnumpy(g)))
    for y in outs + [normgen.rmsnorm(x, g) for _ in range(3)]:
        assert_close(y, want, DType.FP32, "racing threads")
    assert len({id(k.module) for k in runtime._loaded.values()}) == len(runtime._loaded)


def test_a_new_threads_first_call_on_torch_tensors(seed):
    """A thread whose only CUDA work before normgen's launch is torch's (an allocation from
    its cache, its current stream) may not have its device's context current yet: the
    driver-API launch then failed with CUDA_ERROR_INVALID_CONTEXT (found by the soak)."""
    import threading

    torch = cuda_torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16, generator=gen)
    g = torch.ones(2048, device="cuda", dtype=torch.bfloat16)
    want = normgen.rmsnorm(x, g)  # the plan and kernel exist: the thread's call is a lookup and a launch
    torch.cuda.synchronize()
    got, errors = [], []

    def call():
        try:
            got.append(normgen.rmsnorm(x, g))
            torch.cuda.synchronize()
        except BaseException as e:
            errors.append(e)

    for _ in range(4):
        t = threading.Thread(target=call)
        t.start()
        t.join()
    assert not errors, errors
    assert len(got) == 4 and all(torch.equal(y, want) for y in got)
