"""The side-by-side benchmark: `python -m normgen.bench [--out docs] [--quick]` on a GPU
machine with torch. Measures, in one run and on the same inputs, a device-to-device copy
(the ceiling), normgen, torch eager and torch.compile; writes bench.json, bench.md and
bench.png. Effective bandwidth = bytes that must move / median time per call, timed over
back-to-back calls; small shapes by CUDA graph replay."""
from __future__ import annotations

import datetime
import json
import statistics
import time
from pathlib import Path

import click

from .spec import KernelSpec
from .types import DType, FusedAdd, Norm, Pipeline, Quant

ELEMENTS = 1 << 27
BIG_N = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288)
SMALL = ((1, 4096), (32, 4096), (256, 4096), (1, 8192), (32, 8192), (256, 8192))
DTYPES = ("bfloat16", "float16", "float32")
IMPLS = ("normgen", "torch", "torch.compile")


def _torch():
    import torch

    return torch


def time_events(fn, calls: int = 20, reps: int = 15, warmup: int = 3) -> float:
    """Median milliseconds of one call: CUDA events around `calls` back-to-back calls (so
    the host's per-call work overlaps the previous kernel, as in real use), `reps` times."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


def time_graph(fn, calls: int = 100, reps: int = 20) -> float:
    """Median milliseconds of one call, from replays of a CUDA graph of `calls` calls."""
    torch = _torch()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    return time_events(graph.replay, calls=1, reps=reps, warmup=2) / calls


def host_cost_us(fn, calls: int = 2000, rounds: int = 5) -> float:
    """Median microseconds of host time per call (dispatch + launch, no sync)."""
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def _side_by_side(ours, unfused, *args) -> dict:
    """normgen's call, and torch eager and torch.compile of the unfused sequence on args."""
    torch = _torch()
    torch._dynamo.reset()  # a fresh compile per shape: never the recompile-limit fallback to eager
    compiled = torch.compile(unfused, dynamic=False)
    return {"normgen": ours, "torch": lambda: unfused(*args), "torch.compile": lambda: compiled(*args)}


def _quant_in_torch(quant: str):
    """Dynamic per-row quantization to int8 or fp8 in torch: (codes, float32 scales)."""
    torch = _torch()
    qmax, qdt = (127.0, torch.int8) if quant == "int8" else (448.0, torch.float8_e4m3fn)

    def quantize(y):
        y = y.float()
        s = (y.abs().amax(-1, keepdim=True) / qmax).clamp_min(1.1754944e-38)
        q = y / s
        q = q.round().clamp(-128, 127) if quant == "int8" else q.clamp(-448, 448)
        return q.to(qdt), s

    return quantize


def layernorm_impls(x, g, b):
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5),
                         lambda x, g, b: F.layer_norm(x, (n,), g, b, 1e-5), x, g, b)


def add_layernorm_impls(x, r, g, b):
    """Residual add + LayerNorm, returning the sum and y (ck fadd=1, vLLM fused_add_*)."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]

    def unfused(x, r, g, b):
        h = x + r
        return h, F.layer_norm(h, (n,), g, b, 1e-5)

    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5, residual=r), unfused, x, r, g, b)


def quant_layernorm_impls(x, g, b, quant: str):
    """LayerNorm + dynamic per-row quantization to int8 or fp8 (codes and float32 scales)."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    quantize = _quant_in_torch(quant)
    return _side_by_side(lambda: normgen.layernorm(x, g, b, eps=1e-5, quant=quant),
                         lambda x, g, b: quantize(F.layer_norm(x, (n,), g, b, 1e-5)), x, g, b)


def rmsnorm_impls(x, r, g, quant=None):
    """RMSNorm (eps 1e-6), with the residual add (returning the sum and y) when r is given,
    or dynamic per-row quantization: vLLM's rms_norm, fused_add_rms_norm and
    rms_norm_dynamic_per_token_quant."""
    import normgen

    F = _torch().nn.functional
    n = x.shape[-1]
    quantize = _quant_in_torch(quant) if quant else None

    def unfused(x, r, g):
        h = x if r is None else x + r
        y = F.rms_norm(h, (n,), g, 1e-6)
        if quantize:
            return quantize(y)
        return y if r is None else (h, y)

    return _side_by_side(lambda: normgen.rmsnorm(x, g, eps=1e-6, residual=r, quant=quant), unfused, x, r, g)


# op -> (dtypes, Ns, implementations, bytes that must move for M x N of itemsize bytes)
OPS = {
    "layernorm": (DTYPES, BIG_N, lambda x, r, g, b: layernorm_impls(x, g, b),
                  lambda m, n, isz: 2 * m * n * isz + 2 * n * isz),
    "add+layernorm": (("bfloat16",), BIG_N[:7], add_layernorm_impls,
                      lambda m, n, isz: 4 * m * n * isz + 2 * n * isz),
    "layernorm+int8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: quant_layernorm_impls(x, g, b, "int8"),
                       lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz),
    "layernorm+fp8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: quant_layernorm_impls(x, g, b, "fp8_e4m3"),
                      lambda m, n, isz: m * n * (isz + 1) + 4 * m + 2 * n * isz),
    "rmsnorm": (DTYPES[:2], BIG_N, lambda x, r, g, b: rmsnorm_impls(x, None, g),
                lambda m, n, isz: 2 * m * n * isz + n * isz),
    "add+rmsnorm": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: rmsnorm_impls(x, r, g),
                    lambda m, n, isz: 4 * m * n * isz + n * isz),
    "rmsnorm+fp8": (("bfloat16",), BIG_N[:7], lambda x, r, g, b: rmsnorm_impls(x, None, g, "fp8_e4m3"),
                    lambda m, n, isz: m * n * (isz + 1) + 4 * m + n * isz),
}


# op -> the instance fields of its normgen call beyond the precisions (what dispatch picks
# an instance for)
CALLS = {
    "layernorm": (Norm.LAYERNORM, {}),
    "rmsnorm": (Norm.RMSNORM, {}),
    "add+layernorm": (Norm.LAYERNORM, dict(fused_add=FusedAdd.STORE)),
    "add+rmsnorm": (Norm.RMSNORM, dict(fused_add=FusedAdd.STORE)),
    "layernorm+int8": (Norm.LAYERNORM, dict(out=DType.INT8, quant=Quant.DYNAMIC, scale=DType.FP32)),
    "layernorm+fp8": (Norm.LAYERNORM, dict(out=DType.FP8, quant=Quant.DYNAMIC, scale=DType.FP32)),
    "rmsnorm+fp8": (Norm.RMSNORM, dict(out=DType.FP8, quant=Quant.DYNAMIC, scale=DType.FP32)),
}
_DTYPES = {d.numpy.name: d for d in DType if d.is_float_input}  # "bfloat16" -> DType.BF16, ...


def call_spec(op: str, x: DType) -> KernelSpec:
    """The instance fields of op's normgen call on x rows (x's weights), as dispatch sees them:
    pipeline, bucket and vector width are placeholders that dispatch.choose fills in."""
    norm, fields = CALLS[op]
    return KernelSpec(norm, x, x, **dict(dict(out=x), **fields), pipeline=Pipeline.TWO_PASS, bucket=None, vec=1)


def prebuild(quick: bool, ops) -> int:
    """Compile every instance the run will call (16-byte aligned rows), in parallel, before
    anything is timed: the run's wall time is then timing, not NVRTC."""
    from . import cache, dispatch, runtime

    specs = set()
    for op in ops:
        dtypes, op_ns, *_ = OPS[op]
        for dtype in dtypes:
            call = call_spec(op, _DTYPES[dtype])
            specs.update(dispatch.choose(call, n, 8) for n in (op_ns[::2] if quick else op_ns))
    cache.build(sorted(specs, key=str), dispatch.GENERATED_DIR, runtime.device_arch(0))
    return len(specs)


def copy_gbps() -> float:
    torch = _torch()
    src = torch.randn(ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_events(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6


def run(quick: bool, impls, ops, log) -> dict:
    torch = _torch()
    torch.manual_seed(0)
    if "normgen" in impls:
        log(f"built {prebuild(quick, ops)} instances")
    ceiling = copy_gbps()
    log(f"copy: {ceiling:.0f} GB/s")
    rows = []
    for op in ops:
        dtypes, op_ns, make_impls, must_move = OPS[op]
        for dtype in dtypes:
            dt = getattr(torch, dtype)
            for n in op_ns[::2] if quick else op_ns:
                m = ELEMENTS // n
                x = torch.randn(m, n, device="cuda", dtype=dt)
                r = torch.randn(m, n, device="cuda", dtype=dt) if op.startswith("add") else None
                g = 1 + 0.5 * torch.randn(n, device="cuda", dtype=dt)
                b = torch.randn(n, device="cuda", dtype=dt)
                nbytes = must_move(m, n, x.element_size())
                for impl, fn in make_impls(x, r, g, b).items():
                    if impl not in impls:
                        continue
                    ms = time_events(fn)
                    gbps = nbytes / ms / 1e6
                    rows.append(dict(op=op, dtype=dtype, n=n, m=m, impl=impl, ms=ms,
                                     gbps=gbps, ratio=gbps / ceiling, timing="events"))
                    log(f"{op} {dtype:9s} N={n:6d} {impl:14s} {ms * 1e3:8.1f} us "
                        f"{gbps:6.0f} GB/s {gbps / ceiling:5.2f}")
                del x, r, g, b
                torch.cuda.empty_cache()
    host = small_and_host(impls, rows, log) if "layernorm" in ops else {}
    return dict(
        gpu=torch.cuda.get_device_name(), date=datetime.date.today().isoformat(),
        torch=torch.__version__, copy_gbps=ceiling, elements=ELEMENTS, rows=rows,
        host_us=host,
    )


def small_and_host(impls, rows: list, log) -> dict:
    """LayerNorm at small shapes (graph replay), appended to rows; returns the host cost of
    one call per implementation."""
    torch = _torch()
    for m, n in SMALL:
        dt = torch.bfloat16
        x = torch.randn(m, n, device="cuda", dtype=dt)
        g, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
        for impl, fn in layernorm_impls(x, g, b).items():
            if impl not in impls:
                continue
            us = time_graph(fn) * 1e3
            rows.append(dict(op="layernorm", dtype="bfloat16", n=n, m=m, impl=impl, us=us,
                             timing="graph"))
            log(f"small bf16 {m:4d} x {n:5d} {impl:14s} {us:6.2f} us (graph replay)")
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    g, b = (torch.randn(4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fns = layernorm_impls(x, g, b)
    host = {impl: host_cost_us(fns[impl]) for impl in ("normgen", "torch") if impl in impls}
    log("host cost per call: " + ", ".join(f"{k} {v:.2f} us" for k, v in host.items()))
    return host


def markdown(result: dict) -> str:
    big = [r for r in result["rows"] if r["timing"] == "events"]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in big)]
    out = [f"# normgen benchmark: {result['gpu']}, {result['date']}", "",
           f"M x N = 2^27 elements; ratio = effective bandwidth / device-to-device copy "
           f"({result['copy_gbps']:.0f} GB/s, read + write, same run). torch {result['torch']}.", ""]
    for op in [o for o in OPS if any(r["op"] == o for r in big)]:
        out += [f"## {op}", "", "| dtype | N | " + " | ".join(impls) + " |",
                "|---|---|" + "---|" * len(impls)]
        keys = sorted({(r["dtype"], r["n"]) for r in big if r["op"] == op},
                      key=lambda k: (DTYPES.index(k[0]), k[1]))
        for dtype, n in keys:
            cells = []
            for impl in impls:
                r = next((r for r in big if (r["op"], r["dtype"], r["n"], r["impl"]) == (op, dtype, n, impl)), None)
                cells.append(f"{r['ratio']:.2f} ({r['gbps']:.0f})" if r else "–")
            out.append(f"| {dtype} | {n} | " + " | ".join(cells) + " |")
        out.append("")
    small = [r for r in result["rows"] if r["timing"] == "graph"]
    if small:
        out += ["## small shapes, bf16 (µs per call, CUDA graph replay)", "",
                "| M x N | " + " | ".join(impls) + " |", "|---|" + "---|" * len(impls)]
        for m, n in SMALL:
            cells = [next((f"{r['us']:.2f}" for r in small if (r["m"], r["n"], r["impl"]) == (m, n, i)), "–")
                     for i in impls]
            out.append(f"| {m} x {n} | " + " | ".join(cells) + " |")
        out.append("")
    if result["host_us"]:
        out += ["## host cost of one call (1 x 4096 bf16, no sync)", ""]
        out += [f"- {k}: {v:.2f} µs" for k, v in result["host_us"].items()]
    return "\n".join(out) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    big = [r for r in result["rows"] if r["timing"] == "events"]
    panels = sorted({(r["op"], r["dtype"]) for r in big},
                    key=lambda k: (list(OPS).index(k[0]), DTYPES.index(k[1])))
    cols = min(len(panels), 3)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), sharey=True, squeeze=False)
    for ax, (op, dtype) in zip(axes.flat, panels):
        for impl in IMPLS:
            pts = sorted((r["n"], r["ratio"]) for r in big
                         if (r["op"], r["dtype"], r["impl"]) == (op, dtype, impl))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_title(f"{op} {dtype}")
        ax.set_xlabel("N (M x N = 2^27)")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("bandwidth / copy bandwidth")
    axes.flat[0].legend(loc="lower left")
    fig.suptitle(f"{result['gpu']}, {result['date']} (copy {result['copy_gbps']:.0f} GB/s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("docs"),
              show_default=True)
@click.option("--quick", is_flag=True, help="every other N only")
@click.option("--impl", "impls", multiple=True, type=click.Choice(IMPLS), default=IMPLS,
              show_default=True, help="implementations to time (repeatable)")
@click.option("--op", "ops", multiple=True, type=click.Choice(list(OPS)), default=list(OPS),
              show_default=True, help="operations to time (repeatable); small shapes and host "
                                      "cost come with layernorm")
def main(out: Path, quick: bool, impls, ops):
    """Benchmark normgen against torch eager and torch.compile (of the unfused sequence,
    for the fused operations)."""
    out.mkdir(parents=True, exist_ok=True)
    result = run(quick, set(impls), list(ops), lambda s: click.echo(s, err=True))
    (out / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "bench.md").write_text(markdown(result))
    plot(result, out / "bench.png")
    click.echo(markdown(result))


if __name__ == "__main__":
    main()
