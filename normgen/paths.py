"""Where normgen's files are: the templates and the shipped generated set (inside the
package in an installed wheel, beside it in a source checkout), and the user cache that
holds compiled cubins and instances generated on demand. The call path reads these, so this
module imports nothing heavy."""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
HEADER = "normgen_fwd.cuh"  # the kernel header every instance file includes
REGISTRY = "registry.py"  # a generated folder's dispatch table


def _shipped(name: str) -> Path:
    """A wheel carries the folder inside the package (pyproject's package-dir); a source
    checkout, editable install or not, keeps it at the repository's top level."""
    inside = PACKAGE / name
    return inside if inside.is_dir() else PACKAGE.parent / name


TEMPLATES = _shipped("templates")
GENERATED = _shipped("generated")  # generate.py's default output, the dispatcher's first source


def dispatched() -> Path:
    """The generated folder the dispatcher reads first: NORMGEN_GENERATED_DIR, else GENERATED."""
    return Path(os.environ.get("NORMGEN_GENERATED_DIR") or GENERATED)


def cache_dir() -> Path:
    """The user cache: NORMGEN_CACHE_DIR, else $XDG_CACHE_HOME/normgen, else ~/.cache/normgen."""
    given = os.environ.get("NORMGEN_CACHE_DIR")
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "normgen"


def generated_cache() -> Path:
    """Where instances generated on demand are written, as `generate.py --add --out` would."""
    return cache_dir() / "generated"
