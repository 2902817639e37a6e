"""Render the templates over a list of specs, and write the results only where they change."""
from __future__ import annotations

import enum
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import jinja2

from . import devices, params, registry
from .paths import GENERATED, HEADER, REGISTRY, TEMPLATES  # noqa: F401 (GENERATED: generate.py's default)
from .recipe import Recipe, recipe
from .spec import KernelSpec, SpecError, looks_like_name, parse_name

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    undefined=jinja2.StrictUndefined,  # a misspelled variable is an error, not ""
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def render_header() -> str:
    return _env.get_template("norm_fwd.cuh.j2").render(params=params.FIELDS)


def render_instance(spec: KernelSpec, built: Optional[Recipe] = None) -> str:
    """The instance file of a spec, built by its recipe, or by `built` (a tuning tool's
    variation of it, dataclasses.replace'd)."""
    built = built or recipe(spec)
    return _env.get_template("instance.cu.j2").render(spec=spec, recipe=built, launch=_launch_blocks(built))


@dataclass(frozen=True)
class _LaunchBlocks:
    default: int  # sm_90's, and every architecture's not named in `others`
    others: tuple  # (blocks, preprocessor test of the architectures taking them): the #if ladder


def _launch_blocks(built: Recipe) -> _LaunchBlocks:
    by_arch = {arch: devices.launch_blocks(built, d) for arch, d in sorted(devices.KNOWN.items())}
    default = by_arch[90]
    others = sorted({b for b in by_arch.values() if b != default})
    return _LaunchBlocks(default, tuple(
        (b, " || ".join(f"__CUDA_ARCH__ == {a * 10}" for a, ab in by_arch.items() if ab == b)) for b in others))


def _literal(value) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ")"
    return repr(value)


def render_registry(specs: Iterable[KernelSpec]) -> str:
    entries = [(_literal(s.key), s.name) for s in sorted(specs, key=lambda s: s.name)]
    return _env.get_template("registry.py.j2").render(entries=entries)


def outputs(specs: Iterable[KernelSpec]) -> dict[str, str]:
    """File name -> content for everything generate.py writes for these specs."""
    specs = list(specs)
    files = {HEADER: render_header(), REGISTRY: render_registry(specs)}
    files.update((s.file_name, render_instance(s)) for s in specs)
    return files


def registered(out_dir: Path) -> list[KernelSpec]:
    """The instances a generated folder's registry lists (none where it has no registry);
    names that no longer stand for a valid instance, or a registry an older normgen wrote
    that no longer reads, are left out (adding then registers the folder anew)."""
    try:
        names = registry.load(out_dir).values()
    except (SyntaxError, NameError, AttributeError, ImportError):
        return []
    specs = []
    for name in names:
        try:
            specs.append(parse_name(name))
        except SpecError:
            pass
    return specs


def with_registered(out_dir: Path, specs: Iterable[KernelSpec]) -> list[KernelSpec]:
    """`specs` and the instances out_dir already registers: what adding to out_dir writes."""
    return sorted({*registered(out_dir), *specs}, key=lambda s: s.name)


def _stale(out_dir: Path, files: dict[str, str]) -> list[Path]:
    """Instance files in out_dir from an earlier selection: they would contradict the registry."""
    stale = []
    for path in sorted(out_dir.glob("*.cu")):
        if path.name not in files and looks_like_name(path.stem):
            stale.append(path)
    return stale


@dataclass
class Report:
    written: list[str]
    unchanged: list[str]
    removed: list[str]


def write(out_dir: Path, files: dict[str, str], remove_stale: bool = True) -> Report:
    """Write the files that differ (each atomically: a unique temp file, then a rename), and,
    with remove_stale, remove instance files of earlier selections."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report([], [], [])
    for name in sorted(files):
        path = out_dir / name
        if path.exists() and path.read_text() == files[name]:
            report.unchanged.append(name)
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(files[name])
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        report.written.append(name)
    for path in _stale(out_dir, files) if remove_stale else ():
        path.unlink()
        report.removed.append(path.name)
    return report


def differences(out_dir: Path, files: dict[str, str]) -> list[str]:
    """What write() would change, one line each; empty when out_dir is up to date."""
    diffs = []
    for name in sorted(files):
        path = out_dir / name
        if not path.exists():
            diffs.append(f"missing: {name}")
        elif path.read_text() != files[name]:
            diffs.append(f"differs: {name}")
    diffs += [f"stale: {p.name}" for p in _stale(out_dir, files)]
    return diffs
