// The normgen forward kernel family: LayerNorm and RMSNorm, one-pass and two-pass.
// Generated from templates/norm_fwd.cuh.j2 by generate.py; do not edit.
// Each instance .cu defines a Traits struct (the spec, spelled in C++) and calls
// norm_fwd<Traits>; every choice below is a compile-time switch on those traits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace normgen {

typedef long long i64;
typedef unsigned int uint32_t;
typedef signed char int8_t;
enum class Norm { LAYERNORM, RMSNORM };
enum class Pipeline { ONE_PASS, TWO_PASS };
enum class Quant { NONE, DYNAMIC, STATIC };

struct Params {
  const void* x;
  const void* residual;
  const void* x_bias;
  const void* gamma;
  const void* beta;
  const void* smooth;
  const void* qscale;
  void* y;
  void* res_out;
  void* yscale;
  void* mean;
  void* rstd;
  long long rows;
  long long inner;
  long long x_so;
  long long x_si;
  long long r_so;
  long long r_si;
  int n;
  float eps;
  float weight_offset;
  int pad_;
};

// ---- element conversion -------------------------------------------------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
// Quantized outputs: int8 rounds half to even and clamps to [-128, 127] (NaN -> 0); fp8
// e4m3 rounds to nearest even and saturates to +-448.
template <> __device__ __forceinline__ int8_t from_float<int8_t>(float v) {
  int q;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(q) : "f"(v));
  return static_cast<int8_t>(q);
}
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 q;
  q.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return q;
}
// v rounded to T's precision, as a float (exact in float for every T here).
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_float(from_float<T>(v)); }
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }

// The bits of a float rounded to T, in the low bits of a word.
template <typename T> __device__ __forceinline__ uint32_t float_to_bits(float v);
template <> __device__ __forceinline__ uint32_t float_to_bits<float>(float v) { return __float_as_uint(v); }
template <> __device__ __forceinline__ uint32_t float_to_bits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ uint32_t float_to_bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// ---- vector access -------------------------------------------------------------------
// Where a 16-byte load of global memory leaves its line. PAST_L1: in L2 only (ld.global.cg),
// for a row read once, which leaves L1 to the per-column vectors every row reads (see
// one_pass_staged). KEEP_L2: with L2's evict_last policy, as torch.compile's Triton kernels
// load x (see one_pass).
enum class Cache { NORMAL, PAST_L1, KEEP_L2 };

__device__ __forceinline__ uint4 load_keep_l2(const uint4* at) {
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  uint4 q;
  asm("ld.global.L2::cache_hint.v4.u32 { %0, %1, %2, %3 }, [%4], %5;"
      : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
      : "l"(__cvta_generic_to_global(at)), "l"(policy));
  return q;
}

template <typename T, int V> struct alignas(sizeof(T) * V) Pack { T v[V]; };

// A thread's P vectors of V elements, kept as loaded: packed in 32-bit words, two 16-bit
// elements to a word (the compiler gives each __nv_bfloat16 a register of its own otherwise).
template <typename T> __device__ __forceinline__ float bits_to_float(uint32_t word, int half);
template <> __device__ __forceinline__ float bits_to_float<float>(uint32_t word, int) {
  return __uint_as_float(word);
}
template <> __device__ __forceinline__ float bits_to_float<__nv_bfloat16>(uint32_t word, int half) {
  return __uint_as_float(half ? word & 0xffff0000u : word << 16);
}
template <> __device__ __forceinline__ float bits_to_float<__half>(uint32_t word, int half) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(half ? word >> 16 : word)));
}

template <typename T, int P, int V> struct Packed {
  static constexpr int kVec = V;
  static constexpr int kVecBytes = V * sizeof(T);
  static constexpr int kWords = (P * kVecBytes + 3) / 4;
  uint32_t w[kWords];

  // Element j of vector i (compile-time indices once unrolled).
  __device__ __forceinline__ float get(int i, int j) const {
    const int e = i * V + j;
    return sizeof(T) == 4 ? bits_to_float<T>(w[e], 0) : bits_to_float<T>(w[e / 2], e % 2);
  }
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = get(i, j);
  }
  // Vector i from p; vectors are loaded in ascending i (a 2-byte vector shares its word).
  // kCache: where 16-byte accesses (global memory only) leave their lines.
  template <Cache kCache = Cache::NORMAL>
  __device__ __forceinline__ void load(int i, const T* p) {
    if constexpr (kVecBytes >= 16) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 16; ++c) {
        const uint4* at = reinterpret_cast<const uint4*>(p) + c;
        const uint4 q = kCache == Cache::PAST_L1 ? __ldcg(at) : kCache == Cache::KEEP_L2 ? load_keep_l2(at) : *at;
        uint32_t* d = w + i * kVecBytes / 4 + 4 * c;
        d[0] = q.x; d[1] = q.y; d[2] = q.z; d[3] = q.w;
      }
    } else if constexpr (kVecBytes == 8) {
      const uint2 q = *reinterpret_cast<const uint2*>(p);
      w[2 * i] = q.x;
      w[2 * i + 1] = q.y;
    } else if constexpr (kVecBytes == 4) {
      w[i] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      const uint32_t bits = *reinterpret_cast<const unsigned short*>(p);
      w[i / 2] = i % 2 ? (w[i / 2] & 0xffffu) | (bits << 16) : bits;
    }
  }
  // Vector i from floats (rounded to T); the word's other half is kept.
  __device__ __forceinline__ void set(int i, const float (&v)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int e = i * V + j;
      const uint32_t bits = float_to_bits<T>(v[j]);
      if constexpr (sizeof(T) == 4) {
        w[e] = bits;
      } else {
        w[e / 2] = e % 2 ? (w[e / 2] & 0xffffu) | (bits << 16) : (w[e / 2] & 0xffff0000u) | bits;
      }
    }
  }
  // Vector i to p (whole words: kVecBytes >= 4).
  __device__ __forceinline__ void store(int i, T* p) const {
    static_assert(kVecBytes >= 4, "stores whole words");
    if constexpr (kVecBytes >= 16) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 16; ++c) {
        const uint32_t* s = w + i * kVecBytes / 4 + 4 * c;
        reinterpret_cast<uint4*>(p)[c] = make_uint4(s[0], s[1], s[2], s[3]);
      }
    } else if constexpr (kVecBytes == 8) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w[2 * i], w[2 * i + 1]);
    } else {
      *reinterpret_cast<uint32_t*>(p) = w[i];
    }
  }
  __device__ __forceinline__ void zero(int i) {  // 0 bits are 0.0 in every float type
    if constexpr (kVecBytes >= 4) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 4; ++c) w[i * kVecBytes / 4 + c] = 0u;
    } else {
      w[i / 2] = i % 2 ? w[i / 2] & 0xffffu : 0u;
    }
  }
};

// Four quantized codes in one word (first in the low byte).
template <typename T> __device__ __forceinline__ uint32_t pack4(float a, float b, float c, float d);
// int8: each value rounded to a 32-bit integer, then two saturating packs (d's byte 1 and 0
// from the first two operands, its upper half from the third's lower half): the same codes
// as from_float<int8_t>, in 6 instructions instead of 4 conversions, 4 masks and 3 permutes.
template <> __device__ __forceinline__ uint32_t pack4<int8_t>(float a, float b, float c, float d) {
  const auto r = [](float v) {
    int i;
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(i) : "f"(v));
    return i;
  };
  uint32_t hi, w;
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;" : "=r"(hi) : "r"(r(d)), "r"(r(c)));
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;" : "=r"(w) : "r"(r(b)), "r"(r(a)), "r"(hi));
  return w;
}
template <> __device__ __forceinline__ uint32_t pack4<__nv_fp8_e4m3>(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// W words (one 4-, 8- or 16-byte access) stored at p. kWhole: by intrinsic (st.global.wb, the
// default policy), which NVVM cannot split -- for the two-pass kernels, whose plain vector
// stores NVVM split into 32-, 16- and 8-bit ones (NVRTC 13.0 and 13.5, every precision:
// bf16 rows of 2^19 ran at 0.26 of copy on an H100); the one-pass kernels' stay whole as
// plain stores, and the intrinsic there changed their scheduling (two spilled).
template <int W, bool kWhole>
__device__ __forceinline__ void store_words(void* p, const uint32_t (&w)[W]) {
  static_assert(W == 1 || W == 2 || W == 4, "accesses of up to 16 bytes");
  if constexpr (W == 4) {
    const uint4 v = make_uint4(w[0], w[1], w[2], w[3]);
    if constexpr (kWhole) __stwb(static_cast<uint4*>(p), v); else *static_cast<uint4*>(p) = v;
  } else if constexpr (W == 2) {
    const uint2 v = make_uint2(w[0], w[1]);
    if constexpr (kWhole) __stwb(static_cast<uint2*>(p), v); else *static_cast<uint2*>(p) = v;
  } else {
    if constexpr (kWhole) __stwb(static_cast<unsigned int*>(p), w[0]); else *static_cast<uint32_t*>(p) = w[0];
  }
}

template <typename T, int V> __host__ __device__ constexpr int access_elems() {
  return V * sizeof(T) > 16 ? 16 / sizeof(T) : V;
}

template <typename T, int V, bool kWhole = false>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  if constexpr (sizeof(T) == 1 && V >= 4) {  // quantized codes, whole words (V <= 16)
    uint32_t w[V / 4];
#pragma unroll
    for (int k = 0; k < V / 4; ++k) w[k] = pack4<T>(in[4 * k], in[4 * k + 1], in[4 * k + 2], in[4 * k + 3]);
    store_words<V / 4, kWhole>(p, w);
  } else if constexpr (kWhole && sizeof(T) * V >= 4) {  // floats, or two 16-bit elements to a word
    constexpr int kPer = 4 / sizeof(T);
    uint32_t w[V / kPer];
#pragma unroll
    for (int k = 0; k < V / kPer; ++k) {
      w[k] = float_to_bits<T>(in[k * kPer]);
      if constexpr (kPer == 2) w[k] |= float_to_bits<T>(in[k * kPer + 1]) << 16;
    }
    store_words<V / kPer, true>(p, w);
  } else {
    constexpr int A = access_elems<T, V>();
#pragma unroll
    for (int c = 0; c < V; c += A) {
      Pack<T, A> r;
#pragma unroll
      for (int i = 0; i < A; ++i) r.v[i] = from_float<T>(in[c + i]);
      *reinterpret_cast<Pack<T, A>*>(p + c) = r;
    }
  }
}

__device__ __forceinline__ i64 row_offset(i64 row, i64 inner, i64 so, i64 si) {
  if (so == 0) return row * si;  // one row stride (the common case): no 64-bit division
  return (row / inner) * so + (row % inner) * si;
}

// ---- thread-block clusters (rows split over C blocks) ------------------------------------
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_index() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_count() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}
// All threads of all blocks of the cluster; orders the first warp's memory accesses before
// it with every thread's after it. Only a block's first warp writes what other blocks read
// or reads theirs (row_reduce), so only it arrives with release semantics; the others arrive
// relaxed, sparing them the fence's wait for their outstanding stores (the rows' outputs).
// Measured on an H100 (tune_tiles.py "w0r" groups, nineteenth session, against every warp
// releasing): RMSNorm bf16 65536 0.950-0.953 -> 0.957-0.959, + fp8 0.912-0.914 ->
// 0.927-0.933, LayerNorm 0.927-0.933 -> 0.945-0.948, 262144 0.877-0.881 -> 0.888-0.897,
// RMSNorm 524288 0.883-0.892 -> 0.907-0.914; elsewhere even.
__device__ __forceinline__ void cluster_sync() {
  if (threadIdx.x < 32) {  // (a whole warp: `aligned` holds)
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The shared-memory address of a generic pointer into this block's shared memory.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The address in the shared memory of block `rank` of this cluster of what `p` points to here.
__device__ __forceinline__ unsigned cluster_address(const void* p, unsigned rank) {
  unsigned at;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(at) : "r"(shared_address(p)), "r"(rank));
  return at;
}
// A float in the shared memory of block `rank` of this cluster, at the address `p` has here.
__device__ __forceinline__ float load_cluster(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_address(p, rank)) : "memory");
  return v;
}
// v into the shared memory of block `rank` of this cluster, at the address `slot` has here,
// completing there on the mbarrier at the address `barrier` has here.
__device__ __forceinline__ void push_cluster(const float* slot, const unsigned long long* barrier, unsigned rank,
                                             float v) {
  const unsigned at = cluster_address(slot, rank), bar = cluster_address(barrier, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               ::"r"(at), "r"(__float_as_uint(v)), "r"(bar) : "memory");
}
// Waits for the phase of the given parity of this block's mbarrier at shared address
// `barrier`; kCluster: and sees what other blocks of the cluster wrote with it.
template <bool kCluster = false>
__device__ __forceinline__ void wait_parity(unsigned barrier, unsigned parity) {
  unsigned done;
  do {
    if constexpr (kCluster) {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    } else {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    }
  } while (!done);
}

// ---- row reduction ------------------------------------------------------------------
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
// Measured on an H100 (scripts/stream_probe.py, LayerNorm + int8 bf16 65536 over clusters
// of two, twenty-third session): 0.718 with the cluster barrier, 0.873-0.890 pushed.
template <int C, int K> struct PushSlots {
  float recv[2][C][K];
  unsigned long long barrier;
  unsigned phase;
};
template <int K> struct PushSlots<0, K> {};

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
// a cluster (T a power of two; rows are T-aligned groups of the block). The xor butterfly
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

// ---- statistics ----------------------------------------------------------------------
// Shifted sums: with a shift k near the row mean, s1 = sum(x - k) and s2 = sum((x - k)^2)
// give mean = k + s1/n and var = s2/n - (s1/n)^2 without cancellation (while (s1/n)^2 is
// at most var: see share_stats), and x - k is exact for x near k (Sterbenz), so a large
// common offset costs no precision. RMSNorm uses k = 0 and only s2. Padding lanes never
// enter either sum.
struct Stats {
  float shift, c, rstd;  // mean = shift + c; normalized value = ((x - shift) - c) * rstd
  float amax;  // with merged_max: the outputs' absolute maximum
  // c^2 > var: the shift lies more than a standard deviation from the mean; in share_stats'
  // result: the row was summed again for that (around its mean: `shift` is that one)
  bool far;
};

// Sums of d and d*d over V values, pairwise: a thread's error grows with log V + (number of
// vectors), not with the number of elements it holds.
template <int V>
__device__ __forceinline__ void pair_sums(const float (&d)[V], float& s1, float& s2) {
  if constexpr (V == 1) {
    s1 = d[0];
    s2 = d[0] * d[0];
  } else {  // the first level's squares and sums in one fma
    float a[V / 2], b[V / 2];
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      a[j] = d[j] + d[j + V / 2];
      b[j] = fmaf(d[j + V / 2], d[j + V / 2], d[j] * d[j]);
    }
#pragma unroll
    for (int w = V / 4; w > 0; w /= 2)
#pragma unroll
      for (int j = 0; j < w; ++j) {
        a[j] += a[j + w];
        b[j] += b[j + w];
      }
    s1 = a[0];
    s2 = b[0];
  }
}

// A running float sum with Kahan-Babuska compensation, for sums over many chunks: with
// quantized inputs, plain float rounding errors do not cancel and grow with the length. Once
// the sum is not finite the error term holds inf - inf; the sum alone is then the value.
struct Compensated {
  float sum = 0.f, err = 0.f;
  __device__ __forceinline__ void add(float v) {
    const float t = sum + v;
    err += fabsf(sum) >= fabsf(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  __device__ __forceinline__ float value() const { return isfinite(sum) ? sum + err : sum; }
};

// ---- LayerNorm's shift in register rows: one per warp ---------------------------------
// Each warp shifts by the mean of the first vectors of L of its lanes, evenly spaced over
// its W (where rows share a warp, over each row's W = T lanes): 32 elements where a vector
// is 16 bytes (four lanes of bf16, eight of fp32), L shuffles, no reduction before the sums,
// no memory access. Only a warp whose first vector is padding holds no element of the row
// (padding comes last), and its sums are zero. Lane 0's vector alone (the shift until the
// thirteenth session) lay more than a standard deviation from its warp's mean -- and
// share_stats summed the row again -- in 1.9% of normal rows of bf16 4096, 7% of 16384,
// 52% of fp32 4096 (four elements a vector; the kernels' test simulated in NumPy); on the
// H100 32 x 4096 bf16 took 3.14 us with one such row, 2.45 without. 32 elements miss so in
// about 1e-8 of warps. With one vector a thread (P == 1) later lanes may hold padding, so lane
// 0's alone; with more, every lane's first vector lies in any row its bucket serves (longer
// than half the bucket), except in the smallest, where padding zeros only make the shift
// worse (share_stats' check covers any shift).
template <int T, int P, class Row>
__device__ __forceinline__ float warp_shift(const Row& x) {
  constexpr int W = T < 32 ? T : 32, kWant = 32 / Row::kVec, kMost = W < 8 ? W : 8;
  constexpr int L = P == 1 ? 1 : kWant < kMost ? kWant : kMost;
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < Row::kVec; ++j) s += x.get(0, j);
  float k = 0.f;
#pragma unroll
  for (int l = 0; l < L; ++l) k += __shfl_sync(0xffffffffu, s, l * W / L, W);
  return k * (1.f / (L * Row::kVec));
}

// The sums of a row's warps, each around its warp's shift k_w (in k), moved to the first
// warp's shift k_0 as they are combined: with d = k_w - k_0 and n_w the warp's elements,
// sum(h - k_0) = s1_w + n_w d and sum((h - k_0)^2) = s2_w + d (2 s1_w + n_w d). The terms
// are of the row's own spread while each k_w lies within a standard deviation of its warp's
// mean (and k_0 of the row's: share_stats checks); true when a warp's is not: the row is
// then summed again around one shift. In a fixed order: every thread gets the same bits.
template <int T, int R>
__device__ __forceinline__ bool reduce_warp_shifted(float& k, float (&s)[2], ReduceScratch<T, R, 3>& sh,
                                                    const float* counts) {
  static_assert(T > 32, "rows within a warp share one shift");
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
#pragma unroll
    for (int j = 0; j < 2; ++j) s[j] += __shfl_xor_sync(0xffffffffu, s[j], off);
  }
  constexpr int W = T / 32;
  const int warp = threadIdx.x / 32;
  float* row = sh.warps + (warp / W) * W * 3;
  if (threadIdx.x % 32 == 0) {
    row[(warp % W) * 3] = k;
    row[(warp % W) * 3 + 1] = s[0];
    row[(warp % W) * 3 + 2] = s[1];
  }
  __syncthreads();
  const float k0 = row[0];
  bool far = false;
  auto moved = [&](int w, float& a, float& b) {
    const float d = row[w * 3] - k0, s1 = row[w * 3 + 1], s2 = row[w * 3 + 2], nw = counts[w];
    far |= 2.f * s1 * s1 > nw * s2;  // (s1 / n_w)^2 > s2 / n_w - (s1 / n_w)^2
    a = fmaf(nw, d, s1);
    b = fmaf(d, fmaf(nw, d, 2.f * s1), s2);
  };
  if constexpr (W >= 16) {  // lane l moves warp l % W's sums, then a butterfly
    moved(threadIdx.x % W, s[0], s[1]);
    far = __any_sync(0xffffffffu, far);
#pragma unroll
    for (int off = W / 2; off > 0; off /= 2) {
#pragma unroll
      for (int j = 0; j < 2; ++j) s[j] += __shfl_xor_sync(0xffffffffu, s[j], off);
    }
  } else {
    moved(0, s[0], s[1]);
#pragma unroll
    for (int w = 1; w < W; ++w) {
      float a, b;
      moved(w, a, b);
      s[0] += a;
      s[1] += b;
    }
  }
  k = k0;
  return far;
}

// Sums a row's statistics reduce: LayerNorm both shifted sums, RMSNorm only the squares;
// and the values reduced with them (the absolute maximum, with merged_max).
template <class K> __host__ __device__ constexpr int stat_sums() { return K::kNorm == Norm::LAYERNORM ? 2 : 1; }
template <class K> __host__ __device__ constexpr int stat_values() { return stat_sums<K>() + merged_max<K>(); }

// The row's statistics from this thread's shifted sums s1 (unused by RMSNorm) and s2, and
// with merged_max its largest |h * (gamma + offset) * smooth|, m.
//
// kWarpShifted (LayerNorm rows in registers over several warps): each warp summed around
// a shift of its own (warp_shift), which the reduction moves to the first warp's
// (reduce_warp_shifted, with `counts` each warp's elements); `shift` becomes that one.
template <class K, int T, int R, int C, bool kWarpShifted = false, int kPush = 0>
__device__ __forceinline__ Stats row_stats(float shift, float s1, float s2, float m,
                                           ReduceScratch<T, R, stat_values<K>() + kWarpShifted, kPush>& sh, int n,
                                           float eps, const float* counts = nullptr) {
  constexpr int kS = stat_sums<K>();
  float s[stat_values<K>()];
  s[kS - 1] = s2;
  if constexpr (kS == 2) s[0] = s1;
  if constexpr (merged_max<K>()) s[kS] = m;
  bool far_warp = false;
  if constexpr (kWarpShifted) {
    static_assert(kS == 2 && !merged_max<K>() && C == 1, "per-warp shifts: LayerNorm rows of one block");
    far_warp = reduce_warp_shifted<T, R>(shift, s, sh, counts);
  } else {
    row_reduce<SumsThenMax<kS>, T, R, C, stat_values<K>()>(s, sh);
  }
  const float inv_n = 1.f / static_cast<float>(n);
  const float c = kS == 2 ? s[0] * inv_n : 0.f;
  const float var = max_nan(s[kS - 1] * inv_n - c * c, 0.f);  // NaN stays: a row holding one gets NaN
  const float rstd = 1.f / sqrtf(var + eps);
  return Stats{shift, c, rstd, merged_max<K>() ? s[kS] * rstd : 0.f, far_warp || c * c > var};
}

// The statistics for outputs computed from h itself instead of h - shift (spec.fold_shift):
// shift 0 and c the mean, so that the normalize chain's first fma, h * rstd - mean * rstd,
// takes the subtraction: an instruction an element fewer in each output pass. Its constant
// rounds to within |mean * rstd| * 2^-23 (the mean's rounding and the product's), which is
// within the chain's own rounding where the mean lies within a standard deviation of zero:
// `near` says so. Other rows keep the shift, whose subtraction is exact for values near it.
__device__ __forceinline__ Stats folded(const Stats& st, bool& near) {
  const float mean = st.shift + st.c;  // the mean save_stats writes, rounded the same way
  near = fabsf(mean * st.rstd) <= 1.f;
  return Stats{0.f, mean, st.rstd, st.amax, st.far};
}

// ---- streamed rows (K::kStreamed: tiles.STREAMED_TILES) ---------------------------------------
// One block an SM holds its row in registers while the copy engine brings its next row into
// shared memory (cp.async.bulk, completing on an mbarrier): the next row's DRAM reads overlap
// this row's reductions and output passes. The row's gamma and beta sit in shared memory
// beside the stage, copied once (absent ones as ones and zeros), for both output passes.
// The copy is issued in kPieces pieces by as many threads, each the first of its own group
// of warps: issued by one thread, it held that thread's warp back by its instructions, and
// every other warp then waited for it at the row's next barrier.
// A row whose columns do not fit beside a stage spans a cluster of C blocks, block r
// holding its r-th kShare columns (first(), one_pass' column map) and streaming them into
// its stage, with its share of gamma and beta beside it; their reductions push their
// totals to each other (PushSlots).
// Shared memory: [stage: a share of X][gamma: a share of W][beta: a share of W][mbarrier].
template <class K> struct Stream {
  using X = typename K::X;
  using W = typename K::W;
  static constexpr int C = K::kCluster;
  static constexpr int kShare = K::kThreadsPerRow * K::kRepeat * K::kVec, kPieces = 8;  // a block's columns
  static constexpr int kPieceBytes = kShare * sizeof(X) / kPieces;
  static_assert(kPieceBytes % 16 == 0 && K::kThreadsPerRow % (32 * kPieces) == 0, "whole pieces, whole warps");
  // This block's first column of the row.
  __device__ static int first() { return C == 1 ? 0 : static_cast<int>(cluster_rank()) * kShare; }
  // Where column `col` of the row (one of this block's) lies in the stage, gamma and beta.
  __device__ static int local(int col) {
    if constexpr (C == 1) {
      return col;
    } else {
      return col - first();
    }
  }
  __device__ static unsigned char* base() {
    // on a 128-byte line past the static scratch: bulk copies into a stage 48 bytes past one
    // ran 0.815 of copy against 0.912 (scripts/stream_probe.py's STATIC variants, H100)
    extern __shared__ __align__(128) uint4 stage_words[];
    return reinterpret_cast<unsigned char*>(stage_words);
  }
  __device__ static X* stage() { return reinterpret_cast<X*>(base()); }
  __device__ static W* gamma() { return reinterpret_cast<W*>(base() + kShare * sizeof(X)); }
  __device__ static W* beta() { return gamma() + kShare; }
  __device__ static unsigned barrier() { return shared_address(beta() + kShare); }
  __device__ static void init() {  // thread 0; a block barrier before any wait
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier()), "r"(kPieces));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // The piece this thread issues (-1: none).
  // kFresh: threadIdx.x read afresh at each call (volatile), for rows that keep their outputs:
  // held across the row, the piece took a register ptxas then spilled (4 bytes); elsewhere
  // the fresh reads cost 0.02-0.03 of copy (H100).
  template <bool kFresh = false>
  __device__ static int piece() {
    constexpr int kEvery = K::kThreadsPerRow / kPieces;
    unsigned t = threadIdx.x;
    if constexpr (kFresh) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t % kEvery == 0 ? static_cast<int>(t) / kEvery : -1;
  }
  // Piece q of the row of n elements at xr (its bytes q * kPieceBytes on, up to the row's
  // 2n: none, or fewer, for shorter rows; 16-byte multiples, as rows are of whole 16-byte
  // vectors) into the stage. The stage's earlier reads (by every thread, before a block
  // barrier) are ordered before the copy's writes.
  __device__ static void fetch(const X* xr, int n, int q) {
    const int off = q * kPieceBytes, from = first() * static_cast<int>(sizeof(X)) + off;
    const unsigned bytes = max(min(n * static_cast<int>(sizeof(X)) - from, kPieceBytes), 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier()), "r"(bytes) : "memory");
    if (bytes > 0)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(shared_address(stage()) + off),
                     "l"(reinterpret_cast<const char*>(xr) + from), "r"(bytes), "r"(barrier()) : "memory");
  }
  // Waits for the fetch of the given parity (0, 1, 0, ...: one per row) to land.
  __device__ static void wait(unsigned parity) { wait_parity(barrier(), parity); }
};

// ---- per-column vectors: gamma, beta, x-bias, smooth scale ---------------------------------
// Packed like the row. Pipelines hold them in registers for all of a block's rows when
// they fit the budget (they are the same for every row), else load them per vector.
template <class K, int P, int V> struct Columns {
  using W = typename K::W;
  Packed<W, P, V> g, b;
  Packed<typename K::X, P, V> bias;
  Packed<typename K::SM, P, V> sm;
  static constexpr int kWords = Packed<W, P, V>::kWords * (K::kNorm == Norm::LAYERNORM ? 2 : 1) +
                                (K::kXBias ? Packed<typename K::X, P, V>::kWords : 0) +
                                (K::kSmooth ? Packed<typename K::SM, P, V>::kWords : 0);

  // Called once per row: the words look changed to the compiler, which then converts them at
  // each use instead of keeping float copies for all rows (K::kPackColumns).
  __device__ __forceinline__ void keep_packed() {
    constexpr int kW = Packed<W, P, V>::kWords;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      asm volatile("" : "+r"(g.w[k]));
      if constexpr (K::kNorm == Norm::LAYERNORM) asm volatile("" : "+r"(b.w[k]));
    }
#pragma unroll
    for (int k = 0; k < Packed<typename K::X, P, V>::kWords; ++k)
      if constexpr (K::kXBias) asm volatile("" : "+r"(bias.w[k]));
#pragma unroll
    for (int k = 0; k < Packed<typename K::SM, P, V>::kWords; ++k)
      if constexpr (K::kSmooth) asm volatile("" : "+r"(sm.w[k]));
  }
  __device__ __forceinline__ void load_bias(const Params& p, int i, i64 col) {
    if constexpr (K::kXBias) bias.load(i, static_cast<const typename K::X*>(p.x_bias) + col);
  }
  __device__ __forceinline__ void load_epilogue(const Params& p, int i, i64 col) {
    if constexpr (K::kStreamed) {  // shared memory's copies (stream_columns)
      g.load(i, Stream<K>::gamma() + Stream<K>::local(col));
      if constexpr (K::kNorm == Norm::LAYERNORM) b.load(i, Stream<K>::beta() + Stream<K>::local(col));
      return;
    }
    if (p.gamma != nullptr) {
      g.load(i, static_cast<const W*>(p.gamma) + col);
    } else {  // no scale
      float one[V];
#pragma unroll
      for (int j = 0; j < V; ++j) one[j] = 1.f;
      g.set(i, one);
    }
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      if (p.beta != nullptr) {
        b.load(i, static_cast<const W*>(p.beta) + col);
      } else {
        b.zero(i);
      }
    }
    if constexpr (K::kSmooth) sm.load(i, static_cast<const typename K::SM*>(p.smooth) + col);
  }
  __device__ __forceinline__ void load(const Params& p, int i, i64 col) {
    load_bias(p, i, col);
    load_epilogue(p, i, col);
  }
};

// Gamma and beta of a thread's first N vectors of a row brought into L1 ahead of their use
// (prefetch.global.L1: no registers held, nothing waited for); `cols` as in RowCols.
template <class K, int N, class Cols>
__device__ __forceinline__ void prefetch_columns(const Params& p, const Cols& cols) {
  using W = typename K::W;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (cols.inside(i)) {
      if (p.gamma != nullptr) asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const W*>(p.gamma) + cols(i)));
      if (K::kNorm == Norm::LAYERNORM && p.beta != nullptr)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const W*>(p.beta) + cols(i)));
    }
  }
}

// ---- prologue: the fused residual add and x-bias -----------------------------------------
// h = x (+ x_bias) (+ residual), summed in float in that order and rounded once to x's
// precision: the values the unfused sequence would store and normalize. Vector i of x
// becomes h (bias vector ci of c), and h is written to res_out unless that is null.
template <class K, int P, int V, int PC>
__device__ __forceinline__ void fuse(Packed<typename K::X, P, V>& x, const Packed<typename K::X, P, V>& r,
                                     int i, const Columns<K, PC, V>& c, int ci, typename K::X* res_out) {
  float h[V];
  x.get(i, h);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if constexpr (K::kXBias) h[j] += c.bias.get(ci, j);
    if constexpr (K::kFusedAdd != 0) h[j] += r.get(i, j);
  }
  x.set(i, h);
  if (res_out != nullptr) {
    if constexpr (Packed<typename K::X, P, V>::kVecBytes >= 4) {
      x.store(i, res_out);
    } else {
      x.get(i, h);
      store_vec<typename K::X, V>(res_out, h);
    }
  }
}

// ---- epilogue -------------------------------------------------------------------------
// The float outputs of one vector (d: its values minus stats.shift): normalized, scaled,
// shifted and smoothed -- what is stored, or quantized. c's vector ci holds its columns.
template <class K, int PC, int V>
__device__ __forceinline__ void outputs(float (&out)[V], const Params& p, const Stats& st, const float (&d)[V],
                                        const Columns<K, PC, V>& c, int ci) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float g = c.g.get(ci, j);
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      out[j] = fmaf(fmaf(d[j], st.rstd, -st.c * st.rstd), g, c.b.get(ci, j));  // ((d - c) * rstd) * g + b
    } else {
      out[j] = d[j] * st.rstd * (g + p.weight_offset);
    }
    if constexpr (K::kSmooth) out[j] *= c.sm.get(ci, j);
  }
}

template <typename Y> struct QMax;  // the largest quantized magnitude
template <> struct QMax<int8_t> { static constexpr float value = 127.f; };
template <> struct QMax<__nv_fp8_e4m3> { static constexpr float value = 448.f; };

template <typename T> struct Normal;  // the positive normal range of a scale's precision
template <> struct Normal<float> {
  static constexpr float lo = 1.17549435e-38f, hi = 3.40282347e+38f;
};
template <> struct Normal<__half> { static constexpr float lo = 6.103515625e-05f, hi = 65504.f; };
template <> struct Normal<__nv_bfloat16> {
  static constexpr float lo = 1.17549435e-38f, hi = 3.38953139e+38f;
};

// Dynamic quant: the row's scale is absmax / qmax, kept within the normal range of its
// precision (an all-zero row gets the smallest normal: finite, positive, and zero codes; a
// row holding a NaN gets NaN), rounded to that precision and written once per row. Returns the multiplier the codes are
// computed with: 1 / (the scale as stored), so that codes * stored scale dequantize.
template <class K>
__device__ __forceinline__ float dynamic_scale(const Params& p, float amax, i64 row, bool write) {
  using SY = typename K::SY;
  const float s = min_nan(max_nan(amax / QMax<typename K::Y>::value, Normal<SY>::lo), Normal<SY>::hi);
  const SY stored = from_float<SY>(s);
  if (write) static_cast<SY*>(p.yscale)[row] = stored;
  return 1.f / to_float(stored);
}

// The multiplier of a static quant (1 / the given scale), or 1.
template <class K>
__device__ __forceinline__ float static_qmul(const Params& p) {
  if constexpr (K::kQuant == Quant::STATIC) return 1.f / *static_cast<const float*>(p.qscale);
  return 1.f;
}

template <class K>
__device__ __forceinline__ void save_stats(const Params& p, i64 row, const Stats& st) {
  if constexpr (K::kSaveStats) {
    if constexpr (K::kNorm == Norm::LAYERNORM) static_cast<float*>(p.mean)[row] = st.shift + st.c;
    static_cast<float*>(p.rstd)[row] = st.rstd;
  }
}

// ---- the steps every pipeline shares ----------------------------------------------------
// Where a thread's vectors of a row lie: vector i at column cols(i), inside the row of n
// columns unless it is padding. kFull (a whole-row kernel, spec.full_symbol): N is the
// tile's whole row, so every vector is inside, known at compile time: every pass loses its
// per-vector comparisons and the branches around each vector's work, and the compiler
// issues all the vectors' loads (shared memory, per-column vectors) ahead of their
// arithmetic.
template <bool kFull, class ColOf> struct RowCols {
  ColOf col_of;
  int n;
  __device__ __forceinline__ auto operator()(int i) const { return col_of(i); }
  __device__ __forceinline__ bool inside(int i) const { return kFull || col_of(i) < n; }
};
template <bool kFull, class ColOf>
__device__ __forceinline__ RowCols<kFull, ColOf> row_cols(const ColOf& col_of, int n) {
  return {col_of, n};
}

// `load(i, d)` gives vector i of a thread's P vectors as floats; `cols(i)` is its column.
// The mean of the row's values summed in `s` (a per-thread partial): the two-pass shift.
template <int T, int R, int C>
__device__ __forceinline__ float row_mean(float s, ReduceScratch<T, R, 1>& sh, int count) {
  float v[1] = {s};
  row_reduce<Sum, T, R, C, 1>(v, sh);
  return v[0] / static_cast<float>(count);
}

// Adds one vector's sums of (x - shift) and (x - shift)^2 to s1 and s2.
template <int V>
__device__ __forceinline__ void add_centred(float (&d)[V], float shift, float& s1, float& s2) {
  float a, b;
#pragma unroll
  for (int j = 0; j < V; ++j) d[j] -= shift;
  pair_sums<V>(d, a, b);
  s1 += a;
  s2 += b;
}

// This thread's sums of (x - shift) and (x - shift)^2; padding vectors stay out. kRolled:
// a loop, not unrolled (for `load` from memory only: a register row indexed at run time
// would move to local memory).
template <int P, int V, bool kRolled = false, class Load, class Cols>
__device__ __forceinline__ void centred_sums(float shift, const Load& load, const Cols& cols, float& s1,
                                             float& s2) {
  s1 = s2 = 0.f;
  auto add = [&](int i) {
    if (cols.inside(i)) {
      float d[V];
      load(i, d);
      add_centred<V>(d, shift, s1, s2);
    }
  };
  if constexpr (kRolled) {
#pragma unroll 1
    for (int i = 0; i < P; ++i) add(i);
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) add(i);
  }
}

// The row's statistics from this thread's sums around the shift k (s1 unused by RMSNorm)
// and, with merged_max, its largest |h * (gamma + offset) * smooth|, m: one reduction, over
// the cluster too where the row spans one. A LayerNorm row whose k lies more than a standard
// deviation from its mean (c^2 > var: a pilot of outliers) would lose precision to
// cancellation in s2 / n - c^2, so it is summed again around k + c, which is within rounding
// of the mean: another pass over the row on chip and another reduction, for such rows
// only. The decision is the same in all of a row's threads (they hold the same reduced
// bits); rows that share a warp's shuffles or a block's barriers take the second
// reduction together, each keeping its own result. That pass is a loop over `again(i, d)`
// (the row from shared memory, or from global memory again where registers hold it, but
// streamed rows' from their registers by run-time index): unrolled over the registers, it
// cost the common path spills of 4-16 bytes.
template <class K, int P, int V, int T, int R, int C, bool kWarpShifted = false, class Again, class Cols,
          int kPush = 0>
__device__ __forceinline__ Stats share_stats(const Params& p, float k, float s1, float s2, float m, const Again& again_load,
                                             const Cols& cols,
                                             ReduceScratch<T, R, stat_values<K>() + kWarpShifted, kPush>& sh,
                                             ReduceScratch<T, R, stat_values<K>(), kPush>& sh_again,
                                             const float* counts = nullptr) {
  Stats st = row_stats<K, T, R, C, kWarpShifted>(k, s1, s2, m, sh, p.n, p.eps, counts);
  if constexpr (K::kNorm == Norm::LAYERNORM) {
    bool again = st.far;
    if constexpr (R > 1 && T < 32) again = __any_sync(0xffffffffu, again);
    if constexpr (R > 1 && T > 32) again = __syncthreads_or(again);
    if (again) {
      // rounded once, never contracted into fma(s1, 1 / n, shift): the sums below and the
      // shift they are recorded with must be the same float. As a plain addition they were
      // not (NVRTC 13.0, H100: a far row's c was its mean minus the other float next to
      // the shift, its outputs an ulp of the mean off), most likely one copy contracted.
      const float k2 = __fadd_rn(st.shift, st.c);
      centred_sums<P, V, true>(k2, again_load, cols, s1, s2);
      if constexpr (R == 1) {  // the first statistics are dead here: registers for the pass
        st = row_stats<K, T, R, C>(k2, s1, s2, m, sh_again, p.n, p.eps);
        st.far = true;
      } else {
        Stats st2 = row_stats<K, T, R, C>(k2, s1, s2, m, sh_again, p.n, p.eps);
        st2.far = true;
        if (st.far) st = st2;
      }
    }
  }
  return st;
}

// The per-column vectors of a thread's first E vectors of a staged row, loaded into registers
// before the row's statistics are reduced, so that the first output step does not wait for
// them after it (spec.column_registers); E = 0: none.
template <class K, int E, int V> struct EarlyColumns {
  static constexpr int kCount = E;
  Columns<K, (E > 0 ? E : 1), V> c;
  template <class Cols>
  __device__ __forceinline__ void load(const Params& p, const Cols& cols) {
#pragma unroll
    for (int i = 0; i < E; ++i)
      if (cols.inside(i)) c.load_epilogue(p, i, cols(i));
  }
};

// One step of for_each_output: vectors i0 .. i0 + U - 1; the first early.kCount of them
// (where i0 = 0) with early's columns. Columns loaded per vector are loaded A =
// K::kColumnAhead vectors ahead of their use (spec.column_ahead), in a ring of A + 1: a load
// may not pass an earlier store that might alias it, so in a pass that stores, ptxas issues
// each vector's loads after the stores of the vector before, unless the source does so.
template <class K, int P, int V, bool kHeld, bool kCentred, int U, class Load, class Cols, class Fn, class Early>
__device__ __forceinline__ void output_step(int i0, const Params& p, const Stats& st, const Load& load,
                                            const Cols& cols, const Columns<K, kHeld ? P : 1, V>& c,
                                            const Fn& fn, const Early& early) {
  constexpr int A = K::kColumnAhead;
  Columns<K, 1, V> ahead[A + 1];
  auto fetch = [&](int b) {  // vector i0 + b's columns, into the ring (A > 0)
    if (!kHeld && b >= Early::kCount && b < U && cols.inside(i0 + b)) ahead[b % (A + 1)].load_epilogue(p, 0, cols(i0 + b));
  };
#pragma unroll
  for (int b = 0; b < A; ++b) fetch(b);
#pragma unroll
  for (int b = 0; b < U; ++b) {
    if constexpr (A > 0) fetch(b + A);
    const int i = i0 + b;
    if (cols.inside(i)) {
      float d[V], out[V];
      load(i, d);
      if constexpr (!kCentred) {
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] -= st.shift;
      }
      if constexpr (kHeld) {
        outputs<K, P, V>(out, p, st, d, c, i);
      } else if (b < Early::kCount) {
        outputs<K>(out, p, st, d, early.c, b);
      } else {
        if constexpr (A == 0) ahead[0].load_epilogue(p, 0, cols(i));  // at its use
        outputs<K, 1, V>(out, p, st, d, ahead[b % (A + 1)], 0);
      }
      fn(i, out);
    }
  }
}

// fn(i, out) for each of this thread's vectors of a row, with its float outputs; columns
// from c when kHeld (the same for every row), else loaded per vector, the first step's from
// `early` where it holds them (at most U). kCentred: `load` gives the values minus st.shift
// already. U < P: a loop over U vectors at a time (for `load` from memory only), which bounds
// the loads ptxas issues ahead of their use.
template <class K, int P, int V, bool kHeld, bool kCentred = false, int U = P, class Load, class Cols, class Fn,
          class Early = EarlyColumns<K, 0, V>>
__device__ __forceinline__ void for_each_output(const Params& p, const Stats& st, const Load& load,
                                                const Cols& cols, const Columns<K, kHeld ? P : 1, V>& c,
                                                const Fn& fn, const Early& early = Early{}) {
  static_assert(P % U == 0, "whole steps");
  static_assert(Early::kCount <= U && (Early::kCount == 0 || !kHeld), "early columns serve the first step");
  int i0 = 0;
  if constexpr (Early::kCount > 0) {
    output_step<K, P, V, kHeld, kCentred, U>(0, p, st, load, cols, c, fn, early);
    i0 = U;
  }
#pragma unroll 1
  for (; i0 < P; i0 += U)
    output_step<K, P, V, kHeld, kCentred, U>(i0, p, st, load, cols, c, fn, EarlyColumns<K, 0, V>{});
}

// The largest |output| among this thread's vectors of a row (0 for none); U as in
// for_each_output (here and below).
template <class K, int P, int V, bool kHeld, int U = P, class Load, class Cols>
__device__ __forceinline__ float absmax(const Params& p, const Stats& st, const Load& load, const Cols& cols,
                                        const Columns<K, kHeld ? P : 1, V>& c) {
  float m = 0.f;
  for_each_output<K, P, V, kHeld, false, U>(p, st, load, cols, c, [&](int, const float (&out)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) m = max_nan(m, fabsf(out[j]));
  });
  return m;
}

// With merged_max, this thread's largest |h * (gamma + offset) * smooth| (its outputs with
// rstd = 1, exactly: multiplying by 1 rounds nothing); else 0.
template <class K, int P, int V, bool kHeld, int U = P, class Load, class Cols>
__device__ __forceinline__ float unscaled_absmax(const Params& p, const Load& load, const Cols& cols,
                                                 const Columns<K, kHeld ? P : 1, V>& c) {
  if constexpr (merged_max<K>()) {
    return absmax<K, P, V, kHeld, U>(p, Stats{0.f, 0.f, 1.f, 0.f, false}, load, cols, c);
  }
  return 0.f;
}

// Normalize, quantize (times qmul) and store this thread's vectors of a row at y_off;
// kCentred as in for_each_output; kWhole: the stores by intrinsic (store_words).
template <class K, int P, int V, bool kHeld, bool kCentred = false, int U = P, bool kWhole = false, class Load,
          class Cols, class Early = EarlyColumns<K, 0, V>>
__device__ __forceinline__ void normalize_row(const Params& p, const Stats& st, const Load& load,
                                              const Cols& cols, const Columns<K, kHeld ? P : 1, V>& c,
                                              float qmul, i64 y_off, const Early& early = Early{}) {
  for_each_output<K, P, V, kHeld, kCentred, U>(p, st, load, cols, c, [&](int i, float (&out)[V]) {
    if constexpr (K::kQuant != Quant::NONE) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] *= qmul;
    }
    store_vec<typename K::Y, V, kWhole>(static_cast<typename K::Y*>(p.y) + y_off + cols(i), out);
  }, early);
}

// A row held on chip, after its statistics: the dynamic quant scale (a row reduction every
// thread takes part in, live row or not), then this thread's outputs and the row's stats.
// kKeep (K::kKeepOutputs): the outputs computed for the absolute maximum are put in `keep`
// (RegisterFloats or SharedFloats: where `load` reads the row from) for the stores, instead
// of computed again (the normalize chain is most of a 16-bit row's instructions).
// kCentred: `load` gives the row minus st.shift. U: the outputs' vectors at a time in both
// passes (see for_each_output).
template <class K, int P, int V, bool kHeld, bool kKeep, bool kCentred, int T, int R, int C, int U, class Load,
          class Cols, class Keep, class Early = EarlyColumns<K, 0, V>, int kPush = 0>
__device__ __forceinline__ void finish_row(const Params& p, const Stats& st, const Load& load, const Cols& cols,
                                           const Columns<K, kHeld ? P : 1, V>& c, ReduceScratch<T, R, 1, kPush>& sh_max,
                                           Keep&& keep, float qmul, i64 row, bool live, bool leader,
                                           const Early& early = Early{}) {
  if constexpr (merged_max<K>()) {
    qmul = dynamic_scale<K>(p, st.amax, row, live && leader);
  } else if constexpr (K::kQuant == Quant::DYNAMIC) {
    float m[1] = {0.f};
    for_each_output<K, P, V, kHeld, kCentred, U>(p, st, load, cols, c, [&](int i, const float (&out)[V]) {
      if constexpr (kKeep) keep.put(i, out);
#pragma unroll
      for (int j = 0; j < V; ++j) m[0] = max_nan(m[0], fabsf(out[j]));
    }, early);
    row_reduce<Max, T, R, C, 1>(m, sh_max);
    qmul = dynamic_scale<K>(p, m[0], row, live && leader);
  }
  if (live) {
    if (leader) save_stats<K>(p, row, st);  // first: the mean's terms need no register past here
    if constexpr (kKeep && K::kQuant == Quant::DYNAMIC) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (cols.inside(i)) {
          float out[V];
          keep.get(i, out);
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] *= qmul;
          store_vec<typename K::Y, V>(static_cast<typename K::Y*>(p.y) + row * p.n + cols(i), out);
        }
      }
    } else {
      normalize_row<K, P, V, kHeld, kCentred, U>(p, st, load, cols, c, qmul, row * p.n, early);
    }
  }
}

// A thread's P vectors of floats kept between passes over a row (the row centred, or its
// outputs): in registers, or in its block's shared memory (staged rows).
template <int P, int V> struct RegisterFloats {
  float v[P][V];
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = v[i][j];
  }
  __device__ __forceinline__ void put(int i, const float (&d)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[i][j] = d[j];
  }
  // v[i] = vector_of(i) - shift for the vectors inside the row. (A template, not a generic
  // lambda: the device's NVRTC takes a generic lambda in device code for a host function.)
  template <class Cols, class Of>
  __device__ __forceinline__ void centre(const Cols& cols, const Of& vector_of, float shift) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (cols.inside(i)) {
        vector_of(i, v[i]);
#pragma unroll
        for (int j = 0; j < V; ++j) v[i][j] -= shift;
      }
    }
  }
};
// In shared memory, in chunks of Q floats (16 bytes at most): chunk c of vector i of thread
// t of T at ((i * V / Q + c) * T + t) * Q, so that a warp's accesses are consecutive.
template <int T, int V> struct SharedFloats {
  static constexpr int Q = V < 4 ? V : 4;
  using Chunk = Pack<float, Q>;
  float* base;  // this thread's first chunk
  __device__ __forceinline__ Chunk* at(int i, int c) const {
    return reinterpret_cast<Chunk*>(base + (i * (V / Q) + c) * T * Q);
  }
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
#pragma unroll
    for (int c = 0; c < V / Q; ++c) {
      const Chunk q = *at(i, c);
#pragma unroll
      for (int j = 0; j < Q; ++j) d[c * Q + j] = q.v[j];
    }
  }
  __device__ __forceinline__ void put(int i, const float (&d)[V]) const {
#pragma unroll
    for (int c = 0; c < V / Q; ++c) {
      Chunk q;
#pragma unroll
      for (int j = 0; j < Q; ++j) q.v[j] = d[c * Q + j];
      *at(i, c) = q;
    }
  }
};

// A thread's share of one row: x, and with a fused add the residual, as loaded.
template <class K, int P, int V> struct RowIn {
  Packed<typename K::X, P, V> x, r;
};

// Vector i of a thread's share of a row: x (and the residual) at column col of rows xr
// (rr), or zeros for padding and rows past the end (!live), loaded with kCache.
template <class K, int P, int V, Cache kCache = Cache::NORMAL>
__device__ __forceinline__ void load_in(RowIn<K, P, V>& in, int i, const typename K::X* xr, const typename K::X* rr,
                                        i64 col, bool live) {
  if (live) {
    in.x.template load<kCache>(i, xr + col);
    if constexpr (K::kFusedAdd != 0) in.r.template load<kCache>(i, rr + col);
  } else {
    in.x.zero(i);
    if constexpr (K::kFusedAdd != 0) in.r.zero(i);
  }
}

// The fused prologue over a thread's share of a row (see fuse; padding stays zero), with
// the x-bias from c when kHeld, else loaded per vector; the sums go to res_out's columns.
template <class K, int P, int V, bool kHeld, class Cols>
__device__ __forceinline__ void fuse_row(RowIn<K, P, V>& in, const Params& p, const Columns<K, kHeld ? P : 1, V>& c,
                                         const Cols& cols, typename K::X* res_out) {
  if constexpr (K::kFusedAdd != 0 || K::kXBias) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (cols.inside(i)) {
        typename K::X* to = res_out ? res_out + cols(i) : nullptr;
        if constexpr (kHeld) {
          fuse<K, P, V, P>(in.x, in.r, i, c, i, to);
        } else {
          Columns<K, 1, V> ci;
          ci.load_bias(p, 0, cols(i));
          fuse<K, P, V, 1>(in.x, in.r, i, ci, 0, to);
        }
      }
    }
  }
}

// LayerNorm's shift for a row spread over a cluster (staged rows): the mean of h over the
// row's first kCols columns (all of them if fewer), which every thread reads itself with
// its first loads of the row (the same 16 bytes: a broadcast) -- so that the row's sums
// need no reduction before them, and are taken as the row is staged. In exact arithmetic
// any shift gives the same statistics; this one is almost always within a standard
// deviation of the mean, and share_stats sums the rare row where it is not again. (Rows of
// one block: warp_shift; streamed clusters: zero, see one_pass.)
template <class K, int V> struct Pilot {
  using X = typename K::X;
  static constexpr int kVecs = V * sizeof(X) >= 16 ? 1 : 16 / (V * static_cast<int>(sizeof(X)));
  static constexpr int kCols = kVecs * V;  // 16 bytes of x

  // The shift of the row at xr (residual rr) of n columns (whole vectors: V divides n).
  __device__ __forceinline__ static float shift(const Params& p, const X* xr, const X* rr, int n) {
    RowIn<K, kVecs, V> in;
    const auto cols = row_cols<false>([](int i) { return i * V; }, n);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) load_in<K, kVecs, V>(in, i, xr, rr, cols(i), cols.inside(i));
    fuse_row<K, kVecs, V, false>(in, p, Columns<K, 1, V>{}, cols, nullptr);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float h[V];
      in.x.get(i, h);  // padding: zeros
#pragma unroll
      for (int j = 0; j < V; ++j) s += h[j];
    }
    return n >= kCols ? s * (1.f / kCols) : s / static_cast<float>(n);
  }
};

// A streamed block's gamma and beta (ones and zeros where absent) copied to shared memory:
// each thread its own vectors, which only it reads.
template <class K, int P, int V, class Cols>
__device__ __forceinline__ void stream_columns(const Params& p, const Cols& cols) {
  using W = typename K::W;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (cols.inside(i)) {
      Columns<K, 1, V> c;
      if (p.gamma != nullptr) {
        c.g.load(0, static_cast<const W*>(p.gamma) + cols(i));
      } else {
        float one[V];
#pragma unroll
        for (int j = 0; j < V; ++j) one[j] = 1.f;
        c.g.set(0, one);
      }
      c.g.store(0, Stream<K>::gamma() + Stream<K>::local(cols(i)));
      if constexpr (K::kNorm == Norm::LAYERNORM) {
        if (p.beta != nullptr) {
          c.b.load(0, static_cast<const W*>(p.beta) + cols(i));
        } else {
          c.b.zero(0);
        }
        c.b.store(0, Stream<K>::beta() + Stream<K>::local(cols(i)));
      }
    }
  }
}

// ---- one-pass: the whole row in registers ----------------------------------------------
// A block serves R rows at a time with T threads per row, or, with a cluster of C blocks,
// one row with C*T threads. Row thread t holds the P vectors at columns (i*C*T + t)*V
// (streamed rows over a cluster: block r's thread t those at r*P*T*V + (i*T + t)*V, so that
// a block's share is one span of the row), in their input precision (half the registers of
// floats; converting is one instruction).
// Blocks (clusters) stride over the rows, so any number of rows works. Two things keep
// DRAM busy across a block's rows: the next row's loads are issued before this row's
// reductions, and the per-column vectors (the same for every row) are loaded once per
// block -- each when it fits the register budget. Streamed rows (K::kStreamed, see Stream)
// do neither: the next row comes into shared memory by the copy engine, and the columns are
// read from shared memory. kFull: as in one_pass_staged (streamed rows only).
template <class K, bool kFull>
__device__ __forceinline__ void one_pass(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, C = K::kCluster;
  constexpr int V = K::kVec, P = K::kRepeat;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kAdd = K::kFusedAdd != 0;
  // K::kLean (tiles.Tile.lean): built for few registers, which the row takes alone
  constexpr bool kStream = K::kStreamed;
  constexpr bool kHold = !kStream && !K::kLean && V > 1 && Columns<K, P, V>::kWords <= 32;
  constexpr bool kPrefetchRow = !kStream && !K::kLean && V > 1 && (kAdd ? 2 : 1) * Packed<X, P, V>::kWords <= 16;
  // LayerNorm shifts: per warp (warp_shift) in a block's rows, the row's first columns
  // (Pilot) over a staged cluster, zero over a streamed one (see below)
  constexpr bool kWarpShifted = kLN && C == 1 && T > 32;
  // streamed rows keep their outputs in the whole-row kernel only (the other's column
  // checks spilled), which then does not fold its shift
  constexpr bool kKeep = K::kKeepOutputs && (kFull || !kStream);
  constexpr bool kFold = K::kFoldShift && !kKeep;
  constexpr int S = scratch_sets<K>();
  constexpr int kPush = kStream && C > 1 ? C : 0;  // streamed rows over a cluster push their totals
  __shared__ ReduceScratch<T, R, 1, kPush> sh_max[S];
  __shared__ ReduceScratch<T, R, stat_values<K>() + kWarpShifted, kPush> sh_stats[S];
  __shared__ ReduceScratch<T, R, stat_values<K>(), kPush> sh_again[S];
  __shared__ float warp_counts[kWarpShifted ? T / 32 : 1];  // elements of each warp of a row
  const int lane = (C > 1 ? cluster_rank() * T : 0) + threadIdx.x % T;
  const int sub = threadIdx.x / T;  // this thread's row among the block's R
  const i64 group = C > 1 ? cluster_index() : blockIdx.x;
  const i64 stride = (C > 1 ? cluster_count() : gridDim.x) * static_cast<i64>(R);
  const int n = p.n;
  // streamed rows over a cluster: each block a contiguous share of the row (Stream::first)
  int first = 0;
  if constexpr (kStream && C > 1) first = Stream<K>::first();
  const auto cols = row_cols<kFull>([=](int i) {
    return kStream && C > 1 ? first + (i * T + lane % T) * V : (i * C * T + lane) * V;
  }, n);
  auto row_x = [&](i64 row) { return static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si); };
  auto row_r = [&](i64 row) {
    return static_cast<const X*>(p.residual) + (kAdd ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
  };
  auto load_row = [&](RowIn<K, P, V>& in, i64 base) {
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const X* xr = live ? row_x(row) : static_cast<const X*>(p.x);
    const X* rr = live ? row_r(row) : static_cast<const X*>(p.residual);
#pragma unroll
    for (int i = 0; i < P; ++i) load_in<K, P, V, K::kRowCache>(in, i, xr, rr, cols(i), live && cols.inside(i));
  };

  Columns<K, kHold ? P : 1, V> c;
  if constexpr (kHold) {
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (cols.inside(i)) c.load(p, i, cols(i));
  }
  if constexpr (kWarpShifted) {
    if (threadIdx.x < T && threadIdx.x % 32 == 0) {  // warp w of a row: lanes 32w..32w+31
      int count = 0;
#pragma unroll
      for (int i = 0; i < P; ++i) count += min(max(n / V - i * T - static_cast<int>(threadIdx.x), 0), 32);
      warp_counts[threadIdx.x / 32] = static_cast<float>(count * V);
    }
    __syncthreads();
  }
  const float qmul = static_qmul<K>(p);
  i64 base = group * R;
  RowIn<K, P, V> in;
  unsigned parity = 0;  // of the streamed row's fetch
  if constexpr (kStream) {
    stream_columns<K, P, V>(p, cols);
    if (threadIdx.x == 0) {
      for (int j = 0; j < S; ++j) {
        sh_max[j].init();
        sh_stats[j].init();
        sh_again[j].init();
      }
      Stream<K>::init();  // (its fence covers the scratches' mbarriers too)
    }
    __syncthreads();
    if constexpr (C > 1) cluster_sync();  // every block's mbarriers ready before any push
    if (const int q = Stream<K>::template piece<kKeep>(); q >= 0 && base < p.rows) Stream<K>::fetch(row_x(base), n, q);
  } else if (base < p.rows) {
    load_row(in, base);
  }
  for (int ph = 0; base < p.rows; base += stride, ph = (ph + 1) % S) {
    // Every thread runs the reductions, also for a row past the end (live == false).
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const bool more = base + stride < p.rows;
    if constexpr (kStream) {  // this row from the stage, then the next one into it
      Stream<K>::wait(parity);
      parity ^= 1;
#pragma unroll
      for (int i = 0; i < P; ++i)
        load_in<K, P, V>(in, i, Stream<K>::stage(), nullptr, Stream<K>::local(cols(i)), cols.inside(i));
      __syncthreads();
      if (const int q = Stream<K>::template piece<kKeep>(); q >= 0 && more) Stream<K>::fetch(row_x(base + stride), n, q);
    }
    RowIn<K, P, V> next;
    if constexpr (kHold && K::kPackColumns) c.keep_packed();
    if constexpr (kPrefetchRow) {
      if (more) load_row(next, base + stride);
    }
    fuse_row<K, P, V, kHold>(in, p, c, cols,
                             K::kFusedAdd == 1 && live ? static_cast<X*>(p.res_out) + row * n : nullptr);

    // Streamed clusters sum around a shift of zero, a constant: a row whose mean lies more
    // than a deviation from zero is summed again around its mean (share_stats; a two-pass
    // LayerNorm's work), from its registers. Measured on an H100 (tune_tiles.py "sx" groups,
    // twenty-fourth session, bf16 int8 65536, against the pilot's shift): 0.80-0.82 ->
    // 0.87-0.89; rows of 1000 + N(0, 1) 0.68 -> 0.55. At 32768 (one block, warp_shift) a
    // zero shift gained nothing.
    float k = 0.f, s1, s2;
    if constexpr (kLN && C == 1) {
      k = warp_shift<T, P>(in.x);
    } else if constexpr (kLN && !kStream) {
      if (live) k = Pilot<K, V>::shift(p, row_x(row), row_r(row), n);  // a row past the end: zeros, shift 0
    }
    // kKeep: the row as floats centred on the shift, from here on (what the sums take and
    // the outputs start from: two instructions per element fewer than converting and
    // centring it again for the outputs, in the registers the kept outputs need anyway)
    RegisterFloats<kKeep ? P : 1, V> kept;
    if constexpr (kKeep) kept.centre(cols, [&](int i, float (&d)[V]) { in.x.get(i, d); }, k);
    auto load = [&](int i, float (&d)[V]) {  // vector i of the row (kKeep: centred)
      if constexpr (kKeep) {
        kept.get(i, d);
      } else {
        in.x.get(i, d);
      }
    };
    centred_sums<P, V>(kKeep ? 0.f : k, load, cols, s1, s2);
    const float m = unscaled_absmax<K, P, V, kHold>(p, load, cols, c);
    auto reload = [&](int i, float (&d)[V]) {  // vector i of h from global memory, as fuse_row made it
      RowIn<K, 1, V> one;
      const auto one_cols = row_cols<false>([&](int) { return cols(i); }, n);
      load_in<K, 1, V>(one, 0, row_x(row), row_r(row), cols(i), live);
      fuse_row<K, 1, V, false>(one, p, Columns<K, 1, V>{}, one_cols, nullptr);
      one.x.get(0, d);
    };
    // Vector i of the row selected from its registers by a run-time index (streamed rows'
    // rolled passes: little code).
    auto held = [&](int i, float (&d)[V]) {
      constexpr int kW = Packed<X, 1, V>::kWords;
      Packed<X, 1, V> one;
#pragma unroll
      for (int k = 0; k < kW; ++k) one.w[k] = in.x.w[k];
#pragma unroll
      for (int j = 1; j < P; ++j) {
#pragma unroll
        for (int k = 0; k < kW; ++k) one.w[k] = i == j ? in.x.w[j * kW + k] : one.w[k];
      }
      one.get(0, d);
    };
    auto again = [&](int i, float (&d)[V]) {  // a far row's second sums (see share_stats)
      if constexpr (kStream) {
        held(i, d);
      } else {
        reload(i, d);
      }
    };
    Stats st = share_stats<K, P, V, T, R, C, kWarpShifted>(p, k, s1, s2, m, again, cols, sh_stats[ph],
                                                           sh_again[ph], warp_counts);
    if constexpr (kKeep) {
      if (st.far) {  // summed again around the mean (rare): the row centred on that, from memory
        kept.centre(cols, reload, st.shift);
        k = st.shift;
      }
      // else the row is centred on this warp's shift k, the statistics on the first warp's:
      // the mean relative to k is (shift - k) + c, whose rounding is within that of the
      // terms' (each warp's shift lies within its warp's deviation of its mean, and a warp's
      // mean within sqrt(warps) row deviations of the row's); in warp 0 (the leader, which
      // writes the mean) k is the shift and c stays as it is.
      st.c += st.shift - k;
      st.shift = k;
    }
    bool fold = false;  // as in one_pass_staged (kFold: streamed rows)
    Stats st_folded = st;
    if constexpr (kFold) st_folded = folded(st, fold);
    if (fold) {
      if constexpr (kFold)
        finish_row<K, P, V, kHold, kKeep, true, T, R, C, P>(p, st_folded, load, cols, c, sh_max[ph], kept, qmul, row,
                                                            live, lane == 0);
    } else if constexpr (kStream && !kKeep) {
      // A row that keeps its shift (its mean more than a deviation from zero: rare), in
      // rolled passes of two vectors a step, each vector selected from the row's registers
      // by its run-time index: little code. Beside the folded passes, these passes' code
      // alone, never run on the benchmark's rows, cost them 0.06-0.11 of copy built
      // unrolled, inline or out of line (LayerNorm + int8 bf16 32768: 0.856 inline, 0.815 as
      // a __noinline__ function, 0.919-0.926 without; H100); rolled, nothing measurable
      // (0.896-0.913 with, 0.899-0.918 without). Rows of 1000 + N(0, 1) run 0.75-0.76 so
      // (one vector a step 0.70; from a copy in local memory 0.53: L1, beside the shared
      // memory, does not hold the copies), the staged kernel 0.80.
      finish_row<K, P, V, false, false, false, T, R, C, (P % 2 ? 1 : 2)>(p, st, held, cols, c, sh_max[ph], kept,
                                                                         qmul, row, live, lane == 0);
    } else {
      finish_row<K, P, V, kHold, kKeep, kKeep, T, R, C, P>(p, st, load, cols, c, sh_max[ph], kept, qmul, row, live,
                                                          lane == 0);
    }
    if constexpr (kPrefetchRow) {
      in = next;
    } else if (!kStream && more) {
      load_row(in, base + stride);
    }
  }
  if constexpr (C > 1) cluster_sync();  // no block may exit while another reads its shared memory
}

// ---- one-pass, staged: each cluster block's share of the row in shared memory -------------
// For the longest rows: the C blocks of a cluster each hold P vectors per thread of the
// row in shared memory, read in batches of four loads (x's vectors, or x's and the
// residual's: 64 bytes in flight per thread at 16-byte vectors, within the 64 registers).
// Few registers, so several blocks share an SM and hide each other's barrier waits. Each
// thread reads back only the vectors it wrote: the staging needs no barriers of its own.
// Some rows are loaded past L1 (K::kRowCache, spec.row_cache), which shared memory
// shrinks, leaving it to the per-column vectors that every row reads.
// kKeep (LayerNorm's dynamic quant, K::kKeepOutputs): the row is staged as floats, and the
// outputs computed for its absolute maximum replace it there for the stores (spec.tile
// gives such blocks the float row's shared memory).
template <class K, bool kFull>
__device__ __forceinline__ void one_pass_staged(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, C = K::kCluster, V = K::kVec, P = K::kRepeat;
  constexpr bool kAdd = K::kFusedAdd != 0;
  constexpr bool kKeep = K::kKeepOutputs;
  constexpr int kPerBatch = kAdd ? 2 : 4;  // vectors: four loads with the residual's
  constexpr int kBatch = P < kPerBatch ? P : kPerBatch;
  static_assert(K::kRowsPerBlock == 1 && P % kBatch == 0, "staged tiles serve one row per block");
  constexpr int S = scratch_sets<K>();
  __shared__ ReduceScratch<T, 1, 1> sh_max[S];
  __shared__ ReduceScratch<T, 1, stat_values<K>()> sh_stats[S], sh_again[S];
  extern __shared__ uint4 stage_words[];
  X* stage = reinterpret_cast<X*>(stage_words);
  const int lane = (C > 1 ? cluster_rank() * T : 0) + threadIdx.x;
  const int n = p.n;
  const float qmul = static_qmul<K>(p);
  const auto cols = row_cols<kFull>([=](int i) { return (i * C * T + lane) * V; }, n);
  auto slot = [&](int i) { return stage + (i * T + threadIdx.x) * V; };  // conflict-free
  const SharedFloats<T, V> floats{reinterpret_cast<float*>(stage_words) + threadIdx.x * SharedFloats<T, V>::Q};

  int ph = 0;
  for (i64 row = C > 1 ? cluster_index() : blockIdx.x; row < p.rows;
       row += C > 1 ? cluster_count() : gridDim.x, ph = (ph + 1) % S) {
    const X* xr = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si);
    const X* rr = static_cast<const X*>(p.residual) + (kAdd ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
    X* res_out = K::kFusedAdd == 1 ? static_cast<X*>(p.res_out) + row * n : nullptr;
    // LayerNorm's sums are taken as the row is staged, RMSNorm's in a pass over the staged
    // row: while staging, RMSNorm + fp8 at 32768 / 65536 ran at 0.90 / 0.88 of copy instead
    // of 0.92 / 0.90 (H100), plain RMSNorm no faster, and the whole-row kernels with a fused
    // add spilled.
    constexpr bool kSumsWhileStaging = K::kNorm == Norm::LAYERNORM;
    float k = 0.f, s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i0 = 0; i0 < P; i0 += kBatch) {
      RowIn<K, kBatch, V> batch;
      const auto batch_cols = row_cols<kFull>([=](int b) { return cols(i0 + b); }, n);
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        load_in<K, kBatch, V, K::kRowCache>(batch, b, xr, rr, batch_cols(b), batch_cols.inside(b));
      if constexpr (K::kNorm == Norm::LAYERNORM) {
        if (i0 == 0) k = Pilot<K, V>::shift(p, xr, rr, n);  // read with the first batch
      }
      fuse_row<K, kBatch, V, false>(batch, p, Columns<K, 1, V>{}, batch_cols, res_out);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if constexpr (kKeep) {
          float h[V];
          batch.x.get(b, h);
          floats.put(i0 + b, h);
        } else {
          batch.x.store(b, slot(i0 + b));
        }
      }
      // this batch goes to shared memory before the next is loaded: left free, the
      // compiler holds every batch in registers to the end, and spills. Its sums come
      // after, free to overlap the next batch's loads.
      asm volatile("" ::: "memory");
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (kSumsWhileStaging && batch_cols.inside(b)) {
          float d[V];
          batch.x.get(b, d);
          add_centred<V>(d, k, s1, s2);
        }
      }
    }
    auto load = [&](int i, float (&d)[V]) {
      if constexpr (kKeep) {
        floats.get(i, d);
      } else {
        Packed<X, 1, V> v;
        v.load(0, slot(i));
        v.get(0, d);
      }
    };
    // Narrow vectors (more than 8 a thread): the passes below unrolled over all of them spilled.
    constexpr bool kNarrow = P > 8;
    constexpr int U = K::kOutputStep;  // the output passes' vectors at a time (spec.output_step)
    const float m = unscaled_absmax<K, P, V, false, U>(p, load, cols, Columns<K, 1, V>{});
    // rolled over narrow vectors: unrolled, RMSNorm with a fused add spilled 4-68 bytes there
    // (ptxas; fp32 and 16-bit, 32768-262144)
    if constexpr (!kSumsWhileStaging) centred_sums<P, V, kNarrow>(0.f, load, cols, s1, s2);
    // the first output step's columns, fetched while the reduction's barriers wait (spec.column_prefetch)
    prefetch_columns<K, K::kColumnPrefetch>(p, cols);
    // the first output step's first columns, in registers while the reduction's barriers wait (spec.column_registers)
    EarlyColumns<K, K::kColumnRegisters, V> early;
    early.load(p, cols);
    const Stats st = share_stats<K, P, V, T, 1, C>(p, k, s1, s2, m, load, cols, sh_stats[ph], sh_again[ph]);
    bool fold = false;  // the same in all of the row's threads: they hold the same statistics' bits
    Stats st_folded = st;
    if constexpr (K::kFoldShift) st_folded = folded(st, fold);
    if (fold) {  // the output passes take h as staged, the shift folded into the chain's constant
      if constexpr (K::kFoldShift)
        finish_row<K, P, V, false, kKeep, true, T, 1, C, U>(p, st_folded, load, cols, Columns<K, 1, V>{}, sh_max[ph],
                                                            floats, qmul, row, true, lane == 0, early);
    } else {
      // beside the folded passes, the rows that keep their shift (a mean more than a deviation
      // from zero: rare) take their output passes kFarStep vectors at a time: all at once
      // there too, ptxas spilled 40-44 bytes (NVRTC 13.5, LayerNorm + int8 at 32768 / 65536)
      constexpr int kFarStep = K::kFoldShift ? 4 : U;
      finish_row<K, P, V, false, kKeep, false, T, 1, C, kFarStep>(
          p, st, load, cols, Columns<K, 1, V>{}, sh_max[ph], floats, qmul, row, true, lane == 0, early);
    }
  }
  if constexpr (C > 1) cluster_sync();  // no block may exit while another reads its shared memory
}

// ---- two-pass: statistics over the streamed row, then re-read and normalize -----------
// One row per block, in chunks of T*V*P elements. The shift is the mean of the first
// chunk (the whole row when it fits in one), which keeps the shifted sums well-conditioned;
// a LayerNorm row whose first chunk's mean lies more than a deviation from the row's (c^2 >
// var, as share_stats tests) is summed again around shift + c, in another pass. Each later
// pass walks the chunks in the opposite direction of the one before, so the most recently
// read ones hit L2 (the far rows' extra pass walks back, as the next one does). A fused
// prologue is recomputed on every pass (the sum is stored in the first); LayerNorm's
// dynamic quant adds a pass for the row's absolute maximum.
template <class K>
__device__ __forceinline__ void two_pass(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, V = K::kVec, P = K::kRepeat;
  constexpr int kChunk = T * V * P;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kAdd = K::kFusedAdd != 0;
  static_assert(K::kRowsPerBlock == 1 && K::kCluster == 1, "two-pass serves one row per block");
  constexpr int S = scratch_sets<K>();
  __shared__ ReduceScratch<T, 1, 1> sh_shift[S], sh_max[S];
  __shared__ ReduceScratch<T, 1, stat_values<K>()> sh_stats[S];
  const int n = p.n;
  const i64 last_chunk = (static_cast<i64>(n) - 1) / kChunk * kChunk;
  const float static_mul = static_qmul<K>(p);
  const Columns<K, 1, V> none{};

  int ph = 0;
  for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x, ph = (ph + 1) % S) {
    const X* xr = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si);
    const X* rr = static_cast<const X*>(p.residual) + (kAdd ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
    X* res_out = K::kFusedAdd == 1 ? static_cast<X*>(p.res_out) + row * n : nullptr;
    RowIn<K, P, V> in;
    i64 c0 = 0;  // the chunk in `in`
    const auto cols = row_cols<false>([&](int i) { return c0 + (i * T + threadIdx.x) * V; }, n);
    auto load = [&](int i, float (&d)[V]) { in.x.get(i, d); };
    auto load_chunk = [&](bool store_sum) {
#pragma unroll
      for (int i = 0; i < P; ++i) load_in<K, P, V>(in, i, xr, rr, cols(i), cols.inside(i));
      fuse_row<K, P, V, false>(in, p, none, cols, store_sum ? res_out : nullptr);
    };

    load_chunk(true);
    float shift = 0.f;
    if constexpr (kLN) {
      float sx = 0.f;  // padding is zero
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) sx += in.x.get(i, j);
      shift = row_mean<T, 1, 1>(sx, sh_shift[ph], n < kChunk ? n : kChunk);
    }
    Compensated sum1, sum2;
    float m = 0.f;
    for (;;) {
      float c1, c2;  // this chunk's part
      centred_sums<P, V>(shift, load, cols, c1, c2);
      sum1.add(c1);
      sum2.add(c2);
      m = max_nan(m, unscaled_absmax<K, P, V, false>(p, load, cols, none));
      c0 += kChunk;
      if (c0 >= n) break;
      load_chunk(true);
    }
    Stats st = row_stats<K, T, 1, 1>(shift, sum1.value(), sum2.value(), m, sh_stats[ph], n, p.eps);
    if constexpr (kLN) {
      if (st.far) {  // the same in every thread (reduced bits); backwards: the last chunks hit L2
        const float k2 = __fadd_rn(st.shift, st.c);  // one float with the sums (see share_stats)
        Compensated again1, again2;
        for (c0 = last_chunk; c0 >= 0; c0 -= kChunk) {
          load_chunk(false);
          float c1, c2;
          centred_sums<P, V>(k2, load, cols, c1, c2);
          again1.add(c1);
          again2.add(c2);
        }
        __syncthreads();  // every thread has read the first statistics from the scratch
        st = row_stats<K, T, 1, 1>(k2, again1.value(), again2.value(), m, sh_stats[ph], n, p.eps);
      }
    }

    if constexpr (K::kQuant == Quant::DYNAMIC) {
      float amax[1] = {st.amax};
      if constexpr (!merged_max<K>()) {  // a pass for the absolute maximum
        for (c0 = last_chunk; c0 >= 0; c0 -= kChunk) {
          load_chunk(false);
          amax[0] = max_nan(amax[0], absmax<K, P, V, false>(p, st, load, cols, none));
        }
        row_reduce<Max, T, 1, 1, 1>(amax, sh_max[ph]);
      }
      const float qmul = dynamic_scale<K>(p, amax[0], row, threadIdx.x == 0);
      for (c0 = 0; c0 < n; c0 += kChunk) {
        load_chunk(false);
        normalize_row<K, P, V, false, false, P, true>(p, st, load, cols, none, qmul, row * n);
      }
    } else {
      for (c0 = last_chunk; c0 >= 0; c0 -= kChunk) {
        load_chunk(false);
        normalize_row<K, P, V, false, false, P, true>(p, st, load, cols, none, static_mul, row * n);
      }
    }
    if (threadIdx.x == 0) save_stats<K>(p, row, st);
  }
}

// kFull: the kernel serves rows of exactly the bucket's length (the tile's whole row) --
// built as a kernel of its own, so that neither variant's registers constrain the other's.
template <class K, bool kFull>
__device__ __forceinline__ void norm_fwd(const Params& p) {
  static_assert(!K::kPackColumns || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged),
                "only register-held one-pass rows hold columns, packed or not");
  static_assert(!K::kKeepOutputs || (K::kPipeline == Pipeline::ONE_PASS && K::kQuant == Quant::DYNAMIC &&
                                     !merged_max<K>()),
                "outputs are kept only by one-pass rows, between a dynamic quant's maximum and the stores");
  static_assert(!kFull || (K::kPipeline == Pipeline::ONE_PASS && (K::kStaged || K::kStreamed)),
                "only staged and streamed rows have whole-row kernels");
  static_assert(K::kRepeat % K::kOutputStep == 0, "output passes take a thread's vectors in whole steps");
  static_assert(K::kColumnPrefetch <= K::kRepeat && (K::kColumnPrefetch == 0 || K::kStaged),
                "staged rows prefetch some of their vectors' columns");
  static_assert(K::kColumnRegisters <= K::kOutputStep && (K::kColumnRegisters == 0 || K::kStaged),
                "staged rows load some of their first output step's columns early");
  static_assert(!K::kFoldShift || (K::kPipeline == Pipeline::ONE_PASS && (K::kStaged || K::kStreamed) &&
                                   K::kNorm == Norm::LAYERNORM && (K::kStreamed || !K::kKeepOutputs)),
                "staged or streamed LayerNorm rows fold their shift into the output passes' chain");
  static_assert(!K::kLean || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged),
                "only register-held one-pass rows are built lean");
  static_assert(!K::kStreamed || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged && !K::kLean &&
                                  K::kRowsPerBlock == 1 && K::kFusedAdd == 0 && !K::kXBias &&
                                  !K::kSmooth && sizeof(typename K::W) == sizeof(typename K::X) &&
                                  K::kVec * sizeof(typename K::X) == 16),
                "streamed rows: one row a block, of whole 16-byte vectors, gamma and beta of x's precision");
  static_assert(K::kRowCache == Cache::NORMAL || K::kPipeline == Pipeline::ONE_PASS,
                "only one-pass rows choose where their loads of x leave their lines");
  if constexpr (K::kPipeline == Pipeline::ONE_PASS && (K::kStaged || kFull)) {
    Params q = p;  // in a whole-row kernel n is a compile-time constant everywhere (counts, offsets)
    if constexpr (kFull) q.n = K::kThreadsPerRow * K::kCluster * K::kRepeat * K::kVec;
    if constexpr (K::kStaged) {
      one_pass_staged<K, kFull>(q);
    } else {
      one_pass<K, kFull>(q);
    }
  } else if constexpr (K::kPipeline == Pipeline::ONE_PASS) {
    one_pass<K, false>(p);
  } else {
    two_pass<K>(p);
  }
}

}  // namespace normgen
