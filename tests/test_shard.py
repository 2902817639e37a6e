"""--shard K/N (tests/conftest.py): N pytest processes share one run, each test in exactly one."""
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import shard_of

ROOT = Path(__file__).resolve().parent.parent


def _collected(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/test_spec.py", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_shards_partition_the_run():
    every = _collected()
    shards = [_collected("--shard", f"{k}/3") for k in range(3)]
    assert len(every) > 3
    assert sorted(sum(shards, [])) == sorted(every)
    assert all(shards), "every shard gets tests"


@pytest.mark.parametrize("option", ["3/3", "-1/2", "1", "a/b", "1/0"])
def test_bad_shard_is_named(option):
    with pytest.raises(ValueError, match="--shard must be K/N"):
        shard_of(option)
