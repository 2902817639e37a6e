"""Fixed regression cases: every failure the property tests (test_properties.py,
test_gpu_properties.py) find is added here as a fixed case, and replayed on every run by
the same check that found it.

A case is the falsifying example as hypothesis prints it (`case=Case(...)` or
`bad=Bad(...)`: their reprs are Python), shrunk, pasted into the list of the check and
device that failed it: CPU cases run through the real entry points on host data
(test_properties.Host: wrong options only), GPU cases on the GPU. A case stays after its
fix."""
from __future__ import annotations

from dataclasses import replace

import pytest

from .gpu import requires_gpu
from .strategies import Bad, Case, Layout, Options, check_bad, check_case
from .test_properties import Host

ROWS = Layout("rows", (2, 8), (8, 1))
LN = Case(Options("layernorm", "fp32"), ROWS)
RMS = Case(Options("rmsnorm", "fp32"), ROWS)
LN_INT8 = Case(Options("layernorm", "fp32", quant="int8", scale="fp32"), ROWS)

# (check_bad through the entry points on host data) refusals that must name the argument
CPU_BAD: list[Bad] = [
    # float(eps) and float(weight_offset) raise messages that name neither
    Bad(LN, "eps", "value", "text"),
    Bad(LN, "eps", "value", "none"),
    Bad(RMS, "weight_offset", "value", "text"),
    Bad(RMS, "weight_offset", "value", "none"),
    # past float32's range: accepted, then struct.pack raises OverflowError at the launch
    Bad(LN, "eps", "value", "past_float32"),
    Bad(RMS, "weight_offset", "value", "past_float32"),
    # an unhashable quant: TypeError "unhashable type: 'list'"
    Bad(LN, "quant", "value", "list"),
    # scale_dtype='' is taken for the default
    Bad(LN_INT8, "scale_dtype", "value", ""),
]
GPU_CASES: list = [  # (check_case on the GPU)
    # a NaN in a row of a dynamic quant: the absolute maximum dropped it (fmaxf), and the
    # row got the smallest normal scale instead of NaN
    Case(Options("layernorm", "bf16", add=1, quant="int8", smooth="fp32", scale="fp32"),
         Layout("rows", (1, 129), (129, 1)), residual=Layout("rows", (1, 129), (129, 1)),
         poison=((0, 0, "nan", "x"),), lib="cupy"),
    # the same in RMSNorm, whose variance clamp (fmaxf(var, 0)) turned the NaN into rstd =
    # 1 / sqrt(eps) for the row's other elements
    Case(Options("rmsnorm", "bf16"), Layout("rows", (2, 129), (129, 1)), poison=((0, 3, "nan", "x"),), lib="cupy"),
    # an inf in a two-pass row: the chunks' Kahan-Babuska sum takes (inf - inf) into its error
    # term, and sum + err is NaN, where the row's sum of squares is inf (rstd 0, y 0 but the
    # inf's NaN); Compensated.value() now returns the sum where it is not finite
    Case(Options("rmsnorm", "bf16"), Layout("rows", (1, 513), (513, 1)), gamma=False,
         poison=((0, 0, "inf", "x"),), lib="cupy"),
]
GPU_BAD: list[Bad] = [  # (check_bad on the GPU)
    # a first element off an element boundary (a CuPy view of bytes): accepted, and the
    # launch read misaligned memory
    Bad(replace(LN, lib="cupy"), "x", "misaligned"),
    Bad(replace(LN, lib="cupy"), "gamma", "misaligned"),
]


def _id(case) -> str:
    if isinstance(case, Bad):
        return "-".join(filter(None, (case.case.opts.norm, case.arg, case.how, case.what)))
    return f"{case.opts.norm}-{case.opts.x}-N{case.n}-{case.kind}"


@pytest.mark.parametrize("bad", CPU_BAD, ids=_id)
def test_cpu_bad(bad):
    check_bad(bad, Host())


@requires_gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=_id)
def test_gpu_case(case):
    from .test_gpu_properties import Cuda

    check_case(case, Cuda())


@requires_gpu
@pytest.mark.parametrize("bad", GPU_BAD, ids=_id)
def test_gpu_bad(bad):
    from .test_gpu_properties import Cuda

    check_bad(bad, Cuda())
