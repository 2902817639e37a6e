"""Array adapters: read what the kernel needs (pointer, shape, strides, dtype, device) from
CuPy arrays and torch CUDA tensors without copying, and make outputs of the same kind."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import cupy
from cupy.cuda import runtime

from .types import BY_NUMPY, DType

_DLPACK_CUDA = 2  # kDLCUDA


@dataclass
class View:
    """A device array as the kernel sees it; strides in elements."""

    obj: Any
    ptr: int
    shape: tuple
    strides: tuple
    dtype: Optional[DType]  # None: a dtype normgen has no kernel for
    device: int
    torch: bool  # outputs are made by torch (and the launch goes on torch's stream)


_torch = None
_TORCH_DTYPES: dict = {}  # torch dtype -> DType
_TO_TORCH: dict = {}  # DType -> torch dtype


def _torch_module():
    global _torch
    if _torch is None:
        import torch

        _torch = torch
        _TORCH_DTYPES.update({torch.float32: DType.FP32, torch.float16: DType.FP16,
                              torch.bfloat16: DType.BF16, torch.int8: DType.INT8})
        _TO_TORCH.update({v: k for k, v in _TORCH_DTYPES.items()})
    return _torch


def _is_torch(obj) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def view(obj, arg: str) -> View:
    """A View of `obj`, or a TypeError naming `arg` and what to pass instead."""
    if isinstance(obj, cupy.ndarray):
        return _cupy_view(obj, arg)
    if _is_torch(obj):
        torch = _torch_module()
        if not obj.is_cuda:
            raise TypeError(f"{arg} is a torch tensor on {obj.device}; move it to the GPU "
                            f"({arg}.cuda())")
        return View(obj, obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()),
                    _TORCH_DTYPES.get(obj.dtype), obj.device.index, True)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cupy_view(cupy.asarray(obj), arg)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        if obj.__dlpack_device__()[0] == _DLPACK_CUDA:
            return _cupy_view(cupy.from_dlpack(obj), arg)
    raise TypeError(
        f"{arg} must be a CUDA array (cupy.ndarray, a torch CUDA tensor, or any object with "
        f"__cuda_array_interface__ or a CUDA __dlpack__), not {type(obj).__module__}."
        f"{type(obj).__name__}; copy host data to the GPU first, e.g. cupy.asarray({arg})"
    )


def _cupy_view(a: cupy.ndarray, arg: str) -> View:
    isz = a.itemsize
    if any(s % isz for s in a.strides):
        raise ValueError(f"{arg} has strides {a.strides} that are not whole elements")
    return View(a, a.data.ptr, a.shape, tuple(s // isz for s in a.strides),
                BY_NUMPY.get(a.dtype), a.device.id, False)


def empty(like: View, shape: tuple, dtype: DType):
    """An uninitialized contiguous output on like's device, of like's kind."""
    if like.torch:
        return _torch.empty(shape, dtype=_TO_TORCH[dtype], device=like.obj.device)
    with cupy.cuda.Device(like.device):
        return cupy.empty(shape, dtype=dtype.numpy)


def data_ptr(out) -> int:
    return out.data_ptr() if _is_torch(out) else out.data.ptr


def stream_of(like: View) -> int:
    """The current stream of the library that made `like`, on its device."""
    if like.torch:
        return _torch.cuda.current_stream(like.device).cuda_stream
    return cupy.cuda.get_current_stream(like.device).ptr


def current_device() -> int:
    return runtime.getDevice()


def on_device(device: int):
    return cupy.cuda.Device(device)
