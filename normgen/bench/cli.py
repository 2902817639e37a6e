"""`python -m normgen.bench`: the command line of the run."""
from __future__ import annotations

import time
from pathlib import Path

import click

from .measure import DEFAULT_BUDGET_S, run
from .ops import OPS
from .peers import IMPLS
from .report import summary_lines, write_outputs


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("docs"),
              show_default=True, help="folder of bench.json/.md/.png (bench-h200.* on an H200)")
@click.option("--quick", is_flag=True, help="every other power-of-two N (and every N that is not a power of two)")
@click.option("--impl", "impls", multiple=True, type=click.Choice(IMPLS), default=IMPLS,
              show_default=True, help="implementations to time (repeatable); the peers quack and liger "
                                      "where importable, else recorded as not importable")
@click.option("--op", "--ops", "ops", multiple=True, type=click.Choice(list(OPS)), default=list(OPS),
              show_default=True, help="operations to time (repeatable); LayerNorm's and RMSNorm's small "
                                      "shapes come with them, the host cost with layernorm")
@click.option("--budget", type=float, default=DEFAULT_BUDGET_S, show_default=True,
              help="seconds into the run after which the remaining large-shape cases are recorded as "
                   "skipped (the quick set runs first); 0: no limit")
def main(out: Path, quick: bool, impls, ops, budget: float):
    """Benchmark normgen against a copy, torch eager, torch.compile (of the unfused sequence,
    for the fused operations), quack and Liger. Prints one summary line per op at the end:
    each implementation's geometric-mean ratio to copy."""
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)

    def log(s):
        click.echo(s, err=True)

    result = run(quick, set(impls), [o for o in OPS if o in ops], log,
                 save=lambda result: write_outputs(result, out), budget=budget or None, start=start)
    paths = write_outputs(result, out, final=True, log=log)
    click.echo("wrote " + ", ".join(str(p) for p in paths))
    for line in summary_lines(result):
        click.echo(line)
