"""normgen.bench without a GPU: the report from synthetic results (peers unavailable, no
such op, failed and skipped rows), the output names on an H200, the N lists of --quick and
the full run, the peer tables, that importing the module leaves torch alone, and a dry
run of bench.run on CPU tensors with fake timers and a fake peer (what a peer that raises,
an unimportable peer and the time budget leave in the result)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from normgen import bench

ROOT = Path(__file__).resolve().parent.parent


def _row(op, dtype, n, impl, ratio=None, status="ok", note=None, **extra):
    return dict(op=op, dtype=dtype, n=n, m=bench.ELEMENTS // n, impl=impl, timing="events",
                ms=None if ratio is None else 0.2, gbps=None if ratio is None else 3000 * ratio,
                ratio=ratio, status=status, note=note, **extra)


def _result(gpu="NVIDIA H100 80GB HBM3") -> dict:
    rows = [
        _row("layernorm", "bfloat16", 1000, "normgen", 0.95123),
        _row("layernorm", "bfloat16", 1000, "torch", 0.5),
        _row("layernorm", "bfloat16", 1000, "quack", 0.9),
        _row("layernorm", "bfloat16", 4096, "normgen", 0.97),
        _row("layernorm", "bfloat16", 4096, "torch", 0.8),
        _row("layernorm", "bfloat16", 4096, "quack", status="failed",
             note="AssertionError: Unsupported N for the cluster"),
        _row("layernorm", "bfloat16", 5003, "quack", 0.5, err=0.3),
        _row("layernorm+fp8", "bfloat16", 4096, "normgen", 0.9),
        _row("layernorm+fp8", "bfloat16", 4096, "quack", status="no such op",
             note=bench.PEER_MISSING["quack"]["layernorm+fp8"]),
        _row("rmsnorm", "float16", 65536, "normgen", status="skipped",
             note="not run: the time budget (480 s) was spent"),
        dict(op="layernorm", dtype="bfloat16", m=1, n=4096, impl="normgen", us=4.25, timing="graph",
             status="ok", note=None),
        dict(op="rmsnorm", dtype="bfloat16", m=32, n=4096, impl="quack", us=None, timing="graph",
             status="failed", note="RuntimeError: operation not permitted when stream is capturing"),
    ]
    return dict(gpu=gpu, date="2026-11-26", torch="2.11.0", copy_gbps=3000.0, elements=bench.ELEMENTS,
                quick=True, budget_s=480.0, impls=list(bench.IMPLS), rows=rows,
                peers={"quack": {"available": True, "version": "0.6.5"},
                       "liger": {"available": False, "reason": "ModuleNotFoundError: No module named 'triton'"}},
                host_us={"normgen": 15.5, "torch": 16.6}, host_notes={"quack": "RuntimeError: no CUDA"},
                complete=False, skipped_cases=1, elapsed_s=500.0)


def _section(md: str, title: str) -> list[str]:
    """The lines of md's section `## title` (up to the next section)."""
    lines = md.splitlines()
    start = lines.index(f"## {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1:end]


def _cells(section: list[str], first: str) -> list[str]:
    header = next(line for line in section if line.startswith("| N |") or line.startswith("| op |"))
    row = next(line for line in section if line.startswith(f"| {first} |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    return dict(zip(names, (c.strip() for c in row.strip("|").split("|"))))


def _footnote(section: list[str], mark: str) -> str:
    sup = mark[-1]
    return next(line for line in section if line.startswith(sup + " "))


def test_markdown_marks_no_such_op_failed_skipped_and_unavailable_peers():
    md = bench.markdown(_result())
    # an unimportable peer is a line with its reason, not a column
    assert "- liger: not measured, not importable (ModuleNotFoundError: No module named 'triton')" in md
    assert "liger |" not in md
    ln = _section(md, "layernorm, bfloat16")
    assert ln[1] == "| N | normgen | torch | quack |"
    assert _cells(ln, 1000) == {"N": "1000", "normgen": "0.951", "torch": "0.500", "quack": "0.900"}
    failed = _cells(ln, 4096)["quack"]
    assert failed.startswith("×") and failed != "×"
    assert _footnote(ln, failed).rstrip() == failed[-1] + " quack: failed: AssertionError: Unsupported N for the cluster"
    assert _cells(ln, 5003)["quack"].startswith("0.500!")  # a peer that disagrees with torch is flagged
    assert "differ from torch eager's by 0.3" in "\n".join(ln)
    assert _cells(ln, 5003)["normgen"] == ""  # no row: an empty cell, not a number
    fp8 = _section(md, "layernorm+fp8, bfloat16")
    none = _cells(fp8, 4096)["quack"]
    assert none.startswith("—")
    assert "quack: no such op: quack has no dynamically quantized output" in _footnote(fp8, none)
    skipped = _cells(_section(md, "rmsnorm, float16"), 65536)["normgen"]
    assert skipped.startswith("…")
    assert "skipped 1 cases" in md
    summary = _section(md, "Summary: geometric-mean ratio to copy (rows measured / rows run)")
    assert _cells(summary, "layernorm")["quack"] == f"{math.sqrt(0.9 * 0.5):.3f} (2/3)"
    assert _cells(summary, "layernorm+fp8")["quack"] == "—"
    assert _cells(summary, "rmsnorm")["normgen"] == "… (0/1)"
    small = _section(md, "Small shapes, bf16 (µs per call, CUDA graph replay)")
    assert "| layernorm | 1 x 4096 | 4.25 |" in "\n".join(small)
    assert any(line.startswith("| rmsnorm | 32 x 4096 |") and "×" in line for line in small)
    host = "\n".join(_section(md, "Host cost of one eager call (LayerNorm 1 x 4096 bf16, no sync)"))
    assert "- normgen: 15.50 µs" in host and "- quack: × RuntimeError: no CUDA" in host
    calls = "\n".join(_section(md, "Peer calls (forward only, no autograd)"))
    assert "quack, layernorm: quack.rmsnorm.layernorm_fwd" in calls
    assert "quack, layernorm+fp8: no such op" in calls


def test_markdown_reads_rows_of_older_runs():
    """Rows written before statuses existed (bench.json of 2026-11-25) render as measured."""
    row = dict(op="layernorm", dtype="bfloat16", n=1024, m=131072, ms=0.18223680257797242, timing="events")
    result = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-25", "torch": "2.11.0+cu130",
              "copy_gbps": 2978.380305766447, "elements": 1 << 27,
              "rows": [dict(row, impl="normgen", gbps=2946.0295637610902, ratio=0.9891381426533333),
                       dict(row, impl="torch", gbps=1749.3, ratio=0.5873)],
              "host_us": {"normgen": 15.500388500015562, "torch": 16.596009500005948}}
    md = bench.markdown(result)
    first = next(r for r in result["rows"] if r["timing"] == "events")
    assert f"| {first['n']} | {first['ratio']:.3f} |" in "\n".join(_section(md, f"{first['op']}, {first['dtype']}"))
    cells = "\n".join(line for line in md.splitlines() if line.startswith("|"))
    assert "×" not in cells and "—" not in cells and "…" not in cells


def test_summary_lines_one_per_op():
    lines = bench.summary_lines(_result())
    assert [line.split(":")[0] for line in lines] == ["layernorm", "layernorm+fp8", "rmsnorm"]
    assert lines[0] == ("layernorm: normgen 0.961 (2/2), torch 0.632 (2/2), quack "
                        f"{math.sqrt(0.45):.3f} (2/3)")
    assert "quack —" in lines[1]


@pytest.mark.parametrize("gpu, stem", [("NVIDIA H200", "bench-h200"), ("NVIDIA H200 NVL", "bench-h200"),
                                       ("NVIDIA H100 80GB HBM3", "bench"), ("NVIDIA A100-SXM4-80GB", "bench")])
def test_h200_runs_write_their_own_files(tmp_path, gpu, stem):
    paths = bench.write_outputs(_result(gpu), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stem}.json", f"{stem}.md"]
    assert paths == [tmp_path / f"{stem}.json", tmp_path / f"{stem}.md"]
    assert json.loads(paths[0].read_text())["gpu"] == gpu
    assert paths[1].read_text().startswith(f"# normgen benchmark: {gpu},")


def test_quick_and_full_sizes():
    for op, (_, pow2, _, _) in bench.OPS.items():
        quick, full = bench.sizes(op, True), bench.sizes(op, False)
        assert set(bench.OTHER_N) == {1000, 5003, 5120, 50257, 100003}
        assert set(bench.OTHER_N) <= set(quick) and set(bench.OTHER_N) <= set(full), op
        assert [n for n in quick if n not in bench.OTHER_N] == list(pow2[::2]), op
        assert [n for n in full if n not in bench.OTHER_N] == list(pow2), op
        assert list(full) == sorted(full)
    quick, full = bench.cases(list(bench.OPS), True), bench.cases(list(bench.OPS), False)
    assert (len(quick), len(full)) == (95, 135)
    assert len(set(full)) == len(full) and full[:len(quick)] == quick  # the quick set first
    assert bench.cases(["add+rmsnorm"], True) == [("add+rmsnorm", "bfloat16", n)
                                                  for n in (1000, 1024, 4096, 5003, 5120, 16384, 50257, 65536, 100003)]


def test_vector_alignment_of_row_lengths():
    assert [bench.ops._vec(n) for n in (1000, 5003, 50257, 100003, 4096, 6, 12)] == [8, 1, 1, 1, 8, 2, 4]


def test_peer_tables_cover_every_op():
    for peer in bench.PEERS:
        assert set(bench.PEER_CALLS[peer]) | set(bench.PEER_MISSING[peer]) == set(bench.OPS), peer
        assert not set(bench.PEER_CALLS[peer]) & set(bench.PEER_MISSING[peer]), peer
    assert bench.IMPLS[:3] == ("normgen", "torch", "torch.compile") and set(bench.PEERS) <= set(bench.IMPLS)


def test_reason_is_one_line():
    assert bench.reason(AssertionError("Unsupported dtype\n  more")) == "AssertionError: Unsupported dtype"
    assert bench.reason(RuntimeError()) == "RuntimeError"
    assert len(bench.reason(ValueError("x" * 500))) == 200


def test_import_does_not_import_torch_or_matplotlib():
    code = ("import sys, normgen.bench; "
            "print(sorted(m for m in ('torch', 'matplotlib', 'quack', 'liger_kernel') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_help():
    from click.testing import CliRunner

    r = CliRunner().invoke(bench.main, ["--help"])
    assert r.exit_code == 0, r.output
    for option in ("--quick", "--impl", "--op, --ops", "--budget", "--out"):
        assert option in r.output


def test_python_dash_m_runs_the_cli():
    """`python -m normgen.bench` (the package's __main__) runs the same command."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "normgen.bench", "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: python -m normgen.bench [OPTIONS]")
    for option in ("--quick", "--impl", "--op, --ops", "--budget", "--out"):
        assert option in r.stdout


def test_package_names_are_functions_not_modules():
    """normgen.bench.cases and .run are the functions: no submodule of those names shadows
    them (the modules are ops and measure)."""
    assert callable(bench.cases) and callable(bench.run)


# ---- a dry run on CPU tensors ------------------------------------------------------------
@pytest.fixture
def dry(monkeypatch):
    """bench.run's surroundings on CPU: tensors made on the CPU, fake timers, no prebuild, a
    fake quack (torch calls; raises at N=5003), an unimportable liger."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def rmsnorm_fwd(x, weight=None, bias=None, residual=None, eps=1e-6, **_):
        if x.shape[-1] == 5003:
            raise AssertionError("fake quack: no N=5003\nsecond line")
        h = x if residual is None else (x.float() + residual.float()).to(x.dtype)
        return F.rms_norm(h.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype), h, None

    def layernorm_fwd(x, w, b, eps=1e-6):
        assert w.dtype == torch.float32 and b.dtype == torch.float32
        return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps).to(x.dtype)

    quack = types.ModuleType("quack")
    module = types.ModuleType("quack.rmsnorm")
    module.rmsnorm_fwd, module.layernorm_fwd = rmsnorm_fwd, layernorm_fwd
    quack.rmsnorm = rmsnorm_fwd  # as quack/__init__.py does: the name shadows the module
    monkeypatch.setitem(sys.modules, "quack", quack)
    monkeypatch.setitem(sys.modules, "quack.rmsnorm", module)
    monkeypatch.setitem(bench.peers.PEER_MODULES, "liger", ("normgen_test_no_such_module",))

    class Cuda:
        def get_device_name(self):
            return "NVIDIA H200"

        def synchronize(self):
            pass

        def empty_cache(self):
            pass

    class Torch:
        cuda = Cuda()

        def __getattr__(self, name):
            return getattr(torch, name)

        def randn(self, *shape, device=None, **kw):
            return torch.randn(*shape, **kw)

    # Each name is patched in the modules that look it up (the package's re-exports are only
    # copies): torch wherever _torch() is called, the case size, timers, copy and prebuild in
    # the run (measure). A name no longer in one of these modules makes setattr raise here.
    for module in (bench.timing, bench.ops, bench.peers, bench.measure):
        monkeypatch.setattr(module, "_torch", lambda: Torch())
    for module in (bench.timing, bench.measure):
        monkeypatch.setattr(module, "ELEMENTS", 1 << 17)
    monkeypatch.setattr(bench.measure, "time_events", lambda fn: (fn(), 0.01)[1])
    monkeypatch.setattr(bench.measure, "time_graph", lambda fn: (fn(), 0.002)[1])
    monkeypatch.setattr(bench.measure, "host_cost_us", lambda fn: (fn(), 9.0)[1])
    monkeypatch.setattr(bench.measure, "copy_gbps", lambda: 3000.0)
    monkeypatch.setattr(bench.measure, "prebuild", lambda quick, ops: 0)
    return torch


def test_dry_run_records_every_case(dry, tmp_path):
    ops = ["rmsnorm", "rmsnorm+fp8"]
    saved = []

    def save(result):
        saved.append(len(result["rows"]))
        bench.write_outputs(result, tmp_path)

    result = bench.run(True, {"torch", "quack", "liger"}, ops, lambda s: None, save=save)
    assert result["peers"]["liger"]["available"] is False
    assert "normgen_test_no_such_module" in result["peers"]["liger"]["reason"]
    big = [r for r in result["rows"] if r["timing"] == "events"]
    # every case has a row per implementation asked for and importable, whatever happened
    assert len(big) == 2 * len(bench.cases(ops, True)) == 2 * (2 * 10 + 9)
    assert not [r for r in big if r["impl"] == "liger"]
    by = {(r["op"], r["dtype"], r["n"], r["impl"]): r for r in big}
    assert by[("rmsnorm", "float16", 1000, "quack")]["status"] == "ok"
    assert by[("rmsnorm", "float16", 1000, "quack")]["err"] < 1e-2  # compared with torch eager
    failed = by[("rmsnorm", "bfloat16", 5003, "quack")]
    assert (failed["status"], failed["note"], failed["ratio"]) == ("failed", "AssertionError: fake quack: no N=5003", None)
    assert by[("rmsnorm", "bfloat16", 50257, "quack")]["status"] == "ok"  # the run went on
    none = by[("rmsnorm+fp8", "bfloat16", 4096, "quack")]
    assert (none["status"], none["ratio"]) == ("no such op", None)
    small = {(r["op"], r["m"], r["n"], r["impl"]) for r in result["rows"] if r["timing"] == "graph"}
    assert small == {("rmsnorm", m, n, i) for m, n in bench.SMALL_RMS for i in ("torch", "quack")}
    assert result["host_us"] == {} and result["complete"]  # the host cost comes with layernorm
    # written after every case, under the H200's names
    assert len(saved) == len(bench.cases(ops, True)) + 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench-h200.json", "bench-h200.md"]
    assert json.loads((tmp_path / "bench-h200.json").read_text())["rows"] == result["rows"]


def test_dry_run_budget_skips_the_rest_and_says_so(dry):
    result = bench.run(False, {"torch", "quack"}, ["layernorm"], lambda s: None, budget=1e-9)
    big = [r for r in result["rows"] if r["timing"] == "events"]
    assert len(big) == 2 * len(bench.cases(["layernorm"], False))
    assert {r["status"] for r in big} == {"skipped"}
    assert result["skipped_cases"] == len(bench.cases(["layernorm"], False)) and not result["complete"]
    # the small shapes and the host cost still run
    assert {r["status"] for r in result["rows"] if r["timing"] == "graph"} == {"ok"}
    assert result["host_us"] == {"torch": 9.0, "quack": 9.0}
    assert "the time budget" in bench.markdown(result)
