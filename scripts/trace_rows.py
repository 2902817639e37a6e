"""A staged one-pass kernel's timeline, row by row (GPU machine): `python
scripts/trace_rows.py [--phases] OP N [ROWS [PATCH...]]` (bench op, bf16, M x N = 2^27 unless ROWS). Each block's
thread 0 records the global timer as it starts and ends each row it takes, and its SM
(tune_tiles' "trace" patch; the first 32768 block-rows). Prints where a launch's time
beyond its steady state goes: rows started together at the head, SMs idle at the tail
while the last rows finish. --phases (tune_tiles' "phases" patch): where a block's row time
goes instead: staging (thread 0's own, and its last warp's), the statistics' reduction, the
maximum's pass and reduction (a dynamic quant's), the stores' pass, in SM clocks and us."""
import statistics
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_tiles  # noqa: E402
from normgen import bench, runtime  # noqa: E402
from normgen.recipe import recipe  # noqa: E402
from normgen.types import DType  # noqa: E402


def _global(kernel, name, nbytes):
    """A device global of the kernel's module as CuPy memory."""
    ptr = kernel.module.get_global_var(name)
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, nbytes, kernel.module), 0)


def timeline(op, n, rows):
    x = DType.BF16
    with tune_tiles.dispatched(op, x, n, tune_tiles.committed(op, x, n, "trace")) as spec:
        fn = tune_tiles.call(op, tune_tiles.inputs(x, n, rows))
        ms = bench.time_events(fn)
        (kernel,) = runtime._loaded.values()
        buf = cupy.ndarray((4 << 15,), dtype=cupy.uint64, memptr=_global(kernel, "normgen_trace", 8 << 17))
        buf.fill(0)
        for _ in range(3):  # the last of back-to-back calls, as the benchmark times them
            fn()
        torch.cuda.synchronize()
        t = buf.get().reshape(-1, 4)
    t = t[t[:, 1] > 0].astype(np.int64)
    return ms * 1e3, recipe(spec).tile.cluster, t


def report(op, n, rows, *patches):
    assert not patches, "the timeline of the committed kernel only"
    us, cluster, t = timeline(op, n, rows)
    start, end, sm = t[:, 0], t[:, 1], t[:, 2]
    t0, t1 = start.min(), end.max()
    span = (t1 - t0) / 1e3
    dur = (end - start) / 1e3
    first = np.zeros(len(t), bool)
    for b in np.unique(t[:, 3]):  # each block's first row
        i = np.where(t[:, 3] == b)[0]
        first[i[np.argmin(start[i])]] = True
    last_end = {s: end[sm == s].max() for s in np.unique(sm)}
    first_start = {s: start[sm == s].min() for s in np.unique(sm)}
    tail = [(t1 - e) / 1e3 for e in last_end.values()]
    head = [(s - t0) / 1e3 for s in first_start.values()]
    print(f"{op} N={n} rows={rows} cluster={cluster}: {us:.1f} us a call, {span:.1f} us from the first row's "
          f"start to the last's end; {len(t)} block-rows on {len(last_end)} SMs")
    later = dur[~first] if (~first).any() else dur  # blocks of one row each: all of them
    print(f"  a block's row: first rows median {statistics.median(dur[first]):.2f} us, the others "
          f"{statistics.median(later):.2f} (p10 {np.percentile(later, 10):.2f}, p90 {np.percentile(later, 90):.2f})")
    print(f"  SMs' first start after the first: median {statistics.median(head):.2f} us, max {max(head):.2f}; "
          f"SMs idle before the end: median {statistics.median(tail):.2f} us, max {max(tail):.2f}, "
          f"mean {statistics.mean(tail):.2f}")
    bins = np.arange(0, span + 1, 1.0)
    busy = [int(((start - t0) / 1e3 <= b).sum() - ((end - t0) / 1e3 <= b).sum()) for b in bins]
    print("  rows in flight at each us:", " ".join(map(str, busy[:24])), "...", " ".join(map(str, busy[-24:])))


def phases(op, n, rows, *patches):
    x = DType.BF16
    with tune_tiles.dispatched(op, x, n, tune_tiles.committed(op, x, n, *patches, "phases")) as spec:
        fn = tune_tiles.call(op, tune_tiles.inputs(x, n, rows))
        us = bench.time_events(fn) * 1e3
        (kernel,) = runtime._loaded.values()
        buf = cupy.ndarray((8 << 15,), dtype=cupy.int64, memptr=_global(kernel, "normgen_phase", 8 << 18))
        buf.fill(0)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t = buf.get().reshape(-1, 8)
    t = t[t[:, 1] > 0]
    g0, g1 = t[:, 0], t[:, 1]
    c = t[:, 2:7]  # start, own staging end, statistics, maximum, end (SM clocks)
    last = t[:, 7] - c[:, 0]  # the last warp's staging end
    ghz = np.median((c[:, 4] - c[:, 0]) / np.maximum(g1 - g0, 1))
    rows_t = (c[:, 4] - c[:, 0]) / ghz / 1e3
    print(f"{op} N={n} rows={rows} cluster={recipe(spec).tile.cluster} threads={recipe(spec).tile.threads_per_row}"
          f"{' ' + '+'.join(patches) if patches else ''}: {us:.1f} us a call; "
          f"SM clock {ghz:.3f} GHz; a block's row median {np.median(rows_t):.2f} us ({len(t)} block-rows)")
    parts = {"staging (thread 0)": c[:, 1] - c[:, 0], "staging (last warp)": last,
             "to the statistics": c[:, 2] - c[:, 1], "maximum pass + reduction": c[:, 3] - c[:, 2],
             "stores (thread 0)": c[:, 4] - c[:, 3]}
    for name, d in parts.items():
        print(f"  {name:26s} median {np.median(d):8.0f} clocks {np.median(d) / ghz / 1e3:6.2f} us "
              f"(p10 {np.percentile(d, 10) / ghz / 1e3:6.2f}, p90 {np.percentile(d, 90) / ghz / 1e3:6.2f})")


if __name__ == "__main__":
    args = sys.argv[1:]
    probe = phases if args[:1] == ["--phases"] else report
    args = args[1:] if probe is phases else args
    op, n = args[0], int(args[1])
    rows = int(args[2]) if len(args) > 2 else (1 << 27) // n
    probe(op, n, rows, *args[3:])  # --phases: tune_tiles patches after ROWS
