#!/usr/bin/env python3
"""The sanitizer run: one instance of each pipeline x epilogue under compute-sanitizer.

Its four tools: memcheck (with host API errors), racecheck, synccheck and initcheck.

    python3 scripts/sanitize.py --out DIR [--jobs N] [--tools memcheck,racecheck] [--only GLOB]
    python3 scripts/sanitize.py --list      # the cases and the flags; needs no GPU

Pipelines (by the instance's tile): registers, staged (one block), cluster (a row over a
thread-block cluster; resident clusters first), streamed (Tile.stream_bytes), two-pass.
Epilogues: plain, fused add, dynamic quant, static quant (no x-bias, no add beside a quant).
Each case is an instance of the default set where it has one, else one generated for the
run; combinations that no instance can have (streamed rows serve LayerNorm's dynamic quant
alone) are listed as such. More cases: streamed rows over a cluster; ragged rows staged over
a cluster (plain, fused add) and in registers loaded through a row image.

Each (instance, tool) is one child process (this script with --child) that dispatches from
that instance alone (strict: no other instance can serve), makes its calls at a few rows --
at the instance's bucket and at a ragged N, and for fixed grids (resident clusters, streamed
rows) at twice the rows the grid holds plus one, so that every block strides over more than
one row -- and checks every output against the float64 reference (tests/gpu.py's
check_call, its output allocations each a cudaMalloc of its own, so that memcheck sees their
exact bounds). Each instance's child runs once without the sanitizer first, with the same
NORMGEN_CACHE_DIR: it compiles the cubin (NVRTC under the sanitizer is slow) and CuPy's own
kernels, and checks the results.

A run is clean when the tool's summary line is there and reports no error (racecheck: no
error-level hazard; with --fail-on-warnings none at all), the child printed its last line,
and the sanitizer's exit status is 0. Per-run logs: DIR/<instance>.<tool>.log (warm-ups:
<instance>.warmup.log); DIR/sanitize.json holds every run's result. One line per (instance,
tool) is printed as it ends, the total last. Exit status: 0 all clean, 1 any error, child
failure, missing summary or timeout, 2 setup error (no compute-sanitizer, a required flag
unknown to it).
"""
from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from normgen import codegen, matrix, paths, tiles  # noqa: E402
from normgen.recipe import recipe  # noqa: E402
from normgen.spec import KernelSpec, framed_range, invalid_reason, parse_name, shorter_bucket  # noqa: E402
from normgen.types import DType, FusedAdd, Norm, Pipeline, Quant  # noqa: E402

# ---- the compute-sanitizer flags ------------------------------------------------------------
ERROR_EXIT = 86  # --error-exitcode: the sanitizer's exit status when it reported errors
KERNELS = ("--kernel-name", "kns=norm_fwd_")  # normgen's kernels: extern "C" names hold "norm_fwd_"
COMMON = ("--error-exitcode", str(ERROR_EXIT), "--launch-timeout", "300")
TOOLS: dict[str, tuple[str, ...]] = {
    # host API errors too, implicit calls included (--report-api-errors all)
    "memcheck": ("--tool", "memcheck", "--report-api-errors", "all", *KERNELS),
    "racecheck": ("--tool", "racecheck", *KERNELS),
    "synccheck": ("--tool", "synccheck", *KERNELS),
    # every kernel: initcheck learns which bytes are initialized from CuPy's kernels' writes too
    "initcheck": ("--tool", "initcheck"),
}
OPTIONAL_FLAGS = {"--launch-timeout", "--kernel-name"}  # dropped, with a note, where unknown

CHILD_OK = "normgen-sanitize: child finished"

# ---- the cases ---------------------------------------------------------------------------------
PIPELINES = ("registers", "staged", "cluster", "streamed", "two-pass", "ragged", "framed")
EPILOGUES = ("plain", "fused add", "dynamic quant", "static quant")


def pipeline_of(spec: KernelSpec) -> str:
    t = recipe(spec).tile
    if spec.ragged:
        return "ragged"
    if spec.framed:
        return "framed"
    if spec.pipeline == Pipeline.TWO_PASS:
        return "two-pass"
    if t.stream_bytes:
        return "streamed"
    if t.cluster > 1:
        return "cluster"
    return "staged" if t.stage_bytes else "registers"


def epilogue_of(spec: KernelSpec) -> Optional[str]:
    """The epilogue, or None for what the four leave out (x-bias, an add beside a quant)."""
    add = spec.fused_add != FusedAdd.NONE
    if spec.x_bias or (add and spec.quant != Quant.NONE):
        return None
    if add:
        return "fused add"
    return {Quant.NONE: "plain", Quant.DYNAMIC: "dynamic quant", Quant.STATIC: "static quant"}[spec.quant]


def fixed_grid(spec: KernelSpec) -> bool:
    """Launched as one wave of what the device holds (resident clusters, streamed blocks),
    each block (cluster) striding over the rows, whatever the rows."""
    t = recipe(spec).tile
    return bool(t.resident or t.stream_bytes)


_EPILOGUE_FIELDS = {
    "plain": ({},),
    "fused add": ({"fused_add": FusedAdd.STORE}, {"fused_add": FusedAdd.NO_STORE}),
    "dynamic quant": ({"quant": Quant.DYNAMIC, "out": DType.INT8, "scale": DType.FP32},
                      {"quant": Quant.DYNAMIC, "out": DType.FP8, "scale": DType.FP32}),
    "static quant": ({"quant": Quant.STATIC, "out": DType.FP8}, {"quant": Quant.STATIC, "out": DType.INT8}),
}


def search_space(epilogue: str):
    """Valid instances of an epilogue beyond the default set: both norms, precisions and
    weight precisions, every bucket and two-pass, 16-byte and single-element vectors."""
    for norm, x, wide, fields_, stats in itertools.product(
            Norm, (DType.BF16, DType.FP16, DType.FP32), (False, True), _EPILOGUE_FIELDS[epilogue], (False, True)):
        shapes = [(Pipeline.TWO_PASS, None)] + [(Pipeline.ONE_PASS, b) for b in tiles.BUCKETS]
        for (pipe, bucket), vec in itertools.product(shapes, (x.vmax, 1)):
            spec = KernelSpec(norm, x, DType.FP32 if wide else x, fields_.get("out", x), save_stats=stats,
                              pipeline=pipe, bucket=bucket, vec=vec,
                              **{k: v for k, v in fields_.items() if k != "out"})
            if invalid_reason(spec) is None:
                yield spec


_X_ORDER = {DType.BF16: 0, DType.FP16: 1, DType.FP32: 2}
_OUT_FIRST = {"dynamic quant": DType.INT8, "static quant": DType.FP8}


def _preference(spec: KernelSpec, pipeline: str, epilogue: str) -> tuple:
    """Smaller is preferred: resident clusters; register rows of 1024 (several rows a block);
    16-byte vectors; the shortest rows; bf16; the plainest columns; stats with plain rows."""
    t = recipe(spec).tile
    return (pipeline == "cluster" and not t.resident,
            abs((spec.bucket or 1024).bit_length() - 11) if pipeline in ("registers", "ragged") else 0,
            spec.vec != spec.x.vmax, spec.bucket or 0, _X_ORDER[spec.x], spec.w != spec.x,
            spec.smooth is not None, spec.scale not in (None, DType.FP32),
            spec.save_stats != (epilogue == "plain"), spec.fused_add == FusedAdd.NO_STORE,
            spec.out != _OUT_FIRST.get(epilogue, spec.out), spec.name)


@dataclass(frozen=True)
class SanitizeCase:
    pipeline: str
    epilogue: str
    spec: KernelSpec
    shipped: bool  # in the default set (else generated for the run)
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.pipeline} x {self.epilogue}" + (f" ({self.note})" if self.note else "")


def cases(default: Optional[list] = None) -> tuple[list[SanitizeCase], list[tuple[str, str]]]:
    """(the cases, the pipeline x epilogue combinations that no instance can have)."""
    default = matrix.select() if default is None else default
    out, impossible = [], []
    for p, e in itertools.product(PIPELINES, EPILOGUES):
        pool = [s for s in default if pipeline_of(s) == p and epilogue_of(s) == e]
        shipped = bool(pool)
        if not pool:
            pool = [s for s in search_space(e) if pipeline_of(s) == p]
        if not pool:
            impossible.append((p, e))
            continue
        spec = min(pool, key=lambda s: _preference(s, p, e))
        out.append(SanitizeCase(p, e, spec, shipped, _note(spec)))
    over = [s for s in default if pipeline_of(s) == "streamed" and recipe(s).tile.cluster > 1 and epilogue_of(s)]
    if over:  # streamed rows over a cluster: their own exchange, on top of the one-block case
        spec = min(over, key=lambda s: _preference(s, "streamed", epilogue_of(s)))
        out.append(SanitizeCase("streamed", epilogue_of(spec), spec, True, _note(spec)))
    for e in ("plain", "fused add"):  # ragged rows staged over a cluster, on top of those in registers
        pool = [s for s in default if pipeline_of(s) == "ragged" and recipe(s).tile.cluster > 1 and epilogue_of(s) == e]
        if pool:
            spec = min(pool, key=lambda s: _preference(s, "ragged", e))
            out.append(SanitizeCase("ragged", e, spec, True, _note(spec)))
    for e in ("plain", "fused add"):  # framed rows over several warps (each warp's last lane reads the next's first vector)
        pool = [s for s in default if pipeline_of(s) == "framed" and recipe(s).tile.threads_per_row > 32 and epilogue_of(s) == e]
        if pool:
            spec = min(pool, key=lambda s: _preference(s, "framed", e))
            out.append(SanitizeCase("framed", e, spec, True, _note(spec)))
    for e, rows in (("plain", 2), ("fused add", 1)):  # ragged rows in registers through an image of `rows` rows
        image = [s for s in default if pipeline_of(s) == "ragged" and recipe(s).row_images == rows and epilogue_of(s) == e]
        if image:
            spec = min(image, key=lambda s: _preference(s, "ragged", e))
            out.append(SanitizeCase("ragged", e, spec, True, _note(spec)))
    return out, impossible


def _note(spec: KernelSpec) -> str:
    t = recipe(spec).tile
    bits = [f"cluster of {t.cluster}"] if t.cluster > 1 else []
    return ", ".join(bits + ["resident"] * bool(t.resident) + [f"row image of {recipe(spec).row_images}"] * bool(recipe(spec).row_images))


def n_values(spec: KernelSpec) -> list[int]:
    """Row lengths a case calls at: one-pass, the bucket (the whole-row kernel, where the
    file has one) and a ragged N above the next smaller bucket; two-pass, two chunks and a
    part, and less than one chunk. All multiples of the vector width, but in ragged rows,
    whose N are odd: one short of the bucket and a few past the next smaller one."""
    v, t = spec.vec, recipe(spec).tile
    if spec.ragged:
        lo = shorter_bucket(spec)
        return [spec.bucket - 1] + ([lo + 5] if lo + 5 < spec.bucket else [])
    if spec.framed:  # the longest row its frame holds, and a few past the next smaller bucket
        lo, top = framed_range(spec)
        return [top] + ([lo + 5] if lo + 5 < top else [])
    if spec.pipeline == Pipeline.TWO_PASS:
        chunk = t.threads_per_row * t.vec * t.repeat
        return [2 * chunk + 3 * v, 7 * v]
    lo = shorter_bucket(spec)
    ragged = spec.bucket - 3 * v
    return [spec.bucket] + ([ragged] if ragged > lo else [])


def rows_for(fixed: bool, groups: int, rows_per_block: int) -> int:
    """A few rows; on a fixed grid twice what it holds plus one, so that every block (or
    cluster) strides over more than one row (the first over three)."""
    if fixed:
        return 2 * groups * rows_per_block + 1
    return max(3, rows_per_block + 1)


# ---- the sanitizer's report --------------------------------------------------------------------
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+) hazards? displayed\s*\((\d+) errors?,\s*(\d+) warnings?\)")
_API_CALL = re.compile(r"on CUDA API call to (\w+)")


@dataclass
class Report:
    found: bool  # the tool's summary line is there
    errors: int = 0
    warnings: int = 0  # racecheck's warning-level hazards
    api_calls: dict = field(default_factory=dict)  # failed API -> times reported


def parse_report(tool: str, text: str) -> Report:
    """The summary of one compute-sanitizer run: ERROR SUMMARY lines (racecheck: RACECHECK
    SUMMARY, or either), summed over processes, and the failed host API calls reported."""
    errors = [int(n) for n in _ERROR_SUMMARY.findall(text)]
    races = [tuple(map(int, r)) for r in _RACE_SUMMARY.findall(text)]
    api = dict(Counter(_API_CALL.findall(text)))
    if tool == "racecheck":
        found = bool(races or errors)
        return Report(found, max(sum(r[1] for r in races), sum(errors)), sum(r[2] for r in races), api)
    return Report(bool(errors), sum(errors), 0, api)


@dataclass
class Verdict:
    clean: bool
    problems: list
    report: Report

    def describe(self) -> str:
        r = self.report
        text = _count(r.errors, "error") + (f", {_count(r.warnings, 'warning')}" if r.warnings else "")
        if r.api_calls:
            text += " (API: " + ", ".join(f"{k} x{v}" for k, v in sorted(r.api_calls.items())) + ")"
        return text if self.clean else text + "; " + "; ".join(self.problems)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def judge(tool: str, rc: Optional[int], text: str, timed_out: bool = False,
          fail_on_warnings: bool = False) -> Verdict:
    """Clean: a summary with no errors (nor warnings, if asked), the child's last line, exit 0."""
    r = parse_report(tool, text)
    problems = []
    if timed_out:
        problems.append("timed out")
    if not r.found:
        problems.append("no summary line")
    if r.errors:
        problems.append("errors reported")
    if r.warnings and fail_on_warnings:
        problems.append("warnings reported")
    if CHILD_OK not in text:
        problems.append("the child did not finish")
    if rc == ERROR_EXIT and not r.errors:
        problems.append(f"exit {rc} (errors) without an error count")
    elif rc not in (0, ERROR_EXIT) and not timed_out:
        problems.append(f"exit status {rc}")
    return Verdict(not problems, problems, r)


# ---- the child: one instance's calls -------------------------------------------------------------
def child(instance: str, source: Path, seed: int) -> int:
    import cupy

    cupy.cuda.runtime.getDeviceCount()  # CUDA up before the slower imports: the sanitizer connects then
    import normgen
    from normgen import dispatch, runtime
    from tests import gpu

    class ExactPoisoned:
        """check_call's outputs, each a cudaMalloc of its own size (CuPy's pool rounds sizes
        up and splits blocks: a write past an output would land in pool memory, unseen),
        filled with 0xFF (NaN) so that an unwritten element fails the comparison."""

        def __enter__(self):
            def alloc(size):
                mem = cupy.cuda.memory._malloc(size)
                if size:
                    cupy.cuda.runtime.memsetAsync(mem.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
                return mem

            cupy.cuda.set_allocator(alloc)
            return self

        def __exit__(self, *exc):
            cupy.cuda.set_allocator(None)

    cupy.cuda.set_allocator(None)  # inputs too: exact allocations
    spec = parse_name(instance)
    normgen.set_strict(True)  # no other instance may serve
    dispatch.use_generated(source, registry={spec.key: spec.name})
    call = gpu.semantics(spec)
    for i, n in enumerate(n_values(spec)):
        kernel = runtime.load(spec, source, 0, n)
        m = rows_for(fixed_grid(spec), kernel.max_groups, kernel.rows_per_block)
        kind = gpu.KINDS[i % len(gpu.KINDS)]
        # ragged rows: x's rows start anywhere in a vector, the residual's elsewhere; framed
        # rows: contiguous rows (each row tensor's rows start alike: aligned accesses), then x
        # sliced from wider rows (y's rows start unlike x's: the bounce slots)
        pad, start = (11, 5) if spec.ragged or (spec.framed and i % 2) else (0, 0) if spec.framed else (8, 0)
        case = gpu.Case(spec.x, spec.w, n, m, kind, pad, gpu.case_seed(seed, instance, n), call, start=start)
        what = f"{instance} N={n} M={m} {kind} (kernel {kernel.symbol}, {kernel.max_groups} groups)"
        assert dispatch.choose(call, n, 1 if spec.ragged or spec.framed else spec.vec) == spec, what
        gpu.check_call(spec, case, gpu.expected(case), what, allocations=ExactPoisoned)
        used = {k.spec for k in dispatch._kernels.values()}
        assert used == {spec}, f"{what}: served by {sorted(s.name for s in used)}"
        print(f"ok: {what}", flush=True)
    cupy.cuda.runtime.deviceSynchronize()
    print(CHILD_OK, flush=True)
    return 0


# ---- the runs ------------------------------------------------------------------------------------
def find_sanitizer(given: Optional[str]) -> Optional[str]:
    candidates = [given] if given else [
        shutil.which("compute-sanitizer"),
        *(str(Path(d) / "bin" / "compute-sanitizer") for d in
          (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if d)]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def checked_tools(sanitizer: str, tools: list[str]) -> tuple[dict, list[str]]:
    """The tools' flags, less optional ones this compute-sanitizer's --help does not name
    (with a note each); SystemExit(2) where a required one is unknown."""
    try:
        help_text = subprocess.run([sanitizer, "--help"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as e:
        print(f"FAIL: cannot run {sanitizer} --help: {e}", flush=True)
        sys.exit(2)
    notes, out = [], {}
    for tool in tools:
        flags = list(COMMON) + list(TOOLS[tool])
        kept = []
        i = 0
        while i < len(flags):
            flag, value = flags[i], flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
            i += 1 + (value is not None)
            if flag in help_text:
                kept += [flag] + ([value] if value is not None else [])
            elif flag in OPTIONAL_FLAGS:
                notes.append(f"{tool}: {flag} is not in this compute-sanitizer's --help; left out")
            else:
                print(f"FAIL: {flag} (needed for {tool}) is not in {sanitizer} --help", flush=True)
                sys.exit(2)
        out[tool] = kept
    return out, sorted(set(notes))


@dataclass
class Run:
    case: SanitizeCase
    tool: str  # "warmup" for the run without the sanitizer
    log: Path
    rc: Optional[int] = None
    seconds: float = 0.0
    timed_out: bool = False
    verdict: Optional[Verdict] = None
    skipped: str = ""  # why it did not run


_procs: set = set()  # the process groups of running children (this script started them)
_procs_lock = threading.Lock()


def _execute(cmd: list[str], env: dict, log: Path, timeout: float) -> tuple[Optional[int], float, bool]:
    start = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
        with _procs_lock:
            _procs.add(proc.pid)
        try:
            rc = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill(proc.pid)
            rc, timed_out = proc.wait(), True
        finally:
            with _procs_lock:
                _procs.discard(proc.pid)
    return rc, time.monotonic() - start, timed_out


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/normgen-out/sanitize"))
    ap.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                    help="runs at a time (default: half the cores, at most 8)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated (default: all four)")
    ap.add_argument("--only", default="", help="glob on instance names or 'pipeline x epilogue' labels")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a run may take (a guard)")
    ap.add_argument("--sanitizer", default=None, help="compute-sanitizer's path (default: PATH, CUDA_HOME)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="NORMGEN_CACHE_DIR of every run (default: the one in force)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fail-on-warnings", action="store_true", help="racecheck warnings fail a run too")
    ap.add_argument("--list", action="store_true", help="print the cases and flags, run nothing")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--source", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.source, args.seed)

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        ap.error(f"unknown tool(s) {unknown}; valid: {', '.join(TOOLS)}")
    all_cases, impossible = cases()
    chosen = [c for c in all_cases if not args.only or fnmatch.fnmatchcase(c.spec.name, args.only)
              or fnmatch.fnmatchcase(c.label, args.only)]
    for c in all_cases:
        print(f"case: {c.label:52} {c.spec.name}{'' if c.shipped else '  (generated for this run)'}")
    for p, e in impossible:
        print(f"case: {p} x {e}: no instance has this pipeline with this epilogue")
    if args.list:
        for tool in tools:
            print(f"flags: {tool}: {' '.join(COMMON + TOOLS[tool])}")
        return 0
    if not chosen:
        print(f"FAIL: --only {args.only!r} matches no case", flush=True)
        return 2
    sanitizer = find_sanitizer(args.sanitizer)
    if sanitizer is None:
        print("FAIL: compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); "
              "pass --sanitizer PATH", flush=True)
        return 2
    flags, notes = checked_tools(sanitizer, tools)
    version = subprocess.run([sanitizer, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    print(f"sanitizer: {sanitizer} ({version[-1] if version else 'version unknown'})")
    for note in notes:
        print(f"note: {note}")

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.log"):
        old.unlink()
    source = out / "generated"
    codegen.write(source, codegen.outputs(sorted({c.spec for c in chosen}, key=lambda s: s.name)))
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               NORMGEN_CACHE_DIR=str((args.cache_dir or paths.cache_dir()).resolve()),
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("NORMGEN_STRICT", None)

    def child_cmd(c: SanitizeCase) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--child", c.spec.name,
                "--source", str(source), "--seed", str(args.seed)]

    # fixed grids (many rows) first: the longest runs start early
    chosen.sort(key=lambda c: (not fixed_grid(c.spec), c.spec.name))
    started = time.monotonic()
    print_lock = threading.Lock()

    def say(line: str) -> None:
        with print_lock:
            print(line, flush=True)

    def warm(c: SanitizeCase) -> Run:
        run = Run(c, "warmup", out / f"{c.spec.name}.warmup.log")
        run.rc, run.seconds, run.timed_out = _execute(child_cmd(c), env, run.log, args.timeout)
        ok = run.rc == 0 and CHILD_OK in run.log.read_text(errors="replace")
        say(f"{'ok  ' if ok else 'FAIL'}  warm-up    {c.label:44} {c.spec.name}  {run.seconds:.0f}s"
            + ("" if ok else f"  (exit {run.rc}{', timed out' if run.timed_out else ''}; log {run.log})"))
        return run

    def sanitized(c: SanitizeCase, tool: str, warmed: Run) -> Run:
        run = Run(c, tool, out / f"{c.spec.name}.{tool}.log")
        if warmed.rc != 0 or CHILD_OK not in warmed.log.read_text(errors="replace"):
            run.skipped = f"warm-up failed (log {warmed.log})"
            run.verdict = Verdict(False, [run.skipped], Report(False))
        else:
            run.rc, run.seconds, run.timed_out = _execute([sanitizer, *flags[tool], *child_cmd(c)], env,
                                                          run.log, args.timeout)
            run.verdict = judge(tool, run.rc, run.log.read_text(errors="replace"), run.timed_out,
                                args.fail_on_warnings)
        v = run.verdict
        say(f"{'ok  ' if v.clean else 'FAIL'}  {tool:10} {c.label:44} {c.spec.name}  {v.describe()}  "
            f"{run.seconds:.0f}s" + ("" if v.clean else f"  log {run.log}"))
        return run

    # every warm-up is queued ahead of every sanitized run, so a run that waits for its
    # instance's warm-up waits for one already started
    pool = ThreadPoolExecutor(args.jobs)
    try:
        warming = {c: pool.submit(warm, c) for c in chosen}
        futures = [pool.submit(lambda c=c, t=t: sanitized(c, t, warming[c].result())) for c in chosen for t in tools]
        runs = [f.result() for f in futures]
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        with _procs_lock:
            for pgid in list(_procs):
                _kill(pgid)
        print("FAIL: interrupted; no verdict", flush=True)
        return 1
    pool.shutdown()

    failed = [r for r in runs if not r.verdict.clean]
    kinds = Counter()
    for r in failed:
        v = r.verdict
        kinds["warm-up failures" if r.skipped else "reported errors" if v.report.errors
              else "timeouts" if r.timed_out else "missing summaries" if not v.report.found
              else "child failures"] += 1
    seconds = time.monotonic() - started
    (out / "sanitize.json").write_text(json.dumps({
        "sanitizer": sanitizer, "version": version, "notes": notes, "flags": flags,
        "impossible": [f"{p} x {e}" for p, e in impossible],
        "runs": [{"instance": r.case.spec.name, "case": r.case.label, "tool": r.tool, "clean": r.verdict.clean,
                  "errors": r.verdict.report.errors, "warnings": r.verdict.report.warnings,
                  "api_calls": r.verdict.report.api_calls, "problems": r.verdict.problems, "rc": r.rc,
                  "seconds": round(r.seconds, 1), "log": str(r.log)} for r in runs],
        "seconds": round(seconds, 1)}, indent=1))
    scope = f"{len(runs)} runs ({len(chosen)} instances x {len(tools)} tools)"
    if failed:
        print(f"FAIL: {scope}: {len(failed)} failed ("
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f") in {seconds:.0f}s; logs in {out}")
        return 1
    print(f"PASS: {scope} clean in {seconds:.0f}s; logs in {out}")
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.exit(main())
    try:
        sys.exit(main())
    except Exception as e:  # the summary line says so, last
        import traceback

        traceback.print_exc()
        print(f"FAIL: sanitize.py stopped: {type(e).__name__}: {e}", flush=True)
        sys.exit(2)
