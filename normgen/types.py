"""The vocabulary: every enum value with its one name, C++ spelling and host dtype."""
from __future__ import annotations

import enum
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np


class _Enum(enum.Enum):
    """Our enums' base: members are singletons, so they hash by identity, in C (the
    per-call dispatch key hashes several; Enum's own __hash__ is Python code)."""

    __hash__ = object.__hash__


class DType(_Enum):
    """Element types; the value is the short name used in instance names and CLI flags."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    FP8 = "fp8"  # OCP e4m3 (__nv_fp8_e4m3), max 448

    @property
    def cpp(self) -> str:
        return _CPP[self]

    @property
    def itemsize(self) -> int:
        return _NUMPY[self].itemsize

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def vmax(self) -> int:
        """Elements in one 16-byte access."""
        return 16 // self.itemsize

    @property
    def is_float_input(self) -> bool:
        return self in FLOAT_INPUTS


_CPP = {
    DType.FP32: "float",
    DType.FP16: "__half",
    DType.BF16: "__nv_bfloat16",
    DType.INT8: "signed char",
    DType.FP8: "__nv_fp8_e4m3",
}
_NUMPY = {
    DType.FP32: np.dtype(np.float32),
    DType.FP16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
    DType.INT8: np.dtype(np.int8),
    DType.FP8: np.dtype(ml_dtypes.float8_e4m3fn),
}
FLOAT_INPUTS = (DType.FP32, DType.FP16, DType.BF16)
QUANT_OUTPUTS = (DType.INT8, DType.FP8)
QUANT_NAMES = {"int8": DType.INT8, "fp8_e4m3": DType.FP8}  # the API's quant= values
QMAX = {DType.INT8: 127.0, DType.FP8: 448.0}  # the largest quantized magnitude
BY_NUMPY = {dt.numpy: dt for dt in DType}


class _CppEnum(_Enum):
    """An enum that the template mirrors as an enum class of the same name."""

    @property
    def cpp(self) -> str:
        return f"{type(self).__name__}::{self.name}"


class Norm(_CppEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Pipeline(_CppEnum):
    """ONE_PASS holds the whole row on chip; TWO_PASS streams it: statistics, then re-read."""

    ONE_PASS = "1p"
    TWO_PASS = "2p"


class FusedAdd(enum.IntEnum):
    """ck_tile's fadd: 0 none, 1 pre-add and store the sum, 2 pre-add only."""

    NONE = 0
    STORE = 1
    NO_STORE = 2


class Quant(_CppEnum):
    """Fused output quantization. ck_tile's fquant=1 is DYNAMIC with a smooth scale,
    fquant=2 is DYNAMIC without one; STATIC divides by a given scalar scale."""

    NONE = "none"
    DYNAMIC = "dq"
    STATIC = "sq"


class Entry(_CppEnum):
    """Which rows one kernel of an instance serves (its file defines a kernel per entry of
    Recipe.kernels): ANY, every row the instance serves; WHOLE, rows of exactly the
    bucket's length (staged and streamed rows, n a constant); ALIKE, framed rows whose row
    tensors all start at x's row's element of their 16 bytes (no bounce slots)."""

    ANY = "any"
    WHOLE = "whole"
    ALIKE = "alike"


class Cache(_CppEnum):
    """Where a row's 16-byte loads of x (and the residual) leave their lines: NORMAL, in L2
    only (PAST_L1: ld.global.cg), or with L2's evict_last policy (KEEP_L2), as
    torch.compile's Triton kernels load x. Recipe.row_cache chooses."""

    NORMAL = "normal"
    PAST_L1 = "past_l1"
    KEEP_L2 = "keep_l2"


class NormOutput(NamedTuple):
    """What a call (normgen's or the reference's) returns when more than y is asked for;
    None for what was not."""

    y: Any
    residual: Any = None  # x (+ x_bias) + residual, as normalized (store_residual=True)
    scale: Any = None  # per-row dequantization scale (dynamic quant)
    mean: Any = None  # float32 per row (return_mean_rstd=True)
    rstd: Any = None  # float32 per row
