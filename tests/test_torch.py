"""normgen.torch without a GPU: the ops' registration and fake implementations, tracing by
torch.compile and torch.export (fake tensors; a run reaches normgen's own CPU-tensor error),
the modules' constructors and state_dicts, and the refusal of autograd."""
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import normgen  # noqa: E402
import normgen.torch as nt  # noqa: E402
from normgen import dispatch, reference  # noqa: E402
from normgen.types import NormOutput  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CPU_ERROR = r"x is a torch tensor on cpu; move it to the GPU \(x.cuda\(\)\)"


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


# ---- torch stays optional ------------------------------------------------------------------
def test_import_normgen_does_not_import_torch():
    r = _python("""
        import sys
        import normgen
        assert "torch" not in sys.modules, "import normgen"
        import normgen.dispatch
        assert "torch" not in sys.modules, "import normgen.dispatch"
        assert "normgen.torch" not in sys.modules
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---- the ops --------------------------------------------------------------------------------
def test_ops_are_registered_with_their_schemas():
    ln, rms = torch.ops.normgen.layernorm.default, torch.ops.normgen.rmsnorm.default
    for op, names in ((ln, ["x", "gamma", "beta", "residual", "x_bias", "smooth_scale", "quant_scale",
                            "eps", "store_residual", "quant", "scale_dtype", "return_mean_rstd"]),
                      (rms, ["x", "gamma", "residual", "x_bias", "smooth_scale", "quant_scale", "eps",
                             "store_residual", "quant", "scale_dtype", "weight_offset", "return_rstd"])):
        schema = op._schema
        assert [a.name for a in schema.arguments] == names
        assert len(schema.returns) == 5 and all(str(r.type) == "Tensor" for r in schema.returns)
        assert not any(a.alias_info and a.alias_info.is_write for a in schema.arguments)  # functional
    assert torch.Tag.pt2_compliant_tag in ln.tags


_TORCH_OF = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
             np.dtype(np.int8): torch.int8}


def _torch_dtype(np_dtype) -> "torch.dtype":
    import ml_dtypes

    more = {np.dtype(ml_dtypes.bfloat16): torch.bfloat16, np.dtype(ml_dtypes.float8_e4m3fn): torch.float8_e4m3fn}
    return {**_TORCH_OF, **more}[np.dtype(np_dtype)]


_QUANTS = [  # quant, static, scale_dtype
    (None, False, None), ("int8", False, None), ("fp8_e4m3", False, "float16"),
    ("int8", False, torch.bfloat16), ("fp8_e4m3", True, None), ("int8", True, None)]
_NUMPY_X = {torch.float32: np.float32, torch.float16: np.float16}


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_fake_outputs_match_the_reference_for_every_option(norm, x_dtype):
    """Under FakeTensorMode (fake CUDA tensors, no GPU needed) each call of normgen.torch's
    function gives exactly the outputs the NumPy reference gives for the same call: y alone
    or a NormOutput with the same fields None, each of the same shape and dtype, contiguous."""
    import ml_dtypes

    np_x = _NUMPY_X.get(x_dtype, ml_dtypes.bfloat16)
    checked = 0
    for shape, residual, (quant, static, sdt), stats, extras in itertools.product(
            [(5, 16), (2, 3, 16), (16,), (0, 16)], [None, "store", "no_store"], _QUANTS, [False, True],
            [False, True]):
        kw, ref_kw = {}, {}
        if residual:
            kw["store_residual"] = ref_kw["store_residual"] = residual == "store"
        if quant:
            kw["quant"] = ref_kw["quant"] = quant
            if sdt is not None:
                kw["scale_dtype"] = sdt
                ref_kw["scale_dtype"] = {"float16": "fp16", torch.bfloat16: "bf16"}[sdt]
        stat_name = "return_mean_rstd" if norm == "layernorm" else "return_rstd"
        kw[stat_name] = ref_kw[stat_name] = stats
        host = np.ones(shape, np_x)
        vec = np.ones(shape[-1], np_x)
        ref_args = (host, vec, vec) if norm == "layernorm" else (host, vec)
        ref = getattr(reference, norm)(
            *ref_args, residual=host if residual else None, x_bias=vec if extras else None,
            smooth_scale=vec.astype(np.float32) if quant and extras else None,
            quant_scale=np.ones(1, np.float32) if static else None, **ref_kw)
        with FakeTensorMode():
            x = torch.empty(shape, dtype=x_dtype, device="cuda")
            v = torch.empty(shape[-1], dtype=x_dtype, device="cuda")
            args = (x, v, v if extras else None) if norm == "layernorm" else (x, v)
            out = getattr(nt, norm)(
                *args, residual=torch.empty_like(x) if residual else None, x_bias=v if extras else None,
                smooth_scale=torch.empty(shape[-1], device="cuda") if quant and extras else None,
                quant_scale=torch.empty(1, device="cuda") if static else None, **kw)
        what = f"{norm} {x_dtype} {shape} {kw}"
        assert isinstance(out, NormOutput) == isinstance(ref, NormOutput), what
        outs, refs = (out, ref) if isinstance(ref, NormOutput) else ((out,), (ref,))
        for name, t, r in zip(NormOutput._fields, outs, refs):
            if r is None:
                assert t is None, f"{what}: {name}"
                continue
            assert t.shape == r.shape and t.dtype == _torch_dtype(r.dtype), f"{what}: {name} {t.shape} {t.dtype}"
            assert t.is_contiguous() and t.device.type == "cuda", f"{what}: {name}"
        checked += 1
    assert checked == 4 * 3 * len(_QUANTS) * 2 * 2


def test_ops_on_meta_tensors_and_placeholders():
    """The op itself returns five tensors; those not asked for are empty placeholders."""
    x = torch.empty(4, 3, 64, device="meta", dtype=torch.bfloat16)
    y, res, scale, mean, rstd = torch.ops.normgen.layernorm(x, None, None, x, quant="int8", scale_dtype="bfloat16")
    assert (y.shape, y.dtype) == ((4, 3, 64), torch.int8)
    assert (res.shape, res.dtype) == ((4, 3, 64), torch.bfloat16)
    assert (scale.shape, scale.dtype) == ((4, 3), torch.bfloat16)
    assert mean.shape == rstd.shape == (0,)
    y, res, scale, mean, rstd = torch.ops.normgen.rmsnorm(x, None, x, store_residual=False, return_rstd=True)
    assert y.dtype == torch.bfloat16 and res.shape == scale.shape == mean.shape == (0,)
    assert (rstd.shape, rstd.dtype) == ((4, 3), torch.float32)


def test_real_outputs_become_five_fresh_tensors():
    """_five (the real implementation's last step) pads the direct call's result with
    placeholders that share no storage (custom ops may not return aliases)."""
    x = torch.ones(2, 8)
    y = torch.zeros(2, 8)
    five = nt._five(y, x)
    assert five[0] is y and all(t.shape == (0,) and t.dtype == torch.float32 for t in five[1:])
    assert len({t.untyped_storage()._cdata for t in five}) == 5
    rstd = torch.ones(2)
    five = nt._five(NormOutput(y, None, None, None, rstd), x)
    assert five[0] is y and five[4] is rstd and all(t.shape == (0,) for t in five[1:4])


def test_real_implementation_takes_the_direct_path():
    """Run for real, the ops call normgen's public functions, which refuse CPU tensors."""
    x = torch.ones(4, 64)
    with pytest.raises(TypeError, match=CPU_ERROR):
        torch.ops.normgen.layernorm(x, None)
    with pytest.raises(TypeError, match=CPU_ERROR):
        nt.rmsnorm(x, torch.ones(64), residual=x, quant="fp8_e4m3")


def test_real_implementations_take_the_direct_path(monkeypatch):
    """The ops run dispatch._norm, never the public calls: while torch.compile runs, real
    tensors can reach an op (inductor folding constants), and the public calls' tracing hook
    would route them back to it."""
    calls = []

    def direct(*args):
        calls.append(args)
        return args[1]

    monkeypatch.setattr(dispatch, "_norm", direct)
    x, g = torch.ones(2, 8), torch.ones(8)
    out = nt._layernorm_impl(x, g, None, None, None, None, None, eps=1e-5, quant="int8")
    assert out[0] is x and calls[-1][0].value == "layernorm" and calls[-1][8] == "int8"
    out = nt._rmsnorm_impl(x, g, eps=1e-6, weight_offset=1.0, return_rstd=True)
    assert out[0] is x and calls[-1][0].value == "rmsnorm" and calls[-1][12:] == (1.0, True)
    with pytest.raises(ValueError, match="gamma is None"):
        nt._rmsnorm_impl(x, None, weight_offset=1.0)


def test_fake_implementations_check_what_decides_the_outputs():
    with FakeTensorMode():
        x = torch.empty(4, 64, device="cuda", dtype=torch.float16)
        with pytest.raises(ValueError, match="quant must be None, 'int8' or 'fp8_e4m3'"):
            nt.layernorm(x, None, quant="int4")
        with pytest.raises(ValueError, match="scale_dtype must be float32, float16 or bfloat16"):
            nt.layernorm(x, None, quant="int8", scale_dtype=torch.int8)
        with pytest.raises(ValueError, match="gamma is None"):
            nt.rmsnorm(x, None, weight_offset=1.0)
        with pytest.raises(ValueError, match="weight_offset must be a finite"):
            nt.rmsnorm(x, torch.empty(64, device="cuda"), weight_offset=float("inf"))


@pytest.mark.parametrize("given, name", [
    (None, None), (torch.float32, "float32"), (torch.float16, "float16"), (torch.bfloat16, "bfloat16"),
    ("float16", "float16"), ("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32"),
    (np.dtype(np.float16), "float16")])
def test_scale_dtype_spellings(given, name):
    assert nt._scale_name(given) == name


def test_backward_through_the_ops_is_a_clear_error():
    x = torch.empty(8, 64, device="meta", requires_grad=True)
    for y in (nt.layernorm(x, None), nt.rmsnorm(x, None, return_rstd=True).y):
        assert y.requires_grad  # gradients are not dropped silently
        with pytest.raises(RuntimeError, match="has no backward pass yet"):
            y.sum().backward()


# ---- torch.compile and torch.export ---------------------------------------------------------
def _block(x, r, g, b, w):
    out = normgen.layernorm(x, g, b, residual=r, quant="fp8_e4m3")
    stats = normgen.layernorm(out.residual, g, b, return_mean_rstd=True)
    y = normgen.rmsnorm(stats.y, w, residual=x, quant="int8", scale_dtype=torch.bfloat16)
    return out, stats, y, normgen.rmsnorm(x, w)


def _block_inputs():
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    g = torch.ones(64, dtype=torch.bfloat16)
    return x, torch.randn_like(x), g, torch.zeros_like(g), g


def test_compile_traces_the_ops_without_a_graph_break():
    """fullgraph=True raises on any graph break, so tracing reached the ops; the graph then
    runs and stops at normgen's own error about CPU tensors (not a Dynamo error)."""
    torch._dynamo.reset()
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with pytest.raises(TypeError, match=CPU_ERROR):
        torch.compile(_block, fullgraph=True, backend="eager")(*_block_inputs())
    with pytest.raises(TypeError, match=CPU_ERROR):
        torch.compile(_block, fullgraph=True, backend=recording)(*_block_inputs())
    (gm,) = graphs
    assert [c for c, _ in _normgen_calls(gm.graph)] == [
        "normgen.layernorm.default", "normgen.layernorm.default", "normgen.rmsnorm.default",
        "normgen.rmsnorm.default"], gm.code


def test_compile_in_a_fresh_process_without_importing_normgen_torch():
    """A script's first normgen call inside torch.compile: normgen.dispatch and normgen.torch
    are both imported while Dynamo traces."""
    r = _python("""
        import torch, normgen
        def fn(x, g):
            return normgen.layernorm(x, g, residual=x, quant="fp8_e4m3"), normgen.rmsnorm(x, g)
        x, g = torch.randn(8, 64), torch.ones(64)
        try:
            torch.compile(fn, fullgraph=True, backend="eager")(x, g)
        except TypeError as e:
            print("TypeError:", e)
    """)
    assert "TypeError: x is a torch tensor on cpu" in r.stdout, r.stderr[-3000:]


class _Block(torch.nn.Module):
    def __init__(self, n=64, shape=None):
        super().__init__()
        self.ln = nt.LayerNorm(n)
        self.rms = nt.RMSNorm(n)
        self.ln2 = nt.LayerNorm(shape or n, bias=False)

    def forward(self, x, r):
        out = normgen.layernorm(x, self.ln.weight, self.ln.bias, residual=r, quant="fp8_e4m3")
        return out.y, out.scale, self.rms(out.residual), self.ln(x)


def _normgen_calls(graph):
    return [(str(n.target), n) for n in graph.nodes if n.op == "call_function" and str(n.target).startswith("normgen.")]


@pytest.mark.parametrize("strict", [False, True])
def test_export_gives_a_graph_of_the_ops(strict):
    """torch.export traces with fake tensors only (CPU tensors serve), with a dynamic batch;
    the program's outputs have the fake implementations' shapes and dtypes. Running it on
    CPU tensors reaches normgen's CPU-tensor error."""
    block = _Block().requires_grad_(False)
    x, r = torch.randn(8, 64), torch.randn(8, 64)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(block, (x, r), dynamic_shapes=({0: batch}, {0: batch}), strict=strict)
    calls = _normgen_calls(ep.graph)
    assert [c for c, _ in calls] == ["normgen.layernorm.default", "normgen.rmsnorm.default",
                                     "normgen.layernorm.default"]
    assert calls[0][1].kwargs["quant"] == "fp8_e4m3"
    assert calls[1][1].kwargs["eps"] == torch.finfo(torch.float32).eps  # RMSNorm's eps=None
    (output,) = [n for n in ep.graph.nodes if n.op == "output"]
    vals = [a.meta["val"] for a in output.args[0]]
    assert [v.dtype for v in vals] == [torch.float8_e4m3fn, torch.float32, torch.float32, torch.float32]
    assert [v.dim() for v in vals] == [2, 1, 2, 2] and str(vals[1].shape[0]) == str(vals[0].shape[0])
    with pytest.raises(TypeError, match=CPU_ERROR):
        ep.module()(x, r)


def test_export_of_a_module_with_a_normalized_shape_of_several_dims():
    ln = nt.LayerNorm((4, 16)).requires_grad_(False)
    ep = torch.export.export(ln, (torch.randn(2, 3, 4, 16),))
    ((_, call),) = _normgen_calls(ep.graph)
    assert tuple(call.args[0].meta["val"].shape) == (2, 3, 64)
    assert tuple(call.args[1].meta["val"].shape) == (64,)
    (output,) = [n for n in ep.graph.nodes if n.op == "output"]
    assert tuple(output.args[0][0].meta["val"].shape) == (2, 3, 4, 16)


# ---- the modules ----------------------------------------------------------------------------
LAYERNORM_ARGS = [dict(normalized_shape=64), dict(normalized_shape=(64,), eps=1e-6),
                  dict(normalized_shape=(4, 16), elementwise_affine=False),
                  dict(normalized_shape=64, bias=False), dict(normalized_shape=[8, 8], dtype=torch.bfloat16),
                  dict(normalized_shape=32, elementwise_affine=True, bias=True, device="meta", dtype=torch.float16)]
RMSNORM_ARGS = [dict(normalized_shape=64), dict(normalized_shape=(4, 16), eps=1e-5),
                dict(normalized_shape=64, elementwise_affine=False), dict(normalized_shape=64, dtype=torch.float16),
                dict(normalized_shape=[2, 32], eps=None, device="meta", dtype=torch.bfloat16)]


def _pairs():
    return ([(nt.LayerNorm, torch.nn.LayerNorm, kw) for kw in LAYERNORM_ARGS]
            + [(nt.RMSNorm, torch.nn.RMSNorm, kw) for kw in RMSNORM_ARGS])


@pytest.mark.parametrize("ours, theirs, kw", _pairs(), ids=lambda v: getattr(v, "__qualname__", None) or str(v))
def test_modules_take_torch_nn_arguments_and_state_dicts(ours, theirs, kw):
    mine, ref = ours(**kw), theirs(**kw)
    assert isinstance(mine, theirs)
    assert repr(mine) == repr(ref)  # extra_repr as torch's (the class names are the same)
    assert (mine.normalized_shape, mine.eps, mine.elementwise_affine) == (ref.normalized_shape, ref.eps, ref.elementwise_affine)
    ours_sd, ref_sd = mine.state_dict(), ref.state_dict()
    assert list(ours_sd) == list(ref_sd)
    for k in ref_sd:
        assert (ours_sd[k].shape, ours_sd[k].dtype, ours_sd[k].device) == (ref_sd[k].shape, ref_sd[k].dtype, ref_sd[k].device)
    if ref_sd and ref_sd[next(iter(ref_sd))].device.type != "meta":
        for p in ref.parameters():
            torch.nn.init.normal_(p)
        mine.load_state_dict(ref.state_dict(), strict=True)
        for k, v in ref.state_dict().items():
            assert torch.equal(mine.state_dict()[k], v), k
        back = theirs(**kw)
        back.load_state_dict(mine.state_dict(), strict=True)  # and the other way
        assert all(torch.equal(back.state_dict()[k], v) for k, v in ref.state_dict().items())


def test_rmsnorm_default_eps_is_torchs():
    """torch.nn.RMSNorm's eps=None takes float32's eps for float32, float16 and bfloat16
    input (its accumulation type), not torch.finfo(x.dtype).eps; the module passes that on."""
    f32_eps = torch.finfo(torch.float32).eps
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = (0.01 * torch.randn(4, 64)).to(dtype)  # small rows: eps matters
        m = torch.nn.RMSNorm(64, dtype=dtype)
        with torch.no_grad():
            y = m(x)
            assert torch.equal(y, torch.nn.functional.rms_norm(x, (64,), m.weight, f32_eps)), dtype
            if dtype != torch.float32:
                assert not torch.equal(y, torch.nn.functional.rms_norm(x, (64,), m.weight, torch.finfo(dtype).eps))
    assert nt._RMS_DEFAULT_EPS == f32_eps


def test_module_forward_calls_the_public_function(monkeypatch):
    """Eager forward passes weight, bias and eps to normgen.layernorm / rmsnorm (the direct
    path), rows of a several-dim normalized_shape flattened and the result reshaped back."""
    seen = []

    def fake(name):
        def call(x, gamma=None, beta=None, **kw):
            seen.append((name, x.shape, None if gamma is None else gamma.shape, None if beta is None else beta.shape, kw))
            return torch.zeros(x.shape)
        return call

    monkeypatch.setattr(dispatch, "layernorm", fake("layernorm"))
    monkeypatch.setattr(dispatch, "rmsnorm", fake("rmsnorm"))
    x = torch.randn(2, 3, 4, 16)
    with torch.no_grad():
        assert nt.LayerNorm((4, 16), eps=1e-3)(x).shape == x.shape
        assert nt.LayerNorm(16, bias=False)(x).shape == x.shape
        assert nt.RMSNorm((4, 16))(x).shape == x.shape
        assert nt.RMSNorm(16, eps=1e-5, elementwise_affine=False)(x).shape == x.shape
    assert seen == [("layernorm", (2, 3, 64), (64,), (64,), {"eps": 1e-3}),
                    ("layernorm", (2, 3, 4, 16), (16,), None, {"eps": 1e-5}),
                    ("rmsnorm", (2, 3, 64), (64,), None, {"eps": torch.finfo(torch.float32).eps}),
                    ("rmsnorm", (2, 3, 4, 16), None, None, {"eps": 1e-5})]


def test_module_eager_call_reaches_normgen():
    with torch.no_grad(), pytest.raises(TypeError, match=CPU_ERROR):
        nt.LayerNorm(64)(torch.randn(2, 64))


@pytest.mark.parametrize("module", [nt.LayerNorm((4, 16)), nt.RMSNorm(16, elementwise_affine=False)])
def test_modules_check_the_input_shape(module):
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"expected input with shape \[\*, .*16\]"):
        module(torch.randn(4, 8))


@pytest.mark.parametrize("make", [lambda: nt.LayerNorm(64), lambda: nt.RMSNorm(64),
                                  lambda: nt.LayerNorm(64, elementwise_affine=False)])
def test_modules_refuse_to_run_where_autograd_would_need_a_backward(make):
    module = make()
    x = torch.randn(2, 64)
    if module.weight is None:
        x.requires_grad_(True)
    name = type(module).__name__
    with pytest.raises(RuntimeError, match=rf"normgen.torch.{name} has no backward pass yet.*torch.no_grad\(\).*"
                                           rf"torch.inference_mode\(\).*requires_grad_\(False\).*torch.nn.{name}"):
        module(x)
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="no backward pass yet"):  # compiled: the same error
        torch.compile(module, backend="eager")(x)
    # where no backward is wanted, the call goes on to normgen (here: its CPU-tensor error)
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx(), pytest.raises(TypeError, match=CPU_ERROR):
            module(x)
    if module.weight is not None:
        module.requires_grad_(False)
        with pytest.raises(TypeError, match=CPU_ERROR):
            module(x)
