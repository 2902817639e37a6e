"""The tuning harness: times variants of an instance, each its committed recipe with some fields
overridden (dataclasses.replace), against the committed recipe and a device-to-device copy.

    python scripts/tune.py NAME [N] [--rows M] [--set FIELD=VALUE[,FIELD=VALUE...]]... [--check]
                           [--list TABLE=KEY:KIND:BUCKET]...
    python scripts/tune.py --ptxas NAME [--set ...]...      (no GPU: registers and spills)

NAME is an instance name, or a glob over the default set (each match in turn); N the row
length (default: the instance's bucket), over M rows (default 2^27 / N). Each --set is one
variant: FIELD is a field of normgen.recipe.Recipe or tile.FIELD (integers, true / false,
enum names), or max_groups, the launch's grid cap in row groups. Nothing is derived
from an override (set tile.repeat with tile.threads_per_row; min_blocks_per_sm with
tile.registers) but the kernels a file holds, which follow whole_row_kernel, and
fast_memory_waves, which follows waves where it is not set itself. Each variant is
rendered into a scratch folder, loaded by normgen.runtime.load and launched through
normgen.dispatch.plan_with on the same inputs. One line per variant, the committed recipe
first: its overrides, microseconds per call (normgen.bench.time_events) and its bandwidth as
a fraction of the copy's; --check: whether its outputs equal the committed recipe's bit for
bit, and their digest (the inputs are seeded: another tree's tune.py at the same call prints
the same digest where its kernel computes the same bits, so two trees' templates compare by
running each tree's tune.py in turn); --ptxas: compiled by NVRTC instead, with the
registers and spills ptxas reports. Each --list adds a bucket to one of normgen.tiles' bucket
tables (keyed by x's element size or precision name, then the operation's kind, as
recipe._listed reads them) for this process, before anything is built: a framed instance of
a bucket the policy leaves to ragged rows (--list FRAMED_BUCKETS=2:layernorm+quant:4096),
with float columns (FRAMED_FLOAT_COLUMN_BUCKETS) or not; its committed line is then that
policy's recipe, and the instance the dispatcher serves is timed by another run.
Under ncu: `ncu -k regex:NAME --launch-skip 3 --launch-count 1 python scripts/tune.py NAME`.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import fnmatch
import functools
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from normgen import bench, codegen, matrix, tiles  # noqa: E402
from normgen import compile as nvrtc  # noqa: E402
from normgen.recipe import TABLE_KINDS, Recipe, bucket_tables, recipe  # noqa: E402
from normgen.spec import KernelSpec, SpecError, framed_range, parse_name  # noqa: E402
from normgen.types import QUANT_NAMES, DType, Entry, FusedAdd, Norm, Pipeline, Quant  # noqa: E402

LAUNCH = "max_groups"  # a launch override, not a Recipe field: runtime.Kernel.max_groups
COMMITTED = "committed"  # the baseline's label


def parse_variant(text: str) -> dict[str, str]:
    """'tile.registers=40,min_blocks_per_sm=3' -> {'tile.registers': '40', 'min_blocks_per_sm': '3'}."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        field, eq, value = (s.strip() for s in item.partition("="))
        if not (field and eq and value):
            raise ValueError(f"{item!r}: expected FIELD=VALUE")
        out[field] = value
    return out


def _value(current, text: str, path: str):
    """`text` as a value of current's type: an integer, a bool or an enum member."""
    if isinstance(current, bool):
        truth = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
        if text.lower() in truth:
            return truth[text.lower()]
        wanted = "true or false"
    elif isinstance(current, int):
        try:
            return int(text, 0)
        except ValueError:
            wanted = "an integer"
    elif isinstance(current, enum.Enum):
        for member in type(current):
            if text.lower() in (member.name.lower(), str(member.value).lower()):
                return member
        wanted = "one of " + ", ".join(m.name.lower() for m in type(current))
    else:
        raise ValueError(f"{path}: a {type(current).__name__} is not set from the command line")
    raise ValueError(f"{path}={text}: expected {wanted}")


def list_bucket(text: str) -> None:
    """'FRAMED_BUCKETS=2:layernorm+quant:4096': that bucket added to tiles.FRAMED_BUCKETS[2]
    ["layernorm+quant"] in this process; ValueError naming a bad table, key, kind or bucket."""
    table_name, eq, entry = text.partition("=")
    tables = bucket_tables()
    table = tables.get(table_name)
    if not (eq and table is not None):
        raise ValueError(f"--list {text}: expected TABLE=KEY:KIND:BUCKET, TABLE one of {', '.join(sorted(tables))}")
    key, kind, bucket = (entry.split(":") + ["", "", ""])[:3]
    sizes, names = {d.itemsize for d in DType}, {d.value for d in DType}
    key = int(key) if key.isdigit() else key
    if key not in sizes | names or kind not in TABLE_KINDS or not bucket.isdigit():
        raise ValueError(f"--list {text}: KEY is an element size ({', '.join(map(str, sorted(sizes)))}) or a "
                         f"precision ({', '.join(sorted(names))}), KIND one of {', '.join(sorted(TABLE_KINDS))}, "
                         "BUCKET an integer")
    kinds = table.setdefault(key, {})
    kinds[kind] = frozenset(kinds.get(kind, frozenset()) | {int(bucket)})
    recipe.cache_clear()  # recipes follow the tables


def _names(obj) -> list[str]:
    return [f.name for f in dataclasses.fields(obj)]


def overridden(spec: KernelSpec, variant: dict[str, str]) -> Recipe:
    """spec's recipe with the variant's fields replaced; ValueError naming a bad field or value."""
    base = built = recipe(spec)
    for path, text in variant.items():
        if path == LAUNCH:
            _value(0, text, path)  # (applied at launch)
            continue
        outer, dot, inner = path.partition(".")
        if outer not in _names(Recipe):
            raise ValueError(f"{path}: not a field of Recipe ({', '.join(_names(Recipe))}) nor {LAUNCH}")
        if dot:
            sub = getattr(built, outer)
            if not dataclasses.is_dataclass(sub) or inner not in _names(sub):
                raise ValueError(f"{path}: Recipe.{outer} has no field {inner!r}")
            built = dataclasses.replace(built, **{outer: dataclasses.replace(
                sub, **{inner: _value(getattr(sub, inner), text, path)})})
        else:
            built = dataclasses.replace(built, **{outer: _value(getattr(built, outer), text, path)})
    if "waves" in variant and "fast_memory_waves" not in variant:  # the launch on every device
        built = dataclasses.replace(built, fast_memory_waves=built.waves)
    if built.whole_row_kernel != base.whole_row_kernel:  # the file's kernels follow it
        full = ((spec.name + "_full", Entry.WHOLE),) if built.whole_row_kernel else ()
        built = dataclasses.replace(built, kernels=((spec.symbol, Entry.ANY),) + full)
    if spec.pipeline == Pipeline.ONE_PASS and covered(built) > spec.bucket:
        raise ValueError(f"{spec.name}: the tile covers {covered(built)} elements of a row, past the bucket's "
                         f"{spec.bucket} (tile.repeat <= bucket / (threads_per_row * cluster * vec))")
    return built


def covered(built: Recipe) -> int:
    """The elements of a row a one-pass tile holds: its bucket's, or fewer in a variant that
    tries a tile nearer the row's length (it then serves rows of at most that many)."""
    t = built.tile
    return t.threads_per_row * t.cluster * t.repeat * t.vec


def label(variant: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in variant.items()) or COMMITTED


@functools.cache
def _header() -> str:
    return codegen.render_header()


def render(spec: KernelSpec, built: Recipe, folder: Path) -> Path:
    """The instance file rendered from `built`, with the header beside it, in `folder`."""
    codegen.write(folder, {codegen.HEADER: _header(), spec.file_name: codegen.render_instance(spec, built)})
    return folder


def bytes_moved(spec: KernelSpec, m: int, n: int) -> int:
    """What a call must move: x (and the residual) in; y, the stored residual, the per-row
    scales and statistics out; each per-column vector once."""
    x, layernorm = spec.x.itemsize, spec.norm == Norm.LAYERNORM
    rows = m * n * (x + spec.out.itemsize + x * (spec.fused_add != FusedAdd.NONE)
                    + x * (spec.fused_add == FusedAdd.STORE))
    per_row = m * ((spec.scale.itemsize if spec.scale else 0) + 4 * spec.save_stats * (1 + layernorm))
    columns = n * (spec.w.itemsize * (1 + layernorm) + x * spec.x_bias + (spec.smooth.itemsize if spec.smooth else 0))
    return rows + per_row + columns


def call_arguments(spec: KernelSpec, m: int, n: int):
    """Random inputs of spec's call over m rows of n ((x, gamma, beta), on the GPU) and its
    options, as dispatch.plan_with takes them."""
    import torch

    def randn(*shape, dtype):
        return torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype.numpy.name))

    torch.manual_seed(0)
    layernorm = spec.norm == Norm.LAYERNORM
    arrays = (randn(m, n, dtype=spec.x), randn(n, dtype=spec.w), randn(n, dtype=spec.w) if layernorm else None)
    options = {"eps": 1e-5 if layernorm else 1e-6, "return_mean_rstd": spec.save_stats}
    if spec.fused_add != FusedAdd.NONE:
        options.update(residual=randn(m, n, dtype=spec.x), store_residual=spec.fused_add == FusedAdd.STORE)
    if spec.x_bias:
        options["x_bias"] = randn(n, dtype=spec.x)
    if spec.quant != Quant.NONE:
        options["quant"] = {d: name for name, d in QUANT_NAMES.items()}[spec.out]
    if spec.quant == Quant.STATIC:
        options["quant_scale"] = torch.full((), 0.03, device="cuda", dtype=torch.float32)
    if spec.scale is not None:
        options["scale_dtype"] = spec.scale.numpy.name
    if spec.smooth is not None:
        options["smooth_scale"] = torch.linspace(0.5, 1.5, n, device="cuda", dtype=getattr(torch, spec.smooth.numpy.name))
    return arrays, options


def compile_failure(e: Exception) -> str:
    """A variant's compile error in one line: the first error the compiler reports (a
    static_assert names the traits that do not fit together)."""
    first = next((line.strip() for line in str(e).splitlines() if "error" in line), str(e).splitlines()[0])
    return f"compile failed: {first}"


def ptxas(spec: KernelSpec, variants: list[dict], scratch: Path) -> None:
    for i, variant in enumerate(variants):
        folder = render(spec, overridden(spec, variant), scratch / str(i))
        try:
            res = nvrtc.compile_file(folder / spec.file_name).resources
        except nvrtc.CompileError as e:
            print(f"{label(variant):48s} {compile_failure(e)}", flush=True)
            continue
        print(f"{label(variant):48s} {res['registers']:3d} registers, spills {res['spill_stores']}/"
              f"{res['spill_loads']} bytes, stack {res['stack']}", flush=True)


def loaded(spec: KernelSpec, built: Recipe, n: int, folder: Path):
    """spec's kernel for rows of n, rendered from `built` into folder and loaded on the
    current device (normgen.runtime.Kernel)."""
    import torch
    from normgen import runtime

    return runtime.load(spec, render(spec, built, folder), torch.cuda.current_device(), n, built)


def timed(spec: KernelSpec, variants: list[dict], n: int, m: int, check: bool, copy: float, scratch: Path) -> None:
    import torch
    from normgen import dispatch

    call = spec.scalar_two_pass
    served = dispatch.shipped(call, n, max(v for v in (8, 4, 2, 1) if v <= spec.x.vmax and n % v == 0))
    if served != spec:
        print(f"# (the dispatcher serves N={n} with {served.name if served else 'an on-demand instance'})")
    arrays, options = call_arguments(spec, m, n)
    moved, first = bytes_moved(spec, m, n), None
    for i, variant in enumerate(variants):
        built = overridden(spec, variant)
        if spec.pipeline == Pipeline.ONE_PASS and n > covered(built):
            print(f"{label(variant):48s} its tile holds {covered(built)} elements, fewer than N={n}", flush=True)
            continue
        try:
            kernel = loaded(spec, built, n, scratch / str(i))
        except nvrtc.CompileError as e:
            print(f"{label(variant):48s} {compile_failure(e)}", flush=True)
            continue
        if LAUNCH in variant:
            kernel = dataclasses.replace(kernel, max_groups=int(variant[LAUNCH], 0))
        plan, args = dispatch.plan_with(kernel, spec.norm, *arrays, **options)
        out = plan.run(*args)
        outs = [o.view(torch.uint8) for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
        first = first or outs
        same = len(outs) == len(first) and all(torch.equal(a, b) for a, b in zip(outs, first))
        ms = bench.time_events(lambda: plan.run(*args))
        digest = hashlib.sha1(b"".join(o.contiguous().cpu().numpy().tobytes() for o in outs)).hexdigest()[:12]
        print(f"{label(variant):48s} {ms * 1e3:9.1f} us {moved / ms / 1e6 / copy:6.3f} of copy  "
              f"groups {kernel.max_groups}" + (f"  outputs {'identical' if same else 'DIFFER'} {digest}" if check else ""),
              flush=True)


def instances(name: str) -> list[KernelSpec]:
    if not any(c in name for c in "*?["):
        return [parse_name(name)]
    found = [s for s in matrix.select() if fnmatch.fnmatchcase(s.name, name)]
    if not found:
        raise SpecError(f"no instance of the default set matches {name!r}")
    return found


def serves(spec: KernelSpec, n: int) -> bool:
    """Whether spec serves rows of n: those of spec.framed_range for framed rows, any length
    up to its bucket for ragged rows, whole vectors up to it for the others (two-pass
    instances: any whole vectors)."""
    if spec.framed:
        lo, top = framed_range(spec)
        return lo < n <= top
    whole = spec.ragged or n % spec.vec == 0
    return whole and (spec.bucket is None or n <= spec.bucket)


def row_length(spec: KernelSpec, n: Optional[int]) -> int:
    """n, or spec's bucket where n is None; ValueError where spec does not serve that length."""
    length = n or spec.bucket
    if length is None or not serves(spec, length):
        raise ValueError(f"{spec.name} does not serve N={length}" if length else "a two-pass instance needs N")
    return length


def default_rows(n: int) -> int:
    """The benchmark's rows for rows of n: 2^27 elements in all."""
    return max(bench.ELEMENTS // n, 1)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="an instance name, or a glob over the default set")
    ap.add_argument("n", nargs="?", type=int, help="row length (default: the instance's bucket)")
    ap.add_argument("--rows", type=int, help="rows (default: 2^27 / N)")
    ap.add_argument("--set", dest="variants", action="append", default=[], metavar="FIELD=VALUE[,...]",
                    help="one variant: Recipe fields, tile.FIELD or max_groups (repeatable)")
    ap.add_argument("--check", action="store_true", help="compare outputs with the committed recipe's")
    ap.add_argument("--ptxas", action="store_true", help="compile each variant (no GPU): registers, spills")
    ap.add_argument("--list", dest="listed", action="append", default=[], metavar="TABLE=KEY:KIND:BUCKET",
                    help="a bucket added to a tiles bucket table in this process (repeatable)")
    args = ap.parse_args(argv)
    try:
        for text in args.listed:
            list_bucket(text)
        specs = instances(args.name)
        variants = [{}] + [parse_variant(v) for v in args.variants]
        jobs = []
        for spec in specs:
            try:
                n = row_length(spec, args.n)
            except ValueError:
                if len(specs) == 1:
                    raise
                continue
            for variant in variants:  # every variant checked before anything runs
                overridden(spec, variant)
            jobs.append((spec, n, args.rows or default_rows(n)))
        if not jobs:
            raise ValueError(f"no instance matching {args.name!r} serves N={args.n}")
    except (ValueError, SpecError) as e:
        ap.error(str(e))
    copy = None
    if not args.ptxas:
        copy = bench.copy_gbps()
        print(f"# copy {copy:.0f} GB/s")
    with tempfile.TemporaryDirectory(prefix="normgen-tune-") as scratch:
        for spec, n, m in jobs:
            print(f"# {spec.name} N={n}" + ("" if args.ptxas else f" rows={m}"), flush=True)
            folder = Path(scratch) / spec.name
            if args.ptxas:
                ptxas(spec, variants, folder)
            else:
                timed(spec, variants, n, m, args.check, copy, folder)


if __name__ == "__main__":
    main()
