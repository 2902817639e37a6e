"""GPU: the dispatcher's contract beyond one instance: input kinds, streams, strides,
errors, batch invariance, 64-bit offsets."""
from __future__ import annotations

import numpy as np
import pytest

import normgen
from normgen import dispatch, reference
from normgen.codegen import GENERATED
from normgen.types import DType

from .gpu import Case, assert_close, expected, poisoned_allocations, requires_gpu

pytestmark = requires_gpu


@pytest.fixture(autouse=True)
def default_registry():
    dispatch.use_generated(GENERATED)
    yield


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_in_torch_out_on_torch_stream(dtype, seed):
    torch = _torch()
    import cupy

    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(37, 2 * 1000, device="cuda", dtype=tdt, generator=gen)[:, :1000]
    g = torch.randn(1000, device="cuda", dtype=tdt, generator=gen)
    b = torch.randn(1000, device="cuda", dtype=tdt, generator=gen)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y, mean, rstd = normgen.layernorm(x, g, b, eps=1e-5, return_mean_rstd=True)
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

    (x, g, b), ref_y, _, _ = expected(Case(DType.FP16, DType.FP16, 256, 5, "normal", 0, seed))

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
        (x, g, b), _, _, _ = expected(Case(DType.BF16, DType.BF16, n, 1000, "normal", 0, seed))
        batch = normgen.layernorm(x, g, b)
        for r in (0, 517, 999):
            alone = normgen.layernorm(x[r : r + 1], g, b)
            assert cupy.array_equal(alone[0].view(cupy.uint16), batch[r].view(cupy.uint16)), (n, r)


def test_beta_none_and_fp32_weights(seed):
    import cupy

    (x, g, b), _, _, _ = expected(Case(DType.BF16, DType.FP32, 2048, 16, "offset", 8, seed))
    y = normgen.layernorm(x, g)
    want = reference.layernorm(cupy.asnumpy(x), cupy.asnumpy(g), None, 1e-5)
    assert_close(y, cupy.asarray(want), DType.BF16, "beta None, fp32 gamma")


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
    y, mean, rstd = normgen.layernorm(x, cupy.ones(4096, cupy.float32), None, return_mean_rstd=True)
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
    y, mean, rstd = normgen.layernorm(x, cupy.ones(512, cupy.float16), None, return_mean_rstd=True)
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
    torch = _torch()
    with pytest.raises(TypeError, match=r"x.cuda\(\)"):
        normgen.layernorm(torch.ones(2, 8), torch.ones(8, device="cuda"), None)


def test_missing_instance_names_the_command(tmp_path):
    import cupy

    from click.testing import CliRunner
    from normgen.cli import main

    assert CliRunner().invoke(main, ["--prec", "fp32", "--out", str(tmp_path)]).exit_code == 0
    dispatch.use_generated(tmp_path)
    x = cupy.ones((2, 100), cupy.float16)
    with pytest.raises(dispatch.MissingInstanceError) as info:
        normgen.layernorm(x, cupy.ones(100, cupy.float16), None)
    msg = str(info.value)
    assert "python generate.py --filter 'layernorm_fwd_fp16_nb128_1p_v4'" in msg
    assert f"--out {tmp_path}" in msg
    # and the command it names does produce an instance that serves the call
    cmd = msg.split("python generate.py ")[1].split()
    args = [a.strip("'") for a in cmd]
    assert CliRunner().invoke(main, args[:2] + ["--out", str(tmp_path)]).exit_code == 0
    dispatch.use_generated(tmp_path)
    assert normgen.layernorm(x, cupy.ones(100, cupy.float16), None).shape == (2, 100)
