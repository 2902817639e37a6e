"""normgen for torch: the torch.library ops normgen::layernorm and normgen::rmsnorm, which
torch.compile and torch.export trace as one opaque node each (with a fake implementation
that gives the outputs' shapes and dtypes), the functions that call them, and LayerNorm /
RMSNorm modules that load torch.nn's state_dicts.

Imported on first use only (`import normgen` does not import torch). Eager calls of
normgen.layernorm / normgen.rmsnorm take their direct path; while torch.compile or
torch.export traces, they call layernorm / rmsnorm here (dispatch._tracing). There is no
backward pass yet: the modules refuse to run where autograd would want one, and a backward
through the ops raises."""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import dispatch
from .types import DType, Norm, NormOutput, Quant

__all__ = ["layernorm", "rmsnorm", "LayerNorm", "RMSNorm"]

_TORCH_DTYPES = {DType.FP32: torch.float32, DType.FP16: torch.float16, DType.BF16: torch.bfloat16,
                 DType.INT8: torch.int8, DType.FP8: torch.float8_e4m3fn}
# scale_dtype as the ops take it: torch dtypes and the canonical names here, any other
# spelling normgen accepts through dispatch._scale_dtype
_SCALE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
                "float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
_CANONICAL = {DType.FP32: "float32", DType.FP16: "float16", DType.BF16: "bfloat16"}

# Every tensor argument is positional (custom ops refuse keyword-only tensors); the outputs
# are always five tensors, a not-asked-for one an empty (0,) float32 placeholder.
_OUTPUTS = "(Tensor, Tensor, Tensor, Tensor, Tensor)"
_LAYERNORM_SCHEMA = (
    "(Tensor x, Tensor? gamma, Tensor? beta=None, Tensor? residual=None, Tensor? x_bias=None, "
    "Tensor? smooth_scale=None, Tensor? quant_scale=None, *, float eps=1e-05, "
    "bool store_residual=True, str? quant=None, str? scale_dtype=None, "
    f"bool return_mean_rstd=False) -> {_OUTPUTS}")
_RMSNORM_SCHEMA = (
    "(Tensor x, Tensor? gamma=None, Tensor? residual=None, Tensor? x_bias=None, "
    "Tensor? smooth_scale=None, Tensor? quant_scale=None, *, float eps=1e-06, "
    "bool store_residual=True, str? quant=None, str? scale_dtype=None, float weight_offset=0.0, "
    f"bool return_rstd=False) -> {_OUTPUTS}")


# ---- the ops' real implementations ---------------------------------------------------------
# The direct path (dispatch._norm), never the public calls: while torch.compile runs, real
# tensors can reach an op (inductor folding constants), and the public calls' tracing hook
# would route them back to it.
def _layernorm_impl(x, gamma, beta=None, residual=None, x_bias=None, smooth_scale=None,
                    quant_scale=None, *, eps=1e-5, store_residual=True, quant=None,
                    scale_dtype=None, return_mean_rstd=False):
    return _five(dispatch._norm(Norm.LAYERNORM, x, gamma, beta, eps, residual, store_residual, x_bias, quant,
                                smooth_scale, quant_scale, scale_dtype, 0.0, return_mean_rstd), x)


def _rmsnorm_impl(x, gamma=None, residual=None, x_bias=None, smooth_scale=None, quant_scale=None,
                  *, eps=1e-6, store_residual=True, quant=None, scale_dtype=None,
                  weight_offset=0.0, return_rstd=False):
    offset = dispatch._weight_offset(weight_offset, gamma)
    return _five(dispatch._norm(Norm.RMSNORM, x, gamma, None, eps, residual, store_residual, x_bias, quant,
                                smooth_scale, quant_scale, scale_dtype, offset, return_rstd), x)


def _five(out, x) -> tuple:
    """The direct call's result as the ops' five outputs (fresh placeholders: a custom op's
    outputs may not alias each other)."""
    if type(out) is not NormOutput:
        return out, _placeholder(x), _placeholder(x), _placeholder(x), _placeholder(x)
    return tuple(_placeholder(x) if t is None else t for t in out)


def _placeholder(x):
    return x.new_empty(0, dtype=torch.float32)


_layernorm_op = torch.library.custom_op("normgen::layernorm", mutates_args=(), schema=_LAYERNORM_SCHEMA)(_layernorm_impl)
_rmsnorm_op = torch.library.custom_op("normgen::rmsnorm", mutates_args=(), schema=_RMSNORM_SCHEMA)(_rmsnorm_impl)


# ---- fake implementations: the outputs' shapes and dtypes, contiguous ------------------------
def _fake(x, quant, quant_scale, smooth_scale, scale_dtype, stored: bool, mean: bool, rstd: bool) -> tuple:
    """The five outputs' shapes and dtypes, from the options as the direct path checks them."""
    out, mode, sdt = dispatch._quant_options(quant, quant_scale, smooth_scale, scale_dtype)
    lead = x.shape[:-1]
    return (
        x.new_empty(x.shape, dtype=x.dtype if out is None else _TORCH_DTYPES[out]),
        x.new_empty(x.shape) if stored else _placeholder(x),
        x.new_empty(lead, dtype=_TORCH_DTYPES[sdt]) if mode == Quant.DYNAMIC else _placeholder(x),
        x.new_empty(lead, dtype=torch.float32) if mean else _placeholder(x),
        x.new_empty(lead, dtype=torch.float32) if rstd else _placeholder(x),
    )


@_layernorm_op.register_fake
def _layernorm_fake(x, gamma, beta=None, residual=None, x_bias=None, smooth_scale=None,
                    quant_scale=None, *, eps=1e-5, store_residual=True, quant=None,
                    scale_dtype=None, return_mean_rstd=False):
    return _fake(x, quant, quant_scale, smooth_scale, scale_dtype, residual is not None and store_residual,
                 return_mean_rstd, return_mean_rstd)


@_rmsnorm_op.register_fake
def _rmsnorm_fake(x, gamma=None, residual=None, x_bias=None, smooth_scale=None, quant_scale=None,
                  *, eps=1e-6, store_residual=True, quant=None, scale_dtype=None,
                  weight_offset=0.0, return_rstd=False):
    dispatch._weight_offset(weight_offset, gamma)  # its checks, at trace time
    return _fake(x, quant, quant_scale, smooth_scale, scale_dtype, residual is not None and store_residual,
                 False, return_rstd)


def _no_backward(name: str, reference: str):
    def backward(ctx, *grads):
        raise RuntimeError(
            f"normgen::{name} has no backward pass yet, so gradients cannot flow through it. "
            f"Call it under torch.no_grad() or torch.inference_mode() (or on tensors that do not "
            f"require grad); to train, use {reference}.")
    return backward


_layernorm_op.register_autograd(_no_backward("layernorm", "torch.nn.functional.layer_norm"))
_rmsnorm_op.register_autograd(_no_backward("rmsnorm", "torch.nn.functional.rms_norm"))


# ---- the functions (what dispatch._traced() calls) --------------------------------------------
def _scale_name(scale_dtype) -> Optional[str]:
    if scale_dtype is None:
        return None
    name = _SCALE_NAMES.get(scale_dtype)
    return name if name is not None else _CANONICAL[dispatch._scale_dtype(scale_dtype)]


def _result(out, stored: bool, dynamic: bool, mean: bool, rstd: bool):
    """The five outputs as the public calls return them: y alone, or a NormOutput with None
    for what was not asked (from the static flags the op was called with)."""
    if not (stored or dynamic or rstd):
        return out[0]
    return NormOutput(out[0], out[1] if stored else None, out[2] if dynamic else None,
                      out[3] if mean else None, out[4] if rstd else None)


def layernorm(x, gamma, beta=None, *, eps: float = 1e-5, residual=None, store_residual: bool = True,
              x_bias=None, quant: Optional[str] = None, smooth_scale=None, quant_scale=None,
              scale_dtype=None, return_mean_rstd: bool = False):
    """normgen.layernorm (same arguments and results) through the op normgen::layernorm, on
    torch tensors: what torch.compile and torch.export trace."""
    stored = residual is not None and bool(store_residual)
    out = _layernorm_op(x, gamma, beta, residual, x_bias, smooth_scale, quant_scale, eps=float(eps),
                        store_residual=bool(store_residual), quant=quant,
                        scale_dtype=_scale_name(scale_dtype), return_mean_rstd=bool(return_mean_rstd))
    return _result(out, stored, quant is not None and quant_scale is None, bool(return_mean_rstd),
                   bool(return_mean_rstd))


def rmsnorm(x, gamma=None, *, eps: float = 1e-6, residual=None, store_residual: bool = True,
            x_bias=None, quant: Optional[str] = None, smooth_scale=None, quant_scale=None,
            scale_dtype=None, weight_offset: float = 0.0, return_rstd: bool = False):
    """normgen.rmsnorm (same arguments and results) through the op normgen::rmsnorm."""
    stored = residual is not None and bool(store_residual)
    out = _rmsnorm_op(x, gamma, residual, x_bias, smooth_scale, quant_scale, eps=float(eps),
                      store_residual=bool(store_residual), quant=quant, scale_dtype=_scale_name(scale_dtype),
                      weight_offset=float(weight_offset), return_rstd=bool(return_rstd))
    return _result(out, stored, quant is not None and quant_scale is None, False, bool(return_rstd))


# ---- the modules ---------------------------------------------------------------------------
# torch.nn.RMSNorm's eps=None: the eps of its accumulation dtype, float32's for every dtype
# normgen takes (not torch.finfo(x.dtype).eps, as torch's docs said before 2.13)
_RMS_DEFAULT_EPS = torch.finfo(torch.float32).eps


def _refuse_grad(name: str, x, weight, bias) -> None:
    """Called with grad mode on: an error where autograd would want a backward pass."""
    if x.requires_grad or (weight is not None and weight.requires_grad) or (
            bias is not None and bias.requires_grad):
        raise RuntimeError(
            f"normgen.torch.{name} has no backward pass yet, and grad mode is on while its input "
            f"or a parameter requires grad. For inference, call it under torch.no_grad() or "
            f"torch.inference_mode(), or call .requires_grad_(False) on the module; to train, "
            f"use torch.nn.{name}.")


def _rows(name: str, x, shape: tuple):
    """x as (..., prod(shape)) rows, after torch's check that x ends in `shape`."""
    k = len(shape)
    if x.dim() < k or x.shape[-k:] != shape:
        raise RuntimeError(f"normgen.torch.{name}: given normalized_shape={list(shape)}, expected "
                           f"input with shape [*, {', '.join(map(str, shape))}], but got input of "
                           f"size {list(x.shape)}")
    return x if k == 1 else x.reshape(*x.shape[:x.dim() - k], math.prod(shape))


def _param(module, name: str):
    """module.<name>, read from _parameters (as nn.Module.__getattr__ does, in a tenth of the
    time) unless something else stands there (a parametrization, say)."""
    params = module._parameters
    return params[name] if name in params else getattr(module, name)


def _flat(p, shape: tuple):
    return p if p is None or len(shape) == 1 else p.reshape(-1)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm (the same constructor, parameters `weight` and `bias`, state_dict
    and repr) whose forward runs normgen.layernorm. Inference only: with grad mode on and an
    input or parameter that requires grad it raises."""

    def forward(self, x):
        w, b, shape = _param(self, "weight"), _param(self, "bias"), self.normalized_shape
        if torch.is_grad_enabled():
            _refuse_grad("LayerNorm", x, w, b)
        y = dispatch.layernorm(_rows("LayerNorm", x, shape), _flat(w, shape), _flat(b, shape), eps=self.eps)
        return y if len(shape) == 1 else y.reshape(x.shape)


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm (the same constructor, parameter `weight`, state_dict and repr; eps
    None as torch's) whose forward runs normgen.rmsnorm. Inference only, as LayerNorm."""

    def forward(self, x):
        w, shape = _param(self, "weight"), self.normalized_shape
        if torch.is_grad_enabled():
            _refuse_grad("RMSNorm", x, w, None)
        eps = _RMS_DEFAULT_EPS if self.eps is None else self.eps
        y = dispatch.rmsnorm(_rows("RMSNorm", x, shape), _flat(w, shape), eps=eps)
        return y if len(shape) == 1 else y.reshape(x.shape)
