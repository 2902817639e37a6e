"""What a launch costs the block scheduler, apart from any memory traffic (GPU machine):
`python scripts/launch_probe.py`. Blocks that only spin for a set time, launched plain
and as clusters of 2, 4 and 8 at 2 (or 3) blocks an SM, over one wave and over several:
time beyond waves x spin is what the scheduler adds (launch, ramp, per-wave refill). A
"wave" here is SMs x blocks an SM, rounded down to whole clusters: more clusters of four
or eight than an H100 holds at once (their blocks must share a GPC), so theirs take two."""
import cupy
from cupy.cuda import driver

from normgen.bench import time_events

BODY = r"""
extern "C" __global__ void {attr} __launch_bounds__(512) {name}(long long ns, int *sink) {{
  extern __shared__ int stage[];
  long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  long long t = t0;
  while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (threadIdx.x == 0 && t == 0) sink[0] = stage[0];  // never: keeps the shared memory
}}
"""
CLUSTERS = (1, 2, 4, 8)
SOURCE = "".join(BODY.format(attr=f"__cluster_dims__({c}, 1, 1)" if c > 1 else "", name=f"spin{c}")
                 for c in CLUSTERS)
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def main():
    mod = cupy.RawModule(code=SOURCE, options=("-arch=sm_90",))
    sink = cupy.zeros(1, dtype=cupy.int32)
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    for smem_kb, per_sm in ((100, 2), (70, 3)):
        for c in CLUSTERS:
            k = mod.get_function(f"spin{c}")
            driver.funcSetAttribute(k.kernel.ptr, _MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_kb * 1024)
            for spin_us in (2, 10):
                for waves in (1, 4, 16):
                    blocks = (sms * per_sm // c) * c * waves
                    args = (cupy.int64(spin_us * 1000), sink)
                    us = 1e3 * time_events(lambda: k((blocks,), (512,), args, shared_mem=smem_kb * 1024), reps=11)
                    over = us - waves * spin_us
                    print(f"cluster {c} {per_sm}/SM blocks={blocks:5d} spin={spin_us:2d} us waves={waves:2d}: "
                          f"{us:8.2f} us, {over:6.2f} over, {over / waves:5.2f} a wave", flush=True)


if __name__ == "__main__":
    main()
