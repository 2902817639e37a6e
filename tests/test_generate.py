"""generate.py: every flag, determinism, write-only-what-changed, --check, the registry."""
import copy
import importlib.util
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from normgen import bench, codegen, registry, tiles
from normgen.cli import main
from normgen.compile import compile_file
from normgen.matrix import AXES, select
from normgen.recipe import recipe
from normgen.spec import SpecError, parse_name
from normgen.types import Cache, DType, Entry


def run(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def names(*args):
    code, out = run("--list", *args)
    assert code == 0, out
    return out.split()


def test_default_set_is_listed_and_is_the_common_set():
    listed = names()
    assert listed == sorted(listed) and len(listed) == len(set(listed))
    specs = [parse_name(n) for n in listed]
    assert {s.x.value for s in specs} == {"fp32", "fp16", "bf16"}
    assert {s.pipeline.value for s in specs} == {"1p", "2p"}
    assert {s.save_stats for s in specs} == {True, False}
    assert {s.w == s.x for s in specs} == {True, False}
    assert {s.bucket for s in specs if s.bucket} == {int(b) for b in AXES["bucket"].values}
    # the LayerNorm inference fusions, for fp16/bf16 at 16-byte vectors, every bucket and two-pass
    ln = [s for s in specs if s.norm.value == "layernorm"]
    fused = [s for s in ln if s.fused_add or s.quant.value != "none"]
    assert {(s.fused_add, s.quant.value, s.out.value, s.smooth) for s in fused if s.x.value == "bf16"
            and s.pipeline.value == "2p"} == {
        (add, q, out, sm) for add in (0, 1) for q, out in (("none", "bf16"), ("dq", "int8"), ("dq", "fp8"))
        for sm in (None, DType.FP32) if (add, q) != (0, "none") and not (q == "none" and sm)}
    assert {s.x.value for s in fused} == {"fp16", "bf16"} and {s.vec for s in fused if s.pipeline.value == "1p"} == {8}
    assert {s.bucket for s in fused} == set(tiles.ONE_PASS_TILES[2]) | {None}  # None: two-pass
    # RMSNorm as LLM inference runs it: plain, add and store, dynamic or static int8/fp8
    rms = [s for s in specs if s.norm.value == "rmsnorm"]
    assert {(s.x.value, s.fused_add, s.quant.value, s.out.value) for s in rms if recipe(s).op.fused} == {
        (x, add, q, out) for x in ("fp16", "bf16") for add in (0, 1)
        for q, out in [("none", x)] + [(m, o) for m in ("dq", "sq") for o in ("int8", "fp8")] if add or q != "none"}
    assert {(s.w == s.x, s.smooth, s.x_bias, s.save_stats) for s in rms
            if recipe(s).op.fused} == {(True, None, False, False)}
    assert {s.bucket for s in rms} == set(tiles.BUCKETS) | {None}
    # plain RMSNorm in every precision and weight precision, with and without rstd
    plain = [s for s in rms if not recipe(s).op.fused]
    assert {(s.x.value, s.w.value, s.save_stats) for s in plain} == {
        (x, w, mv) for x in ("fp32", "fp16", "bf16") for w in (x, "fp32") for mv in (False, True)}
    # every family has its fallback: two-pass over single elements, for any N and alignment
    families = {s.scalar_two_pass for s in specs}
    assert families <= set(specs)


@pytest.mark.parametrize("flag, value, check, within_default", [
    ("--prec", "bf16,fp16", lambda s: s.x.value in ("bf16", "fp16"), True),
    ("--wprec", "fp32", lambda s: s.w.value == "fp32", False),  # the fusions with fp32 weights too
    ("--wprec", "same", lambda s: s.w == s.x, True),
    ("--pipeline", "1p", lambda s: s.pipeline.value == "1p", True),
    ("--bucket", "64,8192", lambda s: s.bucket in (64, 8192) or s.pipeline.value == "2p", True),
    ("--vec", "1", lambda s: s.vec == 1, False),  # the fusions at scalar access too
    ("--vec", "max", lambda s: s.vec == s.x.vmax and not s.ragged and not s.framed, True),
    ("--vec", "ragged", lambda s: s.ragged, True),
    ("--vec", "framed", lambda s: s.framed, True),
    ("--norm", "layernorm", lambda s: s.norm.value == "layernorm", False),  # + static-quant LayerNorm
    ("--norm", "rmsnorm", lambda s: s.norm.value == "rmsnorm", False),  # + plain fp32, smooth, stats
    ("--fused-add", "0", lambda s: s.fused_add == 0, True),
    ("--fused-add", "1", lambda s: s.fused_add == 1, False),
    ("--fused-add", "2", lambda s: s.fused_add == 2, False),
    ("--x-bias", "0", lambda s: not s.x_bias, True),
    ("--x-bias", "1", lambda s: s.x_bias, False),
    ("--quant", "none", lambda s: s.quant.value == "none", True),
    ("--quant", "int8", lambda s: s.out.value == "int8", False),
    ("--quant", "fp8", lambda s: s.out.value == "fp8", False),
    ("--quant-mode", "static", lambda s: s.quant.value in ("none", "sq"), False),
    ("--smooth", "bf16", lambda s: s.smooth in (None, DType.BF16), False),
    ("--scale-prec", "fp16", lambda s: s.scale in (None, DType.FP16), False),
])
def test_axis_filters(flag, value, check, within_default):
    chosen = names(flag, value)
    assert chosen and all(check(parse_name(n)) for n in chosen)
    assert (set(chosen) <= set(names())) == within_default


def test_save_mv_flags():
    with_mv, without = names("--save-mv"), names("--no-save-mv")
    assert with_mv and all(n.endswith("_mv") for n in with_mv)
    assert without and not any(n.endswith("_mv") for n in without)
    # --save-mv sets the axis in every family (the fusions with stats too)
    assert set(names()) < set(with_mv + without)
    assert {n for n in names() if n.endswith("_mv")} < set(with_mv)


def test_filter_and_exclude_globs():
    assert names("--filter", "layernorm_fwd_bf16_nb4096_1p_v8_mv") == ["layernorm_fwd_bf16_nb4096_1p_v8_mv"]
    two = names("--filter", "layernorm_*_fp16_nb64_1p_*", "--filter", "*_fp32_2p_v4")
    assert set(two) == {f"layernorm_fwd_fp16_nb64_1p_{v}{mv}" for v in ("v1", "v2", "v4", "v8", "r8")
                        for mv in ("", "_mv")} | {"layernorm_fwd_fp32_2p_v4", "rmsnorm_fwd_fp32_2p_v4"}
    kept = names("--prec", "bf16", "--exclude", "*_mv", "--exclude", "*_v1*")
    assert kept and all(not n.endswith("_mv") and "_v1" not in n for n in kept)


def test_filter_reaches_values_outside_the_default_set():
    # vec 2 is not in the default set; a glob ranges over every value of an unset axis.
    assert names("--filter", "layernorm_fwd_fp16_nb1024_1p_v2") == ["layernorm_fwd_fp16_nb1024_1p_v2"]
    assert "layernorm_fwd_fp16_nb1024_1p_v2" not in names()


def test_unknown_value_is_a_clear_error():
    code, out = run("--prec", "fp64")
    assert code == 2 and "fp64" in out and "fp32, fp16, bf16" in out


def test_selecting_nothing_fails():
    code, out = run("--filter", "nothing*")
    assert code != 0 and "select no instance" in out


def test_generation_is_deterministic_and_writes_only_changes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("--prec", "bf16", "--out", str(a))[0] == 0
    assert run("--prec", "bf16", "--out", str(b))[0] == 0
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    stamp = {f: os.stat(a / f).st_mtime_ns for f in files}
    code, out = run("--prec", "bf16", "--out", str(a))
    assert code == 0 and "wrote 0," in out
    assert stamp == {f: os.stat(a / f).st_mtime_ns for f in files}


def test_check_mode(tmp_path):
    out = str(tmp_path)
    assert run("--prec", "fp16", "--check", "--out", out)[0] == 1  # nothing there yet
    assert run("--prec", "fp16", "--out", out)[0] == 0
    assert run("--prec", "fp16", "--check", "--out", out)[0] == 0
    victim = next(tmp_path.glob("*.cu"))
    victim.write_text(victim.read_text() + "// edited\n")
    code, text = run("--prec", "fp16", "--check", "--out", out)
    assert code == 1 and f"differs: {victim.name}" in text
    assert run("--prec", "fp16", "--out", out)[0] == 0
    # A narrower selection makes the others stale: check says so, generate removes them.
    code, text = run("--prec", "fp16", "--pipeline", "2p", "--check", "--out", out)
    assert code == 1 and "stale:" in text
    run("--prec", "fp16", "--pipeline", "2p", "--out", out)
    assert all("_2p_" in p.name for p in tmp_path.glob("*.cu"))
    # A file of an instance that is no longer valid is stale too; a foreign .cu is left alone.
    (tmp_path / "layernorm_fwd_fp16_nb262144_1p_v1.cu").write_text("// old\n")
    (tmp_path / "mine.cu").write_text("// not generated\n")
    code, text = run("--prec", "fp16", "--pipeline", "2p", "--check", "--out", out)
    assert code == 1 and "stale: layernorm_fwd_fp16_nb262144_1p_v1.cu" in text and "mine" not in text
    run("--prec", "fp16", "--pipeline", "2p", "--out", out)
    assert (tmp_path / "mine.cu").exists()


def test_committed_generated_folder_is_up_to_date():
    assert codegen.differences(codegen.GENERATED, codegen.outputs(select())) == []


def test_registry_matches_the_files():
    reg = registry.load(codegen.GENERATED)
    files = {p.stem for p in codegen.GENERATED.glob("*.cu")}
    assert set(reg.values()) == files
    for key, name in reg.items():
        assert parse_name(name).key == key


def test_templates_are_strict():
    with pytest.raises(Exception, match="undefined"):
        codegen._env.from_string("{{ no_such_thing }}").render()


def _script(name: str):
    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def _tune():
    return _script("tune")


def test_tuning_overrides_recipe_fields():
    """scripts/tune.py builds a variant from the committed recipe by dataclasses.replace: no
    override renders the committed file, the kernels follow whole_row_kernel, and a field,
    value or tile that cannot be built is refused before anything runs."""
    tune = _tune()
    spec = parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb16384_1p_v8")
    assert recipe(spec).whole_row_kernel
    assert codegen.render_instance(spec, tune.overridden(spec, {})) == codegen.outputs([spec])[spec.file_name]
    built = tune.overridden(spec, tune.parse_variant("whole_row_kernel=false,tile.registers=40,row_cache=normal"))
    assert built == replace(recipe(spec), whole_row_kernel=False, kernels=((spec.symbol, Entry.ANY),),
                            tile=replace(recipe(spec).tile, registers=40), row_cache=Cache.NORMAL)
    assert codegen.render_instance(spec, built).count("__global__") == 1
    for bad, why in (("nope=1", "not a field"), ("tile.nope=1", "no field"), ("kernels=1", "not set"),
                     ("output_step=four", "an integer"), ("fold_shift=2", "true or false"),
                     ("row_cache=far", "one of normal"), ("tile.threads_per_row=512", "covers 32768")):
        with pytest.raises(ValueError, match=why):
            tune.overridden(spec, tune.parse_variant(bad))


def test_tuning_serves_the_lengths_the_dispatcher_does():
    """scripts/tune.py times a ragged instance at any length of its bucket, an aligned one at
    whole vectors of it, a two-pass one at any whole vectors."""
    tune = _tune()
    ragged = parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_r8")
    aligned = parse_name("layernorm_fwd_bf16_dqint8_syfp32_nb8192_1p_v8")
    two_pass = parse_name("layernorm_fwd_bf16_2p_v8")
    assert [tune.serves(ragged, n) for n in (5003, 8192, 8193)] == [True, True, False]
    assert [tune.serves(aligned, n) for n in (5003, 5000, 8200)] == [False, True, False]
    assert [tune.serves(two_pass, n) for n in (5003, 100000)] == [False, True]


def test_tuning_lists_a_bucket_the_policy_leaves_out(monkeypatch):
    """scripts/tune.py --list adds a bucket to a tiles table in its process: a framed instance
    of a bucket the policy leaves to ragged rows is then built, with float columns where the
    float-column table lists it too; a bad table, key, kind or bucket is refused."""
    tune = _tune()
    name = "layernorm_fwd_fp16_dqint8_syfp32_nb4096_1p_f8"
    with pytest.raises(SpecError, match="framed_serves"):
        parse_name(name)
    for table in ("FRAMED_BUCKETS", "FRAMED_FLOAT_COLUMN_BUCKETS"):
        monkeypatch.setattr(tiles, table, copy.deepcopy(getattr(tiles, table)))
    try:
        tune.list_bucket("FRAMED_BUCKETS=2:layernorm+quant:4096")
        assert recipe(parse_name(name)).column_bytes == 0
        tune.list_bucket("FRAMED_FLOAT_COLUMN_BUCKETS=fp16:layernorm+quant:4096")
        built = recipe(parse_name(name))
        assert built.column_bytes > 0 and built.keep_outputs
        for bad in ("NOPE=2:layernorm:4096", "FRAMED_BUCKETS", "FRAMED_BUCKETS=3:layernorm:4096",
                    "FRAMED_BUCKETS=2:layer:4096", "FRAMED_BUCKETS=2:layernorm:big"):
            with pytest.raises(ValueError, match="--list"):
                tune.list_bucket(bad)
    finally:
        recipe.cache_clear()  # nothing built under the patched tables outlives the test


def test_profile_lines_sums_counts_by_innermost_line():
    """scripts/profile_lines.py joins ncu's per-address counts (offsets from the kernel's first
    address) with nvdisasm -g's line table, by the innermost line; unlisted addresses go
    under None; the table sums them by file first."""
    lines = _script("profile_lines")
    page = (
        '"Kernel Name","k",\n'
        '"Address","Source","Instructions Executed","Warp Stall Sampling (All Samples)"\n'
        '"0x7f0000001000","LDC R1, c[0x0][0x28]","10","3"\n'
        '"0x7f0000001010","FADD R2, R3, R4","40","1"\n'
        '"0x7f0000001020","FFMA R2, R3, R4, R5","40","0"\n'
        '"0x7f0000001030","EXIT","0","0"\n')
    listing = (
        '\t//## File "/t/templates/kernels/stats.cuh", line 34\n'
        "        /*0000*/                   LDC R1, c[0x0][0x28] ;\n"
        '\t//## File "/t/templates/kernels/epilogue.cuh", line 18 inlined at "/t/k.cu", line 3\n'
        "        /*0010*/                   FADD R2, R3, R4 ;\n"
        "        /*0020*/                   FFMA R2, R3, R4, R5 ;\n")
    counts = lines.executed(page)
    assert counts == {0x0: 10, 0x10: 40, 0x20: 40, 0x30: 0}
    where = lines.source_lines(listing)
    assert where == {0x0: ("stats.cuh", 34), 0x10: ("epilogue.cuh", 18), 0x20: ("epilogue.cuh", 18)}
    totals = lines.by_line(counts, where)
    assert totals == {("epilogue.cuh", 18): 80, ("stats.cuh", 34): 10, None: 0}
    table = lines.table(totals, rows=10, top=2).splitlines()
    assert table[0].startswith("9.0 warp instructions a row")
    assert table[1] == "by file: epilogue.cuh 8.0, stats.cuh 1.0, (no line) 0.0"
    text = (Path(lines.__file__).resolve().parent.parent / "templates" / "kernels" / "epilogue.cuh").read_text()
    assert "epilogue.cuh:18" in table[2] and "88.9%" in table[2]
    assert table[2].endswith(text.splitlines()[17].strip()[:72])


def test_tuning_counts_the_benchmarks_bytes():
    """scripts/tune.py's ratio to copy counts the bytes the benchmark counts for its calls."""
    tune = _tune()
    for op, (dtypes, _, _, moved) in bench.OPS.items():
        for x in (d for d in DType if d.is_float_input and d.numpy.name in dtypes):
            assert tune.bytes_moved(bench.call_spec(op, x), 96, 4096) == moved(96, 4096, x.itemsize), (op, x)


def test_tuning_ptxas_prints_the_committed_recipe_then_each_variant():
    """scripts/tune.py --ptxas (no GPU): the committed recipe's registers first, as ptxas
    reports them for the committed file, then the variant's, built as its override says
    (launch bounds for eight 128-thread blocks an SM: at most 64 registers)."""
    name = "rmsnorm_fwd_bf16_nb1024_1p_v8"
    assert recipe(parse_name(name)).tile.block_threads == 128 and recipe(parse_name(name)).min_blocks_per_sm != 8
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "scripts" / "tune.py"), "--ptxas", name,
                           "--set", "min_blocks_per_sm=8"], capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")]
    assert [(r[0], r[2]) for r in rows] == [("committed", "registers,"), ("min_blocks_per_sm=8", "registers,")]
    committed = compile_file(codegen.GENERATED / f"{name}.cu").resources["registers"]
    assert int(rows[0][1]) == committed
    assert int(rows[1][1]) <= 64


def test_extra_selections_are_valid_and_not_empty():
    """scripts/device_suite.sh generates and tests each line of scripts/extra_selections.txt."""
    path = Path(__file__).resolve().parent.parent / "scripts" / "extra_selections.txt"
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines
    for flags in lines:
        listed = names(*shlex.split(flags))
        assert listed, flags
        assert all(parse_name(n).name == n for n in listed)


def test_add_keeps_what_the_folder_holds(tmp_path):
    out = str(tmp_path)
    assert run("--prec", "fp16", "--pipeline", "2p", "--out", out)[0] == 0
    before = {p.name for p in tmp_path.glob("*.cu")}
    code, text = run("--add", "--filter", "rmsnorm_fwd_bf16_nb1024_1p_v8", "--out", out)
    assert code == 0 and "removed 0" in text
    after = {p.name for p in tmp_path.glob("*.cu")}
    assert after == before | {"rmsnorm_fwd_bf16_nb1024_1p_v8.cu"}
    assert set(registry.load(tmp_path).values()) == {Path(n).stem for n in after}
    assert codegen.registered(tmp_path) == [parse_name(Path(n).stem) for n in sorted(after)]
    # --check --add: up to date, and the rest of the folder is not stale
    assert run("--add", "--check", "--filter", "rmsnorm_fwd_bf16_nb1024_1p_v8", "--out", out)[0] == 0
    # replacing stays explicit: without --add the folder holds exactly the selection
    run("--filter", "rmsnorm_fwd_bf16_nb1024_1p_v8", "--out", out)
    assert {p.name for p in tmp_path.glob("*.cu")} == {"rmsnorm_fwd_bf16_nb1024_1p_v8.cu"}


def test_check_names_the_command_with_its_folder_and_filters(tmp_path):
    code = CliRunner().invoke(main, ["--check", "--prec", "fp16", "--no-save-mv", "--filter", "*_2p_*",
                                     "--out", str(tmp_path)], prog_name="generate.py")
    assert code.exit_code == 1
    assert f"run python generate.py --prec fp16 --no-save-mv --filter '*_2p_*' --out {tmp_path}" in code.output
    code = CliRunner().invoke(main, ["--check", "--add", "--filter", "*_2p_v1", "--out", str(tmp_path)],
                              prog_name="normgen")
    assert f"run normgen --add --filter '*_2p_v1' --out {tmp_path}" in code.output


def test_large_selections_ask_for_a_flag(tmp_path):
    code, out = run("--filter", "*", "--out", str(tmp_path))
    assert code == 2 and "--large" in out and "283196 instances" in out
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("where", ["under_a_file", "a_file"])
def test_unwritable_out_is_a_clear_error(tmp_path, where):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "sub" if where == "under_a_file" else blocker
    result = CliRunner().invoke(main, ["--prec", "fp16", "--pipeline", "2p", "--out", str(out)])
    assert result.exit_code == 2 and "Error: Invalid value for '--out'" in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_version_and_help():
    import normgen

    code, out = run("--version")
    assert code == 0 and normgen.__version__ in out
    code, out = run("--help")
    for flag in ("--add", "--check", "--large", "--compile", "--arch", "--jobs", "--cache", "--prune"):
        assert flag in out


def test_unknown_arch_is_a_clear_error(tmp_path):
    code, out = run("--compile", "--arch", "sm_75", "--filter", "rmsnorm_fwd_bf16_2p_v8", "--out", str(tmp_path))
    assert code == 2 and "sm_75" in out and "sm_80" in out


def test_compile_cache_and_prune(tmp_path, monkeypatch):
    """--compile fills the cache for each --arch with the instances that run there (clusters
    need sm_90); --cache lists the cubins, --prune removes those no instance file produces."""
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "gen"
    code, text = run("--filter", "rmsnorm_fwd_bf16_nb1024_1p_v8", "--filter", "rmsnorm_fwd_bf16_nb65536_1p_v8",
                     "--out", str(out), "--compile", "--arch", "sm_80,sm_90", "--jobs", "2")
    assert code == 0, text
    assert "sm_80: 1 of 2 instances run there" in text and "sm_90: 2 of 2 instances run there" in text
    code, text = run("--cache", "--out", str(out))
    assert code == 0 and "3 cubin(s), 0 stale" in text
    assert "sm_80  rmsnorm_fwd_bf16_nb1024_1p_v8" in text and "sm_80  rmsnorm_fwd_bf16_nb65536" not in text
    # a changed instance file leaves its old cubins stale (the shipped set holds neither file
    # with this content; the source folder is named with --out)
    monkeypatch.setenv("NORMGEN_GENERATED_DIR", str(out))
    (out / "rmsnorm_fwd_bf16_nb65536_1p_v8.cu").write_text("// changed\n")
    code, text = run("--cache")
    assert code == 0 and "3 cubin(s), 1 stale" in text
    code, text = run("--prune")
    assert code == 0 and "removed 1 stale file(s)" in text
    assert "2 cubin(s), 0 stale" in run("--cache")[1]
