"""The peers, quack and Liger: what they must import, the calls the benchmark makes of them
and the ops they have no call for; a case's calls of every implementation asked for, and
the check of a peer's outputs against torch eager's."""
from __future__ import annotations

import importlib
from typing import NamedTuple, Optional

from .ops import OPS
from .status import FAILED, NO_OP, reason
from .timing import _torch

PEERS = ("quack", "liger")
IMPLS = ("normgen", "torch", "torch.compile") + PEERS

# peer -> the modules it must import (the first says the package is installed, the others
# are where its calls come from) and its distribution
PEER_MODULES = {
    "quack": ("quack", "quack.rmsnorm"),
    "liger": ("liger_kernel", "liger_kernel.ops.layer_norm", "liger_kernel.ops.rms_norm",
              "liger_kernel.ops.fused_add_rms_norm"),
}
PEER_DIST = {"quack": "quack-kernels", "liger": "liger_kernel"}

# peer -> op -> what the benchmark calls: the forward functions behind the peers' autograd
# wrappers, called directly (no autograd graph, no saved statistics where that is optional),
# with normgen's semantics: RMSNorm eps 1e-6 with gamma, LayerNorm eps 1e-5 with gamma and
# beta, the fused adds returning the sum h and y.
PEER_CALLS = {
    "quack": {
        "layernorm": "quack.rmsnorm.layernorm_fwd(x, gamma.float(), beta.float(), eps=1e-5) "
                     "(it asserts float32 weights)",
        "add+layernorm": "quack.rmsnorm._rmsnorm_fwd(x, gamma.float(), y, bias=beta.float(), residual=r, "
                         "residual_out=h, eps=1e-5, is_layernorm=True): the op behind layernorm_fwd and "
                         "rmsnorm_fwd; no public quack call takes a residual with LayerNorm",
        "rmsnorm": "quack.rmsnorm.rmsnorm_fwd(x, gamma, eps=1e-6)",
        "add+rmsnorm": "quack.rmsnorm.rmsnorm_fwd(x, gamma, residual=r, eps=1e-6) -> (y, h, None)",
    },
    "liger": {
        "layernorm": "liger_kernel.ops.layer_norm.layer_norm_forward(x, gamma, beta, 1e-5) "
                     "(also stores mean and rstd)",
        "rmsnorm": "liger_kernel.ops.rms_norm.rms_norm_forward(x, gamma, 1e-6, offset=0.0, "
                   "casting_mode='gemma', row_mode=None) (also stores rstd)",
        "add+rmsnorm": "liger_kernel.ops.fused_add_rms_norm.fused_add_rms_norm_forward(x, r, gamma, 1e-6, "
                       "offset=0.0, casting_mode='gemma') -> (y, h, ...) (also stores rstd)",
    },
}
_QUACK_NO_QUANT = "quack has no dynamically quantized output (rmsnorm_fwd's out_dtype is a plain cast, no scales)"
_LIGER_NO_QUANT = "Liger has no quantized norm output"
# peer -> op -> why it has no such op
PEER_MISSING = {
    "quack": {"layernorm+int8": _QUACK_NO_QUANT, "layernorm+fp8": _QUACK_NO_QUANT,
              "rmsnorm+fp8": _QUACK_NO_QUANT},
    "liger": {"add+layernorm": "Liger has no residual add fused with LayerNorm",
              "layernorm+int8": _LIGER_NO_QUANT, "layernorm+fp8": _LIGER_NO_QUANT,
              "rmsnorm+fp8": _LIGER_NO_QUANT},
}


def probe_peers(names) -> dict:
    """peer -> {"available": True, "version": ...} or {"available": False, "reason": the
    import error's one line}."""
    status = {}
    for name in names:
        try:
            for module in PEER_MODULES[name]:
                importlib.import_module(module)
        except Exception as e:  # ImportError, or whatever a half-installed stack raises
            status[name] = dict(available=False, reason=reason(e))
            continue
        try:
            from importlib import metadata

            version = metadata.version(PEER_DIST[name])
        except Exception:
            version = None
        status[name] = dict(available=True, version=version)
    return status


def _quack_call(op, x, r, g, b):
    """quack's call of op on these inputs (see PEER_CALLS)."""
    # The peers are imported by name (importlib): they are optional, the benchmark's alone,
    # not dependencies of normgen (tests/test_install.py reads import statements). And
    # import_module, not `import quack.rmsnorm`: quack/__init__.py binds quack.rmsnorm to the
    # function rmsnorm, shadowing the module.
    q = importlib.import_module("quack.rmsnorm")
    layernorm_fwd, rmsnorm_fwd = q.layernorm_fwd, q.rmsnorm_fwd
    torch = _torch()
    if op == "layernorm":
        g32, b32 = g.float(), b.float()  # layernorm_fwd asserts float32 weights: once, untimed
        return lambda: layernorm_fwd(x, g32, b32, eps=1e-5)
    if op == "add+layernorm":
        _rmsnorm_fwd = q._rmsnorm_fwd
        g32, b32 = g.float(), b.float()

        def add_layernorm():
            y, h = torch.empty_like(x), torch.empty_like(x)
            _rmsnorm_fwd(x, g32, y, bias=b32, residual=r, residual_out=h, eps=1e-5, is_layernorm=True)
            return h, y

        return add_layernorm
    if op == "rmsnorm":
        return lambda: rmsnorm_fwd(x, g, eps=1e-6)[0]
    if op == "add+rmsnorm":
        def add_rmsnorm():
            y, h, _ = rmsnorm_fwd(x, g, residual=r, eps=1e-6)
            return h, y

        return add_rmsnorm
    raise LookupError(f"quack: no call for {op}")


def _liger_call(op, x, r, g, b):
    """Liger's call of op on these inputs (see PEER_CALLS): its default (Triton) kernels,
    imported from the op modules, which the LIGER_KERNEL_IMPL backend switch leaves alone."""
    # casting_mode "gemma": x and gamma in float32, y rounded once to x's dtype, as normgen
    # and F.rms_norm compute ("llama" rounds x * rstd to x's dtype before multiplying by
    # gamma; "none" computes in x's dtype). offset 0.0: y = x_hat * gamma.
    if op == "layernorm":
        layer_norm_forward = importlib.import_module("liger_kernel.ops.layer_norm").layer_norm_forward
        return lambda: layer_norm_forward(x, g, b, 1e-5)[0]
    if op == "rmsnorm":
        rms_norm_forward = importlib.import_module("liger_kernel.ops.rms_norm").rms_norm_forward
        return lambda: rms_norm_forward(x, g, 1e-6, 0.0, "gemma", None)[0]
    if op == "add+rmsnorm":
        fused_add_rms_norm_forward = importlib.import_module(
            "liger_kernel.ops.fused_add_rms_norm").fused_add_rms_norm_forward

        def add_rmsnorm():
            y, h, *_ = fused_add_rms_norm_forward(x, r, g, 1e-6, 0.0, "gemma")
            return h, y

        return add_rmsnorm
    raise LookupError(f"liger: no call for {op}")


PEER_BUILD = {"quack": _quack_call, "liger": _liger_call}


class Absent(NamedTuple):
    """An implementation's entry for a case it does not time: why (status and note)."""

    status: str
    note: str


def case_impls(op, x, r, g, b, impls, peers) -> dict:
    """impl -> a call of op on these inputs, or Absent (no such op, or building the call
    raised), in IMPLS order, for the implementations asked for; peers only where
    importable (peers: probe_peers' answer)."""
    ours = OPS[op][2](x, r, g, b)  # normgen, torch, torch.compile
    out = {}
    for impl in IMPLS:
        if impl not in impls:
            continue
        if impl not in PEERS:
            out[impl] = ours[impl]
        elif peers.get(impl, {}).get("available"):
            if op in PEER_MISSING[impl]:
                out[impl] = Absent(NO_OP, PEER_MISSING[impl][op])
                continue
            try:
                out[impl] = PEER_BUILD[impl](op, x, r, g, b)
            except Exception as e:
                out[impl] = Absent(FAILED, reason(e))
    return out


def _recover() -> None:
    """After an implementation raised: let the device finish what was queued (an error it
    raises is left to the next case's calls to report)."""
    try:
        _torch().cuda.synchronize()
    except Exception:
        pass


def _disagreement(out, ref) -> Optional[float]:
    """The largest difference between a peer's outputs and torch eager's, relative to the
    largest output magnitude (per output); None where they are not comparable."""
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    if len(outs) != len(refs) or any(getattr(a, "shape", None) != b.shape for a, b in zip(outs, refs)):
        return None
    worst = 0.0
    for a, b in zip(outs, refs):
        b32 = b.float()
        scale = b32.abs().max().item() or 1.0
        worst = max(worst, (a.float() - b32).abs().max().item() / scale)
    return worst


def _check(impl, fn, ref) -> Optional[float]:
    """A peer's first call, compared with torch eager's outputs (None for normgen and the
    torch calls, which other tests check)."""
    if impl not in PEERS or ref is None:
        return None
    return _disagreement(fn(), ref)


def _reference(fns):
    fn = fns.get("torch")
    if callable(fn) and any(i in PEERS and callable(f) for i, f in fns.items()):
        try:
            return fn()
        except Exception:
            _recover()
    return None
