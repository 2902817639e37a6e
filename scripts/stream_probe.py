"""A stand-alone probe of streamed rows for LayerNorm + dynamic int8 (bf16, M x N = 2^27):
a cluster of C one-per-SM 1024-thread blocks takes R rows at a time, each block the same
1/C of their columns. A block holds its share of the current rows in registers while the
copy engine (cp.async.bulk onto an mbarrier) brings its share of the next rows into shared
memory, and keeps its gamma and beta in shared memory (COLS_SMEM), copied once. DRAM then
streams the next rows through this group's reductions and output passes, and the columns
cost no L2 traffic. Twenty-first and twenty-second sessions (docs/perf-notes.md): the
template's version of this pipeline ran 0.78-0.80 where this kernel ran 0.91-0.94; the
variants that mimic the instance (PARAMS, NOCLUSTER, STATIC, NGBUILD) found the stage off a
128-byte line, and the template's version, so mended, is committed (tiles.STREAMED_TILES).
The figures by VARIANTS.

GPU machine: `python scripts/stream_probe.py [--rows K] [NAME ...]` times the named
VARIANTS (all by default) as the benchmark times (normgen.bench), against its
device-to-device copy and the committed instance, on the same inputs, K times as many rows
(CUDA graph replay gave the same differences: docs/perf-notes.md), and checks each
variant's codes against the committed instance's (codes may differ by one: the probe's shift
is the row's first element). `--only NAME` launches one variant four times, for ncu."""
import ctypes
import struct
import sys
import tempfile
from pathlib import Path

import cupy as cp
from cupy.cuda import driver
import numpy as np
from ml_dtypes import bfloat16

sys.path.insert(0, ".")
from normgen import bench, layernorm, runtime, tiles  # noqa: E402
from normgen import compile as nvrtc_compile  # noqa: E402

SOURCE = r"""
#include <cuda_bf16.h>
typedef unsigned int uint32_t;
typedef signed char int8_t;
// Defined before (see VARIANTS): N; C, the cluster's blocks; R, rows a group; T, threads;
// COLS_SMEM: gamma and beta from shared memory (else global); PIECES: bulk copies a row;
// RED_SHFL: the reductions' second level by a butterfly (else every thread sums the warps'
// partials from shared memory); WSHIFT: the template's per-warp shift's shuffles and a third
// value reduced (timing only: the shift stays the row's first element); SQRTDIV: rstd as
// 1 / sqrtf (IEEE) instead of rsqrtf; STAGE_SHIFT: the row's first element read from the
// stage instead of global memory; EXCH: a cluster's partials pushed into the other blocks'
// shared memory (st.async onto their mbarrier) instead of exchanged over a cluster barrier.
constexpr int V = 8;                  // bf16 per 16-byte vector
constexpr int NC = N / C;             // a block's columns
constexpr int PR = NC / V / T;        // a thread's vectors of one row
constexpr int P = R * PR;
constexpr int W = T / 32;
static_assert(PR * V * T == NC, "a block's columns are whole vectors of every thread");

__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_id() { unsigned r; asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned clusters() { unsigned r; asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
  if (threadIdx.x < 32) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  else asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float load_cluster(const float* p, unsigned r) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(sa(p)), "r"(r));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// This block's share of rows row0 .. row0 + R - 1 (those below `rows`) into the stage.
__device__ __forceinline__ void bulk_group(uint4* stage, const __nv_bfloat16* x, int row0, int rows,
                                           unsigned long long* bar) {
  const int live = min(R, rows - row0);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(bar)), "r"(live * NC * 2) : "memory");
  constexpr int piece = NC * 2 / PIECES;
  for (int j = 0; j < live; ++j) {
    const char* src = reinterpret_cast<const char*>(x + (long long)(row0 + j) * N + rank() * NC);
    char* dst = reinterpret_cast<char*>(stage) + j * NC * 2;
    #pragma unroll
    for (int k = 0; k < PIECES; ++k)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(sa(dst + k * piece)), "l"(src + k * piece), "r"(piece), "r"(sa(bar)) : "memory");
  }
}

// Waits for the phase of the given parity of the mbarrier; kCluster: and sees what the
// cluster's other blocks wrote with it (EXCH).
template <bool kCluster = false>
__device__ __forceinline__ void wait_bar(unsigned long long* bar, uint32_t parity) {
  uint32_t done;
  do {
    if (kCluster)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(sa(bar)), "r"(parity) : "memory");
    else
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(sa(bar)), "r"(parity) : "memory");
  } while (!done);
}

#if EXCH  // partials pushed onto the reader's mbarrier (st.async) instead of a cluster barrier
__shared__ __align__(8) unsigned long long xbar[2];   // stats, maximum: C - 1 blocks' bytes a row
__shared__ float recv[2][2][C][4 * R];                // exchange, row parity, sender, value
__device__ __forceinline__ void push(float* slot, unsigned long long* bar, unsigned r, float v) {
  unsigned ra, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(sa(slot)), "r"(r));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(sa(bar)), "r"(r));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               :: "r"(ra), "r"(__float_as_uint(v)), "r"(rb) : "memory");
}
#endif

__device__ __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// K values per thread reduced over the block and the cluster (sums, or maxima with kMax);
// part: W x K partials, xb: this block's K totals (read by the cluster), out: the K results.
template <bool kMax, int K>
__device__ __forceinline__ void reduce(float (&v)[K], float* part, float* xb, float* out, int xpar = 0) {
  #pragma unroll
  for (int k = 0; k < K; ++k)
    #pragma unroll
    for (int o = 16; o; o >>= 1) {
      const float u = __shfl_xor_sync(0xffffffffu, v[k], o);
      v[k] = kMax ? fmaxf(v[k], u) : v[k] + u;
    }
  if ((threadIdx.x & 31) == 0)
    #pragma unroll
    for (int k = 0; k < K; ++k) part[(threadIdx.x >> 5) * K + k] = v[k];
  __syncthreads();
#if EXCH
  if (C > 1) {  // every thread the block's totals (butterfly), pushed to the others by K threads
    constexpr int e = kMax ? 1 : 0;
    #pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = part[(threadIdx.x % W) * K + k];
      #pragma unroll
      for (int o = W / 2; o; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v[k], o);
        v[k] = kMax ? fmaxf(v[k], u) : v[k] + u;
      }
    }
    const unsigned me = rank();
    #pragma unroll
    for (int k = 0; k < K; ++k)
      if (threadIdx.x == k)
        for (unsigned c = 0; c < C; ++c)
          if (c != me) push(&recv[e][xpar][me][k], &xbar[e], c, v[k]);
    wait_bar<true>(&xbar[e], xpar);
    #pragma unroll
    for (int k = 0; k < K; ++k) {  // in rank order: every block the same totals
      float r = me == 0 ? v[k] : recv[e][xpar][0][k];
      for (unsigned c = 1; c < C; ++c) {
        const float u = c == me ? v[k] : recv[e][xpar][c][k];
        r = kMax ? fmaxf(r, u) : r + u;
      }
      v[k] = r;
    }
    return;
  }
#endif
  if (C > 1) {
    if (threadIdx.x < K) {
      float r = part[threadIdx.x];
      for (int w = 1; w < W; ++w) r = kMax ? fmaxf(r, part[w * K + threadIdx.x]) : r + part[w * K + threadIdx.x];
      xb[threadIdx.x] = r;
    }
    cluster_sync();
    if (threadIdx.x < K) {
      float r = load_cluster(xb + threadIdx.x, 0);
      for (int c = 1; c < C; ++c) {
        const float u = load_cluster(xb + threadIdx.x, c);
        r = kMax ? fmaxf(r, u) : r + u;
      }
      out[threadIdx.x] = r;
    }
    __syncthreads();
    #pragma unroll
    for (int k = 0; k < K; ++k) v[k] = out[k];
  } else if (RED_SHFL) {  // as the template's row_reduce: lane l takes warp l's partials, then a butterfly
    #pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = part[(threadIdx.x % W) * K + k];
      #pragma unroll
      for (int o = W / 2; o; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v[k], o);
        v[k] = kMax ? fmaxf(v[k], u) : v[k] + u;
      }
    }
  } else {
    #pragma unroll
    for (int k = 0; k < K; ++k) {
      float r = part[k];
      for (int w = 1; w < W; ++w) r = kMax ? fmaxf(r, part[w * K + k]) : r + part[w * K + k];
      v[k] = r;
    }
  }
}

__device__ __forceinline__ uint32_t pack4(float a, float b, float c, float d) {
  int ia, ib, ic, id;
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(ia) : "f"(a));
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(ib) : "f"(b));
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(ic) : "f"(c));
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(id) : "f"(d));
  uint32_t h, w;
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;" : "=r"(h) : "r"(id), "r"(ic));
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;" : "=r"(w) : "r"(ib), "r"(ia), "r"(h));
  return w;
}

// The generated instances' ways, one switch each, to find what costs their build against
// this one: PARAMS (one struct argument, as normgen::Params), NOCLUSTER (no __cluster_dims__
// where C is 1), STATIC (the reductions' scratch and the mbarrier in static shared memory,
// before the dynamic region, as the template declares them; SMEM_ALIGN, the dynamic region's
// alignment, 16 as the template's, puts the stage 48 bytes past a 128-byte line). KEEP: the maximum's pass keeps
// its outputs (P x 8 floats a thread) for the stores instead of computing them again.
#if PARAMS
struct ProbeParams {
  const __nv_bfloat16* x; const __nv_bfloat16* g; const __nv_bfloat16* b; int8_t* y; float* scale;
  int rows; float eps; int nvec; int pad;
};
#define PROBE_ARGS const ProbeParams pp
#else
#define PROBE_ARGS const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ g, \
    const __nv_bfloat16* __restrict__ b, int8_t* __restrict__ y, float* __restrict__ scale, int rows, float eps, int nvec
#endif
#if NOCLUSTER && C == 1
#define PROBE_CLUSTER
#else
#define PROBE_CLUSTER __cluster_dims__(C, 1, 1)
#endif
extern "C" __global__ void PROBE_CLUSTER __launch_bounds__(T, 1) probe(PROBE_ARGS) {
#if PARAMS
  const __nv_bfloat16* x = pp.x; const __nv_bfloat16* g = pp.g; const __nv_bfloat16* b = pp.b;
  int8_t* y = pp.y; float* scale = pp.scale; const int rows = pp.rows; const float eps = pp.eps;
  const int nvec = pp.nvec;
#endif
  extern __shared__ __align__(SMEM_ALIGN) unsigned char smem[];
  uint4* stage = reinterpret_cast<uint4*>(smem);                       // R x NC bf16
  uint4* cols = reinterpret_cast<uint4*>(smem + R * NC * 2);           // gamma, beta: 2 x NC bf16
#if STATIC
  __shared__ float part[W * (3 * R + 1) + 10 * R];
  __shared__ unsigned long long bar[1];
#else
  float* part = reinterpret_cast<float*>(smem + R * NC * 2 + (COLS_SMEM ? 4 * NC : 0));  // W x 2R
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(part + W * (3 * R + 1) + 10 * R);
#endif
  float* partm = part + W * (2 * R + 1);                               // W x R (the maxima's own)
  float* xb = partm + W * R;                                           // 2 parities x 3R
  float* out = xb + 6 * R;                                             // 3R
  const int t = threadIdx.x;
  const unsigned me = C > 1 ? rank() : 0;
  const int cid = C > 1 ? cluster_id() : blockIdx.x, ncl = C > 1 ? clusters() : gridDim.x;
  const int groups = (rows + R - 1) / R;
  const uint4* gv = reinterpret_cast<const uint4*>(g) + me * (NC / V);
  const uint4* bv = reinterpret_cast<const uint4*>(b) + me * (NC / V);
  if (COLS_SMEM)
    for (int i = t; i < NC / V; i += T) { cols[i] = gv[i]; cols[NC / V + i] = bv[i]; }
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(bar)));
#if EXCH
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&xbar[0])));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&xbar[1])));
#endif
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (C > 1) cluster_sync();
  int grp = cid;
  if (t == 0 && grp < groups) bulk_group(stage, x, grp * R, rows, bar);
  uint32_t parity = 0;
  for (; grp < groups; grp += ncl) {
    const int row0 = grp * R;
#if EXCH
    if (C > 1 && t == 0) {  // this row's phase of both exchanges: the other blocks' bytes
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(&xbar[0])), "r"((C - 1) * (2 * R + WSHIFT) * 4) : "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(&xbar[1])), "r"((C - 1) * R * 4) : "memory");
    }
#endif
    wait_bar(bar, parity);
    uint4 xr[P];
    #pragma unroll
    for (int k = 0; k < P; ++k) xr[k] = stage[k * T + t];   // row k / PR, vector (k % PR) * T + t
    const float k_stage = lo(stage[0].x);  // (C == 1, R == 1: the row's first element)
    __syncthreads();
    if (t == 0 && grp + ncl < groups) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      bulk_group(stage, x, (grp + ncl) * R, rows, bar);
    }
    float* xbp = xb + parity * 3 * R;
    const int xpar = parity;
    parity ^= 1;
    // the rows' shifted sums around each row's first element
    float k0[R], st[2 * R + WSHIFT];
    #pragma unroll
    for (int j = 0; j < R; ++j) {
      k0[j] = row0 + j < rows ? (STAGE_SHIFT ? k_stage : __bfloat162float(x[(long long)(row0 + j) * N])) : 0.f;
      float s1 = 0.f, s2 = 0.f;
      #pragma unroll
      for (int i = 0; i < PR; ++i) {
        const uint4 v = xr[j * PR + i];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float d0 = lo(w[q]) - k0[j], d1 = hi(w[q]) - k0[j];
          s1 += d0 + d1;
          s2 = fmaf(d0, d0, fmaf(d1, d1, s2));
        }
      }
      st[2 * j] = s1;
      st[2 * j + 1] = s2;
    }
    if (WSHIFT) {  // the template's per-warp shift: four lanes' first vectors, and a third value reduced
      const uint4 v = xr[0];
      float f = lo(v.x) + hi(v.x) + lo(v.y) + hi(v.y) + lo(v.z) + hi(v.z) + lo(v.w) + hi(v.w), kw = 0.f;
      #pragma unroll
      for (int l = 0; l < 4; ++l) kw += __shfl_sync(0xffffffffu, f, l * 8);
      st[2 * R + WSHIFT - 1] = kw;
    }
    reduce<false>(st, part, xbp, out, xpar);
    float rstd[R], c[R], m[R], kept[KEEP ? P : 1][8];
    #pragma unroll
    for (int j = 0; j < R; ++j) {
      const float mu = st[2 * j] * (1.f / N), var = fmaxf(st[2 * j + 1] * (1.f / N) - mu * mu, 0.f);
      rstd[j] = SQRTDIV ? 1.f / sqrtf(var + eps) : rsqrtf(var + eps);
      c[j] = -(k0[j] + mu) * rstd[j] + (WSHIFT ? 0.f * st[2 * R + WSHIFT - 1] : 0.f);
      m[j] = 0.f;
    }
    #pragma unroll
    for (int k = 0; k < P; ++k) {
      if (k >= nvec) break;
      const int j = k / PR, col = (k % PR) * T + t;
      const uint4 gk = COLS_SMEM ? cols[col] : gv[col], bk = COLS_SMEM ? cols[NC / V + col] : bv[col];
      const uint4 v = xr[k];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w}, gw[4] = {gk.x, gk.y, gk.z, gk.w}, bw[4] = {bk.x, bk.y, bk.z, bk.w};
      #pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float o0 = fmaf(fmaf(lo(w[q]), rstd[j], c[j]), lo(gw[q]), lo(bw[q]));
        const float o1 = fmaf(fmaf(hi(w[q]), rstd[j], c[j]), hi(gw[q]), hi(bw[q]));
        if (KEEP) { kept[k][2 * q] = o0; kept[k][2 * q + 1] = o1; }
        m[j] = fmaxf(m[j], fabsf(o0));
        m[j] = fmaxf(m[j], fabsf(o1));
      }
    }
    reduce<true>(m, partm, xbp + 2 * R, out + 2 * R, xpar);
    float qmul[R];
    #pragma unroll
    for (int j = 0; j < R; ++j) {
      const float sc = fminf(fmaxf(m[j] / 127.f, 1.17549435e-38f), 3.40282347e+38f);
      qmul[j] = 1.f / sc;
      if (t == 0 && me == 0 && row0 + j < rows) scale[row0 + j] = sc;
    }
    #pragma unroll
    for (int k = 0; k < P; ++k) {
      if (k >= nvec) break;
      const int j = k / PR, col = (k % PR) * T + t;
      if (row0 + j >= rows) break;
      float o[8];
      if (KEEP) {
        #pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = kept[k][e] * qmul[j];
      } else {
        const uint4 gk = COLS_SMEM ? cols[col] : gv[col], bk = COLS_SMEM ? cols[NC / V + col] : bv[col];
        const uint4 v = xr[k];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w}, gw[4] = {gk.x, gk.y, gk.z, gk.w}, bw[4] = {bk.x, bk.y, bk.z, bk.w};
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
          o[2 * q] = fmaf(fmaf(lo(w[q]), rstd[j], c[j]), lo(gw[q]), lo(bw[q])) * qmul[j];
          o[2 * q + 1] = fmaf(fmaf(hi(w[q]), rstd[j], c[j]), hi(gw[q]), hi(bw[q])) * qmul[j];
        }
      }
      *reinterpret_cast<uint2*>(y + (long long)(row0 + j) * N + me * NC + col * V) =
          make_uint2(pack4(o[0], o[1], o[2], o[3]), pack4(o[4], o[5], o[6], o[7]));
    }
  }
  if (C > 1) cluster_sync();   // no block leaves while another may read its shared memory
}
"""

# name: (N, switches: see SOURCE). Figures (H100, ratio to copy; the committed staged kernel
# in the same runs: 32768 0.814-0.863, 65536 0.745-0.756):
VARIANTS = {
    "one": (32768, {}),  # one block a row: 0.870-0.889 (4x the rows: 0.952-0.956)
    "one_shfl": (32768, {"RED_SHFL": 1}),  # 0.934
    "one_template": (32768, {"RED_SHFL": 1, "WSHIFT": 1}),  # the template's reductions: 0.923-0.938
    "one_sqrt": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "SQRTDIV": 1}),  # ... and its rstd: 0.905-0.922
    # the instances' ways (see SOURCE: PARAMS, NOCLUSTER, STATIC; NGBUILD: normgen.compile's
    # build), one at a time on one_sqrt (0.900-0.911 in the same runs), then all of them.
    # PARAMS 0.903, NOCLUSTER 0.915, NGBUILD 0.910; STATIC at the template's 16-byte alignment
    # 0.815 (three runs), on a 128-byte line 0.911-0.912; all 0.808-0.810. So the instance's
    # loss was its bulk copies into a stage 48 bytes past a 128-byte line
    **{f"one_sqrt_{k.lower()}": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "SQRTDIV": 1, k: 1})
       for k in ("PARAMS", "NOCLUSTER", "NGBUILD")},
    "one_sqrt_static": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "SQRTDIV": 1, "STATIC": 1, "SMEM_ALIGN": 16}),
    "one_sqrt_static128": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "SQRTDIV": 1, "STATIC": 1}),
    "one_sqrt_inst": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "SQRTDIV": 1, "PARAMS": 1, "NOCLUSTER": 1, "STATIC": 1,
                              "SMEM_ALIGN": 16, "NGBUILD": 1}),
    # the maximum's outputs kept for the stores: 0.878-0.879 (64 registers), one_shfl_keep spills
    # 68 bytes: 0.706 (one_shfl 0.922 in the same run)
    "one_sqrt_keep": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "SQRTDIV": 1, "KEEP": 1}),
    "one_shfl_keep": (32768, {"RED_SHFL": 1, "KEEP": 1}),
    "one_stage": (32768, {"RED_SHFL": 1, "WSHIFT": 1, "STAGE_SHIFT": 1}),  # 0.931
    "one_wshift": (32768, {"WSHIFT": 1}),  # three values summed from shared memory (spills 48 bytes): 0.782
    "one_l2": (32768, {"COLS_SMEM": 0}),  # gamma and beta from L2: 0.792
    "c2r1": (32768, {"C": 2}),  # 0.542
    "c2r2": (32768, {"C": 2, "R": 2}),  # 0.602
    "c4r2": (32768, {"C": 4, "R": 2}),  # 0.456
    "c4r4": (32768, {"C": 4, "R": 4}),  # 0.582
    "c2r1_65536": (65536, {"C": 2}),  # 0.718-0.728
    # the partials pushed (EXCH; twenty-third session, the committed staged kernel 0.733-0.742):
    # 0.873-0.890; with the template's warp shift (timing only) 0.833-0.836, its rstd
    # 0.834-0.860, both 0.814-0.817; the copy in 8 pieces 0.877-0.878. At 32768: 0.707
    "c2r1_65536_x": (65536, {"C": 2, "EXCH": 1}),
    "c2r1_65536_xs": (65536, {"C": 2, "EXCH": 1, "WSHIFT": 1, "SQRTDIV": 1}),
    "c2r1_65536_xw": (65536, {"C": 2, "EXCH": 1, "WSHIFT": 1}),
    "c2r1_65536_xq": (65536, {"C": 2, "EXCH": 1, "SQRTDIV": 1}),
    "c2r1_65536_x8": (65536, {"C": 2, "EXCH": 1, "PIECES": 8}),
    "c2r1_x": (32768, {"C": 2, "EXCH": 1}),
    "c4r2_65536": (65536, {"C": 4, "R": 2}),  # 0.541; gamma and beta from L2: 0.489
    "c8r2_65536": (65536, {"C": 8, "R": 2}),  # 0.433
    "c8r4_65536": (65536, {"C": 8, "R": 4}),  # 0.536
    "one_l2_65536": (65536, {"COLS_SMEM": 0}),  # gamma and beta from L2 (256 KB do not fit): ~0.60
}
DEFAULTS = {"C": 1, "R": 1, "T": 1024, "COLS_SMEM": 1, "PIECES": 4, "RED_SHFL": 0, "WSHIFT": 0, "SQRTDIV": 0,
            "STAGE_SHIFT": 0, "PARAMS": 0, "NOCLUSTER": 0, "STATIC": 0, "KEEP": 0, "NGBUILD": 0, "SMEM_ALIGN": 128,
            "EXCH": 0}


def build(n, switches):
    """The variant compiled: its launch, (x, g, b, q, s, rows) -> None."""
    d = {**DEFAULTS, **switches}
    c, r, t = d["C"], d["R"], d["T"]
    defs = "".join(f"#define {k} {v}\n" for k, v in {"N": n, **d}.items())
    if d["NGBUILD"]:  # compiled as the instances are (normgen.compile's options), loaded from the cubin
        folder = Path(tempfile.mkdtemp())
        (folder / "probe.cu").write_text(defs + SOURCE)
        cubin = folder / "probe.cubin"
        cubin.write_bytes(nvrtc_compile.compile_file(folder / "probe.cu", runtime.device_arch(0)).cubin)
        k = cp.RawModule(path=str(cubin)).get_function("probe")
    else:
        k = cp.RawModule(code=defs + SOURCE, options=("--std=c++17",)).get_function("probe")
    smem = r * n // c * 2 + (4 * n // c if d["COLS_SMEM"] else 0)
    smem += 0 if d["STATIC"] else 32 * (3 * r + 1) * 4 + 10 * r * 4 + 16
    k.max_dynamic_shared_size_bytes = smem
    # (a tile only to say the block, cluster and shared memory the occupancy query needs)
    if d["NOCLUSTER"] and c == 1:  # no cluster kernel: as runtime._load sizes a grid
        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, t, smem)
        clusters = per_sm * cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    else:
        clusters = runtime.resident_clusters(k.kernel.ptr, tiles.Tile(t, 1, 8, 1, c, smem))
    nvec = r * n // c // 8 // t

    def launch(x, g, b, q, s, rows):
        grid = min(clusters, -(-rows // r)) * c
        if d["PARAMS"]:  # one struct by value, launched as runtime.Kernel launches
            args = struct.pack("=QQQQQifii", x.data.ptr, g.data.ptr, b.data.ptr, q.data.ptr, s.data.ptr, rows,
                               1e-5, nvec, 0)
            buf = ctypes.create_string_buffer(args, len(args))
            size = ctypes.c_size_t(len(args))
            extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
            driver.launchKernel(k.kernel.ptr, grid, 1, 1, t, 1, 1, smem, cp.cuda.get_current_stream().ptr, 0,
                                ctypes.addressof(extra))
        else:
            k((grid,), (t,), (x, g, b, q, s, np.int32(rows), np.float32(1e-5), np.int32(nvec)), shared_mem=smem)
    return launch


def inputs(n, m):
    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal((m, n), dtype=np.float32).astype(bfloat16))
    g, b = (cp.asarray(rng.standard_normal(n, dtype=np.float32).astype(bfloat16)) for _ in range(2))
    return x, g, b


def main(names, times):
    copy = bench.copy_gbps()
    print(f"copy {copy:.0f} GB/s")
    for n in sorted({VARIANTS[v][0] for v in names}):
        m = (1 << 27) // n * times
        x, g, b = inputs(n, m)
        moved = m * n * 3  # x in, codes out
        ref = layernorm(x, g, b, quant="int8")
        ratio = lambda ms: moved / ms / 1e6 / copy  # noqa: E731
        committed = lambda: layernorm(x, g, b, quant="int8")  # noqa: E731
        print(f"N={n} rows={m} committed {ratio(bench.time_events(committed)):.3f}", flush=True)
        for name in (v for v in names if VARIANTS[v][0] == n):
            try:
                launch = build(n, VARIANTS[name][1])
            except Exception as e:  # noqa: BLE001 (a probe: report and go on)
                print(f"  {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            for rows in (m, m - 1):  # every row, then one fewer (a ragged last group)
                q, s = cp.full((m, n), 77, cp.int8), cp.zeros(m, cp.float32)
                fn = lambda: launch(x, g, b, q, s, rows)  # noqa: E731
                fn()
                diff = int(cp.abs(q[:rows].astype(cp.int16) - ref.y[:rows].view(cp.int8).astype(cp.int16)).max())
                sdiff = float(cp.abs(s[:rows] / ref.scale[:rows] - 1).max())
                if rows == m:
                    print(f"  {name:14s} {ratio(bench.time_events(fn)):.3f}  codes within {diff}, "
                          f"scales within {sdiff:.1e}", flush=True)
                elif diff > 1:
                    print(f"  {name:14s} with {rows} rows: codes off by {diff}", flush=True)
        print(f"N={n} committed {ratio(bench.time_events(committed)):.3f}", flush=True)


def only(name):
    n, switches = VARIANTS[name]
    m = (1 << 27) // n
    x, g, b = inputs(n, m)
    launch = build(n, switches)
    q, s = cp.empty((m, n), cp.int8), cp.empty(m, cp.float32)
    for _ in range(4):
        launch(x, g, b, q, s, m)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--only" in args:
        only(args[args.index("--only") + 1])
    else:
        times = int(args.pop(args.index("--rows") + 1)) if "--rows" in args else 1
        main([a for a in args if a != "--rows"] or list(VARIANTS), times)
