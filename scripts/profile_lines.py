"""An instance's executed instructions by kernel source line, measured on the GPU machine:

    python scripts/profile_lines.py NAME [N] [--rows M] [--set FIELD=VALUE[,...]] [--out DIR] [--top K]
    python scripts/profile_lines.py --report DIR/NAME [N] [--rows M] [--top K]

NAME's kernel (its committed recipe, or one variant as scripts/tune.py's --set builds it),
compiled with -lineinfo, runs under ncu, whose SourceCounters section counts the warp
instructions each SASS address executed; the same build's cubin, disassembled with its line
table (nvdisasm -g), names each address's innermost source line (an inlined function's own
line, not its caller's). The table sums the counts by line: warp instructions a row (M rows
of N, default 2^27 / N elements) and their share, heaviest first, after the same sums by
template file. DIR (default /tmp/normgen-lines) keeps ncu's report as csv, the cubin and its
listing; --report prints the table again from them (each line's text as this tree's
templates hold it). Needs ncu and
nvdisasm on the PATH (the GPU machine has both); run from the tree's root. Timing stays with
tune.py: ncu replays the kernel and leaves the clocks alone (--clock-control none), and its
figures are counts, not speeds.
"""
from __future__ import annotations

import argparse
import collections
import csv
import io
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune  # noqa: E402
from normgen import compile as nvrtc  # noqa: E402
from normgen.recipe import Recipe  # noqa: E402
from normgen.spec import KernelSpec, parse_name  # noqa: E402

LAUNCHES = 3  # ncu profiles the second: the first loads the module
_ADDRESS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/")
_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')


def with_lineinfo() -> None:
    """Builds in this process carry the line table (a cache key of their own: OPTIONS is in it)."""
    if "-lineinfo" not in nvrtc.OPTIONS:
        nvrtc.OPTIONS = (*nvrtc.OPTIONS, "-lineinfo")


def executed(csv_text: str) -> dict[int, int]:
    """Warp instructions executed by address offset from the kernel's first instruction, from
    ncu's source page (`--page source --csv --print-source sass`): a title row, then a table."""
    rows = list(csv.reader(io.StringIO(csv_text)))
    head = next(i for i, r in enumerate(rows) if "Address" in r and "Instructions Executed" in r)
    at, count = rows[head].index("Address"), rows[head].index("Instructions Executed")
    by_address = {int(r[at], 16): int(r[count] or 0) for r in rows[head + 1:] if len(r) > count and r[at]}
    first = min(by_address)
    return {a - first: n for a, n in by_address.items()}


def source_lines(listing: str) -> dict[int, tuple[str, int]]:
    """Each address offset's innermost source line (file name, line) from `nvdisasm -g`."""
    where, lines = None, {}
    for text in listing.splitlines():
        m = _LINE.search(text)
        if m:
            where = (Path(m.group(1)).name, int(m.group(2)))
            continue
        m = _ADDRESS.match(text)
        if m and where is not None:
            lines[int(m.group(1), 16)] = where
    return lines


def by_line(counts: dict[int, int], lines: dict[int, tuple[str, int]]) -> collections.Counter:
    """Warp instructions summed by source line; addresses without a line under None."""
    total = collections.Counter()
    for address, n in counts.items():
        total[lines.get(address)] += n
    return total


def table(totals: collections.Counter, rows: int, top: int) -> str:
    """The heaviest `top` lines: warp instructions a row, share, file:line and its text."""
    whole = sum(totals.values()) or 1
    templates = Path(__file__).resolve().parent.parent / "templates" / "kernels"
    texts = {}
    out = [f"{whole / rows:.1f} warp instructions a row ({whole} in all over {rows} rows)"]
    files = collections.Counter()
    for where, n in totals.items():
        files[where[0] if where else "(no line)"] += n
    out.append("by file: " + ", ".join(f"{name} {n / rows:.1f}" for name, n in files.most_common()))
    for where, n in totals.most_common(top):
        text = ""
        if where is not None and (templates / where[0]).exists():
            texts.setdefault(where[0], (templates / where[0]).read_text().splitlines())
            text = texts[where[0]][where[1] - 1].strip()[:72]
        name = f"{where[0]}:{where[1]}" if where else "(no line)"
        out.append(f"{n / rows:9.1f} {n / whole:6.1%}  {name:28s} {text}")
    return "\n".join(out)


def launch(spec: KernelSpec, built: Recipe, n: int, m: int) -> None:
    """spec's kernel, built from `built` with the line table, launched LAUNCHES times on random rows."""
    import torch
    from normgen import dispatch

    with_lineinfo()
    with tempfile.TemporaryDirectory(prefix="normgen-lines-") as scratch:
        kernel = tune.loaded(spec, built, n, Path(scratch))
    arrays, options = tune.call_arguments(spec, m, n)
    plan, args = dispatch.plan_with(kernel, spec.norm, *arrays, **options)
    for _ in range(LAUNCHES):
        plan.run(*args)
    torch.cuda.synchronize()


def capture(spec: KernelSpec, built: Recipe, sets: list[str], n: int, m: int, out: Path) -> Path:
    """ncu's counts and the disassembled cubin of spec's build from `built` (the variant that
    `sets`, the --set flags, spell for ncu's child process), under out/NAME.*."""
    from normgen import runtime

    out.mkdir(parents=True, exist_ok=True)
    name = spec.name
    stem = out / name
    flags = [f"--set={s}" for s in sets]
    subprocess.run(["ncu", "--clock-control", "none", "--cache-control", "none", "-k", f"regex:^{name}",
                    "--launch-skip", "1", "--launch-count", "1", "--section", "SourceCounters", "-f", "-o",
                    str(stem), sys.executable, __file__, "--launch", name, str(n), "--rows", str(m), *flags],
                   check=True)
    page = subprocess.run(["ncu", "--import", f"{stem}.ncu-rep", "--page", "source", "--csv", "--print-source",
                           "sass"], check=True, capture_output=True, text=True).stdout
    Path(f"{stem}.sass.csv").write_text(page)
    with_lineinfo()
    with tempfile.TemporaryDirectory(prefix="normgen-lines-") as scratch:
        folder = tune.render(spec, built, Path(scratch))
        cubin = nvrtc.compile_file(folder / spec.file_name, runtime.device_arch(0)).cubin
    Path(f"{stem}.cubin").write_bytes(cubin)
    listing = subprocess.run(["nvdisasm", "-g", "-c", f"{stem}.cubin"], check=True, capture_output=True,
                             text=True).stdout
    Path(f"{stem}.lines.sass").write_text(listing)
    return stem


def report(stem: Path, rows: int, top: int) -> str:
    counts = executed(Path(f"{stem}.sass.csv").read_text())
    return table(by_line(counts, source_lines(Path(f"{stem}.lines.sass").read_text())), rows, top)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", nargs="?", help="an instance name")
    ap.add_argument("n", nargs="?", type=int, help="row length (default: the instance's bucket)")
    ap.add_argument("--rows", type=int, help="rows (default: 2^27 / N)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE[,...]",
                    help="Recipe fields overridden, as in scripts/tune.py (one variant)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/normgen-lines"), help="where the captures go")
    ap.add_argument("--top", type=int, default=40, help="lines listed")
    ap.add_argument("--report", type=Path, metavar="DIR/NAME", help="the table from an earlier capture")
    ap.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)  # ncu's child
    args = ap.parse_args(argv)
    if args.report is not None:  # (N, where given, lands in the first positional)
        n = int(args.name) if args.name and args.name.isdigit() else parse_name(args.report.name).bucket
        print(report(args.report, args.rows or tune.default_rows(n), args.top))
        return
    if args.name is None:
        ap.error("an instance name, or --report DIR/NAME")
    try:
        spec = parse_name(args.name)
        n = tune.row_length(spec, args.n)
        built = tune.overridden(spec, tune.parse_variant(",".join(args.sets)))
    except ValueError as e:  # (a SpecError is one)
        ap.error(str(e))
    m = args.rows or tune.default_rows(n)
    if args.launch:
        launch(spec, built, n, m)
        return
    stem = capture(spec, built, args.sets, n, m, args.out)
    print(f"# {spec.name} N={n} rows={m}: {stem}.*")
    print(report(stem, m, args.top))


if __name__ == "__main__":
    main()
