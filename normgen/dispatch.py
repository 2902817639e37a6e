"""The public calls. Per call: look the call's signature up in a dictionary of checked
calls (plans), make the outputs, launch. A new signature is checked in full first; the
first call for a new shape class also resolves the instance through the generated registry
and compiles it (normgen.runtime)."""
from __future__ import annotations

import math
import numbers
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple, Optional

from . import arrays, devices, ondemand, paths, runtime, tiles
from . import registry as registry_file
from .ondemand import NormgenWarning, set_strict  # noqa: F401 (public)
from .recipe import ragged_first
from .spec import KernelSpec, framed_range, invalid_reason
from .types import FLOAT_INPUTS, QUANT_NAMES, DType, FusedAdd, Norm, NormOutput, Pipeline, Quant

GENERATED_DIR = paths.dispatched()

_registry: Optional[dict] = None  # KernelSpec.key -> instance name, of GENERATED_DIR
_kernels: dict = {}  # call key -> runtime.Kernel


class MissingInstanceError(LookupError):
    """Strict mode: no shipped instance serves a call; the message names the command that
    adds one."""


def use_generated(path, registry: Optional[dict] = None) -> None:
    """Dispatch from another generated folder (as written by generate.py --out PATH), or,
    with `registry`, from a subset of its instances."""
    global GENERATED_DIR, _registry
    GENERATED_DIR = Path(path)
    _registry = registry
    _kernels.clear()
    _plans.clear()


def registry() -> dict:
    """GENERATED_DIR's registry; empty where it has none (every call is then generated on
    demand, or refused in strict mode)."""
    global _registry
    if _registry is None:
        _registry = registry_file.load(GENERATED_DIR)
    return _registry


# ---- instance choice ----------------------------------------------------------------------
def candidates(call: KernelSpec, n: int, vec_align: int, device: Optional[devices.Device] = None,
               col_align: Optional[int] = None):
    """Instances that can serve a call (its fusions and precisions as in `call`; pipeline,
    bucket and vector width free) on `device` (None: any), best first. Rows of whole
    16-byte vectors: the smallest one-pass bucket that holds the row (while N is within the
    one-pass range), in 16-byte vectors. Other rows whose per-column vectors are 16-byte
    aligned (col_align, None for that): framed rows in the smallest bucket that holds the
    row, where its frame holds it too and they serve it (recipe.framed_serves); then, from
    the smallest bucket that holds the row, ragged rows and narrower vectors in the order
    recipe.ragged_first gives. Then two-pass. Which of them serves a
    call depends on N, the precisions, the fusions and the alignments alone (never on M), so
    a row's result does not depend on the batch it is in."""
    x = call.x
    vecs = [v for v in (8, 4, 2, 1) if v <= vec_align and v <= x.vmax]
    skewed = (col_align is None or col_align >= x.vmax) and vec_align < x.vmax
    ragged = [(x.vmax, True)] * skewed
    full, narrow = [(v, False) for v in vecs if v == x.vmax], [(v, False) for v in vecs if v < x.vmax]

    def usable(s: KernelSpec) -> bool:
        return invalid_reason(s) is None and (device is None or devices.unsupported_reason(s, device) is None)

    if n <= tiles.ONE_PASS_MAX_N[x]:
        if skewed:  # the smallest bucket's framed instance, where its frame holds the row
            b = min(b for b in tiles.ONE_PASS_TILES[x.itemsize] if b >= n)
            s = replace(call, pipeline=Pipeline.ONE_PASS, bucket=b, vec=x.vmax, ragged=False, framed=True)
            lo, top = framed_range(s)
            if lo < n <= top and usable(s):
                yield s
        for b in tiles.ONE_PASS_TILES[x.itemsize]:
            if b >= n:
                widths = full + (ragged + narrow if ragged_first(call, b) else narrow + ragged)
                for s in (replace(call, pipeline=Pipeline.ONE_PASS, bucket=b, vec=v, ragged=r) for v, r in widths):
                    if usable(s):
                        yield s
    yield from (replace(call, pipeline=Pipeline.TWO_PASS, bucket=None, vec=v, ragged=False) for v in vecs)


def shipped(call: KernelSpec, n: int, vec_align: int, device: Optional[devices.Device] = None,
            col_align: Optional[int] = None) -> Optional[KernelSpec]:
    """The first candidate the generated folder holds, or None."""
    table = registry()
    return next((s for s in candidates(call, n, vec_align, device, col_align) if s.key in table), None)


def choose(call: KernelSpec, n: int, vec_align: int, device: Optional[devices.Device] = None,
           col_align: Optional[int] = None) -> KernelSpec:
    """The shipped instance that serves a call, or MissingInstanceError naming the best
    candidate and the command that ships it."""
    spec = shipped(call, n, vec_align, device, col_align)
    if spec is None:
        raise _missing(next(candidates(call, n, vec_align, device, col_align)), n)
    return spec


def _missing(best: KernelSpec, n: int) -> MissingInstanceError:
    return MissingInstanceError(
        f"no generated instance serves this call (N={n}) and normgen is strict; the best one is "
        f"{best.name}: {ondemand.ship_command(best, GENERATED_DIR)}")


class CallKey(NamedTuple):
    """What chooses a call's instance (_plan makes it; _kernels files kernels under it): its
    device, row length and vector alignment, and its arguments' fusions and precisions."""

    device: int
    n: int
    vec_align: int  # the widest vector (elements) every row and column vector is aligned to
    col_align: int  # the widest vector (elements) the column vectors alone are aligned to
    norm: Norm
    x: DType
    w: Optional[DType]  # None: no gamma or beta
    out: DType
    fused_add: FusedAdd
    x_bias: bool
    quant: Quant
    smooth: Optional[DType]
    scale: Optional[DType]
    save_stats: bool

    def calls(self) -> list[KernelSpec]:
        """The call as specs, their pipeline, bucket and vector width left to the choice: one
        per weight precision that serves it (without gamma or beta, x's first, then fp32)."""
        return [KernelSpec(self.norm, self.x, w, self.out, self.fused_add, self.x_bias, self.quant, self.smooth,
                           self.scale, self.save_stats, pipeline=Pipeline.TWO_PASS, bucket=None, vec=1)
                for w in ((self.x, DType.FP32) if self.w is None else (self.w,))]


def chosen(key: CallKey, dev: devices.Device) -> tuple[KernelSpec, bool]:
    """The instance that serves a call on `dev`, and whether it is shipped: the first shipped
    candidate of the call's specs in turn, else the first spec's best candidate."""
    calls = key.calls()
    for call in calls:
        spec = shipped(call, key.n, key.vec_align, dev, key.col_align)
        if spec is not None:
            return spec, True
    return next(candidates(calls[0], key.n, key.vec_align, dev, key.col_align)), False


def _resolve(key: CallKey) -> runtime.Kernel:
    spec, folder = instance_for(key)
    kernel = runtime.load(spec, folder, key.device, key.n)
    _kernels[key] = kernel
    return kernel


def instance_for(key: CallKey, dev: Optional[devices.Device] = None) -> tuple[KernelSpec, Path]:
    """The instance that serves a call on its device (or `dev`), and the folder of its file:
    the shipped one, else the best candidate generated on demand (strict:
    MissingInstanceError)."""
    spec, is_shipped = chosen(key, dev or devices.of(key.device))
    if is_shipped:
        return spec, GENERATED_DIR
    if ondemand.strict():
        raise _missing(spec, key.n)
    return spec, ondemand.provide(spec)


# ---- argument checks ----------------------------------------------------------------------
def _rows(xv: arrays.View, arg: str = "x") -> tuple[int, int, int, int]:
    """(rows, inner, outer stride, inner stride): row r starts at
    (r // inner) * outer + (r % inner) * inner_stride elements."""
    shape, strides = xv.shape, xv.strides
    if len(shape) == 2:  # the common case
        return shape[0], shape[0], 0, strides[0]
    dims = [(s, st) for s, st in zip(shape[:-1], strides[:-1]) if s != 1]
    merged: list[list[int]] = []
    for s, st in dims:
        if merged and merged[-1][1] == st * s:
            merged[-1] = [merged[-1][0] * s, st]
        else:
            merged.append([s, st])
    rows = math.prod(xv.shape[:-1])
    if not merged:
        return rows, 1, 0, 0
    if len(merged) == 1:
        return rows, rows, 0, merged[0][1]
    if len(merged) == 2:
        return rows, merged[1][0], merged[0][1], merged[1][1]
    raise ValueError(
        f"{arg}: its leading dimensions (shape {xv.shape}, strides {xv.strides} in elements) "
        f"cannot be addressed as rows with two strides; pass a contiguous copy of {arg}"
    )


def _vector(v: arrays.View, arg: str, n: int, x: arrays.View, dtypes: tuple) -> None:
    if v.device != x.device:
        raise ValueError(f"{arg} is on device {v.device} but x is on device {x.device}")
    if v.dtype not in dtypes:
        raise TypeError(f"{arg} must have dtype {' or '.join(d.value for d in dtypes)}, "
                        f"not {v.obj.dtype}")
    if v.shape != (n,):
        raise ValueError(f"{arg} must have shape ({n},) to match x's last dimension, "
                         f"not {v.shape}")
    if n > 1 and v.strides[0] != 1:
        raise ValueError(f"{arg} must be contiguous (stride 1), not stride {v.strides[0]}; "
                         f"pass a contiguous copy")


def _check_x(xv: arrays.View) -> int:
    if xv.dtype not in (DType.FP32, DType.FP16, DType.BF16):
        raise TypeError(f"x must have dtype float32, float16 or bfloat16, not {xv.obj.dtype}")
    if len(xv.shape) == 0:
        raise ValueError("x must have at least one dimension (..., N)")
    n = xv.shape[-1]
    if not 1 <= n < 2**31:
        raise ValueError(f"x: the last dimension N must be between 1 and 2**31 - 1, not {n}")
    _last_dim_contiguous(xv, "x")
    return n


def _last_dim_contiguous(v: arrays.View, arg: str) -> None:
    if v.shape[-1] > 1 and v.strides[-1] != 1 and math.prod(v.shape):  # empty: no strides to speak of
        raise ValueError(f"{arg}: the last dimension must be contiguous (stride 1), not stride "
                         f"{v.strides[-1]}; pass a contiguous copy of {arg}")


FLOAT32_MAX = 3.4028234663852886e38


def _real(value, arg: str) -> float:
    """A Python or NumPy real number as a float, or a TypeError naming `arg`. A float is
    taken at once: rmsnorm reads weight_offset so on every call."""
    if type(value) is float:
        return value
    if isinstance(value, (str, bytes, bool)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a real number, not {type(value).__name__} {value!r}")
    return float(value)


def _eps(eps) -> float:
    e = _real(eps, "eps")
    if not (math.isfinite(e) and 1.2e-38 < e <= FLOAT32_MAX):  # a positive normal float32
        raise ValueError(f"eps must be a positive finite float32 (from 1.2e-38 to 3.4e38), not {eps!r}")
    return e


def _weight_offset(offset, gamma) -> float:
    """RMSNorm's weight_offset as a float: a finite float32, and 0 where gamma is None."""
    o = _real(offset, "weight_offset")
    if not (math.isfinite(o) and abs(o) <= FLOAT32_MAX):
        raise ValueError(f"weight_offset must be a finite float32, not {offset!r}")
    if gamma is None and o != 0.0:
        raise ValueError(f"weight_offset={offset!r} offsets gamma, but gamma is None; pass gamma, "
                         f"or drop weight_offset")
    return o


def _lowbit(a: int) -> int:
    return a & -a if a else 1 << 62


def _vec_align(xv: arrays.View, x_bits: int, weights) -> int:
    """The widest vector width (of at most 16 bytes) that every access of this call is
    aligned for: it depends on the pointers' addresses modulo 16 only (see signature)."""
    return min(_lowbit(x_bits | xv.ptr // xv.dtype.itemsize), _col_align(xv, weights))


def _alike_rows(v: arrays.View, n: int, rows: int, inner: int, so: int, si: int) -> bool:
    """Whether each row of v starts at the element of its 16 bytes at which the same row of a
    dense (rows, n) output starts (the outputs are made so): a framed instance then stores
    every output in x's aligned vectors (kernels/framed_rows.cuh)."""
    vmax = 16 // v.dtype.itemsize
    return (v.ptr // v.dtype.itemsize % vmax == 0 and (rows <= 1 or (si - n) % vmax == 0)
            and (rows <= inner or (so - inner * n) % vmax == 0))


def _col_align(xv: arrays.View, weights) -> int:
    """The widest vector width (of at most 16 bytes) that the vectors in `weights` are
    aligned for."""
    v = 16 // xv.dtype.itemsize
    for wv in weights:
        if wv.ptr % 16:
            v = min(v, _lowbit(wv.ptr // wv.dtype.itemsize))
    return v


def _residual(rv: arrays.View, xv: arrays.View, inner: int) -> tuple[int, int]:
    """The residual's (outer, inner) row strides, addressed with x's `inner`."""
    if rv.device != xv.device:
        raise ValueError(f"residual is on device {rv.device} but x is on device {xv.device}")
    if rv.dtype != xv.dtype:
        raise TypeError(f"residual must have x's dtype ({xv.obj.dtype}), not {rv.obj.dtype}")
    if rv.shape != xv.shape:
        raise ValueError(f"residual must have x's shape {xv.shape}, not {rv.shape}")
    _last_dim_contiguous(rv, "residual")
    _, r_inner, so, si = _rows(rv, "residual")
    if so and r_inner != inner:  # two strides, grouped unlike x's rows
        raise ValueError(f"residual: its rows (strides {rv.strides}) cannot be addressed like "
                         f"x's (strides {xv.strides}); pass a contiguous copy of residual")
    return so, si


_SCALE_DTYPES = {"float32": DType.FP32, "fp32": DType.FP32, "float16": DType.FP16,
                 "fp16": DType.FP16, "half": DType.FP16, "bfloat16": DType.BF16,
                 "bf16": DType.BF16}


def _scale_dtype(dtype) -> DType:
    """scale_dtype as a DType: a name ('float32', 'bf16', ...), a NumPy or a torch dtype."""
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if name in _SCALE_DTYPES:
        return _SCALE_DTYPES[name]
    raise ValueError(f"scale_dtype must be float32, float16 or bfloat16, not {dtype!r}")


def _quant_options(quant, quant_scale, smooth_scale, scale_dtype):
    """(output precision or None for x's, Quant mode, per-row scale precision or None) of a
    call's quantization options, checked without its arrays."""
    if quant is None:
        for arg, value in (("smooth_scale", smooth_scale), ("quant_scale", quant_scale),
                           ("scale_dtype", scale_dtype)):
            if value is not None:
                raise ValueError(f"{arg} applies to quantized output: pass quant='int8' or "
                                 f"quant='fp8_e4m3', or drop {arg}")
        return None, Quant.NONE, None
    if not isinstance(quant, str) or quant not in QUANT_NAMES:
        raise ValueError(f"quant must be None, 'int8' or 'fp8_e4m3', not {quant!r}")
    if quant_scale is None:
        return QUANT_NAMES[quant], Quant.DYNAMIC, _scale_dtype("float32" if scale_dtype is None else scale_dtype)
    if scale_dtype is not None:
        raise ValueError("scale_dtype is the dtype of the per-row scales of dynamic quant; with "
                         "quant_scale (static quant) there are none: drop scale_dtype")
    return QUANT_NAMES[quant], Quant.STATIC, None


def _quant_scale(qv: arrays.View, xv: arrays.View) -> None:
    if qv.device != xv.device:
        raise ValueError(f"quant_scale is on device {qv.device} but x is on device {xv.device}")
    if qv.dtype != DType.FP32 or math.prod(qv.shape) != 1:
        raise ValueError(f"quant_scale must be a float32 device array holding one value "
                         f"(shape () or (1,)), not dtype {qv.obj.dtype} shape {qv.shape}")


# ---- the calls ----------------------------------------------------------------------------
def layernorm(x, gamma, beta=None, *, eps: float = 1e-5, residual=None,
              store_residual: bool = True, x_bias=None, quant: Optional[str] = None,
              smooth_scale=None, quant_scale=None, scale_dtype=None,
              return_mean_rstd: bool = False):
    """LayerNorm over the last dimension, with an optional fused prologue and epilogue:

        h = x (+ x_bias) (+ residual)       summed in float32, rounded once to x's dtype
        y = (h - mean) / sqrt(var + eps) * gamma (+ beta)   (population variance)
        y = y * smooth_scale                if given
        y = quantize(y)                     if quant is given

    x: (..., N) CUDA array, float32/float16/bfloat16 (CuPy, torch, or any CUDA Array
    Interface / DLPack object); rows may be strided, the last dimension must be contiguous.
    gamma, beta: (N,), x's dtype or float32; either may be None (no scale, no shift).
    residual: x's shape and dtype; x_bias: (N,), x's dtype. Statistics are accumulated in
    float32.

    quant: None, "int8" or "fp8_e4m3". With quant_scale (a one-element float32 device
    array) the codes are y / quant_scale (static); without it, each row gets the scale
    absmax(y) / qmax (qmax 127 or 448), returned in scale_dtype (float32 by default, or
    float16/bfloat16). int8 codes round half to even and saturate; fp8 codes saturate to
    +-448 and are returned as torch.float8_e4m3fn for torch inputs, as uint8 arrays of the
    e4m3 bits for CuPy inputs. smooth_scale: (N,) float32/float16/bfloat16, multiplies y
    before quantization (requires quant).

    Returns y (x's kind and shape; x's dtype unless quantized) when only y is asked for,
    else NormOutput(y, residual, scale, mean, rstd) with None for what was not asked:
    residual (h) with a residual and store_residual=True, scale with dynamic quant, mean
    and rstd (float32, x.shape[:-1]) with return_mean_rstd=True.
    """
    if _tracing(x):
        return _traced().layernorm(x, gamma, beta, eps=eps, residual=residual, store_residual=store_residual,
                                   x_bias=x_bias, quant=quant, smooth_scale=smooth_scale, quant_scale=quant_scale,
                                   scale_dtype=scale_dtype, return_mean_rstd=return_mean_rstd)
    return _norm(Norm.LAYERNORM, x, gamma, beta, eps, residual, store_residual, x_bias,
                 quant, smooth_scale, quant_scale, scale_dtype, 0.0, return_mean_rstd)


def rmsnorm(x, gamma=None, *, eps: float = 1e-6, residual=None, store_residual: bool = True,
            x_bias=None, quant: Optional[str] = None, smooth_scale=None, quant_scale=None,
            scale_dtype=None, weight_offset: float = 0.0, return_rstd: bool = False):
    """RMSNorm over the last dimension, with the fused prologue and epilogue of layernorm:

        h = x (+ x_bias) (+ residual)       summed in float32, rounded once to x's dtype
        y = h / sqrt(mean(h^2) + eps) * (gamma + weight_offset)
        y = y * smooth_scale                if given
        y = quantize(y)                     if quant is given

    gamma: (N,), x's dtype or float32, or None for no scale (weight_offset must then be 0).
    weight_offset=1.0 gives Gemma's (1 + gamma), added in float32. Inputs, quant,
    smooth_scale, quant_scale and scale_dtype as for layernorm.

    Returns y when only y is asked for, else NormOutput(y, residual, scale, None, rstd):
    residual (h) with a residual and store_residual=True, scale with dynamic quant, rstd
    (float32, x.shape[:-1]) with return_rstd=True.
    """
    if _tracing(x):
        return _traced().rmsnorm(x, gamma, eps=eps, residual=residual, store_residual=store_residual,
                                 x_bias=x_bias, quant=quant, smooth_scale=smooth_scale, quant_scale=quant_scale,
                                 scale_dtype=scale_dtype, weight_offset=weight_offset, return_rstd=return_rstd)
    return _norm(Norm.RMSNORM, x, gamma, None, eps, residual, store_residual, x_bias, quant, smooth_scale,
                 quant_scale, scale_dtype, _weight_offset(weight_offset, gamma), return_rstd)


_is_compiling = None  # torch.compiler.is_compiling, once a torch tensor has come here


def plan_with(kernel: runtime.Kernel, norm: Norm, x, gamma=None, beta=None, *, eps: float = 1e-5, residual=None,
              store_residual: bool = True, x_bias=None, quant=None, smooth_scale=None, quant_scale=None,
              scale_dtype=None, weight_offset: float = 0.0, return_mean_rstd: bool = False) -> tuple[Plan, tuple]:
    """A call checked as layernorm / rmsnorm check it, launching `kernel` instead of the one
    the dispatcher chooses (a tuning tool's build of an instance: runtime.load's `built`):
    (plan, arrays); plan.run(*arrays) makes the call."""
    return _plan(norm, x, gamma, beta, residual, x_bias, smooth_scale, quant_scale, eps, store_residual, quant,
                 scale_dtype, weight_offset, return_mean_rstd, kernel)


def _tracing(x) -> bool:
    """Whether torch.compile or torch.export is tracing this call: it then goes through the
    torch.library ops (normgen.torch), which the tracer sees as one opaque node with a fake
    implementation; an eager call takes the direct path below, without the op's dispatch.
    Only a torch tensor can be traced, and sys.modules is not read (Dynamo would walk it)."""
    global _is_compiling
    is_compiling = _is_compiling
    if is_compiling is None:
        if not type(x).__module__.startswith("torch"):
            return False
        import torch  # loaded: x is a torch tensor

        is_compiling = _is_compiling = torch.compiler.is_compiling
    return is_compiling()


def _traced():
    from . import torch as ops  # registers the ops on first use

    return ops


# ---- the per-call path ------------------------------------------------------------------
# A call is checked in full once per signature (its arguments' shapes, strides, dtypes,
# devices and pointer alignments, and its options); the checked call's plan is kept under
# that signature, so a repeated call costs a few attribute reads, a dictionary lookup, the
# outputs' allocation and the launch.
_plans: dict = {}  # call signature -> Plan
_MAX_PLANS = 4096  # a bound on the memory of programs whose shapes never repeat


def _norm(norm, x, gamma, beta, eps, residual, store_residual, x_bias, quant, smooth_scale,
          quant_scale, scale_dtype, weight_offset, return_stats):
    sig = arrays.signature
    plan = key = None
    if type(eps) is float:  # (an eps of another type is checked every time)
        try:
            key = (norm, sig(x), None if gamma is None else sig(gamma), None if beta is None else sig(beta),
                   None if residual is None else sig(residual), None if x_bias is None else sig(x_bias),
                   None if smooth_scale is None else sig(smooth_scale),
                   None if quant_scale is None else sig(quant_scale),
                   eps, store_residual, quant, scale_dtype, weight_offset, return_stats)
            plan = _plans.get(key)
        except (arrays.NoSignature, TypeError):  # another kind of array; an unhashable option
            key = None
    if plan is None:
        plan, (x, gamma, beta, residual, x_bias, smooth_scale, quant_scale) = _plan(
            norm, x, gamma, beta, residual, x_bias, smooth_scale, quant_scale, eps, store_residual, quant,
            scale_dtype, weight_offset, return_stats)
        if key is not None:
            if len(_plans) >= _MAX_PLANS:
                _plans.clear()
            _plans[key] = plan
    if arrays.current_device() != plan.device:
        with arrays.on_device(plan.device):
            return plan.run(x, gamma, beta, residual, x_bias, smooth_scale, quant_scale)
    return plan.run(x, gamma, beta, residual, x_bias, smooth_scale, quant_scale)


@dataclass(frozen=True)
class Plan:
    """A checked call: its launch (None: no rows), the outputs to make, the constant Params
    fields."""

    device: int
    launch: Optional[Callable]  # (stream, Params values): runtime.Kernel.launcher
    makers: tuple  # y, residual, scale, mean, rstd: each a function of x making it, or None
    stream: Callable  # device -> the current stream of x's library
    constants: tuple  # the Params fields from `rows` on, in params.FIELDS order
    single: bool  # y alone is returned (else a NormOutput)
    needs_grad: tuple = ()  # the torch arguments that require grad (refused in grad mode)

    def run(self, x, gamma, beta, residual, x_bias, smooth, qscale):
        """The call on arrays of the plan's signature: torch tensors or CuPy arrays."""
        if self.needs_grad and arrays.grad_enabled():
            raise RuntimeError(
                f"normgen has no backward pass yet, and grad mode is on while {', '.join(self.needs_grad)} "
                f"{'requires' if len(self.needs_grad) == 1 else 'require'} grad: its outputs would carry no "
                f"gradient. For inference, call it under torch.no_grad() or torch.inference_mode(), or pass "
                f"tensors that do not require grad (.detach()); to train, use torch.nn.functional.")
        y_of, res_of, scale_of, mean_of, rstd_of = self.makers
        y = y_of(x)
        res = res_of(x) if res_of else None
        scale = scale_of(x) if scale_of else None
        mean = mean_of(x) if mean_of else None
        rstd = rstd_of(x) if rstd_of else None
        if self.launch is not None:
            p = arrays.data_ptr
            self.launch(self.stream(self.device), (
                p(x), 0 if residual is None else p(residual), 0 if x_bias is None else p(x_bias),
                0 if gamma is None else p(gamma), 0 if beta is None else p(beta),
                0 if smooth is None else p(smooth), 0 if qscale is None else p(qscale), p(y),
                0 if res is None else p(res), 0 if scale is None else p(scale),
                0 if mean is None else p(mean), 0 if rstd is None else p(rstd)) + self.constants)
        return y if self.single else NormOutput(y, res, scale, mean, rstd)


def _plan(norm, x, gamma, beta, residual, x_bias, smooth_scale, quant_scale, eps, store_residual,
          quant, scale_dtype, weight_offset, return_stats, kernel=None) -> tuple[Plan, tuple]:
    """Check a call's arguments (errors name the argument and the fix) and choose its kernel
    (or launch `kernel`: a tuning tool's build of the instance): the plan, and the arrays to
    run it on (other kinds of input as CuPy arrays). The options are checked first: their
    errors do not depend on the arrays."""
    e = _eps(eps)
    out, mode, sdt = _quant_options(quant, quant_scale, smooth_scale, scale_dtype)
    xv = arrays.view(x, "x")
    n = _check_x(xv)
    aligned = []  # inputs whose alignment bounds the vector width
    columns = []  # the per-column vectors among them
    wdt = None  # the weights' precision; None: no gamma (nor beta)
    gv = bv = rv = xbv = smv = qv = None
    if gamma is not None:
        gv = arrays.view(gamma, "gamma")
        _vector(gv, "gamma", n, xv, (xv.dtype, DType.FP32))
        wdt = gv.dtype
        aligned.append(gv)
        columns.append(gv)
    if beta is not None:
        bv = arrays.view(beta, "beta")
        _vector(bv, "beta", n, xv, (wdt,) if wdt else (xv.dtype, DType.FP32))
        wdt = bv.dtype
        aligned.append(bv)
        columns.append(bv)
    rows, inner, so, si = _rows(xv)
    bits = n | so | si

    fused_add, r_so, r_si = FusedAdd.NONE, 0, 0
    if residual is not None:
        rv = arrays.view(residual, "residual")
        r_so, r_si = _residual(rv, xv, inner)
        fused_add = FusedAdd.STORE if store_residual else FusedAdd.NO_STORE
        bits |= r_so | r_si
        aligned.append(rv)
    if x_bias is not None:
        xbv = arrays.view(x_bias, "x_bias")
        _vector(xbv, "x_bias", n, xv, (xv.dtype,))
        aligned.append(xbv)
        columns.append(xbv)

    out, smooth = out or xv.dtype, None
    if quant_scale is not None:
        qv = arrays.view(quant_scale, "quant_scale")
        _quant_scale(qv, xv)
    if smooth_scale is not None:
        smv = arrays.view(smooth_scale, "smooth_scale")
        _vector(smv, "smooth_scale", n, xv, FLOAT_INPUTS)
        smooth = smv.dtype
        aligned.append(smv)
        columns.append(smv)

    lead = xv.shape[:-1]
    dense = so == 0 and (si == n or rows <= 1)  # x's rows are contiguous
    makers = (
        arrays.maker(xv, xv.shape, out, dense and out is xv.dtype),
        arrays.maker(xv, xv.shape, xv.dtype, dense) if fused_add == FusedAdd.STORE else None,
        arrays.maker(xv, lead, sdt) if mode == Quant.DYNAMIC else None,
        arrays.maker(xv, lead, DType.FP32) if return_stats and norm == Norm.LAYERNORM else None,
        arrays.maker(xv, lead, DType.FP32) if return_stats else None,
    )
    if rows and kernel is None:
        key = CallKey(xv.device, n, _vec_align(xv, bits, aligned), _col_align(xv, columns), norm, xv.dtype, wdt,
                      out, fused_add, x_bias is not None, mode, smooth, sdt, return_stats)
        kernel = _kernels.get(key) or _resolve(key)
    single = fused_add != FusedAdd.STORE and mode != Quant.DYNAMIC and not return_stats
    needs_grad = tuple(arg for arg, v in (("x", xv), ("gamma", gv), ("beta", bv), ("residual", rv),
                                          ("x_bias", xbv), ("smooth_scale", smv))
                       if v is not None and v.torch and v.obj.requires_grad)
    if rows and kernel.alike is not None and _alike_rows(xv, n, rows, inner, so, si) and (
            rv is None or _alike_rows(rv, n, rows, inner, r_so, r_si)):
        kernel = kernel.alike
    plan = Plan(xv.device, kernel.launcher(rows) if rows else None, makers, arrays.stream_getter(xv),
                (rows, inner, so, si, r_so, r_si, n, e, weight_offset, 0), single, needs_grad)
    return plan, (xv.obj, *(v and v.obj for v in (gv, bv, rv, xbv, smv, qv)))
