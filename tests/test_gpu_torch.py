"""GPU: normgen.torch: torch.compile (inductor), torch.export and CUDA graphs over blocks that
call normgen give eager's bits; the ops pass torch.library.opcheck; the modules load
torch.nn's state_dicts and match torch.nn.LayerNorm / RMSNorm."""
from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

import normgen  # noqa: E402
import normgen.torch as nt  # noqa: E402
from normgen import dispatch, reference  # noqa: E402
from normgen.codegen import GENERATED  # noqa: E402
from normgen.types import DType, NormOutput  # noqa: E402

from .gpu import assert_close, requires_gpu  # noqa: E402

pytestmark = requires_gpu
M, N = 256, 4096


@pytest.fixture(autouse=True)
def cuda_and_default_registry():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    dispatch.use_generated(GENERATED)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _inputs(seed: int, m: int = M, n: int = N, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
    r = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
    qs = torch.tensor([3.0 / 448], device="cuda")  # a static scale that lets a few codes saturate
    return x, r, qs


class Block(torch.nn.Module):
    """LayerNorm + residual + dynamic fp8 quant, LayerNorm with its statistics, RMSNorm +
    residual + static fp8 quant, and the modules: every kind of output, NormOutputs with
    None fields among them. All of these are in the default generated set (bf16)."""

    def __init__(self, n: int = N, dtype=torch.bfloat16):
        super().__init__()
        self.ln = nt.LayerNorm(n, device="cuda", dtype=dtype)
        self.rms = nt.RMSNorm(n, device="cuda", dtype=dtype)
        gen = torch.Generator(device="cuda").manual_seed(1234)
        with torch.no_grad():
            self.ln.weight.copy_(1 + 0.5 * torch.randn(n, device="cuda", generator=gen))
            self.ln.bias.copy_(torch.randn(n, device="cuda", generator=gen))
            self.rms.weight.copy_(1 + 0.5 * torch.randn(n, device="cuda", generator=gen))
        self.requires_grad_(False)

    def forward(self, x, r, qs):
        g, b, w = self.ln.weight, self.ln.bias, self.rms.weight
        out = normgen.layernorm(x, g, b, residual=r, quant="fp8_e4m3")
        stats = normgen.layernorm(out.residual, g, b, return_mean_rstd=True)
        h = stats.y * 0.5  # an inductor kernel between the ops (exact: a power of two)
        static = normgen.rmsnorm(h, w, residual=out.residual, quant="fp8_e4m3", quant_scale=qs)
        return out, stats, static, self.rms(x), self.ln(h)


def _flat(block):
    """The block's tensors as a flat tuple (serializable outputs for torch.export.save)."""
    def run(x, r, qs):
        out = block(x, r, qs)
        return tuple(t for o in out for t in (o if isinstance(o, tuple) else (o,)) if t is not None)
    return run


def _bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def assert_same(got, want, what="out"):
    """The same structure (NormOutput fields None alike) and bit-identical tensors."""
    if isinstance(want, tuple):
        assert type(got) is type(want) and len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what}.{want._fields[i] if isinstance(want, NormOutput) else i}")
    elif want is None:
        assert got is None, what
    else:
        assert isinstance(got, torch.Tensor), what
        assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device), what
        assert torch.equal(_bits(got), _bits(want)), f"{what}: bits differ"


def _check_eager_kinds(out):
    ln, stats, static, rms, y = out
    assert ln.y.dtype == torch.float8_e4m3fn and ln.scale.shape == (ln.y.shape[0],) and ln.mean is None
    assert stats.residual is None and stats.scale is None and stats.mean.dtype == torch.float32
    assert static.y.dtype == torch.float8_e4m3fn and static.scale is None and static.rstd is None
    assert isinstance(rms, torch.Tensor) and isinstance(y, torch.Tensor)


def test_compiled_block_matches_eager_bit_for_bit():
    block = Block()
    compiled = torch.compile(block, fullgraph=True)
    for seed, m in ((0, M), (1, M + 44)):  # the second: another batch (dynamic)
        args = _inputs(seed, m)
        want = block(*args)
        _check_eager_kinds(want)
        assert_same(compiled(*args), want)


def test_compiled_functions_match_eager():
    """torch.compile of plain functions of normgen calls (no module), fullgraph."""
    def fn(x, r, g):
        out = normgen.layernorm(x, g, None, residual=r, quant="int8")
        return out, normgen.rmsnorm(out.residual, g, residual=x, quant="int8")

    x, r, _ = _inputs(2, 200, 1024, torch.float16)
    g = torch.ones(1024, device="cuda", dtype=torch.float16)
    assert_same(torch.compile(fn, fullgraph=True)(x, r, g), fn(x, r, g))


def test_exported_program_runs_and_matches():
    block = Block()
    args = _inputs(3)
    ep = torch.export.export(block, args)
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and str(n.target).startswith("normgen.")]
    assert ops == ["normgen.layernorm.default"] * 2 + ["normgen.rmsnorm.default"] * 2 + ["normgen.layernorm.default"]
    want = block(*args)
    assert_same(ep.module()(*args), want)
    # saved and loaded (the ops' schemas serialize), on other data
    flat = torch.export.export(_FlatBlock(block), args)
    buf = io.BytesIO()
    torch.export.save(flat, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    args = _inputs(4)
    assert_same(tuple(loaded.module()(*args)), _flat(block)(*args))


class _FlatBlock(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x, r, qs):
        return _flat(self.block)(x, r, qs)


def test_compiled_block_replays_in_a_cuda_graph():
    """A compiled block captured with torch.cuda.graph: each replay, on new data copied into
    the static inputs, gives eager's bits for that data (normgen launches on the capturing
    stream, and its outputs come from the graph's pool)."""
    block = Block()
    compiled = torch.compile(block, fullgraph=True)
    static = _inputs(5)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compile, plan and load the kernels before the capture
            compiled(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(*static)
    for seed in (6, 7):
        new = _inputs(seed)
        for s, v in zip(static, new):
            s.copy_(v)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(out, block(*new), f"replay with seed {seed}")


def test_reduce_overhead_mode_replays_correctly():
    from torch._dynamo.utils import counters

    block = Block()
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    counters.clear()
    for seed in range(8, 12):  # warm-up, recording, then replays
        args = _inputs(seed)
        got = compiled(*args)  # the next call overwrites these outputs: compare now
        assert_same(got, block(*args), f"call with seed {seed}")
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


# ---- the ops ------------------------------------------------------------------------------
def _op_cases():
    x, r, qs = _inputs(13, 64, 1024)
    g = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    ln, rms = torch.ops.normgen.layernorm.default, torch.ops.normgen.rmsnorm.default
    return [
        (ln, (x, g, g), {}),
        (ln, (x, g, g, r), {"quant": "fp8_e4m3"}),
        (ln, (x, g, None), {"return_mean_rstd": True, "eps": 1e-3}),
        (rms, (x, g, r), {"quant": "fp8_e4m3", "eps": 1e-5}),
        (rms, (x, g, None, None, None, qs), {"quant": "int8"}),
        (rms, (x[:, :512], None), {}),  # strided rows
    ]


@pytest.mark.parametrize("case", range(6))
def test_opcheck(case):
    """The ops' schemas, fake implementations (shapes, dtypes and strides against the real
    outputs), autograd registration and AOT dispatch, as torch.library.opcheck checks them."""
    op, args, kwargs = _op_cases()[case]
    torch.library.opcheck(op, args, kwargs)


def test_functions_give_the_public_calls_results():
    x, r, qs = _inputs(14, 64, 4096)
    g = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    for name, args, kw in (("layernorm", (x, g, g), {"residual": r, "quant": "fp8_e4m3"}),
                           ("layernorm", (x, g), {"return_mean_rstd": True}),
                           ("rmsnorm", (x, g), {"residual": r, "quant": "int8", "scale_dtype": torch.float32}),
                           ("rmsnorm", (x, g), {})):
        assert_same(getattr(nt, name)(*args, **kw), getattr(normgen, name)(*args, **kw), name)


# ---- the modules ----------------------------------------------------------------------------
# torch's own layer_norm / rms_norm against normgen's, as test_gpu_api compares them
TOLERANCE = {"layernorm": dict(atol=5e-2, rtol=1e-2), "rmsnorm": dict(atol=2e-2, rtol=1e-2)}
FP32_TOLERANCE = dict(atol=1e-5, rtol=1e-5)
DTYPES = {torch.float32: DType.FP32, torch.float16: DType.FP16, torch.bfloat16: DType.BF16}


def _host(t):
    import cupy

    return cupy.asnumpy(cupy.from_dlpack(t.detach().contiguous()))


def _compare(y, want, ref64, dtype, norm, what):
    """y against torch.nn's output (test_gpu_api's tolerances) and the NumPy reference
    (assert_close: within an ulp of the correctly rounded result)."""
    import cupy

    tol = FP32_TOLERANCE if dtype == torch.float32 else TOLERANCE[norm]
    assert y.shape == want.shape and y.dtype == want.dtype, what
    assert torch.allclose(y.float(), want.float(), **tol), (
        f"{what}: {float((y.float() - want.float()).abs().max()):.3g} from torch.nn")
    flat = y.reshape(-1, ref64.shape[-1])
    assert_close(cupy.from_dlpack(flat), cupy.asarray(ref64), DTYPES[dtype], what)


def _randomize(module, gen):
    with torch.no_grad():
        if module.weight is not None:
            module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, device="cuda", generator=gen))
        if getattr(module, "bias", None) is not None:
            module.bias.copy_(torch.randn(module.bias.shape, device="cuda", generator=gen))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kw", [dict(), dict(bias=False), dict(elementwise_affine=False),
                                dict(normalized_shape=(8, 128), eps=1e-6)], ids=str)
def test_layernorm_module_matches_torch_nn(kw, dtype):
    kw = dict(kw)
    shape = kw.pop("normalized_shape", 1024)
    theirs = torch.nn.LayerNorm(shape, device="cuda", dtype=dtype, **kw)
    _randomize(theirs, torch.Generator(device="cuda").manual_seed(20))
    mine = nt.LayerNorm(shape, device="cuda", dtype=dtype, **kw)
    mine.load_state_dict(theirs.state_dict(), strict=True)
    n = 1024
    x = torch.randn(300, *((shape,) if isinstance(shape, int) else shape), device="cuda", dtype=dtype,
                    generator=torch.Generator(device="cuda").manual_seed(21))
    with torch.inference_mode():
        y, want = mine(x), theirs(x)
    g = None if mine.weight is None else _host(mine.weight).reshape(n)
    b = None if mine.bias is None else _host(mine.bias).reshape(n)
    ref = reference.layernorm(_host(x).reshape(-1, n), g, b, mine.eps)
    _compare(y, want, ref, dtype, "layernorm", f"LayerNorm {kw} {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kw", [dict(), dict(elementwise_affine=False), dict(eps=1e-5),
                                dict(normalized_shape=(8, 128))], ids=str)
def test_rmsnorm_module_matches_torch_nn(kw, dtype):
    """eps None (torch's default) among them, on rows small enough that eps shows."""
    kw = dict(kw)
    shape = kw.pop("normalized_shape", 1024)
    theirs = torch.nn.RMSNorm(shape, device="cuda", dtype=dtype, **kw)
    _randomize(theirs, torch.Generator(device="cuda").manual_seed(22))
    mine = nt.RMSNorm(shape, device="cuda", dtype=dtype, **kw)
    mine.load_state_dict(theirs.state_dict(), strict=True)
    n = 1024
    x = 1e-3 * torch.randn(300, *((shape,) if isinstance(shape, int) else shape), device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(23))
    x = x.to(dtype)
    with torch.inference_mode():
        y, want = mine(x), theirs(x)
    g = None if mine.weight is None else _host(mine.weight).reshape(n)
    eps = torch.finfo(torch.float32).eps if mine.eps is None else mine.eps
    ref = reference.rmsnorm(_host(x).reshape(-1, n), g, eps)
    _compare(y, want, ref, dtype, "rmsnorm", f"RMSNorm {kw} {dtype}")


@pytest.mark.parametrize("make", [lambda: nt.LayerNorm(1024, device="cuda"),
                                  lambda: nt.RMSNorm(1024, device="cuda")])
def test_modules_refuse_grad(make):
    module = make()
    x = torch.randn(8, 1024, device="cuda")
    with pytest.raises(RuntimeError, match="has no backward pass yet"):
        module(x)
    with pytest.raises(RuntimeError, match="has no backward pass yet"):
        torch.compile(module, fullgraph=True)(x)
    with torch.no_grad():
        want = module(x)
    module.requires_grad_(False)
    assert torch.equal(module(x), want)  # grad mode on, nothing requires grad
    with pytest.raises(RuntimeError, match="has no backward pass yet"):
        module(x.requires_grad_(True))


def test_functions_refuse_grad():
    """The functions, like the modules, refuse where autograd would want a backward pass,
    naming the arguments that require grad; the same call runs under no_grad, and with
    tensors that do not require grad in grad mode."""
    x = torch.randn(8, 1024, device="cuda")
    w = torch.nn.Parameter(torch.rand(1024, device="cuda") + 0.5)
    b = torch.zeros(1024, device="cuda")
    with pytest.raises(RuntimeError, match=r"no backward pass yet.*while gamma requires grad"):
        normgen.layernorm(x, w, b)
    with pytest.raises(RuntimeError, match=r"while x, gamma require grad"):
        normgen.rmsnorm(x.detach().requires_grad_(True), w)
    with torch.no_grad():
        want = normgen.layernorm(x, w, b)  # the plan of the refused call's signature
    assert torch.equal(normgen.layernorm(x, w.detach(), b), want)
    with torch.inference_mode():
        assert torch.equal(normgen.layernorm(x, w, b), want)
    with pytest.raises(RuntimeError, match="no backward pass yet"):
        normgen.layernorm(x, w, b)  # grad mode on again
