"""The generate.py command line: flags -> Selection -> normgen.matrix.select.

pytest builds its selection from the same flags (tests/conftest.py), so the CLI and the
test suite choose instances through one function."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from . import codegen
from .matrix import AXES, Selection, SelectionError, select


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


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@_selection_options
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=codegen.GENERATED,
              show_default=True, help="output folder")
@click.option("--list", "list_only", is_flag=True, help="print the selected names, write nothing")
@click.option("--check", is_flag=True,
              help="write nothing; exit 1 if the output folder differs from what would be written")
def main(out: Path, list_only: bool, check: bool, include, exclude, save_mv, **axes):
    """Generate normgen kernel instances (.cu) and their dispatch registry.

    Without flags: the default set, the union of three families -- plain LayerNorm (each
    axis at its default below); the LayerNorm inference fusions (fp16/bf16, add and store
    0/1, quant none/int8/fp8 dynamic, smooth none/fp32, 16-byte vectors); and RMSNorm for
    LLM inference (fp16/bf16, add and store 0/1, quant none/int8/fp8 dynamic or static,
    16-byte vectors). An axis flag sets that axis in every family; --filter makes the axes
    not given range over all their values."""
    try:
        specs = select(_selection(include, exclude, save_mv, **axes))
    except SelectionError as e:
        raise click.UsageError(str(e)) from None
    if not specs:
        click.echo("error: the filters select no instance", err=True)
        sys.exit(2)
    if list_only:
        click.echo("\n".join(s.name for s in specs))
        return
    files = codegen.outputs(specs)
    if check:
        diffs = codegen.differences(out, files)
        if diffs:
            click.echo("\n".join(diffs))
            click.echo(f"{out}: {len(diffs)} file(s) out of date; run python generate.py", err=True)
            sys.exit(1)
        click.echo(f"{out}: up to date ({len(specs)} instances)")
        return
    r = codegen.write(out, files)
    click.echo(f"{out}: {len(specs)} instances; wrote {len(r.written)}, "
               f"unchanged {len(r.unchanged)}, removed {len(r.removed)}")


def selection_from_args(args: list[str]) -> Selection:
    """A Selection from generate.py-style flags (used by the test suite)."""
    ctx = main.make_context("generate.py", list(args))
    p = ctx.params
    axes = {a: p[a] for a in AXES if a != "save_mv"}
    return _selection(p["include"], p["exclude"], p["save_mv"], **axes)
