"""On the GPU machine: the host cost of one normgen call, piece by piece, beside torch's
(python scripts/host_profile.py; the benchmark reports the whole-call figure)."""
import timeit

import torch

import normgen
from normgen import arrays, dispatch, params, runtime  # noqa: F401 (used in the timed statements)

x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
g = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
F = torch.nn.functional
normgen.layernorm(x, g, b)
normgen.rmsnorm(x, g)
torch.cuda.synchronize()


def t(name, stmt, n=20000):
    s = min(timeit.repeat(stmt, number=n, repeat=5, globals=globals())) / n * 1e6
    print(f"{name:28s} {s:6.2f} us")
    torch.cuda.synchronize()


t("normgen.layernorm", "normgen.layernorm(x, g, b)")
t("F.layer_norm", "F.layer_norm(x, (4096,), g, b, 1e-5)")
t("normgen.rmsnorm", "normgen.rmsnorm(x, g)")
t("F.rms_norm", "F.rms_norm(x, (4096,), g, 1e-6)")
t("3 signatures", "arrays.signature(x); arrays.signature(g); arrays.signature(b)")
(key, plan), = [(k, p) for k, p in dispatch._plans.items() if k[3] is not None]
t("plan lookup (dict get)", "dispatch._plans.get(key)")
t("plan.run", "plan.run(x, g, b, None, None, None, None)")
t("torch.empty_like", "torch.empty_like(x)")
t("stream", "plan.stream(0)")
t("current_device", "arrays.current_device()")
vals = (x.data_ptr(), 0, 0, g.data_ptr(), b.data_ptr(), 0, 0, x.data_ptr(), 0, 0, 0, 0) + plan.constants
t("launch (pack + cuLaunchKernel)", "plan.launch(0, vals)")
buf = runtime._buffers
t("pack alone", "params.PACKER.pack_into(buf.args, 0, *vals)")
kernel = next(iter(dispatch._kernels.values()))
func = kernel.func
t("cuLaunchKernel alone", "runtime._launch(func, 1, 1, 1, 128, 1, 1, 0, 0, 0, buf.extra_ptr)")
side = torch.cuda.Stream().cuda_stream
t("cuLaunchKernel, side stream", "runtime._launch(func, 1, 1, 1, 128, 1, 1, 0, side, 0, buf.extra_ptr)")
import cProfile, pstats  # noqa: E401,E402

cProfile.run("for _ in range(20000): normgen.layernorm(x, g, b)", "/tmp/hp")
pstats.Stats("/tmp/hp").sort_stats("tottime").print_stats(12)
