"""The cubin cache (normgen.cache): verified reads, rebuilt bad files, atomic writes, a cache
that cannot be written, threads, the ahead-of-time build, listing and pruning. Real NVRTC
compiles of small instances (CPU), plus one GPU test of a call over a damaged cache."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from normgen import cache, paths
from normgen import compile as nvrtc_compile
from normgen.spec import parse_name

from .gpu import requires_gpu

NAME = "layernorm_fwd_bf16_nb1024_1p_v8"
NAMES = (NAME, "rmsnorm_fwd_bf16_nb1024_1p_v8", "rmsnorm_fwd_fp16_nb256_1p_v8")
ARCH = "sm_90"
INSTANCE = parse_name(NAME)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def fresh() -> bytes:
    """The instance's cubin straight from NVRTC."""
    return nvrtc_compile.compile_file(paths.GENERATED / INSTANCE.file_name, ARCH).cubin


def files(folder, pattern="*"):
    return sorted(p for p in folder.rglob(pattern) if p.is_file()) if folder.exists() else []


def temps(folder):
    return files(folder, f"*{cache.TEMP_SUFFIX}")


def test_pack_round_trip_and_rejects():
    blob = b"\x7fELF" + bytes(range(256)) * 3
    packed = cache.pack(blob)
    assert cache.unpack(packed) == (blob, "")
    for bad in (b"", packed[:-1], packed + b"x", packed[:cache.HEADER_SIZE - 1], blob,
                packed[:-1] + bytes([packed[-1] ^ 1])):
        cubin, why = cache.unpack(bad)
        assert cubin is None and why


def test_miss_compiles_and_stores_a_verified_file(cache_dir, fresh):
    got = cache.cubin(INSTANCE, paths.GENERATED, ARCH)
    assert got.startswith(b"\x7fELF") and got == fresh
    path = cache.cache_path(INSTANCE, paths.GENERATED, ARCH)
    assert path.parent == cache_dir / ARCH and path.name.startswith(NAME + "-")
    assert files(cache_dir) == [path]
    data = path.read_bytes()
    assert data.startswith(cache.MAGIC) and cache.unpack(data) == (fresh, "")


def test_hit_returns_the_same_bytes_without_compiling(fresh):
    first = cache.cubin(INSTANCE, paths.GENERATED, ARCH)
    path = cache.cache_path(INSTANCE, paths.GENERATED, ARCH)
    before = path.stat()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a hit warns of nothing
        again = cache.cubin(INSTANCE, paths.GENERATED, ARCH)
    after = path.stat()
    assert again == first == fresh
    # a compile would have written a new file and renamed it over this one
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def _truncated(data):
    return data[:len(data) // 2]


def _flipped(data):
    i = cache.HEADER_SIZE + (len(data) - cache.HEADER_SIZE) // 2
    return data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:]


@pytest.mark.parametrize("damage", [_truncated, _flipped, lambda d: b"", lambda d: d[cache.HEADER_SIZE:]],
                         ids=["truncated", "flipped", "empty", "bare-cubin"])
def test_a_file_that_does_not_verify_is_rebuilt(cache_dir, fresh, damage):
    path = cache.cache_path(INSTANCE, paths.GENERATED, ARCH)
    path.parent.mkdir(parents=True)
    path.write_bytes(damage(cache.pack(fresh)))
    with pytest.warns(cache.CacheWarning, match="does not verify") as record:
        got = cache.cubin(INSTANCE, paths.GENERATED, ARCH)
    assert len(record) == 1 and str(path) in str(record[0].message)
    assert got.startswith(b"\x7fELF") and got == fresh
    assert cache.unpack(path.read_bytes()) == (fresh, "")
    assert files(cache_dir) == [path]


def test_a_cache_under_a_regular_file_serves_from_memory(tmp_path, monkeypatch, fresh):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a folder")
    folder = blocker / "cache"
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(folder))
    before = sorted(tmp_path.rglob("*"))
    with pytest.warns(cache.CacheWarning, match="NORMGEN_CACHE_DIR") as record:
        got = cache.cubin(INSTANCE, paths.GENERATED, ARCH)
    assert len(record) == 1 and str(folder) in str(record[0].message)
    assert got == fresh
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        assert cache.cubin(INSTANCE, paths.GENERATED, ARCH) == fresh
    assert sorted(tmp_path.rglob("*")) == before and blocker.read_bytes() == b"not a folder"
    assert cache.entries() == [] and cache.prune() == []
    with pytest.raises(OSError, match="NORMGEN_CACHE_DIR"):
        cache.build([INSTANCE], paths.GENERATED, ARCH)


def test_threads_share_one_file(cache_dir, fresh):
    start = threading.Barrier(4)
    got = [None] * 4

    def call(i):
        start.wait()
        got[i] = cache.cubin(INSTANCE, paths.GENERATED, ARCH)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [fresh] * 4
    assert files(cache_dir) == [cache.cache_path(INSTANCE, paths.GENERATED, ARCH)]
    assert temps(cache_dir) == []


BUILD_SCRIPT = """
from normgen import cache, paths
from normgen.spec import parse_name

# module level, no __main__ guard: a spawned process pool would fail here
built = cache.build([parse_name(n) for n in {names!r}], paths.GENERATED, ["sm_90", "sm_80"],
                    jobs=2, progress=True)
print("\\n".join(map(str, built)))
"""


def test_build_from_a_script_without_a_main_guard(tmp_path, cache_dir):
    script = tmp_path / "build_script.py"
    script.write_text(BUILD_SCRIPT.format(names=NAMES))
    env = dict(os.environ, PYTHONPATH=str(paths.PACKAGE.parent))
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "normgen: compiling" in done.stderr and "6/6" in done.stderr  # tqdm's bar
    built = [Path(p) for p in done.stdout.split()]
    specs = [parse_name(n) for n in NAMES]
    assert built == [cache.cache_path(s, paths.GENERATED, a) for s in specs for a in ("sm_90", "sm_80")]
    assert sorted(built) == files(cache_dir) and temps(cache_dir) == []
    assert all(cache.unpack(p.read_bytes())[0].startswith(b"\x7fELF") for p in built)
    listed = cache.entries()
    assert sorted(e.path for e in listed) == sorted(built) and all(e.current for e in listed)
    assert {(e.arch, e.name) for e in listed} == {(a, n) for n in NAMES for a in ("sm_90", "sm_80")}
    # everything cached: the same files again, none rewritten
    stats = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in built]
    assert cache.build(specs, paths.GENERATED, ("sm_90", "sm_80"), progress=True) == built
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in built] == stats


def test_build_collects_errors_and_takes_a_folder_per_spec(tmp_path, cache_dir, fresh):
    missing = parse_name(NAMES[1])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(cache.BuildError, match=f"1 of 2 instances failed to build: {missing.name} \\(sm_90\\)") as err:
        cache.build([INSTANCE, missing], {INSTANCE: paths.GENERATED, missing: empty}, ARCH, jobs=2)
    assert [(s, a) for s, a, _ in err.value.errors] == [(missing, ARCH)]
    assert isinstance(err.value.errors[0][2], FileNotFoundError)
    # the other instance was built all the same
    path = cache.cache_path(INSTANCE, paths.GENERATED, ARCH)
    assert files(cache_dir) == [path] and cache.unpack(path.read_bytes())[0] == fresh


def test_entries_and_prune(cache_dir, fresh):
    on_demand = paths.generated_cache()  # an instance of the same name, generated apart
    on_demand.mkdir(parents=True)
    shutil.copy(paths.GENERATED / paths.HEADER, on_demand)
    source = (paths.GENERATED / INSTANCE.file_name).read_text()
    (on_demand / INSTANCE.file_name).write_text(source + "// v1\n")
    current = cache.ensure(INSTANCE, paths.GENERATED, ARCH)
    changed = cache.ensure(INSTANCE, on_demand, ARCH)
    assert current != changed and cache.unpack(changed.read_bytes())[0] == fresh  # comments aside
    legacy = current.with_suffix(".cubin")  # an earlier version's bare cubin
    legacy.write_bytes(fresh)
    old_temp, new_temp = (current.parent / f".{NAME}-x.{t}{cache.TEMP_SUFFIX}" for t in ("old", "new"))
    legacy_temp = current.parent / f"{current.stem}.1234.tmp"
    for temp in (old_temp, new_temp, legacy_temp):
        temp.write_bytes(b"torn")
    for temp in (old_temp, legacy_temp):  # left over; new_temp may be a write in progress
        os.utime(temp, (0, 0))

    assert {e.path: e.current for e in cache.entries()} == {current: True, changed: True, legacy: False}
    (on_demand / INSTANCE.file_name).write_text(source + "// v2\n")  # the instance changed
    listed = {e.path: e for e in cache.entries()}
    assert {p: e.current for p, e in listed.items()} == {current: True, changed: False, legacy: False}
    e = listed[changed]
    assert (e.arch, e.name, e.size) == (ARCH, NAME, changed.stat().st_size)
    assert changed.name == f"{NAME}-{e.key}{cache.SUFFIX}"

    assert sorted(cache.prune()) == sorted([changed, legacy, old_temp, legacy_temp])
    assert files(cache_dir / ARCH) == sorted([current, new_temp])
    assert (on_demand / INSTANCE.file_name).exists()  # instances are not the cache's to prune
    assert [e.path for e in cache.entries()] == [current]


@requires_gpu
def test_call_over_a_damaged_or_unwritable_cache(tmp_path, monkeypatch, cache_dir):
    import cupy

    import normgen
    from normgen import dispatch, reference, runtime
    from normgen.types import DType

    from .gpu import assert_close

    dispatch.use_generated(paths.GENERATED)
    rng = cupy.random.default_rng(7)
    x = rng.standard_normal((64, 1024), dtype=cupy.float32).astype(cupy.float16)
    g = (1 + 0.5 * rng.standard_normal(1024, dtype=cupy.float32)).astype(cupy.float16)
    b = rng.standard_normal(1024, dtype=cupy.float32).astype(cupy.float16)
    want = cupy.asarray(reference.layernorm(*(cupy.asnumpy(a) for a in (x, g, b)), 1e-5))

    def forget():  # the process's loaded modules and kernels: the next call reads the cache
        runtime._loaded.clear()
        runtime._module.cache_clear()
        dispatch._kernels.clear()
        dispatch._plans.clear()

    def check(what):
        y = normgen.layernorm(x, g, b, eps=1e-5)
        cupy.cuda.Device().synchronize()
        assert_close(y, want, DType.FP16, what)

    forget()
    check("cold cache")
    used = files(cache_dir, f"*{cache.SUFFIX}")
    assert used
    for p in used:
        p.write_bytes(_flipped(p.read_bytes()))
    forget()
    with pytest.warns(cache.CacheWarning, match="does not verify"):
        check("corrupt cubin")
    assert all(cache.unpack(p.read_bytes())[0] is not None for p in used)

    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    monkeypatch.setenv("NORMGEN_CACHE_DIR", str(blocker / "cache"))
    forget()
    with pytest.warns(cache.CacheWarning, match="NORMGEN_CACHE_DIR"):
        check("unwritable cache")
    forget()
