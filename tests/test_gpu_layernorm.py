"""GPU: every selected instance against the NumPy reference, and the dispatcher's contract."""
from __future__ import annotations

import zlib

import pytest

from normgen import dispatch, tiles
from normgen.codegen import GENERATED
from normgen.types import Pipeline

from .gpu import Case, assert_close, assert_stats, expected, poisoned_allocations, requires_gpu

pytestmark = requires_gpu

N_VALUES = (1, 7, 64, 1000, 1024, 4095, 4096, 8192, 8193, 12288, 65536)
M_VALUES = (0, 1, 3, 1000)


def _n_cases(spec):
    """N values an instance is tested at: two-pass, all of N_VALUES and past the one-pass
    range; one-pass, those in its bucket, both ends of it, and tiny rows (mostly padding)."""
    v = spec.vec
    if spec.pipeline == Pipeline.TWO_PASS:
        # several chunks plus a partial one; the first N the dispatcher sends to two-pass
        ns = set(N_VALUES) | {v, 3 * 2048 * v + v, tiles.ONE_PASS_MAX_N[spec.x] + v}
    else:
        lo = max([b for b in tiles.BUCKETS if b < spec.bucket and tiles.has_one_pass(spec.x, b, v)], default=0)
        ns = {n for n in N_VALUES if lo < n <= spec.bucket} | {v, 7, lo + v, spec.bucket - v, spec.bucket}
    return sorted(n for n in ns if n >= 1 and n % v == 0 and (spec.bucket is None or n <= spec.bucket))


def _cases(spec, seed):
    for n in _n_cases(spec):
        # M = 1000 for N_VALUES; boundary values past them use 64 rows (a quick reference)
        for m in M_VALUES if n in N_VALUES or n <= 8192 else (0, 1, 3, 64):
            for kind in ("normal", "offset") if m else ("normal",):
                pad = 0 if m <= 1 else 8  # rows of x are a slice of wider rows
                yield Case(spec.x, spec.w, n, m, kind, pad, seed ^ zlib.crc32(f"{n},{m},{kind}".encode()))


@pytest.fixture(scope="module", autouse=True)
def built(request):
    """Compile every selected instance up front, in parallel (the tests then load cubins)."""
    from .conftest import selected_specs
    from normgen import runtime

    runtime.build(selected_specs(request.config), GENERATED, runtime.device_arch(0))


@pytest.fixture
def only(spec):
    """Dispatch from this one instance alone."""
    dispatch.use_generated(GENERATED, registry={spec.key: spec.name})
    yield spec
    dispatch.use_generated(GENERATED)


def test_instance_against_reference(only, seed):
    import normgen

    spec = only
    for case in _cases(spec, seed):
        (x, g, b), ref_y, ref_mean, ref_rstd = expected(case)
        what = f"{spec.name} N={case.n} M={case.m} {case.kind} pad={case.pad} seed={seed}"
        chosen = dispatch.choose(spec.norm, spec.x, spec.w, spec.save_stats, case.n, spec.vec)
        assert chosen == spec, what
        with poisoned_allocations():
            if spec.save_stats:
                y, mean, rstd = normgen.layernorm(x, g, b, eps=1e-5, return_mean_rstd=True)
            else:
                y = normgen.layernorm(x, g, b, eps=1e-5)
        assert_close(y, ref_y, spec.x, what)
        if spec.save_stats:
            assert mean.shape == rstd.shape == (case.m,)
            assert_stats(mean, rstd, ref_mean, ref_rstd, what)
