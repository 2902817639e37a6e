"""Each kernel's time on the GPU and the gap before the next, from PyTorch's profiler
(CUPTI), for back-to-back calls as the benchmark makes them (GPU machine): `python
scripts/kernel_gaps.py [OP N ...]` (bench ops, bf16, M x N = 2^27; torch's copy of the same
bytes for comparison). A call's time in the benchmark is the kernel's plus the gap."""
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tune_tiles  # noqa: E402
from normgen import bench  # noqa: E402
from normgen.types import DType  # noqa: E402


def gaps(fn, calls=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    ks = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                key=lambda e: e.time_range.start)
    durs = [e.time_range.end - e.time_range.start for e in ks]
    between = [b.time_range.start - a.time_range.end for a, b in zip(ks, ks[1:])]
    return statistics.median(durs), statistics.median(between), {e.name[:40] for e in ks}


def main(pairs):
    for op, n in pairs:
        m = (1 << 27) // n
        ins = tune_tiles.inputs(DType.BF16, n, m)
        fns = bench.OPS[op][2](*ins)
        out = torch.empty_like(ins[0])
        for name, fn in (("normgen", fns["normgen"]), ("copy", lambda: out.copy_(ins[0]))):
            dur, gap, names = gaps(fn)
            print(f"{op:14s} N={n:6d} {name:8s} kernel {dur:7.2f} us, gap after {gap:5.2f} us  {sorted(names)}",
                  flush=True)


if __name__ == "__main__":
    a = sys.argv[1:] or ["rmsnorm", "65536", "rmsnorm", "32768", "rmsnorm", "4096", "layernorm+int8", "32768"]
    main([(a[i], int(a[i + 1])) for i in range(0, len(a), 2)])
