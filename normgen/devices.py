"""What instance choice needs to know of a GPU, and which instances a GPU can run.

The registry names instances by their spec alone; whether one runs on a device depends on
its tile (normgen.recipe) and the device's architecture and shared memory. The dispatcher
skips instances a device cannot run and takes the next candidate, down to the two-pass
pipeline, which every supported GPU runs."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from . import tiles
from .recipe import Recipe, recipe, shared_blocks
from .spec import KernelSpec

MIN_ARCH = 80  # compute capability 8.0 (A100): bf16 arithmetic and L2 cache policies
PORTABLE_CLUSTER = 8  # larger clusters are non-portable and must be allowed per kernel
_MAX_SHARED_OPTIN = 97  # cudaDevAttrMaxSharedMemoryPerBlockOptin


@dataclass(frozen=True)
class Device:
    arch: int  # compute capability as major * 10 + minor: 90 for sm_90
    shared_optin: int  # dynamic shared memory a block may opt in to, in bytes

    @property
    def name(self) -> str:
        return f"sm_{self.arch}"

    @property
    def shared_per_sm(self) -> int:
        """An SM's shared memory: a block's opt-in and the 1 KB the driver reserves a block."""
        return self.shared_optin + 1024


# The architectures normgen builds for, with their opt-in shared memory per block (CUDA
# programming guide, compute capabilities table): what the CPU suite compiles for.
KNOWN: dict[int, Device] = {d.arch: d for d in (
    Device(80, 163 * 1024),  # A100
    Device(86, 99 * 1024),  # A10, RTX 30xx
    Device(89, 99 * 1024),  # L4, L40, RTX 40xx
    Device(90, 227 * 1024),  # H100, H200
    Device(100, 227 * 1024),  # B200
    Device(120, 99 * 1024),  # RTX 50xx
)}


def known(arch: str) -> Device:
    """The Device of a target such as "sm_100": KNOWN's, or sm_90's for one it does not name
    (an instance file's residency target there is sm_90's)."""
    return KNOWN.get(int(arch.removeprefix("sm_")), KNOWN[90])


class UnsupportedDeviceError(RuntimeError):
    """A GPU older than normgen supports."""


def unsupported_reason(spec: KernelSpec, device: Device) -> Optional[str]:
    """Why `device` cannot run `spec`, or None if it can. Thread-block clusters and the bulk
    copies of streamed rows need sm_90; streamed rows are built for sm_90's register file
    (ptxas spills them for sm_100 and sm_120); clusters past 8 blocks are non-portable, on
    sm_90 and sm_100 only; a staged block needs its shared memory."""
    r = recipe(spec)
    t = r.tile
    if t.stream_bytes and device.arch // 10 != 9:
        return f"streamed rows are built for sm_90, not {device.name}"
    if t.cluster > 1 and device.arch < 90:
        return f"thread-block clusters need sm_90 or newer, not {device.name}"
    if t.cluster > PORTABLE_CLUSTER and device.arch not in (90, 100):
        return f"clusters of {t.cluster} blocks run on sm_90 and sm_100 only, not {device.name}"
    if r.shared_bytes > device.shared_optin:
        return (f"{r.shared_bytes // 1024} KB of shared memory a block is more than "
                f"{device.name}'s {device.shared_optin // 1024} KB")
    return None


def launch_blocks(built: Recipe, device: Device) -> int:
    """__launch_bounds__' residency target of a recipe's kernels on `device`: the recipe's
    (set for sm_90's 228 KB of shared memory an SM), or as many blocks as the device's shared
    memory an SM holds, where that is fewer. A target the SM cannot reach only caps each
    thread's registers (ptxas spilled so on sm_86, sm_89 and sm_120)."""
    if not built.shared_bytes:
        return built.min_blocks_per_sm
    return max(1, min(built.min_blocks_per_sm, shared_blocks(built.shared_bytes, device.shared_per_sm)))


def dram_bytes_per_sm_clock(props: dict) -> float:
    """What DRAM can give each SM in one of its clocks, at peak: twice the memory clock times
    the bus's bytes, over the SMs times their clock (cudaDeviceProp's fields, kHz and bits); 0
    where the runtime does not report them."""
    try:
        dram = 2 * props["memoryClockRate"] * props["memoryBusWidth"] / 8
        return dram / (props["multiProcessorCount"] * props["clockRate"])
    except (KeyError, TypeError, ZeroDivisionError):
        return 0.0


def launch_waves(built: Recipe, props: dict) -> int:
    """The launch's blocks (clusters) per block the device holds at once: the recipe's for a
    device whose DRAM is fast for its SMs (tiles.FAST_MEMORY_BYTES_PER_CLOCK), else its waves.
    The launch alone changes, not a row's bits: a block strides over the rows either way."""
    fast = dram_bytes_per_sm_clock(props) >= tiles.FAST_MEMORY_BYTES_PER_CLOCK
    return built.fast_memory_waves if fast else built.waves


@functools.cache
def of(index: int) -> Device:
    """The Device of a CUDA device index; UnsupportedDeviceError below MIN_ARCH."""
    from cupy.cuda import runtime

    props = runtime.getDeviceProperties(index)
    arch = props["major"] * 10 + props["minor"]
    name = props["name"].decode(errors="replace") if isinstance(props["name"], bytes) else props["name"]
    if arch < MIN_ARCH:
        raise UnsupportedDeviceError(
            f"normgen needs a GPU of compute capability 8.0 (sm_80, A100) or newer; device "
            f"{index} ({name}) is sm_{arch}")
    return Device(arch, runtime.deviceGetAttribute(_MAX_SHARED_OPTIN, index))
