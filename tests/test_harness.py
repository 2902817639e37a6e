"""CPU: the pure logic of the GPU harness scripts (scripts/sanitize.py, scripts/soak.py,
scripts/suite_summary.py) and of runtime.resident_clusters' driver call: the sanitizer
report parser on compute-sanitizer's own wording, the soak's growth verdict on synthetic
series, its configurations (valid calls, and the dispatcher's own vector-width rule), the
sanitizer's cases, the GPU suite's summary line, and CUlaunchConfig's C layout."""
from __future__ import annotations

import ast
import ctypes
import importlib.util
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from normgen import devices, dispatch, runtime, tiles
from normgen.arrays import View
from normgen.matrix import select
from normgen.recipe import recipe
from normgen.spec import framed_range, invalid_reason, parse_name
from normgen.types import DType, FusedAdd, Norm, Pipeline, Quant

ROOT = Path(__file__).resolve().parent.parent


def _script(name: str):
    module_name = f"normgen_script_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[module_name]


sanitize = _script("sanitize")
soak = _script("soak")

# ---- compute-sanitizer's reports ------------------------------------------------------------------
OK = sanitize.CHILD_OK
MEMCHECK_CLEAN = f"""========= COMPUTE-SANITIZER
ok: layernorm_fwd_bf16_nb1024_1p_v8_mv N=1024 M=5 normal
{OK}
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK_ERRORS = f"""========= COMPUTE-SANITIZER
========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not found" on CUDA API call to cuGetProcAddress.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2f1a3c] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not found" on CUDA API call to cuGetProcAddress.
=========     Saved host backtrace up to driver entry point at error
=========
========= Invalid __global__ write of size 16 bytes
=========     at layernorm_fwd_bf16_nb1024_1p_v8_mv+0x1a70
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f3a2c000810 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a2c000000 of size 2063 bytes
=========
{OK}
========= ERROR SUMMARY: 3 errors
"""
RACECHECK_CLEAN = f"""========= COMPUTE-SANITIZER
{OK}
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
RACECHECK_ERROR = f"""========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at rmsnorm_fwd_bf16_nb131072_1p_v8_mv+0x3f20
=========     and Read access at rmsnorm_fwd_bf16_nb131072_1p_v8_mv+0x4010 [256 hazards]
=========
{OK}
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
RACECHECK_WARNINGS = f"""========= COMPUTE-SANITIZER
========= Warning: Race reported between Write access at kernel+0x120
=========     and Write access at kernel+0x120 [4 hazards]
{OK}
========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)
"""
SYNCCHECK_ERROR = f"""========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp
=========     at layernorm_fwd_bf16_2p_v8+0x9a0
=========     by thread (3,0,0) in block (0,0,0)
{OK}
========= ERROR SUMMARY: 1 error
"""
INITCHECK_ERROR = f"""========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 2 bytes
=========     at layernorm_fwd_fp16_nb32768_1p_v8+0x2c40
=========     by thread (12,0,0) in block (0,0,0)
=========     Address 0x7f10b2001000
{OK}
========= ERROR SUMMARY: 4 errors
"""
NO_DEVICE = """========= COMPUTE-SANITIZER
========= Error: Device not supported
Traceback (most recent call last):
cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorUnknown: unknown error
"""
CRASHED_CHILD = """========= COMPUTE-SANITIZER
Segmentation fault
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""


@pytest.mark.parametrize("tool, text", [
    ("memcheck", MEMCHECK_CLEAN), ("racecheck", RACECHECK_CLEAN), ("racecheck", RACECHECK_WARNINGS),
    ("synccheck", MEMCHECK_CLEAN), ("initcheck", MEMCHECK_CLEAN),
])
def test_clean_reports_are_clean(tool, text):
    v = sanitize.judge(tool, 0, text)
    assert v.clean and v.report.found and v.report.errors == 0, v.problems


@pytest.mark.parametrize("tool, text, rc, errors", [
    ("memcheck", MEMCHECK_ERRORS, sanitize.ERROR_EXIT, 3), ("racecheck", RACECHECK_ERROR, sanitize.ERROR_EXIT, 1),
    ("synccheck", SYNCCHECK_ERROR, sanitize.ERROR_EXIT, 1), ("initcheck", INITCHECK_ERROR, sanitize.ERROR_EXIT, 4),
])
def test_reported_errors_fail_the_run(tool, text, rc, errors):
    v = sanitize.judge(tool, rc, text)
    assert not v.clean and v.report.errors == errors and "errors reported" in v.problems
    assert v.describe().startswith(f"{errors} error{'' if errors == 1 else 's'}")


def test_failed_api_calls_are_counted_by_name():
    r = sanitize.parse_report("memcheck", MEMCHECK_ERRORS)
    assert r.api_calls == {"cuGetProcAddress": 2}
    assert "cuGetProcAddress x2" in sanitize.judge("memcheck", sanitize.ERROR_EXIT, MEMCHECK_ERRORS).describe()


def test_racecheck_warnings_fail_only_when_asked():
    assert sanitize.parse_report("racecheck", RACECHECK_WARNINGS).warnings == 2
    v = sanitize.judge("racecheck", 0, RACECHECK_WARNINGS, fail_on_warnings=True)
    assert not v.clean and v.problems == ["warnings reported"]


def test_a_run_without_its_summary_or_its_child_fails():
    v = sanitize.judge("memcheck", 1, NO_DEVICE)
    assert not v.clean and "no summary line" in v.problems and "the child did not finish" in v.problems
    # a clean summary from a run whose target died is no pass
    v = sanitize.judge("racecheck", 139, CRASHED_CHILD)
    assert not v.clean and v.report.found and "the child did not finish" in v.problems
    assert "exit status 139" in v.problems
    # the racecheck summary does not stand for memcheck's
    assert not sanitize.judge("memcheck", 0, RACECHECK_CLEAN).clean


def test_exit_status_and_timeouts_are_checked():
    v = sanitize.judge("memcheck", sanitize.ERROR_EXIT, MEMCHECK_CLEAN)
    assert not v.clean and any("without an error count" in p for p in v.problems)
    v = sanitize.judge("memcheck", -9, MEMCHECK_CLEAN, timed_out=True)
    assert not v.clean and v.problems == ["timed out"]


def test_summaries_of_several_processes_add_up():
    text = MEMCHECK_CLEAN + "========= ERROR SUMMARY: 2 errors\n"
    assert sanitize.parse_report("memcheck", text).errors == 2


def test_the_flag_table():
    memcheck = sanitize.TOOLS["memcheck"]
    assert memcheck[memcheck.index("--report-api-errors") + 1] == "all"
    for tool, flags in sanitize.TOOLS.items():
        assert flags[flags.index("--tool") + 1] == tool
    assert "--error-exitcode" in sanitize.COMMON
    assert set(sanitize.TOOLS) == {"memcheck", "racecheck", "synccheck", "initcheck"}


# ---- the sanitizer's cases ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def default_set():
    return select()


def test_sanitize_cases_cover_every_pipeline_and_epilogue(default_set):
    cases, impossible = sanitize.cases(default_set)
    covered = {(c.pipeline, c.epilogue) for c in cases}
    for p in sanitize.PIPELINES:
        for e in sanitize.EPILOGUES:
            assert ((p, e) in covered) != ((p, e) in impossible), (p, e)
    names = {s.name for s in default_set}
    for c in cases:
        s = c.spec
        assert invalid_reason(s) is None and parse_name(s.name) == s, s.name
        assert (sanitize.pipeline_of(s), sanitize.epilogue_of(s)) == (c.pipeline, c.epilogue), s.name
        assert c.shipped == (s.name in names), s.name
    # streamed rows serve LayerNorm's dynamic quant alone: no instance has the other three
    assert sorted(impossible) == [("streamed", "fused add"), ("streamed", "plain"), ("streamed", "static quant")]
    for _, e in impossible:
        assert not [s for s in sanitize.search_space(e) if sanitize.pipeline_of(s) == "streamed"]
    # the clusters' cases are resident (fixed grids), and streamed rows over a cluster have their own
    assert all(recipe(c.spec).tile.resident for c in cases if c.pipeline == "cluster")
    assert any(c.pipeline == "streamed" and recipe(c.spec).tile.cluster > 1 for c in cases)
    # ragged rows: in registers for each epilogue, and staged over a cluster; framed rows for each
    assert {c.epilogue for c in cases if c.pipeline == "ragged"} == set(sanitize.EPILOGUES)
    assert {c.epilogue for c in cases if c.pipeline == "framed"} == set(sanitize.EPILOGUES)
    assert any(c.pipeline == "ragged" and recipe(c.spec).tile.cluster > 1 for c in cases)


def test_sanitize_calls_stride_fixed_grids_over_more_than_one_row(default_set):
    cases, _ = sanitize.cases(default_set)
    for c in cases:
        s = c.spec
        for n in sanitize.n_values(s):
            assert (n % 2 == 1 if s.ragged else n % s.vec != 0 if s.framed else n % s.vec == 0) and n >= 1, (s.name, n)
            assert s.bucket is None or (framed_range(s)[0] < n <= framed_range(s)[1] if s.framed
                                        else n <= s.bucket), (s.name, n)
        if s.pipeline == Pipeline.ONE_PASS and not s.ragged and not s.framed:
            assert sanitize.n_values(s)[0] == s.bucket  # the whole-row kernel, where there is one
        resident = c.pipeline == "cluster" and recipe(s).tile.resident
        assert sanitize.fixed_grid(s) == (c.pipeline == "streamed" or resident)
    for groups, rpb in ((92, 1), (132, 1), (45, 2)):
        m = sanitize.rows_for(True, groups, rpb)
        assert m > 2 * groups * rpb  # every group strides over two rows or more
    assert sanitize.rows_for(False, 400, 4) == 5 and sanitize.rows_for(False, 400, 1) == 3


def test_sanitize_list_runs_without_a_gpu():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "sanitize.py"), "--list"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "flags: memcheck:" in done.stdout and "--report-api-errors all" in done.stdout


# ---- the soak ----------------------------------------------------------------------------------------
MIB = 1 << 20


def test_growth_of_flat_and_noisy_series_is_none():
    assert soak.growth([100 * MIB] * 30, MIB, 0.0)["grows"] is False
    noisy = [100 * MIB + (i * 7919 % 13) * 10_000 for i in range(60)]
    assert soak.growth(noisy, MIB, 0.0)["grows"] is False
    # a spike while the middle third ran, none after: no growth
    spiky = [100 * MIB] * 30
    spiky[15] = 900 * MIB
    assert soak.growth(spiky, 256 * MIB, 0.1)["grows"] is False


def test_growth_of_a_leak_is_found():
    leak = [100 * MIB + i * MIB // 2 for i in range(90)]  # half a MiB a sample
    g = soak.growth(leak, MIB, 0.0)
    assert g["grows"] is True and g["last_max"] > g["middle_max"] + g["margin"]
    # the held quantities' margin: 256 MiB or 10%
    assert soak.growth(leak, 256 * MIB, 0.1)["grows"] is False
    assert soak.growth([1000 * MIB + i * 10 * MIB for i in range(90)], 256 * MIB, 0.1)["grows"] is True


def test_growth_within_the_margin_and_early_growth_pass():
    # settling in the first third is not judged
    settling = [i * 50 * MIB for i in range(10)] + [500 * MIB] * 20
    assert soak.growth(settling, MIB, 0.0)["grows"] is False
    assert soak.growth([100 * MIB] * 20 + [100 * MIB + MIB // 2] * 10, MIB, 0.0)["grows"] is False


def test_growth_with_too_few_samples_is_inconclusive():
    assert soak.growth([1, 2, 3, 4, 5], MIB, 0.0)["grows"] is None
    assert soak.growth([None] * 40, MIB, 0.0)["grows"] is None  # torch absent


def test_cache_bound():
    samples = [{"plans": 3, "kernels": 2, "loaded": 2, "modules": 1}, {"plans": 5, "kernels": 4, "loaded": 4,
                                                                        "modules": 3}]
    assert soak.cache_bound(samples, 5)["within"] is True
    assert soak.cache_bound(samples, 4)["within"] is False
    assert soak.cache_bound(samples, 5)["peaks"]["plans"] == 5


def _samples(k: int, **over) -> list[dict]:
    base = {"device_used": 4 << 30, "pool_used": 300 * MIB, "pool_total": 900 * MIB, "torch_allocated": None,
            "torch_reserved": None, "host_rss": 2 << 30, "plans": 40, "kernels": 30, "loaded": 30, "modules": 25}
    return [{**base, **{q: f(i) for q, f in over.items()}} for i in range(k)]


def test_soak_verdict():
    clean = soak.judge_soak(_samples(30), 48, 1000, 0, 0, [])
    assert clean["verdict"] == "PASS" and clean["grew"] == [] and clean["inconclusive"] == []
    leak = soak.judge_soak(_samples(30, pool_used=lambda i: 300 * MIB + i * MIB), 48, 1000, 0, 0, [])
    assert leak["verdict"] == "FAIL" and leak["grew"] == ["pool_used"]
    assert soak.judge_soak(_samples(30), 48, 1000, 1, 0, [])["reasons"] == ["1 wrong results"]
    assert soak.judge_soak(_samples(30), 48, 1000, 0, 2, [])["reasons"] == ["2 exceptions in calls"]
    assert soak.judge_soak(_samples(30), 48, 1000, 0, 0, ["thread 1: ..."])["verdict"] == "FAIL"
    assert soak.judge_soak(_samples(30), 48, 0, 0, 0, [])["reasons"] == ["no calls in the timed soak"]
    over = soak.judge_soak(_samples(30, plans=lambda i: 40 + i), 48, 1000, 0, 0, [])
    assert over["verdict"] == "FAIL" and not over["cache_bound"]["within"]
    short = soak.judge_soak(_samples(3), 48, 10, 0, 0, [])
    assert short["verdict"] == "PASS" and "pool_used" in short["inconclusive"]


def test_soak_loop_pauses_the_workers_for_each_sample_and_stops():
    lock = threading.Lock()
    active, calls, seen, entered = [0], Counter(), [], set()

    def work(k):
        with lock:
            active[0] += 1
        time.sleep(0.001)
        with lock:
            active[0] -= 1
            calls[k] += 1

    def take():
        with lock:
            seen.append(active[0])
            return {"calls": sum(calls.values())}

    class Context:
        def __init__(self, k):
            self.k = k

        def __enter__(self):
            entered.add((self.k, threading.current_thread().name))

        def __exit__(self, *exc):
            return False

    samples, failures = soak.run_loop(3, 0.6, 0.05, work, take, Context)
    assert failures == []
    assert len(samples) >= 5 and set(seen) == {0}  # no call in flight at any sample
    assert all(calls[k] for k in range(3))
    assert samples[-1]["calls"] == sum(calls.values())  # none after the last sample
    assert entered == {(k, f"soak-{k}") for k in range(3)}  # each worker's context, on its thread


def test_soak_loop_stops_on_what_escapes_a_worker():
    def work(k):
        if k == 1:
            raise RuntimeError("boom")
        time.sleep(0.001)

    start = time.monotonic()
    _, failures = soak.run_loop(3, 60, 0.05, work, dict)
    assert time.monotonic() - start < 20
    assert len(failures) == 1 and "thread 1" in failures[0] and "boom" in failures[0]


def test_soak_loop_reports_a_hung_call():
    release = threading.Event()

    def work(k):
        if k == 0:
            release.wait(10)
        else:
            time.sleep(0.001)

    try:
        _, failures = soak.run_loop(2, 60, 0.05, work, dict, timeout=0.5)
    finally:
        release.set()
    assert any("did not reach the barrier" in f for f in failures), failures


@pytest.fixture(scope="module")
def configs():
    return [c for seed in (1, 2, 3) for c in soak.draw_configs(seed, 200)]


def test_soak_configurations_are_valid_calls(configs):
    for c in configs:
        for dev in (devices.KNOWN[90], devices.KNOWN[80]):
            spec = soak.planned_instance(c, dev)
            assert invalid_reason(spec) is None, (c.describe(), spec.name, invalid_reason(spec))
            assert devices.unsupported_reason(spec, dev) is None, (c.describe(), spec.name)
        # what normgen's argument checks require
        if c.gamma and c.beta:
            assert c.gamma == c.beta, c.describe()
        for w in (c.gamma, c.beta):
            assert w in (None, c.x, DType.FP32), c.describe()
        assert c.norm == Norm.LAYERNORM or c.beta is None
        assert not c.weight_offset or (c.norm == Norm.RMSNORM and c.gamma), c.describe()
        assert c.quant in (None, "int8", "fp8_e4m3")
        assert c.smooth is None or c.quant, c.describe()
        assert c.scale_dtype is None or (c.quant and not c.static), c.describe()
        assert not c.static or c.quant, c.describe()
        assert not c.lead or c.m % 2 == 0, c.describe()
        assert c.m == 1 or c.m * c.n <= soak.ELEMENTS, c.describe()
        assert c.n % soak.vec_align(c) == 0 and soak.vec_align(c) <= c.x.vmax


def test_soak_configurations_are_distinct_and_cover_the_options(configs):
    drawn = soak.draw_configs(7, 48)
    assert len(drawn) == len(set(drawn)) == 48
    assert drawn == soak.draw_configs(7, 48)  # the seed decides
    has = lambda f: any(f(c) for c in configs)  # noqa: E731
    assert has(lambda c: c.norm == Norm.RMSNORM) and has(lambda c: c.norm == Norm.LAYERNORM)
    for x in (DType.FP32, DType.FP16, DType.BF16):
        assert has(lambda c: c.x == x)
    assert has(lambda c: c.gamma == DType.FP32 and c.x != DType.FP32)
    assert has(lambda c: c.gamma is None) and has(lambda c: c.norm == Norm.LAYERNORM and c.beta is None)
    assert has(lambda c: c.weight_offset)
    assert has(lambda c: c.residual == FusedAdd.STORE) and has(lambda c: c.residual == FusedAdd.NO_STORE)
    assert has(lambda c: c.x_bias) and has(lambda c: c.stats)
    assert has(lambda c: c.quant and c.static) and has(lambda c: c.quant and not c.static and c.smooth)
    assert has(lambda c: c.scale_dtype == "bfloat16")
    assert has(lambda c: c.n in tiles.BUCKETS) and has(lambda c: c.n % 2 == 1)
    assert has(lambda c: c.offset % 2 == 1) and has(lambda c: c.pad) and has(lambda c: c.lead)
    assert has(lambda c: c.lib == "torch") and has(lambda c: c.lib == "cupy")
    assert has(lambda c: c.m >= 64)
    assert not any(c.lib == "torch" for c in soak.draw_configs(1, 100, libs=("cupy",)))


def test_soak_vector_width_is_the_dispatchers(configs):
    """soak.vec_align (which names the kernel a configuration's calls are filed under) is
    what dispatch._rows and dispatch._vec_align compute for its arrays' layout."""
    base = 1 << 20  # an allocation's address: 512-byte aligned
    for c in configs:
        isz = c.x.itemsize
        stride = c.n + c.pad
        if c.lead:
            shape, strides = (2, c.m // 2, c.n), (c.m // 2 * stride, stride, 1)
        else:
            shape, strides = (c.m, c.n), (stride, 1)
        xv = View(None, base + c.offset * isz, shape, strides, c.x, 0, False)
        rows, inner, so, si = dispatch._rows(xv)
        bits = c.n | so | si
        aligned = [View(None, base, (c.n,), (1,), c.gamma, 0, False)] if c.gamma else []
        if c.residual != FusedAdd.NONE:
            rv = View(None, 2 * base + c.offset * isz, shape, strides, c.x, 0, False)
            _, _, r_so, r_si = dispatch._rows(rv)
            bits |= r_so | r_si
            aligned.append(rv)
        assert dispatch._vec_align(xv, bits, aligned) == soak.vec_align(c), c.describe()
        assert rows == c.m


def test_soak_call_key_has_the_dispatchers_shape(configs):
    c = configs[0]
    key = soak.call_key(c)
    assert len(key) == 14 and key[:5] == (0, c.n, soak.vec_align(c), 16 // c.x.itemsize, c.norm)
    for c in configs:
        _, _, _, _, _, x, w, out, add, xb, mode, smooth, sdt, stats = soak.call_key(c)
        assert (mode == Quant.DYNAMIC) == (sdt is not None) == bool(c.quant and not c.static)
        assert out == (x if not c.quant else {"int8": DType.INT8, "fp8_e4m3": DType.FP8}[c.quant])


# ---- resident_clusters' driver call ----------------------------------------------------------------
def test_cu_launch_config_has_the_c_layout():
    """cuda.h's CUlaunchConfig on x86-64: seven unsigned ints (28 bytes), 4 bytes of padding,
    hStream at 32, attrs at 40, numAttrs at 48, padded to 56."""
    config = runtime._CUlaunchConfig
    assert ctypes.sizeof(config) == 56
    offsets = {name: getattr(config, name).offset for name, _ in config._fields_}
    assert offsets == {"gridDimX": 0, "gridDimY": 4, "gridDimZ": 8, "blockDimX": 12, "blockDimY": 16,
                       "blockDimZ": 20, "sharedMemBytes": 24, "hStream": 32, "attrs": 40, "numAttrs": 48}


def test_cu_launch_config_matches_cuda_h(tmp_path):
    """The same, as a C compiler lays out cuda.h's struct (where a compiler and the header are here)."""
    from normgen.compile import CompileError, cuda_include_dir

    cc = shutil.which("cc") or shutil.which("gcc")
    try:
        include = Path(cuda_include_dir())
    except CompileError:
        pytest.skip("no CUDA headers")
    if cc is None or not (include / "cuda.h").is_file():
        pytest.skip("no C compiler or no cuda.h")
    src = tmp_path / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include <cuda.h>\nint main(void) {\n'
                   '  printf("%zu %zu %zu %zu %zu\\n", sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, sharedMemBytes),'
                   ' offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),'
                   ' offsetof(CUlaunchConfig, numAttrs));\n  return 0;\n}\n')
    built = subprocess.run([cc, f"-I{include}", str(src), "-o", str(tmp_path / "layout")], capture_output=True,
                           text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    got = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, timeout=60).stdout.split()
    c = runtime._CUlaunchConfig
    assert [int(v) for v in got] == [ctypes.sizeof(c), c.sharedMemBytes.offset, c.hStream.offset, c.attrs.offset,
                                     c.numAttrs.offset]


def test_runtime_does_not_import_the_cuda_bindings_driver():
    """cuda.bindings' driver module resolves every driver symbol through cuGetProcAddress on
    first use; the runtime calls the driver through ctypes instead."""
    tree = ast.parse((ROOT / "normgen" / "runtime.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("cuda.bindings"), ast.dump(node)
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("cuda.bindings") for a in node.names), ast.dump(node)


def test_the_suite_summary_adds_the_shards_up_and_says_when_limit_stopped_one():
    """scripts/suite_summary.py on shard logs as pytest -q writes them: counts added up, the
    longest shard's time, INCOMPLETE only where a shard was interrupted."""
    summary = _script("suite_summary").summary
    done = ["....\nFAILED tests/t.py::a - assert\n"
            "1 failed, 99 passed, 4275 deselected, 27 warnings in 320.67s (0:05:20)\n",
            "...\n98 passed, 1 skipped, 4276 deselected in 340.09s (0:05:40)\n",
            "..E\n99 passed, 4275 deselected, 1 error in 312.19s (0:05:12)\n"]
    assert summary(done, 3, "400") == "1 failed, 296 passed, 1 skipped, 1 error in 340.09s (3 shards of 3)"
    stopped = ("....\n!!!!!!!!!!!!!!!!!!!! KeyboardInterrupt !!!!!!!!!!!!!!!!!!!!\n"
               "/x/reference.py:35: KeyboardInterrupt\n64 passed, 4275 deselected, 46 warnings in 398.55s (0:06:38)\n")
    assert summary(done + [stopped], 4, "400") == (
        "1 failed, 360 passed, 1 skipped, 1 error in 398.55s (4 shards of 4); "
        "INCOMPLETE: 1 shards stopped at LIMIT=400 before their last test")
    before_any_summary = stopped.split("64 passed")[0]
    assert summary([before_any_summary], 1, "60") == (
        " in 0.00s (0 shards of 1); INCOMPLETE: 1 shards stopped at LIMIT=60 before their last test")
