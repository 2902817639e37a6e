"""GPU: every selected instance (LayerNorm and RMSNorm) against the NumPy reference."""
from __future__ import annotations

import pytest

from normgen import dispatch, tiles

from normgen.spec import framed_range, shorter_bucket
from normgen.types import FusedAdd, Norm, Pipeline, Quant

from .conftest import source_dir
from .gpu import (
    KINDS, LEAD, SPECIAL_KINDS, Case, case_seed, check_call, expected, requires_gpu, semantics, shift_columns,
)

pytestmark = requires_gpu

N_VALUES = (1, 7, 64, 1000, 1024, 4095, 4096, 8192, 8193, 12288, 65536)
M_VALUES = (0, 1, 3, 1000)


def _n_cases(spec):
    """N values an instance is tested at: two-pass, all of N_VALUES and past the one-pass
    range; one-pass, those in its bucket, both ends of it, and tiny rows (mostly padding)."""
    v = spec.vec
    if spec.framed:  # the N it serves (framed_range): both ends, odd N, N % V of every kind, tiny rows
        lo, top = framed_range(spec)
        ns = {n for n in N_VALUES if lo < n <= top} | {1, 7, lo + 1, lo + 3, top - 1, top, (lo + top) // 2 + 5,
                                                      top - v - 2}
        return sorted(n for n in ns if lo < n <= top)
    if spec.ragged:  # any N in the bucket: both ends, odd N, N % V of every kind, tiny rows
        lo = shorter_bucket(spec)
        ns = {n for n in N_VALUES if lo < n <= spec.bucket} | {1, 7, lo + 1, lo + 3, spec.bucket - 1, spec.bucket,
                                                              (lo + spec.bucket) // 2 + 5, spec.bucket - v - 2}
        return sorted(n for n in ns if 1 <= n <= spec.bucket)
    if spec.pipeline == Pipeline.TWO_PASS:
        # several chunks plus a partial one; the first N the dispatcher sends to two-pass
        ns = set(N_VALUES) | {v, 3 * 2048 * v + v, tiles.ONE_PASS_MAX_N[spec.x] + v}
    else:
        lo = shorter_bucket(spec)
        ns = {n for n in N_VALUES if lo < n <= spec.bucket} | {v, 7, lo + v, spec.bucket - v, spec.bucket}
    return sorted(n for n in ns if n >= 1 and n % v == 0 and (spec.bucket is None or n <= spec.bucket))


def _cases(spec, seed):
    """Plain instances: M = 1000 up to N = 8192 and at N_VALUES, else 64, and 16 past
    262144 (a quick reference: fewer rows than a grid holds either way). Fused instances
    (many more, sharing the plain ones' row walk): M = 256 up to N = 8192, else 16; and the
    special kinds at the instance's largest N. LayerNorm there also with rows whose shifts
    lie far from their mean; RMSNorm without gamma and with weight_offset = 1 (Gemma's 1 +
    gamma)."""
    plain = spec.fused_add == FusedAdd.NONE and not spec.x_bias and spec.quant == Quant.NONE
    call = None if plain and spec.norm == Norm.LAYERNORM else semantics(spec)
    ns = _n_cases(spec)
    pad_of, start_of = (11, 5) if spec.ragged or spec.framed else (8, 0)
    for n in ns:
        if plain:
            big = 1000 if n <= 8192 or n in N_VALUES else 64 if n <= 262144 else 16
        else:  # above 8192 a few rows hold millions of elements; the row walk is the plain one's
            big = 256 if n <= 8192 else 16
        for m in M_VALUES[:-1] + (big,):
            for kind in KINDS if m else KINDS[:1]:
                # rows of x are a slice of wider rows; ragged rows' start anywhere in a vector;
                # framed rows' many rows contiguous (each row tensor's rows start alike, the
                # aligned accesses), a few sliced (x's rows start unlike y's: element by element)
                pad, start = (0, 0) if m <= 1 or (spec.framed and m == big) else (pad_of, start_of)
                yield Case(spec.x, spec.w, n, m, kind, pad, case_seed(seed, n, m, kind), call, start=start)
    if spec.framed:  # the special kinds on contiguous rows (the aligned accesses)
        pad_of, start_of = 0, 0
    if not plain:
        for kind in SPECIAL_KINDS:
            yield Case(spec.x, spec.w, ns[-1], 3, kind, pad_of, case_seed(seed, kind), call, start=start_of)
    if spec.norm == Norm.LAYERNORM:
        yield Case(spec.x, spec.w, ns[-1], 3, LEAD, pad_of, case_seed(seed, LEAD), call,
                   lead=shift_columns(spec, ns[-1]), start=start_of)
    if spec.norm == Norm.RMSNORM:
        yield Case(spec.x, spec.w, ns[-1], 3, "offset", pad_of, seed ^ 1, call, gamma=False, start=start_of)
        yield Case(spec.x, spec.w, ns[-1], 3, "normal", pad_of, seed ^ 2, call, weight_offset=1.0, start=start_of)


@pytest.fixture(scope="module", autouse=True)
def built(request):
    """Compile the instances this run tests (after -k and --shard) up front, in parallel
    (the tests then load cubins)."""
    from normgen import cache, runtime

    run = {item.callspec.params["spec"] for item in request.session.items
           if hasattr(item, "callspec") and "spec" in item.callspec.params}
    cache.build(sorted(run, key=str), source_dir(), runtime.device_arch(0))


@pytest.fixture
def only(spec):
    """Dispatch from this one instance alone."""
    dispatch.use_generated(source_dir(), registry={spec.key: spec.name})
    yield spec
    dispatch.use_generated(source_dir())


def test_instance_against_reference(only, seed):
    spec = only
    for case in _cases(spec, seed):
        e = expected(case)
        what = (f"{spec.name} N={case.n} M={case.m} {case.kind} pad={case.pad} seed={seed}"
                f"{'' if case.gamma else ' gamma=None'} weight_offset={case.weight_offset}")
        assert dispatch.choose(semantics(spec), case.n, 1 if spec.ragged or spec.framed else spec.vec) == spec, what
        check_call(spec, case, e, what)
