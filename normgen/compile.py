"""NVRTC compilation of one instance to a cubin: the one path used both on demand (the
dispatcher) and ahead of time (the CPU test suite, which needs no GPU)."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .paths import TEMPLATES


OPTIONS = ("--std=c++17", "-Xptxas=-v")  # -v: the ptxas resource report lands in the log


class CompileError(RuntimeError):
    pass


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    log: str

    @property
    def resources(self) -> dict[str, int]:
        """The ptxas report: registers, stack frame and spill bytes (the most any kernel of
        the file uses)."""
        def grab(pattern):
            return max((int(v) for v in re.findall(pattern, self.log)), default=0)
        return {
            "registers": grab(r"Used (\d+) registers"),
            "stack": grab(r"(\d+) bytes stack frame"),
            "spill_stores": grab(r"(\d+) bytes spill stores"),
            "spill_loads": grab(r"(\d+) bytes spill loads"),
        }

    @property
    def spills(self) -> bool:
        """Whether a kernel of the file spills registers or keeps a local-memory stack frame."""
        res = self.resources
        return bool(res["spill_stores"] or res["spill_loads"] or res["stack"])


@functools.cache
def cuda_include_dir() -> str:
    from cuda.pathfinder import find_nvidia_header_directory

    found = find_nvidia_header_directory("cudart")
    if not found:
        raise CompileError("CUDA headers (cuda_fp16.h) not found: pip install nvidia-cuda-runtime")
    return found


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


def options(arch: str, source_dir: Path) -> list[str]:
    """The instance's folder (its normgen_fwd.cuh) first, then the kernel headers
    (templates/kernels/, included as "kernels/NAME.cuh"), then CUDA's."""
    return [f"--gpu-architecture={arch}", *OPTIONS, f"-I{source_dir}", f"-I{TEMPLATES}", f"-I{cuda_include_dir()}"]


@functools.cache
def kernel_headers() -> str:
    """The kernel headers' names and contents, one digest: part of every cubin's key."""
    h = hashlib.sha256()
    for path in sorted((TEMPLATES / "kernels").glob("*.cuh")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(source: str, header: str, arch: str) -> str:
    """Everything the cubin depends on: the sources, the options, the target, NVRTC."""
    h = hashlib.sha256()
    for part in (source, header, kernel_headers(), arch, " ".join(OPTIONS), str(nvrtc_version())):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _check(result, prog=None, what=""):
    """cuda.bindings returns (status,) or (status, value): raise on failure, else the value."""
    from cuda.bindings import nvrtc

    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = _log(prog) if prog is not None else ""
        raise CompileError(f"NVRTC {what} failed ({err.name}):\n{log}")
    return result[1] if len(result) > 1 else None


def _log(prog) -> str:
    from cuda.bindings import nvrtc

    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0 ").decode(errors="replace")


@contextlib.contextmanager
def _compiled(path: Path, opts: list[str]):
    """The NVRTC program of a generated instance file (its header sits beside it), compiled
    with `opts`; destroyed on exit."""
    from cuda.bindings import nvrtc

    prog = _check(nvrtc.nvrtcCreateProgram(path.read_bytes(), path.name.encode(), 0, [], []),
                  what="create")
    try:
        raw = [o.encode() for o in opts]
        _check(nvrtc.nvrtcCompileProgram(prog, len(raw), raw), prog, f"compile of {path.name}")
        yield prog
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _output(prog, get_size, get, what: str) -> bytes:
    size = _check(get_size(prog), what=f"{what} size")
    out = b" " * size
    _check(get(prog, out), what=what)
    return out


def ptx_of(path: Path, arch: str = "compute_90") -> str:
    """The PTX NVRTC makes of a generated instance file (what NVVM emits, before ptxas): for
    checking the instructions a kernel is built from without a GPU."""
    from cuda.bindings import nvrtc

    path = Path(path)
    with _compiled(path, [o for o in options(arch, path.parent) if o != "-Xptxas=-v"]) as prog:
        return _output(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "ptx").rstrip(b"\0 ").decode()


def compile_file(path: Path, arch: str = "sm_90", min_blocks: int = 0) -> Compiled:
    """Compile a generated instance file (its header sits beside it) for `arch`; min_blocks:
    its kernels' __launch_bounds__ residency target in place of the file's (0: the file's)."""
    from cuda.bindings import nvrtc

    path = Path(path)
    target = [f"-DNORMGEN_MIN_BLOCKS={min_blocks}"] if min_blocks else []
    with _compiled(path, options(arch, path.parent) + target) as prog:
        log = _log(prog)
        return Compiled(_output(prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "cubin"), log)


def compile_unspilled(path: Path, arch: str, blocks: int) -> Compiled:
    """Compile for `arch` at the file's residency target (`blocks` an SM there), and where
    ptxas spills registers at it, at the next lower target that it does not (the file's
    where none down to one block is clean: then the spill is not the register cap's). The
    targets are chosen on sm_90; ptxas for sm_100 and sm_120 may need more registers for the
    same kernel (docs/policy.md: min_blocks_per_sm)."""
    first = compiled = compile_file(path, arch)
    while compiled.spills and blocks > 1:
        blocks -= 1
        compiled = compile_file(path, arch, min_blocks=blocks)
    return first if compiled.spills else compiled
