"""GPU: every call is served -- odd widths and misaligned rows by the default set's own
instances, and calls outside it by instances generated on demand."""
from __future__ import annotations

import pytest

import normgen
from normgen import dispatch
from normgen.paths import GENERATED
from normgen.spec import KernelSpec
from normgen.types import DType, FusedAdd, Norm, Pipeline, Quant

from .gpu import Case, Expected, case_seed, check_call, expected, requires_gpu

pytestmark = requires_gpu


def _call(norm, x, w=None, **kw) -> KernelSpec:
    return KernelSpec(norm, x, w or x, kw.pop("out", x), pipeline=Pipeline.TWO_PASS, vec=1, **kw)


DQ, SQ = Quant.DYNAMIC, Quant.STATIC
CALLS = (
    _call(Norm.RMSNORM, DType.FP32),  # fp32 RMSNorm
    _call(Norm.RMSNORM, DType.FP32, DType.FP32, save_stats=True),
    _call(Norm.RMSNORM, DType.BF16, DType.FP32, save_stats=True),
    _call(Norm.LAYERNORM, DType.BF16, fused_add=FusedAdd.STORE),
    _call(Norm.LAYERNORM, DType.FP16, fused_add=FusedAdd.STORE, quant=DQ, out=DType.INT8, smooth=DType.FP32,
          scale=DType.FP32),
    _call(Norm.RMSNORM, DType.BF16, quant=DQ, out=DType.FP8, scale=DType.FP32),
    _call(Norm.RMSNORM, DType.FP16, fused_add=FusedAdd.STORE, quant=SQ, out=DType.INT8),
)


def _misaligned(inputs: dict) -> dict:
    """The same values, with x's and the residual's rows starting one element past a
    16-byte boundary."""
    import cupy

    out = dict(inputs)
    for name in ("x", "residual"):
        a = inputs[name]
        wide = cupy.empty((a.shape[0], a.shape[1] + 1), a.dtype)
        wide[:, 1:] = a
        out[name] = wide[:, 1:]
    return out


@pytest.fixture
def strict():
    """Served by the shipped default set alone: nothing generated at run time."""
    dispatch.use_generated(GENERATED)
    normgen.set_strict(True)
    yield
    normgen.set_strict(False)


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.name.replace("_2p_v1", ""))
@pytest.mark.parametrize("n", [5003, 50257, 100000])
def test_odd_widths_and_misaligned_rows_are_served_by_the_default_set(call, n, strict, seed):
    m = 64 if n < 10000 else 12
    case = Case(call.x, call.w, n, m, "normal", 8, case_seed(seed, call.name, n, m), call)
    e = expected(case)
    check_call(call, case, e, f"{call.name} N={n} M={m} seed={seed}")
    shifted = Expected(_misaligned(e.inputs), e.ref, e.y64, e.terms64)
    assert dispatch._vec_align(dispatch.arrays.view(shifted.inputs["x"], "x"), n, ()) == 1
    check_call(call, case, shifted, f"{call.name} N={n} M={m} misaligned seed={seed}")


def test_a_call_no_instance_serves_is_generated_and_served(tmp_path, monkeypatch, seed):
    """An x-bias is outside the default set: the first call generates its instance into the
    user cache (a warning names it and the command that ships it), later ones reuse it; in
    strict mode the same call raises MissingInstanceError."""
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(tmp_path))
    dispatch.use_generated(GENERATED)
    call = _call(Norm.LAYERNORM, DType.BF16, x_bias=True)
    case = Case(call.x, call.w, 3000, 100, "normal", 8, case_seed(seed, "ondemand"), call)
    e = expected(case)
    with pytest.warns(normgen.NormgenWarning, match=r"generated layernorm_fwd_bf16_xb_nb4096_1p_v8 .*--add"):
        check_call(call, case, e, "generated on demand")
    assert (tmp_path / "generated" / "layernorm_fwd_bf16_xb_nb4096_1p_v8.cu").is_file()
    assert any((tmp_path / "sm_90").glob("layernorm_fwd_bf16_xb_nb4096_1p_v8-*")) or any(
        tmp_path.glob("sm_*/layernorm_fwd_bf16_xb_nb4096_1p_v8-*"))
    check_call(call, case, e, "generated on demand, again")
    dispatch.use_generated(GENERATED)  # forget the plans and kernels
    normgen.set_strict(True)
    try:
        with pytest.raises(normgen.MissingInstanceError, match="--add --filter 'layernorm_fwd_bf16_xb_nb4096_1p_v8'"):
            check_call(call, case, e, "strict")
    finally:
        normgen.set_strict(False)
        dispatch.use_generated(GENERATED)


@pytest.mark.parametrize("call, n", [
    (_call(Norm.LAYERNORM, DType.BF16, save_stats=True), 5003),  # rows in registers (statistics: their bits)
    (_call(Norm.LAYERNORM, DType.FP32, save_stats=True), 1001),  # rows sharing a block
    (_call(Norm.RMSNORM, DType.FP16, save_stats=True), 50257),  # staged over a cluster (rstd: its bits)
    (_call(Norm.LAYERNORM, DType.FP16, fused_add=FusedAdd.STORE, quant=DQ, out=DType.INT8, smooth=DType.FP32,
           scale=DType.FP32), 5002),
    (_call(Norm.RMSNORM, DType.BF16, fused_add=FusedAdd.STORE, quant=SQ, out=DType.FP8), 100003),
    (_call(Norm.RMSNORM, DType.BF16, fused_add=FusedAdd.STORE), 9001),  # framed rows (sums: their bits)
], ids=lambda v: v.name.replace("_2p_v1", "") if isinstance(v, KernelSpec) else str(v))
def test_a_rows_results_do_not_depend_on_where_it_lies(call, n, strict, seed):
    """Rows whose starts lie at every place within a 16-byte vector, in a batch, give the
    same bits as each of them alone at each such place (ragged rows keep fixed columns)."""
    import cupy

    from .gpu import call_args, make_inputs

    case = Case(call.x, call.w, n, 19, "offset", 3, case_seed(seed, "placed", call.name, n), call, start=1)
    inputs = make_inputs(case)
    fn, args, kw = call_args(call, inputs, case)
    batch = getattr(normgen, fn)(*args, **kw)
    batch = batch if isinstance(batch, normgen.NormOutput) else normgen.NormOutput(batch)
    width = 16 // call.x.itemsize
    for row in (0, 1, 2, 18):
        for start in range(width):
            alone = dict(inputs)
            for name in ("x", "residual"):
                wide = cupy.zeros((1, n + width), inputs[name].dtype)
                wide[0, start:start + n] = inputs[name][row]
                alone[name] = wide[:, start:start + n]
            fn, args, kw = call_args(call, alone, case)
            one = getattr(normgen, fn)(*args, **kw)
            one = one if isinstance(one, normgen.NormOutput) else normgen.NormOutput(one)
            for name, got, want in zip(one._fields, one, batch):
                if got is not None:
                    assert cupy.asnumpy(got).tobytes() == cupy.asnumpy(want[row:row + 1]).tobytes(), \
                        f"{call.name} N={n}: row {row} alone at {start}: {name} differs from the batch's"
