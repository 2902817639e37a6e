"""Test-suite wiring: `--select "<generate.py flags>"` chooses the instances under test
through the same function as generate.py (normgen.matrix.select via normgen.cli)."""
from __future__ import annotations

import functools
import os
import shlex
import sys
from pathlib import Path

import pytest

# NVRTC 13 keeps a compute cache and skips ptxas on a hit, which leaves out the ptxas
# resource report that test_compile reads. The tests always want a real compile.
os.environ["CUDA_CACHE_DISABLE"] = "1"

from normgen.cli import selection_from_args
from normgen.matrix import select


def pytest_addoption(parser):
    parser.addoption("--select", default=os.environ.get("NORMGEN_SELECT", ""),
                     help="generate.py flags choosing the instances to test, e.g. "
                          "\"--prec bf16 --pipeline 1p\" (default: the default set)")
    parser.addoption("--seed", type=int, default=None,
                     help="random seed for GPU test data (default: fresh each run)")
    parser.addoption("--shard", default="",
                     help="K/N: run every N-th collected test from the K-th (0 <= K < N), so that "
                          "N processes share a run (scripts/device_suite.sh)")


def shard_of(option: str) -> tuple[int, int]:
    """(K, N) from --shard's "K/N"; ValueError naming the option otherwise."""
    try:
        k, n = (int(v) for v in option.split("/"))
        if 0 <= k < n:
            return k, n
    except ValueError:
        pass
    raise ValueError(f"--shard must be K/N with integers 0 <= K < N, not {option!r}")


def pytest_collection_modifyitems(config, items):
    option = config.getoption("--shard")
    if option:
        k, n = shard_of(option)
        deselected = [item for i, item in enumerate(items) if i % n != k]
        items[:] = [item for i, item in enumerate(items) if i % n == k]
        config.hook.pytest_deselected(items=deselected)


@functools.cache
def _selected(flags: str):
    return tuple(select(selection_from_args(shlex.split(flags))))


def selected_specs(config):
    return _selected(config.getoption("--select"))


def source_dir():
    """The generated folder under test: NORMGEN_GENERATED_DIR (as the dispatcher reads it,
    e.g. a `generate.py --out DIR` selection outside the default set), else generated/."""
    from normgen.codegen import GENERATED

    return Path(os.environ.get("NORMGEN_GENERATED_DIR", GENERATED))


@pytest.fixture(scope="session")
def seed(request):
    """Random seed for test data: --seed, or fresh each run (it is printed on failure)."""
    s = request.config.getoption("--seed")
    return s if s is not None else int.from_bytes(os.urandom(4), "little")


@pytest.fixture(autouse=True)
def _release_gpu_memory():
    """After each test, return the memory CuPy's and torch's pools keep to the device: the
    GPU suite runs several pytest processes on one GPU, and pools that only grow would run
    it out of memory."""
    yield
    from .gpu import gpu_reason

    if "cupy" not in sys.modules or gpu_reason():
        return
    sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def pytest_generate_tests(metafunc):
    if "spec" in metafunc.fixturenames and not hasattr(metafunc.function, "spec_cases"):
        specs = selected_specs(metafunc.config)
        metafunc.parametrize("spec", specs, ids=[s.test_id for s in specs])
