"""The dispatcher's decisions, checked without a GPU."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import normgen
from normgen import codegen, devices, dispatch, ondemand, tiles
from normgen.matrix import select
from normgen.recipe import recipe
from normgen.paths import GENERATED
from normgen.arrays import View, view
from normgen.spec import KernelSpec
from normgen.types import DType, FusedAdd, Norm, Pipeline, Quant


ROOT = Path(__file__).resolve().parent.parent
H100 = devices.KNOWN[90]


@pytest.fixture
def strict():
    ondemand.set_strict(True)
    yield
    ondemand.set_strict(False)


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
    assert (mid[0].pipeline, mid[0].bucket, mid[0].vec) == (Pipeline.ONE_PASS, 10240, 4)  # fitted
    n = tiles.ONE_PASS_MAX_N[DType.FP32] + 4  # past the one-pass range: two-pass only
    big = list(dispatch.candidates(_call(DType.FP32, save_stats=True), n, 4))
    assert all(s.pipeline == Pipeline.TWO_PASS for s in big)
    assert [s.vec for s in big] == [4, 2, 1]


def test_fitted_buckets_serve_aligned_rows_up_to_their_length():
    """Rows of whole 16-byte vectors up to a fitted bucket's length take it, longer ones the
    power-of-two bucket it is cut from; other rows framed rows of the smallest bucket that
    holds them (a fitted one too) where its frame holds them too and framed rows serve the
    bucket (tiles.FRAMED_BUCKETS), else that bucket's ragged
    rows (a fitted bucket's: its power of two's)."""
    for n, vec_align, want in ((4104, 8, "nb5120_1p_v8"), (5120, 8, "nb5120_1p_v8"), (5128, 8, "nb8192_1p_v8"),
                               (5003, 1, "nb8192_1p_r8"), (5004, 4, "nb8192_1p_r8"), (5115, 1, "nb8192_1p_r8"),
                               (9001, 1, "nb10240_1p_f8"),
                               (10000, 8, "nb10240_1p_v8")):
        assert dispatch.choose(_call(), n, vec_align).name == f"layernorm_fwd_bf16_{want}", n


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
    try:
        dispatch.use_generated(GENERATED)
        chosen = dispatch.choose(_call(save_stats=True), 1000, 8)
        assert chosen.name == "layernorm_fwd_bf16_nb1024_1p_v8_mv"
        # rows not of whole 16-byte vectors (N % 8 == 4, odd N): framed rows where they serve
        # the bucket (recipe.framed_serves: unfused LayerNorm's the 10240 bucket) and its frame
        # holds the row (in registers); else one element an access or ragged rows
        # (recipe.ragged_first); staged rows ragged
        assert dispatch.choose(_call(), 1004, 4).name == "layernorm_fwd_bf16_nb1024_1p_v1"
        assert dispatch.choose(_call(), 9001, 1).name == "layernorm_fwd_bf16_nb10240_1p_f8"
        assert dispatch.choose(_call(), 5003, 1).name == "layernorm_fwd_bf16_nb8192_1p_r8"
        assert dispatch.choose(_call(), 4093, 1).name == "layernorm_fwd_bf16_nb4096_1p_r8"
        assert dispatch.choose(_call(), 1020, 1).name == "layernorm_fwd_bf16_nb1024_1p_v1"
        assert dispatch.choose(_call(), 50257, 1).name == "layernorm_fwd_bf16_nb65536_1p_r8"
        # ... unless gamma and beta are not 16-byte aligned: the scalar two-pass instance
        assert dispatch.choose(_call(), 50257, 1, col_align=2).name == "layernorm_fwd_bf16_2p_v1"
        add_quant = _call(fused_add=FusedAdd.STORE, quant=Quant.DYNAMIC, out=DType.INT8,
                          smooth=DType.FP32, scale=DType.FP32)
        assert dispatch.choose(add_quant, 5000, 8).name == \
            "layernorm_fwd_bf16_add1_smfp32_dqint8_syfp32_nb5120_1p_v8"  # a fitted bucket
        # fusions at odd N: framed rows (LayerNorm + quant on the bucket's plain tile, its
        # aligned rows' being staged); past the one-pass range, the two-pass scalar fallback
        assert dispatch.choose(add_quant, 5001, 1).name == "layernorm_fwd_bf16_add1_smfp32_dqint8_syfp32_nb5120_1p_f8"
        assert dispatch.choose(add_quant, 20001, 1).name == "layernorm_fwd_bf16_add1_smfp32_dqint8_syfp32_nb32768_1p_r8"
        assert dispatch.choose(add_quant, 524289, 1).name == "layernorm_fwd_bf16_add1_smfp32_dqint8_syfp32_2p_v1"
        with pytest.raises(dispatch.MissingInstanceError) as info:
            dispatch.use_generated(GENERATED, registry={})
            dispatch.choose(_call(DType.FP16), 100, 4)
        assert str(info.value).endswith("python generate.py --add --filter 'layernorm_fwd_fp16_nb128_1p_v4'")
        with pytest.raises(dispatch.MissingInstanceError) as info:
            dispatch.use_generated(tmp_path, registry={})
            dispatch.choose(_call(DType.FP16), 100, 4)
        assert str(info.value).endswith(f"--out {tmp_path}")
    finally:
        dispatch.use_generated(GENERATED)


# (device, n, vec, col_align, norm, x, w, out, fused_add, x_bias, quant, smooth, scale, save_stats)
NO_WEIGHTS = dispatch.CallKey(0, 1000, 8, 8, Norm.RMSNORM, DType.BF16, None, DType.BF16, FusedAdd.NONE, False,
                              Quant.NONE, None, None, False)


def test_no_weights_take_an_instance_of_either_weight_precision(strict):
    wfp32 = KernelSpec(Norm.RMSNORM, DType.BF16, DType.FP32, DType.BF16, pipeline=Pipeline.ONE_PASS,
                       bucket=1024, vec=8)
    try:
        dispatch.use_generated(GENERATED, registry={wfp32.key: wfp32.name})
        # gamma None: the fp32-weight instance serves
        assert dispatch.instance_for(NO_WEIGHTS, H100) == (wfp32, GENERATED)
        with pytest.raises(dispatch.MissingInstanceError, match="rmsnorm_fwd_bf16_nb1024_1p_v8'"):
            dispatch.use_generated(GENERATED, registry={})
            dispatch.instance_for(NO_WEIGHTS, H100)  # the message names the x-precision instance
    finally:
        dispatch.use_generated(GENERATED)


def test_a_call_no_instance_serves_is_generated_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(tmp_path))
    try:
        dispatch.use_generated(GENERATED, registry={})
        with pytest.warns(normgen.NormgenWarning, match=r"generated rmsnorm_fwd_bf16_nb1024_1p_v8 into .*"
                          r"python generate.py --add --filter 'rmsnorm_fwd_bf16_nb1024_1p_v8'"):
            spec, folder = dispatch.instance_for(NO_WEIGHTS, H100)
        assert spec.name == "rmsnorm_fwd_bf16_nb1024_1p_v8" and folder == tmp_path / "generated"
        # the folder is what generate.py --add --out would write: header, instance, registry
        assert codegen.differences(folder, codegen.outputs([spec])) == []
        assert codegen.registered(folder) == [spec]
        # a second instance is added beside the first; the first is not generated again
        other = NO_WEIGHTS._replace(n=5003, vec_align=1)
        with pytest.warns(normgen.NormgenWarning, match="rmsnorm_fwd_bf16_nb5120_1p_f8"):
            dispatch.instance_for(other, H100)
        assert [s.name for s in codegen.registered(folder)] == ["rmsnorm_fwd_bf16_nb1024_1p_v8",
                                                               "rmsnorm_fwd_bf16_nb5120_1p_f8"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert dispatch.instance_for(NO_WEIGHTS, H100) == (spec, folder)
    finally:
        dispatch.use_generated(GENERATED)


def test_generation_on_demand_is_safe_across_processes(tmp_path):
    """Four processes generate into one cache at once; each instance ends up registered."""
    script = (
        "import sys, warnings; warnings.simplefilter('ignore')\n"
        "from normgen import dispatch\n"
        "from normgen.devices import KNOWN\n"
        "from normgen.types import *\n"
        "dispatch.use_generated(dispatch.GENERATED_DIR, registry={})\n"
        "for n in (int(sys.argv[1]), 3000, 700):\n"
        "    dispatch.instance_for(dispatch.CallKey(0, n, 1, 8, Norm.RMSNORM, DType.BF16, DType.BF16, DType.BF16,"
        " FusedAdd.NONE, False, Quant.NONE, None, None, False), KNOWN[90])\n")
    env = {**os.environ, "NORMGEN_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)], env=env, cwd=ROOT) for n in (100, 200, 5000, 20000)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    names = {s.name for s in codegen.registered(tmp_path / "generated")}
    # (framed rows where they serve a register bucket, ragged rows elsewhere)
    assert names == {"rmsnorm_fwd_bf16_nb128_1p_r8", "rmsnorm_fwd_bf16_nb256_1p_r8", "rmsnorm_fwd_bf16_nb5120_1p_f8",
                     "rmsnorm_fwd_bf16_nb32768_1p_r8", "rmsnorm_fwd_bf16_nb4096_1p_f8", "rmsnorm_fwd_bf16_nb1024_1p_f8"}
    assert {p.stem for p in (tmp_path / "generated").glob("*.cu")} == names
    assert not list((tmp_path / "generated").glob("*.tmp"))


def test_strict_mode_refuses_to_generate(tmp_path, monkeypatch, strict):
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(tmp_path))
    try:
        dispatch.use_generated(GENERATED, registry={})
        with pytest.raises(dispatch.MissingInstanceError, match="strict.*--add --filter 'rmsnorm_fwd_bf16_nb1024_1p_v8'"):
            dispatch.instance_for(NO_WEIGHTS, H100)
        assert not (tmp_path / "generated").exists()
    finally:
        dispatch.use_generated(GENERATED)


def test_strict_from_the_environment():
    out = subprocess.run([sys.executable, "-c", "from normgen import ondemand; print(ondemand.strict())"],
                         env={**os.environ, "NORMGEN_STRICT": "1"}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_an_unwritable_cache_generates_for_the_process(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(tmp_path / "file" / "cache"))
    try:
        dispatch.use_generated(GENERATED, registry={})
        with pytest.warns(normgen.NormgenWarning, match="cannot write the cache"):
            spec, folder = dispatch.instance_for(NO_WEIGHTS, H100)
        assert (folder / spec.file_name).is_file() and (folder / codegen.HEADER).is_file()
    finally:
        dispatch.use_generated(GENERATED)


def _families(specs):
    return sorted({s.scalar_two_pass for s in specs}, key=str)


ODD_NS = (1, 7, 1000, 1003, 5003, 32769, 50257, 100003, 524289)


@pytest.mark.parametrize("arch", sorted(devices.KNOWN))
def test_the_default_set_serves_every_n_and_alignment_of_its_families(arch):
    dev = devices.KNOWN[arch]
    try:
        dispatch.use_generated(GENERATED)
        for call in _families(select()):
            for n in ODD_NS:
                for align in (1, 2, 4, 8):
                    spec = dispatch.shipped(call, n, min(align, call.x.vmax), dev)
                    assert spec is not None, (call.name, n, align)
                    assert devices.unsupported_reason(spec, dev) is None
    finally:
        dispatch.use_generated(GENERATED)


def test_instances_a_device_cannot_run_are_passed_over():
    sm80, sm86, sm90, sm100 = (devices.KNOWN[a] for a in (80, 86, 90, 100))
    ln = _call()
    assert recipe(dispatch.choose(ln, 65536, 8, sm90)).tile.cluster == 2
    assert dispatch.choose(ln, 65536, 8, sm80).pipeline == Pipeline.TWO_PASS  # no clusters before sm_90
    fp32 = _call(DType.FP32)
    assert recipe(dispatch.choose(fp32, 32768, 4, sm90)).tile.shared_bytes == 128 * 1024
    assert recipe(dispatch.choose(fp32, 32768, 4, sm80)).tile.shared_bytes == 128 * 1024  # 163 KB there
    assert dispatch.choose(fp32, 32768, 4, sm86).pipeline == Pipeline.TWO_PASS  # 99 KB there
    quant = _call(quant=Quant.DYNAMIC, out=DType.INT8, scale=DType.FP32)
    assert recipe(dispatch.choose(quant, 32768, 8, sm90)).tile.stream_bytes
    assert not recipe(dispatch.choose(quant, 32768, 8, sm100)).tile.stream_bytes


def test_signatures_are_taken_of_torch_and_cupy_arrays_only():
    """Other kinds (here a host array, which the checks then refuse) have no signature, so
    their calls are checked in full every time."""
    from normgen import arrays

    assert arrays.signature(None) is None
    with pytest.raises(arrays.NoSignature):
        arrays.signature(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="x must be a CUDA array"):
        normgen.layernorm(np.zeros((2, 4), np.float32), np.ones(4, np.float32))
