"""The on-disk cubin cache: one verified file per (arch, instance, compile.cache_key) under
paths.cache_dir()/<arch>/, shared by the on-demand path (cubin), the ahead-of-time build
(build) and the cache listing (entries, prune).

A file is MAGIC, the cubin's length (8 bytes, little-endian), its sha256 (32 bytes), then
the cubin. Every read checks all three: a truncated, corrupt or foreign file is a miss,
rebuilt and replaced. Files are written to a mkstemp file in the same folder and renamed
over the target (os.replace), so readers see a whole file or none; a crash that leaves a
torn file (no fsync) is caught by the check on the next read."""
from __future__ import annotations

import hashlib
import os
import re
import struct
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from . import compile as nvrtc_compile
from . import devices, paths
from .recipe import recipe
from .spec import KernelSpec

MAGIC = b"normgen-cubin-1\n"
_HEAD = struct.Struct("<Q32s")  # length, sha256
HEADER_SIZE = len(MAGIC) + _HEAD.size
SUFFIX = ".ngcubin"  # ".cubin": files of earlier versions (bare cubins), never current
TEMP_SUFFIX = ".tmp"
_ARCH_DIR = re.compile(r"(sm|compute)_\d+[a-z]?")
_FILE = re.compile(r"(?P<name>[^-]+)-(?P<key>[0-9a-f]+)(?P<suffix>\.ngcubin|\.cubin)")


class CacheWarning(UserWarning):
    pass


class BuildError(RuntimeError):
    """Instances that failed to build: .errors holds (spec, arch, exception) of each."""

    def __init__(self, errors: list, total: int):
        self.errors = errors
        names = ", ".join(f"{s.name} ({a})" for s, a, _ in errors)
        details = "\n\n".join(f"{s.name} ({a}): {type(e).__name__}: {e}" for s, a, e in errors)
        super().__init__(f"{len(errors)} of {total} instances failed to build: {names}\n\n{details}")


# ---- the file format -------------------------------------------------------------------
def pack(cubin: bytes) -> bytes:
    return MAGIC + _HEAD.pack(len(cubin), hashlib.sha256(cubin).digest()) + cubin


def unpack(data: bytes) -> tuple[bytes | None, str]:
    """(the cubin, "") where `data` verifies, else (None, why not)."""
    if not data:
        return None, "empty"
    if len(data) < HEADER_SIZE or not data.startswith(MAGIC):
        return None, "not a normgen cubin file"
    length, digest = _HEAD.unpack_from(data, len(MAGIC))
    cubin = data[HEADER_SIZE:]
    if len(cubin) != length:
        return None, f"truncated or padded: {len(cubin)} of {length} bytes"
    if hashlib.sha256(cubin).digest() != digest:
        return None, "content does not match its sha256"
    return cubin, ""


# ---- one instance ----------------------------------------------------------------------
def key_of(source_file: Path, arch: str) -> str:
    """compile.cache_key of an instance file, with the header beside it."""
    source_file = Path(source_file)
    header = (source_file.parent / paths.HEADER).read_text()
    return nvrtc_compile.cache_key(source_file.read_text(), header, arch)


def cache_path(spec: KernelSpec, source_dir: Path, arch: str) -> Path:
    """Where the cubin of `spec` (generated in source_dir) for `arch` is cached."""
    key = key_of(Path(source_dir) / spec.file_name, arch)
    return paths.cache_dir() / arch / f"{spec.name}-{key}{SUFFIX}"


_locks: dict = {}  # cache file -> Lock: threads of one process compile each file once
_locks_lock = threading.Lock()
_warned_unwritable: set = set()  # cache folders warned about, once per process


def _lock_for(path: Path) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(path, threading.Lock())


def _read(path: Path) -> bytes | None:
    """The verified cubin at `path`, or None (missing, unreadable, or failing the check:
    warned, as it is then rebuilt)."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:  # e.g. a folder in its place: the write that follows decides
        warnings.warn(f"normgen: cannot read cache file {path} ({e}); rebuilding it", CacheWarning, 4)
        return None
    cubin, why = unpack(data)
    if cubin is None:
        warnings.warn(f"normgen: cache file {path} does not verify ({why}); rebuilding it",
                      CacheWarning, 4)
    return cubin


def _mode() -> int:
    mask = os.umask(0o22)  # os.umask is the only portable read; set back at once
    os.umask(mask)
    return 0o666 & ~mask


_MODE = _mode()  # mkstemp makes 0600 files; cached cubins are as readable as any file


def _store(path: Path, cubin: bytes) -> None:
    """Write atomically: a temp file unique to this call, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), _MODE)
            f.write(pack(cubin))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def compile_instance(spec: KernelSpec, source_dir: Path, arch: str) -> nvrtc_compile.Compiled:
    """The instance's file in source_dir built for `arch` as the cache stores it: at its
    residency target there, or a lower one where ptxas spills at it (compile_unspilled)."""
    blocks = devices.launch_blocks(recipe(spec), devices.known(arch))
    return nvrtc_compile.compile_unspilled(Path(source_dir) / spec.file_name, arch, blocks)


def _compile(spec: KernelSpec, source_dir: Path, arch: str) -> bytes:
    return compile_instance(spec, source_dir, arch).cubin


def _ensure(spec: KernelSpec, source_dir: Path, arch: str, in_memory: bool = False) -> tuple[Path, bytes]:
    """(cache file, verified cubin), compiled and stored where the file is missing or fails
    the check. Where it cannot be stored: OSError, or with in_memory the compile, warned once
    per process. CompileError where NVRTC fails."""
    path = cache_path(spec, source_dir, arch)  # outside the fallback: the sources must read
    with _lock_for(path):
        cubin = _read(path)
        if cubin is None:
            cubin = _compile(spec, source_dir, arch)
            try:
                _store(path, cubin)
            except OSError as e:
                if not in_memory:
                    raise
                _unwritable(e)
        return path, cubin


def ensure(spec: KernelSpec, source_dir: Path, arch: str) -> Path:
    """The cache file of the instance's verified cubin, compiled and stored if missing or
    failing the check. OSError where the cache cannot be written."""
    return _ensure(spec, source_dir, arch)[0]


def _unwritable(err: OSError) -> None:
    folder = paths.cache_dir()
    with _locks_lock:
        if folder in _warned_unwritable:
            return
        _warned_unwritable.add(folder)
    warnings.warn(
        f"normgen: cannot write the kernel cache {folder} ({type(err).__name__}: {err}); compiling "
        f"in memory, again in every process. Set NORMGEN_CACHE_DIR to a writable folder, or make "
        f"{folder} writable.", CacheWarning, 4)


def cubin(spec: KernelSpec, source_dir: Path, arch: str) -> bytes:
    """The verified cubin of the instance file source_dir/spec.file_name for `arch`: from the
    cache where a file there verifies, else compiled and stored. Where the cache cannot be
    written (any OSError), the compile is served from memory, with one warning per process."""
    return _ensure(spec, source_dir, arch, in_memory=True)[1]


def _verifies(path: Path) -> bool:
    try:
        return unpack(path.read_bytes())[0] is not None
    except OSError:
        return False


# ---- ahead of time -----------------------------------------------------------------------
def _jobs(jobs: int, todo: int) -> int:
    if jobs <= 0:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(jobs, todo))


def build(specs, source_dir, archs, jobs: int = 0, progress: bool = False) -> list[Path]:
    """Compile every (spec, arch) whose cubin is not in the cache yet, on `jobs` threads (0:
    one per core; NVRTC releases the GIL, and threads are safe from any script, where a
    spawned process pool needs a __main__ guard). source_dir: one folder, or a mapping spec
    -> folder. archs: one arch or several. Returns the cache files, one per distinct (spec,
    arch), spec-major. Failures are collected and raised together (BuildError); an
    unwritable cache raises OSError before anything is compiled."""
    archs = [archs] if isinstance(archs, str) else list(archs)
    dir_of = (lambda s: Path(source_dir[s])) if isinstance(source_dir, Mapping) else (lambda s: Path(source_dir))
    work = list(dict.fromkeys((s, a) for s in specs for a in archs))
    for arch in archs:
        folder = paths.cache_dir() / arch
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if not os.access(folder, os.W_OK):
                raise PermissionError(13, "not writable", str(folder))
        except OSError as e:
            raise OSError(e.errno, f"cannot write the kernel cache {paths.cache_dir()} ({e}); set "
                                   f"NORMGEN_CACHE_DIR to a writable folder") from e

    results: dict = {}
    errors: list = []
    todo = []
    for s, a in work:  # hits are a read and a hash: sort out the compiles first
        try:
            path = cache_path(s, dir_of(s), a)
        except Exception as e:  # a missing source or header
            errors.append((s, a, e))
            continue
        if _verifies(path):
            results[s, a] = path
        else:
            todo.append((s, a))

    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="cubin", desc=f"normgen: compiling ({len(results)} cached)")

    def one(item):
        s, a = item
        try:
            return item, ensure(s, dir_of(s), a), None
        except Exception as e:
            return item, None, e

    def collect(item, path, err):
        if err is None:
            results[item] = path
        else:
            errors.append((*item, err))
        if bar is not None:
            bar.update()

    try:
        with ThreadPoolExecutor(_jobs(jobs, len(todo)), thread_name_prefix="normgen-build") as pool:
            for fut in as_completed([pool.submit(one, item) for item in todo]):
                collect(*fut.result())
    finally:
        if bar is not None:
            bar.close()
    if errors:
        order = {w: i for i, w in enumerate(work)}
        raise BuildError(sorted(errors, key=lambda e: order[e[0], e[1]]), len(work))
    return [results[w] for w in work]


# ---- listing and pruning -----------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    arch: str
    name: str  # the instance's name
    key: str  # compile.cache_key it was built under
    size: int  # bytes on disk
    path: Path
    current: bool  # an instance file of that name in a source folder (entries) has this key


def _arch_dirs() -> list[Path]:
    root = paths.cache_dir()
    try:
        return sorted(d for d in root.iterdir() if d.is_dir() and _ARCH_DIR.fullmatch(d.name))
    except OSError:  # no cache (yet), or not a folder
        return []


def _current_keys(name: str, arch: str, memo: dict, folders) -> set:
    if (name, arch) not in memo:
        keys = set()
        for folder in folders:
            try:
                keys.add(key_of(folder / f"{name}.cu", arch))
            except OSError:  # no such instance (or header) there
                pass
        memo[name, arch] = keys
    return memo[name, arch]


def entries(folders=()) -> list[Entry]:
    """Every cubin in the cache (current format or earlier), by arch and name; current where
    the instance file of that name in the dispatcher's folder (paths.dispatched()), the
    on-demand folder or one of `folders` compiles to it."""
    out, memo = [], {}
    folders = [paths.dispatched(), paths.generated_cache(), *map(Path, folders)]
    for d in _arch_dirs():
        for f in sorted(d.iterdir()):
            m = _FILE.fullmatch(f.name)
            if not m or not f.is_file():
                continue
            name, key = m["name"], m["key"]
            current = m["suffix"] == SUFFIX and key in _current_keys(name, d.name, memo, folders)
            try:
                size = f.stat().st_size
            except FileNotFoundError:  # pruned meanwhile
                continue
            out.append(Entry(d.name, name, key, size, f, current))
    return out


def prune(temp_age: float = 60.0, folders=()) -> list[Path]:
    """Remove the cubins that are not current (entries), and temp files older than
    `temp_age` seconds (younger ones may be a write in progress). Returns what was removed."""
    removed = [e.path for e in entries(folders) if not e.current]
    now = time.time()
    for d in _arch_dirs():
        for f in d.glob(f"*{TEMP_SUFFIX}"):  # earlier versions' too (name-key.<pid>.tmp)
            try:
                if now - f.stat().st_mtime >= temp_age:
                    removed.append(f)
            except OSError:
                pass
    done = []
    for f in removed:
        try:
            f.unlink()
            done.append(f)
        except FileNotFoundError:
            pass
    return done
