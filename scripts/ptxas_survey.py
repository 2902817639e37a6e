"""Registers and spills of every instance a set of name globs selects (the whole matrix, not
only the default set), compiled by this machine's NVRTC in parallel from a scratch folder:
`python scripts/ptxas_survey.py [--kept-step K] GLOB...`. --kept-step: LayerNorm + quant's
kept staged rows built with their output passes K vectors at a time (tiles.kept_output_step)
instead of the committed choice, to see where a change would spill before making it.
--only ATTR: only the instances whose recipe has ATTR true (a field of recipe.Recipe, such
as fold_shift); --early: --only column_registers (those that load columns early). Prints each
instance that spills (or uses a stack frame), then a count."""
import concurrent.futures
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from normgen import codegen, compile, matrix, tiles  # noqa: E402
from normgen.recipe import recipe  # noqa: E402
from normgen.spec import parse_name  # noqa: E402


def _set_step(step):
    if step:
        tiles.kept_output_step = lambda tile, light: step


def _compile(job):
    name, folder, step = job
    _set_step(step)
    spec = parse_name(name)
    files = codegen.outputs([spec])
    codegen.write(Path(folder) / name, files)
    res = compile.compile_file(Path(folder) / name / spec.file_name).resources
    return name, res


def main(globs, step=0, only=None):
    _set_step(step)
    specs = matrix.select(matrix.Selection(include=tuple(globs)))
    names = [s.name for s in specs if only is None or getattr(recipe(s), only)]
    folder = tempfile.mkdtemp()
    jobs = [(n, folder, step) for n in names]
    ctx = multiprocessing.get_context("spawn")
    bad = 0
    with concurrent.futures.ProcessPoolExecutor(os.cpu_count(), mp_context=ctx) as pool:
        for name, res in pool.map(_compile, jobs):
            if res["spill_stores"] or res["spill_loads"] or res["stack"]:
                bad += 1
                print(f"{name}: {res['registers']} registers, spills {res['spill_stores']}/{res['spill_loads']}, "
                      f"stack {res['stack']}", flush=True)
    print(f"{len(names)} instances (NVRTC {'.'.join(map(str, compile.nvrtc_version()))}, kept step "
          f"{step or 'committed'}): {bad} spill")


if __name__ == "__main__":
    args = sys.argv[1:]
    step = int(args.pop(args.index("--kept-step") + 1)) if "--kept-step" in args else 0
    only = args.pop(args.index("--only") + 1) if "--only" in args else None
    only = "column_registers" if "--early" in args else only
    main([a for a in args if a not in ("--kept-step", "--early", "--only")], step, only)
