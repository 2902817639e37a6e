"""The ptxas survey: the instances that spill among those some name globs select.

    python scripts/ptxas_survey.py [--only FIELD]... [--early] [--set FIELD=VALUE[,...]] GLOB...

The globs select from the whole matrix, not only the default set; each instance is compiled
by this machine's NVRTC, in parallel, from a scratch folder. --only FIELD: only the instances
whose committed recipe has FIELD true (a field of normgen.recipe.Recipe or tile.FIELD, such as
fold_shift or tile.stage_bytes; repeatable, all must hold); --early: --only column_registers.
--set: every instance built with these recipe fields overridden (scripts/tune.py's syntax), to
see where a change would spill before making it; e.g. LayerNorm + quant's kept staged rows
at K vectors a step: --only keep_outputs --only tile.stage_bytes --set output_step=K. Prints
each instance that spills (or uses a stack frame), then a count.
"""
import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune  # noqa: E402
from normgen import compile, matrix  # noqa: E402
from normgen.recipe import recipe  # noqa: E402


def _compile(job):
    spec, built, folder = job
    folder = tune.render(spec, built, Path(folder) / spec.name)
    return spec.name, compile.compile_file(folder / spec.file_name).resources


def _holds(r, path: str) -> bool:
    for part in path.split("."):
        r = getattr(r, part)
    return bool(r)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("globs", nargs="+", metavar="GLOB")
    ap.add_argument("--only", action="append", default=[], metavar="FIELD")
    ap.add_argument("--early", action="append_const", dest="only", const="column_registers")
    ap.add_argument("--set", dest="variant", default="", metavar="FIELD=VALUE[,...]")
    args = ap.parse_args(argv)
    specs = matrix.select(matrix.Selection(include=tuple(args.globs)))
    try:
        variant = tune.parse_variant(args.variant)
        specs = [s for s in specs if all(_holds(recipe(s), f) for f in args.only)]
        builds = [(s, tune.overridden(s, variant)) for s in specs]
    except (ValueError, AttributeError) as e:
        ap.error(str(e))
    ctx = multiprocessing.get_context("spawn")
    bad = 0
    with tempfile.TemporaryDirectory() as folder, \
            concurrent.futures.ProcessPoolExecutor(os.cpu_count(), mp_context=ctx) as pool:
        for name, res in pool.map(_compile, [(s, built, folder) for s, built in builds]):
            if res["spill_stores"] or res["spill_loads"] or res["stack"]:
                bad += 1
                print(f"{name}: {res['registers']} registers, spills {res['spill_stores']}/{res['spill_loads']}, "
                      f"stack {res['stack']}", flush=True)
    print(f"{len(builds)} instances (NVRTC {'.'.join(map(str, compile.nvrtc_version()))}, "
          f"{tune.label(variant)}): {bad} spill")


if __name__ == "__main__":
    main()
