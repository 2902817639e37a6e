"""On the GPU machine: the host cost of one normgen call, piece by piece, beside torch's
(python scripts/host_profile.py; the benchmark reports the whole-call figure)."""
import timeit, torch
import normgen
from normgen import dispatch, arrays
x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
g = torch.randn(4096, device="cuda", dtype=torch.bfloat16); b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
F = torch.nn.functional
normgen.layernorm(x, g, b); torch.cuda.synchronize()
def t(name, stmt, n=20000):
    s = min(timeit.repeat(stmt, number=n, repeat=5, globals=globals())) / n * 1e6
    print(f"{name:28s} {s:6.2f} us"); torch.cuda.synchronize()
t("normgen.layernorm", "normgen.layernorm(x, g, b)")
t("F.layer_norm", "F.layer_norm(x, (4096,), g, b, 1e-5)")
t("normgen.rmsnorm", "normgen.rmsnorm(x, g)")
t("F.rms_norm", "F.rms_norm(x, (4096,), g, 1e-6)")
t("view(x)", "arrays.view(x, 'x')")
t("x.get_device", "x.get_device()")
t("x.data_ptr", "x.data_ptr()")
t("tuple(x.shape)", "tuple(x.shape)")
t("x.stride()", "x.stride()")
t("x.dtype", "x.dtype")
xv = arrays.view(x, 'x')
t("new_empty", "x.new_empty((1,4096), dtype=torch.bfloat16)")
t("empty_like", "torch.empty_like(x)")
t("torch.empty", "torch.empty((1,4096), dtype=torch.bfloat16, device=x.device)")
t("stream_of", "arrays.stream_of(xv)")
t("current_device", "arrays.current_device()")
t("torch.cuda.current_device", "torch.cuda.current_device()")
key = next(iter(dispatch._kernels))
t("kernel lookup (dict get)", "dispatch._kernels.get(key)")
k = dispatch._kernels[key]
vals = (x.data_ptr(), 0, 0, g.data_ptr(), b.data_ptr(), 0, 0, x.data_ptr(), 0, 0, 0, 0, 1, 1, 0, 4096, 0, 0, 4096, 1e-5, 0.0, 0)
t("launch", "k.launch(0, 1, *vals)")
t("_check_x+eps+rows", "dispatch._check_x(xv); dispatch._eps(1e-5); dispatch._rows(xv)")
gv = arrays.view(g, 'g')
t("_vector", "dispatch._vector(gv, 'gamma', 4096, xv, (xv.dtype,))")
t("_vec_align", "dispatch._vec_align(xv, 4096, [gv, gv])")
import cProfile, pstats
cProfile.run("for _ in range(20000): normgen.layernorm(x, g, b)", "/tmp/hp")
pstats.Stats("/tmp/hp").sort_stats("tottime").print_stats(18)
