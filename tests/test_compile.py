"""Every selected instance compiles for sm_90 through NVRTC (no GPU needed), with no
register spills and no local-memory stack frame."""
import re
from pathlib import Path

import pytest

from normgen import cache, codegen, devices
from normgen.compile import compile_file, compile_unspilled, ptx_of
from normgen.matrix import select
from normgen.recipe import recipe
from normgen.spec import parse_name
from normgen.types import FusedAdd

from .conftest import source_dir


def assert_compiles_clean(path, arch="sm_90"):
    compiled = compile_file(path, arch=arch)
    assert compiled.cubin.startswith(b"\x7fELF")
    res = compiled.resources
    assert res["registers"] > 0, compiled.log  # the ptxas report was read
    assert res["spill_stores"] == res["spill_loads"] == 0, compiled.log
    assert res["stack"] == 0, compiled.log
    assert "warning" not in compiled.log, compiled.log


@pytest.mark.compile_all
def test_instance_compiles_without_spills(spec):
    assert_compiles_clean(source_dir() / spec.file_name)


def pipeline_of(spec) -> str:
    """The pipeline an instance's kernel runs: two-pass, framed, streamed, cluster, staged or
    registers (framed and register rows with their columns as floats in shared memory, or not)."""
    r = recipe(spec)
    t = r.tile
    if spec.bucket is None:
        return "two_pass"
    if spec.framed:
        return "framed, float columns" if r.column_bytes else "framed"
    if t.stream_bytes or t.cluster > 1 or t.stage_bytes:
        return "streamed" if t.stream_bytes else "cluster" if t.cluster > 1 else "staged"
    return "registers, float columns" if r.column_bytes else "registers"


def representatives(arch: int) -> list:
    """One default instance of every pipeline x epilogue (prologue: fused add or not; quant:
    none, dynamic, static) x input precision that the dispatcher can choose on `arch`."""
    dev, seen = devices.KNOWN[arch], {}
    for spec in select():
        if devices.unsupported_reason(spec, dev) is None:
            seen.setdefault((pipeline_of(spec), spec.fused_add != FusedAdd.NONE, spec.quant, spec.x), spec)
    return [(arch, s) for s in seen.values()]


OTHER_ARCHS = [rep for arch in sorted(devices.KNOWN) if arch != 90 for rep in representatives(arch)]


@pytest.mark.compile_all
@pytest.mark.parametrize("arch, instance", OTHER_ARCHS, ids=[f"sm_{a}-{s.name}" for a, s in OTHER_ARCHS])
def test_each_pipeline_and_epilogue_compiles_for_every_architecture(arch, instance):
    # as the cache builds it: at a lower residency target where ptxas spills at the file's
    built = cache.compile_instance(instance, source_dir(), f"sm_{arch}")
    assert built.cubin.startswith(b"\x7fELF") and built.resources["registers"] > 0, built.log
    assert not built.spills and "warning" not in built.log, built.log


def test_float_column_rows_of_1024_build_clean_on_every_architecture():
    # at four blocks an SM ptxas spilled them for sm_100 (NVRTC 13.5); the cache's build takes fewer there
    spec = parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb1024_1p_v8")
    assert recipe(spec).column_bytes
    for arch in devices.KNOWN:
        built = cache.compile_instance(spec, source_dir(), f"sm_{arch}")
        assert not built.spills, (arch, built.log)


def test_a_build_that_spills_at_its_residency_target_takes_a_lower_one(tmp_path):
    # the instance's file (256 threads, two blocks an SM) with a target of eight (a 32-register cap: it spills)
    spec = parse_name("rmsnorm_fwd_bf16_nb4096_1p_v8")
    codegen.write(tmp_path, codegen.outputs([spec]))
    path = tmp_path / spec.file_name
    text = path.read_text()
    path.write_text(text.replace("#define NORMGEN_MIN_BLOCKS 2\n", "#define NORMGEN_MIN_BLOCKS 8\n", 1))
    assert compile_file(path).spills
    built = compile_unspilled(path, "sm_90", 8)
    assert not built.spills and built.resources["registers"] > 65536 // (256 * 8), built.log
    # a clean build keeps the file's target: the same cubin as compiling it alone
    path.write_text(text)
    assert compile_unspilled(path, "sm_90", 2).cubin == compile_file(path).cubin


def test_every_architecture_has_its_pipelines():
    for arch in devices.KNOWN:
        pipelines = {pipeline_of(s) for _, s in representatives(arch)}
        assert {"two_pass", "registers", "staged"} <= pipelines, arch
        assert ("cluster" in pipelines) == (arch >= 90), arch
        assert ("streamed" in pipelines) == (arch == 90), arch


# The heaviest fusions outside the default set, those nearest a spill (staged tiles with an
# x-bias or a narrow-vector dynamic quant, RMSNorm's dynamic quant with an add and a smooth
# scale in a whole-row kernel), staged rows kept as floats over narrow vectors or with
# every fusion, and rows built for fewer registers than the staged default (40 over clusters
# of eight, 48 for LayerNorm + quant at 8192); compiled from a scratch folder.
HEAVY = (
    "layernorm_fwd_bf16_dqint8_syfp32_nb131072_1p_v2",
    "layernorm_fwd_fp32_dqint8_syfp32_nb131072_1p_v1",
    "layernorm_fwd_bf16_wfp32_xb_add1_smfp32_dqint8_syfp32_nb16384_1p_v8_mv",
    "rmsnorm_fwd_bf16_xb_add1_nb32768_1p_v2",
    "rmsnorm_fwd_fp16_wfp32_xb_add1_smfp32_dqint8_syfp32_nb65536_1p_v8_mv",
    "rmsnorm_fwd_fp32_dqfp8_syfp32_nb131072_1p_v1",
    "rmsnorm_fwd_bf16_add2_smfp32_dqint8_syfp32_nb65536_1p_v8",
    "layernorm_fwd_bf16_wfp32_xb_add1_smfp32_dqint8_syfp32_nb262144_1p_v2_mv",
    "layernorm_fwd_fp32_xb_add1_smfp32_dqint8_syfp32_nb131072_1p_v1_mv",
    "layernorm_fwd_bf16_wfp32_nb262144_1p_v2_mv",  # plain rows over clusters of eight: 40 registers
    "rmsnorm_fwd_fp16_wfp32_nb131072_1p_v2_mv",
    "layernorm_fwd_fp16_wfp32_add1_smfp32_dqint8_syfp32_nb8192_1p_v8",  # 48 registers
)


@pytest.mark.parametrize("name", HEAVY)
def test_heavy_fusions_compile_without_spills(name, tmp_path):
    spec = parse_name(name)
    codegen.write(tmp_path, codegen.outputs([spec]))
    assert_compiles_clean(tmp_path / spec.file_name)


@pytest.mark.parametrize("name", ["layernorm_fwd_bf16_2p_v8", "rmsnorm_fwd_fp16_2p_v8", "layernorm_fwd_fp32_2p_v4",
                                  "layernorm_fwd_bf16_nb8192_1p_v8", "layernorm_fwd_bf16_nb65536_1p_v8"])
def test_output_vectors_are_stored_whole(name, tmp_path):
    """Each thread's 16-byte output vectors go out in one store each (st.global.v4): NVVM
    may split them into 16- and 32-bit stores, which cost long rows most of their bandwidth
    (docs/perf-notes.md: "Epilogue: plain stores")."""
    spec = parse_name(name)
    codegen.write(tmp_path, codegen.outputs([spec]))
    stores = re.findall(r"\bst\.global[.\w]*", ptx_of(tmp_path / spec.file_name))
    assert stores and all(s.endswith((".v4.u32", ".v4.f32")) for s in stores), stores


def test_template_has_no_generic_lambdas():
    """Device code holds no generic lambda (an `auto` parameter): the GPU machine's NVRTC
    takes one for a host function and fails the compile, where this suite's NVRTC may accept
    it (docs/perf-notes.md: "Compiler and registers")."""
    text = (Path(__file__).resolve().parent.parent / "templates" / "norm_fwd.cuh.j2").read_text()
    assert not re.findall(r"\[[^\]\n]*\]\s*\([^)]*\bauto\b", text)
