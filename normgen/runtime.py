"""Compiled instances on a device: build (or fetch from the disk cache) on first use, load
once per device, and launch with a packed Params struct."""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import cupy
from cupy.cuda import driver, runtime

from . import cache, devices, params
from .recipe import Recipe, recipe
from .spec import KernelSpec
from .types import Entry

_CU_LAUNCH_PARAM_BUFFER_POINTER = 1
_CU_LAUNCH_PARAM_BUFFER_SIZE = 2
_CU_LAUNCH_PARAM_END = 0
_CUDA_ERROR_INVALID_CONTEXT = 201
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED


class _Buffers(threading.local):
    """One packed-argument buffer per thread; cuLaunchKernel copies it at launch."""

    def __init__(self):
        self.args = ctypes.create_string_buffer(params.PACKER.size)
        self.size = ctypes.c_size_t(params.PACKER.size)
        self.extra = (ctypes.c_void_p * 5)(
            _CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self.args),
            _CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self.size),
            _CU_LAUNCH_PARAM_END,
        )
        self.extra_ptr = ctypes.addressof(self.extra)


_buffers = _Buffers()
_launch = driver.launchKernel


@dataclass
class Kernel:
    """One instance loaded on one device."""

    spec: KernelSpec
    module: cupy.cuda.function.Module  # keeps the module loaded
    symbol: str  # the kernel's name in the module (Recipe.symbol of its entry)
    func: int  # CUfunction
    block: int
    rows_per_block: int
    cluster: int  # blocks per row
    smem: int  # dynamic shared memory per block
    max_groups: int  # devices.launch_waves times the blocks (clusters) the device holds, or (tile.resident) exactly
    # the clusters it holds; they stride over the rest
    alike: Optional[Kernel] = None  # the instance's kernel for rows that start alike (Entry.ALIKE), if any

    def launcher(self, rows: int):
        """A function (stream, values) that launches this kernel over `rows` rows; values:
        the Params fields in params.FIELDS order. Everything else is bound here, once."""
        func, block, smem, pack = self.func, self.block, self.smem, params.PACKER.pack_into
        blocks = min(-(-rows // self.rows_per_block), self.max_groups) * self.cluster

        def launch(stream: int, values: tuple) -> None:
            b = _buffers
            pack(b.args, 0, *values)
            try:
                _launch(func, blocks, 1, 1, block, 1, 1, smem, stream, 0, b.extra_ptr)
            except driver.CUDADriverError as e:
                # A thread whose CUDA calls so far (torch's, say) left its device's context
                # not yet current: make it current, as the runtime does on a thread's first
                # call that needs it, and launch.
                if getattr(e, "status", None) != _CUDA_ERROR_INVALID_CONTEXT:
                    raise
                runtime.setDevice(runtime.getDevice())
                _launch(func, blocks, 1, 1, block, 1, 1, smem, stream, 0, b.extra_ptr)

        launch.kernel = self  # `func` is a handle into self.module: keep the module loaded
        return launch


def device_arch(device: int) -> str:
    """The architecture a device's cubins are compiled for, e.g. sm_90."""
    return devices.of(device).name


class _CUlaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig: seven unsigned ints, hStream, attrs, numAttrs (56 bytes on
    x86-64, with the C padding after sharedMemBytes and numAttrs)."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


@functools.cache
def _libcuda() -> ctypes.CDLL:
    """The driver library, its two entry points here bound by name (dlsym). Not cuda.bindings'
    driver module: that resolves every driver symbol through cuGetProcAddress on first use,
    and the lookups that fail on a given driver are API errors to a sanitizer."""
    lib = ctypes.CDLL("libcuda.so.1")  # already loaded by CuPy: the same handle
    lib.cuOccupancyMaxActiveClusters.argtypes = (
        ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_CUlaunchConfig))
    lib.cuOccupancyMaxActiveClusters.restype = ctypes.c_int
    lib.cuGetErrorName.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
    lib.cuGetErrorName.restype = ctypes.c_int
    return lib


def resident_clusters(func: int, tile) -> int:
    """How many of a cluster kernel's clusters an idle device holds at once: fewer than its
    blocks per SM x SMs / cluster size, as a cluster's blocks must share a GPC. At least 1;
    RuntimeError naming the CUresult where the driver call fails. The kernel's cluster shape
    is compiled in (__cluster_dims__), so the config names no cluster attribute."""
    lib = _libcuda()
    config = _CUlaunchConfig(gridDimX=tile.cluster, gridDimY=1, gridDimZ=1, blockDimX=tile.block_threads,
                             blockDimY=1, blockDimZ=1, sharedMemBytes=tile.shared_bytes)
    clusters = ctypes.c_int(0)
    err = lib.cuOccupancyMaxActiveClusters(ctypes.byref(clusters), func, ctypes.byref(config))
    if err != 0:  # CUDA_SUCCESS
        name = ctypes.c_char_p()
        known = lib.cuGetErrorName(err, ctypes.byref(name)) == 0 and name.value
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed: "
                           f"{name.value.decode() if known else 'unknown CUresult'} ({err})")
    return max(clusters.value, 1)


_loaded: dict = {}  # (spec, source_dir, device, whole-row kernel, recipe) -> Kernel
_loading = threading.Lock()  # one module per instance and device, however many threads ask at once


def load(spec: KernelSpec, source_dir: Path, device: int, n: int, built: Optional[Recipe] = None) -> Kernel:
    """The kernel of `spec` that serves rows of n: the whole-row kernel where it has one and
    n is its bucket (Recipe.whole_row_kernel), else the one for every n, with the kernel for
    rows that start alike attached where the instance has one (Kernel.alike: the caller
    knows its rows). `built`: the recipe source_dir's file was rendered with, where not the
    spec's own (a tuning tool's)."""
    r = built or recipe(spec)
    entry = Entry.WHOLE if r.whole_row_kernel and n == spec.bucket else Entry.ANY
    key = (spec, source_dir, device, entry, r)
    kernel = _loaded.get(key)
    if kernel is None:
        with _loading:
            kernel = _loaded.get(key)
            if kernel is None:
                kernel = _load(spec, source_dir, device, entry, r)
                if r.symbol(Entry.ALIKE):
                    kernel.alike = _load(spec, source_dir, device, Entry.ALIKE, r)
                _loaded[key] = kernel
    return kernel


@functools.cache
def _module(spec: KernelSpec, source_dir: Path, device: int) -> cupy.cuda.function.Module:
    """The instance's verified cubin loaded on `device` (once for both of its kernels), from
    memory (cuModuleLoadData): nothing that fails the cache's check reaches the driver."""
    image = cache.cubin(spec, source_dir, device_arch(device))
    with cupy.cuda.Device(device):
        module = cupy.cuda.function.Module()
        module.load(image)
        return module


def _load(spec: KernelSpec, source_dir: Path, device: int, entry: Entry, built: Recipe) -> Kernel:
    with cupy.cuda.Device(device):
        props = runtime.getDeviceProperties(device)
        module = _module(spec, source_dir, device)
        symbol = built.symbol(entry)
        func = module.get_function(symbol)  # cupy.cuda.function.Function: .ptr is the CUfunction
        tile, shared = built.tile, built.launch_bytes(entry)
        if shared > 48 * 1024:  # beyond the default dynamic shared-memory limit
            driver.funcSetAttribute(func.ptr, _MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        if tile.cluster > devices.PORTABLE_CLUSTER:
            driver.funcSetAttribute(func.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(
            func.ptr, tile.block_threads, shared)
        blocks = max(per_sm, 1) * props["multiProcessorCount"]
        waves = devices.launch_waves(built, props)
        groups = resident_clusters(func.ptr, tile) if tile.resident else max(blocks // tile.cluster, 1) * waves
        if spec.framed and groups > tile.vec:
            # a multiple of vec blocks: each block's rows of a dense batch then start at one
            # element of their 16 bytes, and it realigns its held columns once (framed_rows.cuh)
            groups -= groups % tile.vec
        return Kernel(spec, module, symbol, func.ptr, tile.block_threads, tile.rows_per_block,
                      tile.cluster, shared, groups)
