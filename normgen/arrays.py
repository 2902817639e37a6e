"""Array adapters: read what the kernel needs (pointer, shape, strides, dtype, device) from
CuPy arrays and torch CUDA tensors without copying, and make outputs of the same kind.
This is on every call's path, so the common cases are kept to a few attribute reads."""
from __future__ import annotations

import sys
from typing import Any, Optional

import cupy
import numpy as np
from cupy.cuda import runtime

from .types import BY_NUMPY, DType

_DLPACK_CUDA = 2  # kDLCUDA
# CuPy has no fp8 dtype: fp8 outputs for CuPy users are uint8 arrays of the e4m3 bits
# (view them on the host with ml_dtypes.float8_e4m3fn).
_CUPY_DTYPES = {DType.FP8: np.dtype(np.uint8)}


class View:
    """A device array as the kernel sees it; strides in elements."""

    __slots__ = ("obj", "ptr", "shape", "strides", "dtype", "device", "torch")

    def __init__(self, obj, ptr, shape, strides, dtype, device, torch):
        self.obj: Any = obj
        self.ptr: int = ptr
        self.shape: tuple = shape
        self.strides: tuple = strides
        self.dtype: Optional[DType] = dtype  # None: a dtype normgen has no kernel for
        self.device: int = device
        self.torch: bool = torch  # outputs are made by torch, launched on torch's stream


_torch = None
_TORCH_TYPES: set = set()  # torch.Tensor and the subclasses seen (nn.Parameter, ...)
_TORCH_DTYPES: dict = {}  # torch dtype -> DType
_TO_TORCH: dict = {}  # DType -> torch dtype
_torch_stream = None  # device index -> raw current stream


def _torch_module():
    global _torch, _torch_stream
    if _torch is None:
        import torch

        _torch = torch
        _TORCH_DTYPES.update({torch.float32: DType.FP32, torch.float16: DType.FP16,
                              torch.bfloat16: DType.BF16, torch.int8: DType.INT8,
                              torch.float8_e4m3fn: DType.FP8})
        _TO_TORCH.update({v: k for k, v in _TORCH_DTYPES.items()})
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_stream = raw or (lambda d: torch.cuda.current_stream(d).cuda_stream)
    return _torch


def _is_torch(obj) -> bool:
    if type(obj) in _TORCH_TYPES:
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        _torch_module()
        _TORCH_TYPES.add(type(obj))
        return True
    return False


def view(obj, arg: str) -> View:
    """A View of `obj`, or a TypeError naming `arg` and what to pass instead."""
    if type(obj) is cupy.ndarray:
        return _cupy_view(obj, arg)
    if _is_torch(obj):
        device = obj.get_device()
        if device < 0:
            raise TypeError(f"{arg} is a torch tensor on {obj.device}; move it to the GPU "
                            f"({arg}.cuda())")
        return View(obj, obj.data_ptr(), tuple(obj.shape), obj.stride(),
                    _TORCH_DTYPES.get(obj.dtype), device, True)
    if isinstance(obj, cupy.ndarray):
        return _cupy_view(obj, arg)
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
    strides = a.strides
    if any(s % isz for s in strides):
        raise ValueError(f"{arg} has strides {strides} that are not whole elements")
    if a.data.ptr % isz:
        raise ValueError(f"{arg} starts at an address that is not a multiple of its element size "
                         f"({isz} bytes); pass a copy of {arg}")
    return View(a, a.data.ptr, a.shape, tuple(s // isz for s in strides),
                BY_NUMPY.get(a.dtype), a.device.id, False)


class NoSignature(Exception):
    """An argument of a kind without a cheap signature (see signature)."""


def signature(obj):
    """What a call's checks and choices read from one argument -- shape, strides, dtype,
    device, the pointer's alignment within 16 bytes and (torch) whether it requires grad -- in
    a few attribute reads, for torch tensors and CuPy arrays (None for None). Other kinds raise NoSignature: such calls are
    checked in full every time."""
    t = type(obj)
    if t in _TORCH_TYPES:
        return obj.shape, obj.stride(), obj.dtype, obj.get_device(), obj.data_ptr() & 15, obj.requires_grad
    if t is cupy.ndarray:
        return obj.shape, obj.strides, obj.dtype, obj.device.id, obj.data.ptr & 15
    if obj is None:
        return None
    raise NoSignature


def maker(like: View, shape: tuple, dtype: DType, like_x: bool = False):
    """A function of x making an uninitialized contiguous output of like's kind on like's
    device (CuPy's: when that is the current device). like_x: like is contiguous and the
    output has its shape and dtype (torch's fastest allocation)."""
    if like.torch:
        if like_x:
            return _torch.empty_like
        torch_dtype, device = _TO_TORCH[dtype], _torch.device("cuda", like.device)
        return lambda _: _torch.empty(shape, dtype=torch_dtype, device=device)
    np_dtype = _CUPY_DTYPES.get(dtype, dtype.numpy)
    return lambda _: cupy.empty(shape, dtype=np_dtype)


def data_ptr(a) -> int:
    """The device pointer of a torch tensor or a CuPy array."""
    return a.data_ptr() if type(a) in _TORCH_TYPES else a.data.ptr


def stream_getter(like: View):
    """A function of the device giving the current stream of the library that made `like`."""
    if like.torch:
        return _torch_stream
    return lambda device: cupy.cuda.get_current_stream(device).ptr


current_device = runtime.getDevice  # () -> the current device's index


def on_device(device: int):
    return cupy.cuda.Device(device)


def grad_enabled() -> bool:
    """Whether torch's grad mode is on (torch is loaded: a torch tensor was seen)."""
    return _torch.is_grad_enabled()
