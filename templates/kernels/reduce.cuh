// Row reductions: sums and NaN-keeping maxima over the threads of a row, within a warp,
// a block and a cluster, in a fixed order.
#pragma once
#include "cluster.cuh"

namespace normgen {

// The larger (smaller) of a and b, or NaN where either is NaN (fmaxf drops a NaN): a row's
// absolute maximum, and so its dynamic scale, is NaN where the row holds a NaN.
__device__ __forceinline__ float max_nan(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}
__device__ __forceinline__ float min_nan(float a, float b) {
  float m;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}

// Op::op(k, a, b) combines value k of two partners.
struct Sum {
  __device__ __forceinline__ static float op(int, float a, float b) { return a + b; }
};
struct Max {
  __device__ __forceinline__ static float op(int, float a, float b) { return max_nan(a, b); }
};
// Values 0..S-1 summed, the rest maxed: a row's sums and its absolute maximum in one reduction.
template <int S> struct SumsThenMax {
  __device__ __forceinline__ static float op(int k, float a, float b) { return k < S ? a + b : max_nan(a, b); }
};

// RMSNorm's dynamic quant reduces the row's absolute maximum together with its sum of
// squares: |y| = rstd * |h * (gamma + offset) * smooth| and rstd > 0, so the maximum of the
// second factor, taken before rstd is known, times rstd is the outputs' (to rounding). One
// reduction (one barrier, one cluster exchange) per row instead of two. LayerNorm's mean
// and beta do not factor out so.
template <class K> __host__ __device__ constexpr bool merged_max() {
  return K::kNorm == Norm::RMSNORM && K::kQuant == Quant::DYNAMIC;
}

// Where a streamed row spans a cluster of kPush blocks (see Stream), each block pushes its
// totals into the others' shared memory (st.async, completing on their mbarrier) instead of
// meeting them at a cluster barrier: a block waits only for the others' few bytes, not for
// its first warp's outstanding stores as the barrier's release does. Slots alternate by the
// mbarrier's phase: a block that runs ahead writes the next phase's slot. `phase` is read by
// every thread before the reduction's block barrier and advanced by thread 0 after it.
template <int C, int K> struct PushSlots {
  float recv[2][C][K];
  unsigned long long barrier;
  unsigned phase;
};
template <int K> struct PushSlots<0, K> {};

// Row shapes a block reduction takes: whole warps, and 16 or more of them a power of two
// (they are combined by a butterfly).
__host__ __device__ constexpr bool whole_warps(int T) {
  return T % 32 == 0 && (T / 32 < 16 || ((T / 32) & (T / 32 - 1)) == 0);
}

// Shared memory one reduction needs: per-warp partials, and for clusters this block's total
// (read by the other blocks) and the cluster total (read by this block's threads), or with
// kPush the other blocks' totals pushed to it.
template <int T, int R, int K, int kPush = 0> struct ReduceScratch : PushSlots<kPush, K> {
  float warps[T > 32 ? R * (T / 32) * K : 1];
  float block[K];
  float cluster[K];

  __device__ __forceinline__ void init() {  // thread 0, before a cluster barrier
    if constexpr (kPush > 0) {
      this->phase = 0;
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&this->barrier)));
    }
  }
};

// Scratch sets per reduction. A thread may rewrite a scratch only once every thread (of
// every block of the cluster) has read it, i.e. after another barrier: where every row
// takes two reductions (the statistics, then a dynamic quant's maximum) the next one's
// barrier is that; else two sets alternate row by row and the next row's barrier is.
template <class K> __host__ __device__ constexpr int scratch_sets() {
  return K::kQuant == Quant::DYNAMIC && !merged_max<K>() ? 1 : 2;
}

// Reduces K values with Op over the T threads that share a row in each of the C blocks of
// a cluster (T a power of two, or whole warps fewer than 16 in one row a block; rows are
// T-aligned groups of the block). The xor butterfly
// combines the same two values in both partners, so every thread ends with the same bits;
// warp, block and cluster partials are combined in a fixed order: results do not depend on
// which block or which batch the row is in. Across blocks only the first warp writes (thread
// 0) and reads (its first C lanes) shared memory: cluster_sync relies on it.
template <class Op, int T, int R, int C, int K, int kPush>
__device__ __forceinline__ void row_reduce(float (&v)[K], ReduceScratch<T, R, K, kPush>& sh) {
  static_assert(kPush == 0 || (kPush == C && R == 1 && T > 32), "pushed totals: rows of whole clusters");
  unsigned phase = 0;
  if constexpr (kPush > 0) phase = sh.phase;  // before the block barrier below
#pragma unroll
  for (int off = (T < 32 ? T : 32) / 2; off > 0; off /= 2) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = Op::op(k, v[k], __shfl_xor_sync(0xffffffffu, v[k], off));
  }
  if constexpr (T > 32) {
    constexpr int W = T / 32;
    static_assert(whole_warps(T), "whole warps; 16 or more a butterfly of them");
    const int warp = threadIdx.x / 32;
    float* row = sh.warps + (warp / W) * W * K;
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) row[(warp % W) * K + k] = v[k];
    }
    __syncthreads();
    if constexpr (W >= 16) {  // lane l takes warp l % W's partials, then a butterfly: few registers
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = row[(threadIdx.x % W) * K + k];
#pragma unroll
      for (int off = W / 2; off > 0; off /= 2) {
#pragma unroll
        for (int k = 0; k < K; ++k) v[k] = Op::op(k, v[k], __shfl_xor_sync(0xffffffffu, v[k], off));
      }
    } else {  // each thread in turn: the shortest latency
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float s = row[k];
#pragma unroll
        for (int w = 1; w < W; ++w) s = Op::op(k, s, row[w * K + k]);
        v[k] = s;
      }
    }
  }
  if constexpr (kPush > 0) {  // every thread holds the block's totals (above)
    const unsigned me = cluster_rank();
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                   ::"r"(shared_address(&sh.barrier)), "r"((C - 1) * K * 4) : "memory");
      sh.phase = phase ^ 1;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (threadIdx.x == k) {
        for (unsigned r = 0; r < C; ++r)
          if (r != me) push_cluster(&sh.recv[phase][me][k], &sh.barrier, r, v[k]);
      }
    }
    wait_parity<true>(shared_address(&sh.barrier), phase);
#pragma unroll
    for (int k = 0; k < K; ++k) {  // in rank order: every block the same bits
      float t = me == 0 ? v[k] : sh.recv[phase][0][k];
#pragma unroll
      for (unsigned r = 1; r < C; ++r) t = Op::op(k, t, r == me ? v[k] : sh.recv[phase][r][k]);
      v[k] = t;
    }
  } else if constexpr (C > 1) {
    static_assert(R == 1 && T >= 32 && C <= 32 && (C & (C - 1)) == 0, "a cluster serves one row");
    if (threadIdx.x == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) sh.block[k] = v[k];
    }
    cluster_sync();
    if (threadIdx.x < 32) {
      float t[K];
#pragma unroll
      for (int k = 0; k < K; ++k) t[k] = load_cluster(&sh.block[k], threadIdx.x % C);
#pragma unroll
      for (int off = C / 2; off > 0; off /= 2) {
#pragma unroll
        for (int k = 0; k < K; ++k) t[k] = Op::op(k, t[k], __shfl_xor_sync(0xffffffffu, t[k], off));
      }
      if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < K; ++k) sh.cluster[k] = t[k];
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = sh.cluster[k];
  }
}

}  // namespace normgen
