"""The dispatcher's decisions, checked without a GPU."""
import numpy as np
import pytest

import normgen
from normgen import dispatch, tiles
from normgen.arrays import View, view
from normgen.spec import KernelSpec
from normgen.types import DType, FusedAdd, Norm, Pipeline, Quant


def _view(shape, strides, dtype=DType.FP16, ptr=1 << 20):
    return View(None, ptr, shape, strides, dtype, 0, False)


@pytest.mark.parametrize("shape, strides, want", [
    ((8, 64), (64, 1), (8, 8, 0, 64)),
    ((8, 64), (100, 1), (8, 8, 0, 100)),  # a slice of wider rows
    ((2, 3, 64), (192, 64, 1), (6, 6, 0, 64)),  # collapses to one stride
    ((2, 3, 64), (1000, 64, 1), (6, 3, 1000, 64)),  # two strides
    ((2, 1, 3, 64), (1000, 7, 64, 1), (6, 3, 1000, 64)),  # size-1 dims drop out
    ((64,), (1,), (1, 1, 0, 0)),
    ((0, 64), (64, 1), (0, 0, 0, 64)),
])
def test_rows_decomposition(shape, strides, want):
    assert dispatch._rows(_view(shape, strides)) == want


def test_three_strides_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="contiguous copy"):
        dispatch._rows(_view((2, 3, 4, 64), (5000, 1000, 100, 1)))


def _call(x=DType.BF16, w=None, save_stats=False, **fusions) -> KernelSpec:
    """A call's spec; dispatch fills in pipeline, bucket and vector width."""
    return KernelSpec(Norm.LAYERNORM, x, w or x, fusions.pop("out", x), save_stats=save_stats,
                      pipeline=Pipeline.TWO_PASS, **fusions)


def test_candidates_prefer_smallest_bucket_then_widest_vector_then_two_pass():
    c = list(dispatch.candidates(_call(), 1000, 8))
    assert (c[0].pipeline, c[0].bucket, c[0].vec) == (Pipeline.ONE_PASS, 1024, 8)
    assert [s.vec for s in c[:4]] == [8, 4, 2, 1]
    assert c[-1].pipeline == Pipeline.TWO_PASS and c[-1].vec == 1
    mid = list(dispatch.candidates(_call(DType.FP32, save_stats=True), 8193, 4))
    assert (mid[0].pipeline, mid[0].bucket, mid[0].vec) == (Pipeline.ONE_PASS, 16384, 4)
    n = tiles.ONE_PASS_MAX_N[DType.FP32] + 4  # past the one-pass range: two-pass only
    big = list(dispatch.candidates(_call(DType.FP32, save_stats=True), n, 4))
    assert all(s.pipeline == Pipeline.TWO_PASS for s in big)
    assert [s.vec for s in big] == [4, 2, 1]


def test_vector_width_follows_alignment():
    x = _view((4, 1024), (1024, 1), ptr=1 << 20)
    assert dispatch._vec_align(x, 1024, ()) == 8
    assert dispatch._vec_align(x, 1020, ()) == 4
    assert dispatch._vec_align(_view((4, 1024), (1024, 1), ptr=(1 << 20) + 2), 1024, ()) == 1
    fp32_gamma_8b = _view((1024,), (1,), DType.FP32, ptr=(1 << 20) + 8)
    assert dispatch._vec_align(x, 1024, (fp32_gamma_8b,)) == 2
    # at most 16 bytes, so that the width depends on each pointer modulo 16 (the signature)
    assert dispatch._vec_align(_view((4, 1024), (1024, 1), DType.FP32, ptr=1 << 20), 1024, ()) == 4


def test_host_arrays_are_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"x must be a CUDA array .* cupy.asarray\(x\)"):
        view(np.ones((2, 8), np.float32), "x")


@pytest.mark.parametrize("eps", [0, -1.0, float("nan"), float("inf"), 1e-45])
def test_eps_must_be_positive_and_finite(eps):
    with pytest.raises(ValueError, match="eps must be a positive"):
        dispatch._eps(eps)


def test_choice_and_missing_instance_message(tmp_path):
    from normgen.codegen import GENERATED

    try:
        dispatch.use_generated(GENERATED)
        chosen = dispatch.choose(_call(save_stats=True), 1000, 8)
        assert chosen.name == "layernorm_fwd_bf16_nb1024_1p_v8_mv"
        # N % 8 == 4: v4 is not in the default set, the scalar instance serves
        assert dispatch.choose(_call(), 1004, 4).vec == 1
        add_quant = _call(fused_add=FusedAdd.STORE, quant=Quant.DYNAMIC, out=DType.INT8,
                          smooth=DType.FP32, scale=DType.FP32)
        assert dispatch.choose(add_quant, 5000, 8).name == \
            "layernorm_fwd_bf16_add1_smfp32_dqint8_syfp32_nb8192_1p_v8"
        with pytest.raises(dispatch.MissingInstanceError) as info:  # fusions at v1: one filter away
            dispatch.choose(add_quant, 5001, 1)
        assert str(info.value).endswith(
            "python generate.py --filter 'layernorm_fwd_bf16_add1_smfp32_dqint8_syfp32_nb8192_1p_v1'")
        with pytest.raises(dispatch.MissingInstanceError) as info:
            dispatch.use_generated(GENERATED, registry={})
            dispatch.choose(_call(DType.FP16), 100, 4)
        assert str(info.value).endswith("python generate.py --filter 'layernorm_fwd_fp16_nb128_1p_v4'")
        with pytest.raises(dispatch.MissingInstanceError) as info:
            dispatch.use_generated(tmp_path, registry={})
            dispatch.choose(_call(DType.FP16), 100, 4)
        assert str(info.value).endswith(f"--out {tmp_path}")
    finally:
        dispatch.use_generated(GENERATED)


def test_no_weights_take_an_instance_of_either_weight_precision():
    from normgen.codegen import GENERATED

    wfp32 = KernelSpec(Norm.RMSNORM, DType.BF16, DType.FP32, DType.BF16, pipeline=Pipeline.ONE_PASS,
                       bucket=1024, vec=8)
    # (device, n, vec, norm, x, w, out, fused_add, x_bias, quant, smooth, scale, save_stats)
    key = (0, 1000, 8, Norm.RMSNORM, DType.BF16, None, DType.BF16, FusedAdd.NONE, False,
           Quant.NONE, None, None, False)
    try:
        dispatch.use_generated(GENERATED, registry={wfp32.key: wfp32.name})
        assert dispatch.instance_for(key) == wfp32  # gamma None: the fp32-weight instance serves
        with pytest.raises(dispatch.MissingInstanceError, match="rmsnorm_fwd_bf16_nb1024_1p_v8'"):
            dispatch.use_generated(GENERATED, registry={})
            dispatch.instance_for(key)  # the message names the x-precision instance
    finally:
        dispatch.use_generated(GENERATED)


def test_signatures_are_taken_of_torch_and_cupy_arrays_only():
    """Other kinds (here a host array, which the checks then refuse) have no signature, so
    their calls are checked in full every time."""
    from normgen import arrays

    assert arrays.signature(None) is None
    with pytest.raises(arrays.NoSignature):
        arrays.signature(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="x must be a CUDA array"):
        normgen.layernorm(np.zeros((2, 4), np.float32), np.ones(4, np.float32))
