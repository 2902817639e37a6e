"""Compare the PTX NVRTC emits for every default instance between two revisions.

    python scripts/ptx_compare.py BASE [HEAD] [--filter GLOB]... [--jobs N] [--arch compute_90] [--show K]

BASE and HEAD are git revisions; without HEAD the other side is the working tree of the
checkout this script lives in, uncommitted changes included. A revision is checked out with
`git worktree add --detach` into a temporary folder (removed at the end). Each side runs a
worker in its own code (cwd and PYTHONPATH = that tree): `python generate.py --out TMP` writes
the side's default set, --filter GLOBs (fnmatch on the instance name, any may match) keep a
subset of it -- not generate.py's --filter, which widens the set beyond the defaults -- and
the side's own normgen.compile.ptx_of(path, arch) makes each instance's PTX, so each side
compiles with its own options and include paths. Both sides use this venv's NVRTC.

Normalization, applied to each PTX before comparing (it hides only names and comments):
  - comment lines (`//...`, e.g. the compiler-build banner, `.globl`, "has been demoted")
    and blank lines are dropped; trailing whitespace is stripped; everything else is kept,
    including .version/.target/.address_size (one NVRTC makes both sides, so they match
    unless the emitted code really changed);
  - a `.global` data declaration of a mangled name that nothing else in the PTX mentions is
    dropped: a traits struct's or a trait's static constexpr members, emitted as data that
    no instruction reads, whose number and order follow the headers' layout, not the code;
  - every C++-mangled identifier (`_Z...`: function-scope statics such as `__shared__`
    arrays, device functions, namespace-scope constants, anonymous-namespace types) is
    renamed S0, S1, ... in order of first appearance (a `_param_N` suffix is kept), because
    moving code between functions, or a file's anonymous-namespace hash, changes a mangled
    name without changing the code. extern "C" kernel entry names are kept as they are.
    The renaming is order-preserving, so a change in declaration or use order still differs;
  - within each function, virtual registers (per prefix: %r, %rd, %f, %p, ...) and labels
    are renumbered by first appearance and the .reg lines' counts dropped: the same
    instructions over other register numbers compare equal (ptxas allocates registers anew).

Results of a revision side are cached under ~/.cache/normgen-ptx-compare/, keyed by commit,
arch, filters, NVRTC version and the normalization code, so a rerun recomputes only the
working tree. Exit status: 0 when every instance is identical and both sides have the same
names, 1 otherwise.
"""
from __future__ import annotations

import argparse
import difflib
import fnmatch
import gzip
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "normgen-ptx-compare"
MANGLED = re.compile(r"(?<![\w$%])(_Z\w*?)(_param_\d+)?(?![\w$])")


# a data declaration: `.global .align 4 .u32 NAME = 1;`, `.global .align 1 .u8 NAME;`
UNUSED_DATA = re.compile(r"^\.global\s[^;]*?(_Z[A-Za-z0-9_$]+)(?:\[\d*\])?(?:\s*=[^;]*)?;$")


def normalize(ptx: str) -> str:
    """The PTX with comment and blank lines dropped and mangled names renamed S0, S1, ... by
    first appearance (see the module docstring)."""
    names: dict[str, str] = {}

    def canon(m: re.Match) -> str:
        return names.setdefault(m[1], f"S{len(names)}") + (m[2] or "")

    lines = [line.rstrip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith("//")]
    uses: dict[str, int] = {}
    for line in lines:
        for m in MANGLED.finditer(line):
            uses[m[1]] = uses.get(m[1], 0) + 1
    out = []
    for line in lines:
        m = UNUSED_DATA.match(line.strip())
        if m and uses.get(m[1]) == 1:
            continue
        out.append(MANGLED.sub(canon, line))
    return "\n".join(_renumbered(out)) + "\n"


REG_DECL = re.compile(r"^(\s*\.reg\s+\.\w+\s+%)([A-Za-z]+)<\d+>;$")
LABEL = re.compile(r"\$L__\w+")
FUNCTION = re.compile(r"^\s*(\.visible\s+|\.weak\s+)?\.(entry|func)\b")


def _renumbered(lines: list[str]) -> list[str]:
    """Each function's virtual registers (the prefixes its .reg lines declare: %r, %rd, %f,
    %p, ...) renumbered per prefix, and its labels, by first appearance; the declared counts
    dropped. A consistent renaming within a function: two texts equal after it are the same
    program with other register numbers (which ptxas assigns anew anyway)."""
    prefixes = {m[2] for line in lines if (m := REG_DECL.match(line))}
    if not prefixes:
        return lines
    reg = re.compile(r"%(" + "|".join(sorted(prefixes, key=len, reverse=True)) + r")(\d+)\b")
    regs: dict[str, str] = {}
    counts: dict[str, int] = {}
    labels: dict[str, str] = {}

    def rename(m: re.Match) -> str:
        if m[0] not in regs:
            regs[m[0]] = f"%{m[1]}{counts.get(m[1], 0)}"
            counts[m[1]] = counts.get(m[1], 0) + 1
        return regs[m[0]]

    out = []
    for line in lines:
        if FUNCTION.match(line):
            regs, counts, labels = {}, {}, {}
        if m := REG_DECL.match(line):
            out.append(f"{m[1]}{m[2]}<N>;")
            continue
        out.append(LABEL.sub(lambda m: labels.setdefault(m[0], f"$L{len(labels)}"), reg.sub(rename, line)))
    return out


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---- the worker: runs inside one side's tree, with that side's normgen ------------------------
def _ptx(job: tuple[str, str]) -> tuple[str, str]:
    from normgen.compile import ptx_of

    path, arch = job
    try:
        return Path(path).stem, normalize(ptx_of(Path(path), arch))
    except Exception as e:  # a compile failure is a result of its own: it differs from PTX
        return Path(path).stem, f"<ptx_of failed> {type(e).__name__}: {e}\n"


def worker(cfg: dict) -> None:
    import multiprocessing

    import normgen

    tree = Path.cwd().resolve()
    if not Path(normgen.__file__).resolve().is_relative_to(tree):
        sys.exit(f"worker: normgen imported from {normgen.__file__}, not from {tree}")
    out = Path(cfg["out"])
    gen = out / "generated"
    done = subprocess.run([sys.executable, "generate.py", "--out", str(gen)],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"worker: generate.py failed in {tree}:\n{done.stdout}{done.stderr}")
    files = sorted(p for p in gen.glob("*.cu")
                   if not cfg["filters"] or any(fnmatch.fnmatchcase(p.stem, g) for g in cfg["filters"]))
    texts = {}
    with multiprocessing.Pool(cfg["jobs"]) as pool:
        for i, (name, text) in enumerate(pool.imap_unordered(_ptx, [(str(p), cfg["arch"]) for p in files]), 1):
            texts[name] = text
            if i % 100 == 0 or i == len(files):
                print(f"  [{cfg['label']}] {i}/{len(files)}", file=sys.stderr, flush=True)
    shutil.rmtree(gen)
    (out / "hashes.json").write_text(json.dumps({n: digest(t) for n, t in sorted(texts.items())}, indent=0))
    with gzip.open(out / "ptx.json.gz", "wt") as f:
        json.dump(texts, f)


# ---- the parent: one side at a time, then the comparison ---------------------------------------
def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def cache_key(sha: str, args) -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    filters = hashlib.sha256("\0".join(args.filter).encode()).hexdigest()[:10] if args.filter else "all"
    norm = digest(inspect.getsource(normalize) + MANGLED.pattern)[:8]
    return f"{sha}-{args.arch}-{filters}-nvrtc{major}.{minor}-norm{norm}"


def run_worker(tree: Path, out: Path, label: str, args) -> None:
    cfg = {"out": str(out), "arch": args.arch, "filters": args.filter, "jobs": args.jobs, "label": label}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, str(HERE), "--worker", json.dumps(cfg)], cwd=tree, env=env, check=True)


def side(rev: str | None, label: str, root: Path, args) -> dict[str, str]:
    """{instance name: normalized PTX} of a revision (cached) or, for None, the working tree."""
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="ptx-compare-"))
    try:
        if rev is None:
            print(f"{label}: working tree {root}", file=sys.stderr)
            folder = tmp / "out"
            folder.mkdir()
            run_worker(root, folder, label, args)
        else:
            sha = git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=root)
            folder = CACHE / cache_key(sha, args)
            print(f"{label}: {rev} = {sha[:12]}" + (" (cached)" if folder.is_dir() else ""), file=sys.stderr)
            if not folder.is_dir():
                tree, partial = tmp / "tree", tmp / "out"
                partial.mkdir()
                git("worktree", "add", "--detach", str(tree), sha, cwd=root)
                try:
                    run_worker(tree, partial, label, args)
                finally:
                    git("worktree", "remove", "--force", str(tree), cwd=root)
                CACHE.mkdir(parents=True, exist_ok=True)
                os.replace(partial, folder)  # whole or absent: a killed run leaves no cache entry
        with gzip.open(folder / "ptx.json.gz", "rt") as f:
            texts = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{label}: {len(texts)} instances in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return texts


def report(base: dict[str, str], head: dict[str, str], show: int, names: tuple[str, str]) -> bool:
    """Print the counts, the names that differ and the first `show` diffs; True if all match."""
    common = sorted(base.keys() & head.keys())
    differ = [n for n in common if base[n] != head[n]]
    only_base, only_head = sorted(base.keys() - head.keys()), sorted(head.keys() - base.keys())
    print(f"{len(common) - len(differ)} identical, {len(differ)} differ, "
          f"only-in-base {len(only_base)}, only-in-head {len(only_head)}")
    for title, listed in (("differ", differ), ("only in base", only_base), ("only in head", only_head)):
        if listed:
            print(f"\n{title}:\n  " + "\n  ".join(listed))
    for n in differ[:show]:
        diff = list(difflib.unified_diff(base[n].splitlines(), head[n].splitlines(),
                                         f"{names[0]}/{n}.ptx", f"{names[1]}/{n}.ptx", lineterm=""))
        print(f"\n{n} (normalized PTX):\n" + "\n".join(diff[:80]))
        if len(diff) > 80:
            print(f"... {len(diff) - 80} more diff lines")
    return not (differ or only_base or only_head)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", metavar="BASE", help="git revision")
    ap.add_argument("head", metavar="HEAD", nargs="?", help="git revision (default: the working tree)")
    ap.add_argument("--filter", action="append", default=[], metavar="GLOB",
                    help="keep default instances whose name matches (repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="compiles at once")
    ap.add_argument("--arch", default="compute_90", help="NVRTC --gpu-architecture (default compute_90)")
    ap.add_argument("--show", type=int, default=1, metavar="K", help="diffs to print (default 1)")
    args = ap.parse_args()
    root = Path(git("rev-parse", "--show-toplevel", cwd=HERE.parent))
    start = time.monotonic()
    base = side(args.base, "base", root, args)
    head = side(args.head, "head", root, args)
    same = report(base, head, args.show, (args.base, args.head or "worktree"))
    print(f"({time.monotonic() - start:.0f} s)", file=sys.stderr)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
