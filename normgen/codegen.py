"""Render the templates over a list of specs, and write the results only where they change."""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import jinja2

from . import params
from .spec import KernelSpec, looks_like_name

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
GENERATED = TEMPLATES.parent / "generated"  # generate.py's default output, the dispatcher's default input
HEADER = "normgen_fwd.cuh"
REGISTRY = "registry.py"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    undefined=jinja2.StrictUndefined,  # a misspelled variable is an error, not ""
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def render_header() -> str:
    return _env.get_template("norm_fwd.cuh.j2").render(params=params.FIELDS)


def render_instance(spec: KernelSpec) -> str:
    return _env.get_template("instance.cu.j2").render(spec=spec, tile=spec.tile)


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


def write(out_dir: Path, files: dict[str, str]) -> Report:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report([], [], [])
    for name in sorted(files):
        path = out_dir / name
        if path.exists() and path.read_text() == files[name]:
            report.unchanged.append(name)
            continue
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(files[name])
        os.replace(tmp, path)
        report.written.append(name)
    for path in _stale(out_dir, files):
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
