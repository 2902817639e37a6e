"""normgen: generated fused LayerNorm/RMSNorm CUDA kernels, compiled on demand."""
from __future__ import annotations

__all__ = ["layernorm", "rmsnorm", "NormOutput", "MissingInstanceError", "NormgenWarning", "set_strict"]
__version__ = "0.1.0"


def __getattr__(name):
    # The dispatcher needs CuPy; the generator and the spec model do not, so import lazily.
    if name in __all__:
        from . import dispatch

        value = getattr(dispatch, name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name == "torch":  # normgen.torch: the torch ops and modules, which import torch
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'normgen' has no attribute {name!r}")
