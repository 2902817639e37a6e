"""A generated folder's registry (registry.py, rendered by codegen from registry.py.j2):
KernelSpec.key -> instance name. Read by the dispatcher and by generate.py --add."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .paths import REGISTRY


def load(folder: Path) -> dict:
    """The registry of a generated folder ({} where it has none)."""
    path = Path(folder) / REGISTRY
    if not path.is_file():
        return {}
    mod_spec = importlib.util.spec_from_file_location("normgen_generated_registry", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return dict(module.REGISTRY)
