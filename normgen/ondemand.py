"""Instances generated at run time: a call that no shipped instance serves gets its best
instance generated from the templates into the user cache, by the code path of
`generate.py --add --out <cache>/generated`, under a lock that threads and processes share.
Off under strict mode (NORMGEN_STRICT=1 or set_strict(True)), for deployments that must not
generate at run time."""
from __future__ import annotations

import os
import tempfile
import threading
import warnings
from pathlib import Path

from . import paths
from .spec import KernelSpec

_strict = os.environ.get("NORMGEN_STRICT", "") not in ("", "0")
_lock = threading.Lock()
_ready: dict[tuple[KernelSpec, Path], Path] = {}  # (spec, cache) -> the folder its current file is in
_scratch: list[Path] = []  # a per-process folder, where the user cache cannot be written


class NormgenWarning(UserWarning):
    """normgen did work a deployment may want to do ahead of time, or could not use its cache."""


def set_strict(strict: bool = True) -> None:
    """Strict: a call no shipped instance serves raises MissingInstanceError instead of
    generating one (as NORMGEN_STRICT=1 does)."""
    global _strict
    _strict = bool(strict)


def strict() -> bool:
    return _strict


def ship_command(spec: KernelSpec, out: Path | None = None) -> str:
    """The command that adds `spec` to a generated folder ahead of time."""
    where = "" if out is None or Path(out).resolve() == paths.GENERATED.resolve() else f" --out {out}"
    return f"python generate.py --add --filter '{spec.name}'{where}"


def provide(spec: KernelSpec) -> Path:
    """The folder holding `spec`'s current generated file, generating it there first if
    needed (once per instance per cache: the files are written only where they differ)."""
    key = (spec, paths.generated_cache())
    folder = _ready.get(key)
    if folder is not None:
        return folder
    with _lock:
        if key not in _ready:
            _ready[key] = _generate(spec, key[1])
    return _ready[key]


def _generate(spec: KernelSpec, folder: Path) -> Path:
    from filelock import FileLock

    from . import codegen  # the generator: imported only when a call needs it

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder / ".lock")):
            new = not (folder / spec.file_name).exists()
            codegen.write(folder, codegen.outputs(codegen.with_registered(folder, [spec])), remove_stale=False)
    except OSError as e:
        folder = _scratch_folder()
        new = True
        codegen.write(folder, codegen.outputs([spec]))
        warnings.warn(f"normgen: cannot write the cache {paths.generated_cache()} ({e.strerror or e}); "
                      f"generated {spec.name} into {folder} for this process. Set NORMGEN_CACHE_DIR "
                      f"to a writable folder", NormgenWarning, stacklevel=2)
    if new:
        warnings.warn(f"normgen: no shipped instance serves this call; generated {spec.name} into "
                      f"{folder} (once per cache). To ship it ahead of time: {ship_command(spec)}",
                      NormgenWarning, stacklevel=2)
    return folder


def _scratch_folder() -> Path:
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="normgen-")))
    return _scratch[0]
