"""The command line of generate.py, `normgen` and `python -m normgen`: flags -> Selection ->
normgen.matrix.select, then write, add, check or compile the selection; or list and prune
the cache.

pytest builds its selection from the same flags (tests/conftest.py), so the CLI and the
test suite choose instances through one function."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from . import __version__, codegen, paths
from .matrix import AXES, Selection, SelectionError, select

LARGE = 5000  # a selection of more instances than this is written or compiled only with --large


def _axis_option(axis: str):
    flag = "--" + axis.replace("_", "-")
    info = AXES[axis]
    return click.option(
        flag, axis, metavar="LIST", default=None,
        help=f"{info.help}; comma-separated from {{{','.join(info.values)}}} "
             f"[default: {','.join(info.default)}]",
    )


def _selection_options(f):
    for axis in reversed([a for a in AXES if a != "save_mv"]):
        f = _axis_option(axis)(f)
    f = click.option("--save-mv/--no-save-mv", "save_mv", default=None,
                     help="only instances that write mean/rstd, or only ones that do not "
                          "[default: both]")(f)
    f = click.option("--exclude", multiple=True, metavar="GLOB",
                     help="drop instances whose name matches (repeatable)")(f)
    f = click.option("--filter", "include", multiple=True, metavar="GLOB",
                     help="keep only instances whose name matches (repeatable); axes not "
                          "given explicitly then range over all their values")(f)
    return f


def _selection(include, exclude, save_mv, **axes) -> Selection:
    chosen = {}
    for axis, value in axes.items():
        if value is not None:
            values = tuple(v.strip() for v in value.split(",") if v.strip())
            chosen[axis] = values
    if save_mv is not None:
        chosen["save_mv"] = ("1",) if save_mv else ("0",)
    return Selection(axes=chosen, include=tuple(include), exclude=tuple(exclude))


def _prog(ctx: click.Context) -> str:
    name = ctx.find_root().info_name or "normgen"
    return "python generate.py" if name == "generate.py" else name


def _command(ctx: click.Context, out: Path, add: bool, include, exclude, save_mv, axes) -> str:
    """The command that writes what --check compared against: the same folder and filters."""
    args = ["--add"] if add else []
    for axis, value in axes.items():
        if value is not None:
            args += ["--" + axis.replace("_", "-"), value]
    if save_mv is not None:
        args.append("--save-mv" if save_mv else "--no-save-mv")
    for g in include:
        args += ["--filter", g]
    for g in exclude:
        args += ["--exclude", g]
    if Path(out).resolve() != paths.GENERATED.resolve():
        args += ["--out", str(out)]
    return " ".join([_prog(ctx), *map(shlex.quote, args)])


def _archs(value: str | None) -> list[str]:
    """--arch's architectures, or the GPUs' present."""
    from . import devices

    if value:
        archs = [a.strip() for a in value.split(",") if a.strip()]
        known = [d.name for d in devices.KNOWN.values()]
        bad = [a for a in archs if a not in known]
        if bad:
            raise click.BadParameter(f"unknown architecture(s) {', '.join(bad)}; valid: {', '.join(known)}",
                                     param_hint="'--arch'")
        return archs
    try:
        from cupy.cuda import runtime

        count = runtime.getDeviceCount()
        found = {f"sm_{devices.of(i).arch}" for i in range(count)}
    except Exception:  # no driver, no GPU, or a GPU older than sm_80
        found = set()
    if not found:
        raise click.UsageError("no supported GPU found to compile for: name the architectures, "
                               "e.g. --arch sm_90 or --arch sm_80,sm_90")
    return sorted(found)


def _compile(specs, out: Path, archs: list[str], jobs: int) -> None:
    from . import cache, devices

    work = {}
    for arch in archs:
        dev = devices.KNOWN[int(arch[3:])]
        runs = [s for s in specs if devices.unsupported_reason(s, dev) is None]
        click.echo(f"{arch}: {len(runs)} of {len(specs)} instances run there")
        work[arch] = runs
    failed = []
    for arch, runs in work.items():
        try:
            cache.build(runs, out, [arch], jobs=jobs, progress=True)
        except cache.BuildError as e:
            failed.append(str(e))
    if failed:
        raise click.ClickException("\n".join(failed))
    click.echo(f"compiled into {paths.cache_dir()}")


def _show_cache(prune: bool, folders) -> None:
    """List (or prune) the cache; a cubin is current where the dispatcher's folder, the
    on-demand folder or `folders` (an --out given) holds the instance it was built from."""
    from . import cache

    if prune:
        removed = cache.prune(folders=folders)
        click.echo(f"{paths.cache_dir()}: removed {len(removed)} stale file(s)")
        return
    entries = cache.entries(folders)
    for e in entries:
        click.echo(f"{e.arch}  {e.name}  {e.size // 1024} KB  {'current' if e.current else 'stale'}")
    stale = sum(not e.current for e in entries)
    click.echo(f"{paths.cache_dir()}: {len(entries)} cubin(s), {stale} stale (--prune removes them)")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@_selection_options
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=paths.GENERATED,
              show_default=True, help="output folder")
@click.option("--add", is_flag=True,
              help="add the selection to the folder and its registry, keeping what is there "
                   "(without it the folder holds exactly the selection)")
@click.option("--list", "list_only", is_flag=True, help="print the selected names, write nothing")
@click.option("--check", is_flag=True,
              help="write nothing; exit 1 if the output folder differs from what would be written")
@click.option("--large", is_flag=True, help=f"allow writing or compiling more than {LARGE} instances")
@click.option("--compile", "compile_", is_flag=True,
              help="also compile the selection into the cache, for --arch")
@click.option("--arch", metavar="LIST", default=None,
              help="architectures to compile for, e.g. sm_80,sm_90 [default: the GPUs present]")
@click.option("--jobs", type=click.IntRange(min=0), default=0, show_default=True,
              help="compiles at once (0: one per core)")
@click.option("--cache", "show_cache", is_flag=True,
              help="list the compiled cubins in the cache, whether current or stale; select nothing")
@click.option("--prune", is_flag=True, help="remove stale cubins from the cache; select nothing")
@click.version_option(__version__, message="%(prog)s %(version)s")
@click.pass_context
def main(ctx, out: Path, add: bool, list_only: bool, check: bool, large: bool, compile_: bool, arch,
         jobs: int, show_cache: bool, prune: bool, include, exclude, save_mv, **axes):
    """Generate normgen kernel instances (.cu) and their dispatch registry.

    Without flags: the default set, the union of four families and their fallbacks --
    plain LayerNorm (each axis at its default below); plain RMSNorm (16-byte vectors); the
    LayerNorm inference fusions (fp16/bf16, add and store 0/1, quant none/int8/fp8 dynamic,
    smooth none/fp32, 16-byte vectors); RMSNorm for LLM inference (fp16/bf16, add and store
    0/1, quant none/int8/fp8 dynamic or static, 16-byte vectors) -- each with a two-pass
    single-element fallback that serves every N and alignment. An axis flag sets that axis
    in every family; --filter makes the axes not given range over all their values."""
    if show_cache or prune:
        given = ctx.get_parameter_source("out") != click.core.ParameterSource.DEFAULT
        _show_cache(prune, [out] if given else [])
        return
    try:
        specs = select(_selection(include, exclude, save_mv, **axes))
    except SelectionError as e:
        raise click.UsageError(str(e)) from None
    if not specs:
        raise click.UsageError("the filters select no instance")
    if list_only:
        click.echo("\n".join(s.name for s in specs))
        return
    if len(specs) > LARGE and not large:
        raise click.UsageError(f"the selection has {len(specs)} instances (over {LARGE}): narrow it "
                               f"(see --list), or pass --large to write them all")
    archs = _archs(arch) if compile_ else []
    wanted = codegen.with_registered(out, specs) if add else specs
    files = codegen.outputs(wanted)
    if check:
        diffs = codegen.differences(out, files)
        if add:  # adding never removes: what else the folder holds is not a difference
            diffs = [d for d in diffs if not d.startswith("stale: ")]
        if diffs:
            click.echo("\n".join(diffs))
            click.echo(f"{out}: {len(diffs)} file(s) out of date; run "
                       f"{_command(ctx, out, add, include, exclude, save_mv, axes)}", err=True)
            sys.exit(1)
        click.echo(f"{out}: up to date ({len(wanted)} instances)")
        return
    try:
        r = codegen.write(out, files, remove_stale=not add)
    except OSError as e:
        raise click.BadParameter(f"cannot write {e.filename or out}: {e.strerror or e}",
                                 param_hint="'--out'") from None
    click.echo(f"{out}: {len(wanted)} instances; wrote {len(r.written)}, "
               f"unchanged {len(r.unchanged)}, removed {len(r.removed)}")
    if compile_:
        _compile(specs, out, archs, jobs)


def selection_from_args(args: list[str]) -> Selection:
    """A Selection from generate.py-style flags (used by the test suite)."""
    ctx = main.make_context("generate.py", list(args))
    p = ctx.params
    axes = {a: p[a] for a in AXES if a != "save_mv"}
    return _selection(p["include"], p["exclude"], p["save_mv"], **axes)
