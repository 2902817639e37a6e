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

// ---- vector access: V elements, in accesses of at most 16 bytes ----------------------
template <typename T, int V> struct alignas(sizeof(T) * V) Pack { T v[V]; };
template <typename T, int V> __host__ __device__ constexpr int access_elems() {
  return V * sizeof(T) > 16 ? 16 / sizeof(T) : V;
}

template <typename T, int V>
__device__ __forceinline__ void load_vec(float (&out)[V], const T* p) {
  constexpr int A = access_elems<T, V>();
#pragma unroll
  for (int c = 0; c < V; c += A) {
    const Pack<T, A> r = *reinterpret_cast<const Pack<T, A>*>(p + c);
#pragma unroll
    for (int i = 0; i < A; ++i) out[c + i] = to_float(r.v[i]);
  }
}

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
  static constexpr int kVecBytes = V * sizeof(T);
  static constexpr int kWords = (P * kVecBytes + 3) / 4;
  uint32_t w[kWords];

  // Element j of vector i (compile-time indices once unrolled).
  __device__ __forceinline__ float get(int i, int j) const {
    const int e = i * V + j;
    return sizeof(T) == 4 ? bits_to_float<T>(w[e], 0) : bits_to_float<T>(w[e / 2], e % 2);
  }
  // Vector i from p; vectors are loaded in ascending i (a 2-byte vector shares its word).
  __device__ __forceinline__ void load(int i, const T* p) {
    if constexpr (kVecBytes >= 16) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 16; ++c) {
        const uint4 q = reinterpret_cast<const uint4*>(p)[c];
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

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  constexpr int A = access_elems<T, V>();
#pragma unroll
  for (int c = 0; c < V; c += A) {
    Pack<T, A> r;
#pragma unroll
    for (int i = 0; i < A; ++i) r.v[i] = from_float<T>(in[c + i]);
    *reinterpret_cast<Pack<T, A>*>(p + c) = r;
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
// All threads of all blocks of the cluster; orders shared-memory writes before it with
// reads (also remote ones) after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// A float in the shared memory of block `rank` of this cluster, at the address `p` has here.
__device__ __forceinline__ float load_cluster(const float* p, unsigned rank) {
  unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// ---- row reduction ------------------------------------------------------------------
// Shared memory one reduction needs: per-warp partials, and for clusters this block's total
// (read by the other blocks) and the cluster total (read by this block's threads).
template <int T, int R, int K> struct ReduceScratch {
  float warps[T > 32 ? R * (T / 32) * K : 1];
  float block[K];
  float cluster[K];
};

// Sums K values over the T threads that share a row in each of the C blocks of a cluster
// (T a power of two; rows are T-aligned groups of the block). The xor butterfly adds the
// same two values in both partners, so every thread ends with the same bits; warp, block
// and cluster partials are combined in a fixed order: results do not depend on which
// block or which batch the row is in.
template <int T, int R, int C, int K>
__device__ __forceinline__ void row_sum(float (&v)[K], ReduceScratch<T, R, K>& sh) {
#pragma unroll
  for (int off = (T < 32 ? T : 32) / 2; off > 0; off /= 2) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], off);
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
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < W; ++w) s += row[w * K + k];
      v[k] = s;
    }
  }
  if constexpr (C > 1) {
    static_assert(R == 1 && C <= 32 && (C & (C - 1)) == 0, "a cluster serves one row");
    // A block rewrites sh.block only after the cluster barrier of the next reduction, which
    // every other block passes only after reading it: two reductions per row keep it safe.
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
        for (int k = 0; k < K; ++k) t[k] += __shfl_xor_sync(0xffffffffu, t[k], off);
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
// give mean = k + s1/n and var = s2/n - (s1/n)^2 without cancellation (s1/n is tiny), and
// x - k is exact for x near k (Sterbenz), so a large common offset costs no precision.
// RMSNorm uses k = 0 and only s2. Padding lanes never enter either sum.
struct Stats {
  float shift, c, rstd;  // mean = shift + c; normalized value = ((x - shift) - c) * rstd
};

// Sums of d and d*d over V values, pairwise: a thread's error grows with log V + (number of
// vectors), not with the number of elements it holds.
template <int V>
__device__ __forceinline__ void pair_sums(const float (&d)[V], float& s1, float& s2) {
  float a[V], b[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    a[j] = d[j];
    b[j] = d[j] * d[j];
  }
#pragma unroll
  for (int w = V / 2; w > 0; w /= 2)
#pragma unroll
    for (int j = 0; j < w; ++j) {
      a[j] += a[j + w];
      b[j] += b[j + w];
    }
  s1 = a[0];
  s2 = b[0];
}

// A running float sum with Kahan-Babuska compensation, for sums over many chunks: with
// quantized inputs, plain float rounding errors do not cancel and grow with the length.
struct Compensated {
  float sum = 0.f, err = 0.f;
  __device__ __forceinline__ void add(float v) {
    const float t = sum + v;
    err += fabsf(sum) >= fabsf(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  __device__ __forceinline__ float value() const { return sum + err; }
};

template <Norm kNorm>
__device__ __forceinline__ Stats finish_stats(float shift, float s1, float s2, int n, float eps) {
  const float inv_n = 1.f / static_cast<float>(n);
  const float c = kNorm == Norm::LAYERNORM ? s1 * inv_n : 0.f;
  const float var = fmaxf(s2 * inv_n - c * c, 0.f);
  return Stats{shift, c, 1.f / sqrtf(var + eps)};
}

// ---- epilogue -----------------------------------------------------------------------
// gamma/beta for P vectors, packed like the row.
template <class K, int P, int V> struct Weights {
  Packed<typename K::W, P, V> g, b;

  __device__ __forceinline__ void load(const Params& p, int i, i64 col) {
    using W = typename K::W;
    g.load(i, static_cast<const W*>(p.gamma) + col);
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      if (p.beta != nullptr) {
        b.load(i, static_cast<const W*>(p.beta) + col);
      } else {
        b.zero(i);
      }
    }
  }
};

// Normalize vector i of V values d (already shifted by stats.shift) and store it at col.
template <class K, int P, int V>
__device__ __forceinline__ void normalize_store(const Params& p, const Stats& st, const float (&d)[V],
                                                const Weights<K, P, V>& w, int i, i64 y_off, i64 col) {
  float out[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const float g = w.g.get(i, j);
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      out[j] = fmaf((d[j] - st.c) * st.rstd, g, w.b.get(i, j));
    } else {
      out[j] = d[j] * st.rstd * (g + p.weight_offset);
    }
  }
  store_vec<typename K::Y, V>(static_cast<typename K::Y*>(p.y) + y_off + col, out);
}

// Load one vector's weights and normalize it (weights not kept in registers).
template <class K, int V>
__device__ __forceinline__ void normalize_store(const Params& p, const Stats& st, const float (&d)[V],
                                                i64 y_off, i64 col) {
  Weights<K, 1, V> w;
  w.load(p, 0, col);
  normalize_store<K, 1, V>(p, st, d, w, 0, y_off, col);
}

template <class K>
__device__ __forceinline__ void save_stats(const Params& p, i64 row, const Stats& st) {
  if constexpr (K::kSaveStats) {
    if constexpr (K::kNorm == Norm::LAYERNORM) static_cast<float*>(p.mean)[row] = st.shift + st.c;
    static_cast<float*>(p.rstd)[row] = st.rstd;
  }
}

// ---- the steps every pipeline shares ----------------------------------------------------
// `load(i, d)` gives vector i of a thread's P vectors as floats; `col_of(i)` is its column.
// The mean of the row's values summed in `s` (a per-thread partial): the shift.
template <int T, int R, int C>
__device__ __forceinline__ float row_mean(float s, ReduceScratch<T, R, 1>& sh, int count) {
  float v[1] = {s};
  row_sum<T, R, C, 1>(v, sh);
  return v[0] / static_cast<float>(count);
}

// This thread's sums of (x - shift) and (x - shift)^2; padding vectors stay out.
template <int P, int V, class Load, class ColOf>
__device__ __forceinline__ void centred_sums(float shift, int n, const Load& load, const ColOf& col_of,
                                             float& s1, float& s2) {
  s1 = s2 = 0.f;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (col_of(i) < n) {
      float d[V], a, b;
      load(i, d);
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] -= shift;
      pair_sums<V>(d, a, b);
      s1 += a;
      s2 += b;
    }
  }
}

// Normalize and store this thread's vectors of a row; gamma/beta from `w` when kHeld (the
// same for every row), else loaded per vector.
template <class K, int P, int V, bool kHeld, class Load, class ColOf>
__device__ __forceinline__ void normalize_row(const Params& p, const Stats& st, const Load& load,
                                              const ColOf& col_of, const Weights<K, kHeld ? P : 1, V>& w,
                                              i64 y_off) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (col_of(i) < p.n) {
      float d[V];
      load(i, d);
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] -= st.shift;
      if constexpr (kHeld) {
        normalize_store<K, P, V>(p, st, d, w, i, y_off, col_of(i));
      } else {
        normalize_store<K, V>(p, st, d, y_off, col_of(i));
      }
    }
  }
}

// ---- one-pass: the whole row in registers ----------------------------------------------
// A block serves R rows at a time with T threads per row, or, with a cluster of C blocks,
// one row with C*T threads. Row thread t holds the P vectors at columns (i*C*T + t)*V, in
// their input precision (half the registers of floats; converting is one instruction).
// Blocks (clusters) stride over the rows, so any number of rows works. Two things keep
// DRAM busy across a block's rows: the next row's loads are issued before this row's
// reductions, and gamma/beta (the same for every row) are loaded once per block -- each
// when it fits the register budget.
template <class K>
__device__ __forceinline__ void one_pass(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, C = K::kCluster;
  constexpr int V = K::kVec, P = K::kRepeat;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kHoldWeights = V > 1 && 2 * Packed<typename K::W, P, V>::kWords <= 32;
  constexpr bool kPrefetchRow = V > 1 && Packed<X, P, V>::kWords <= 16;
  __shared__ ReduceScratch<T, R, 1> sh_shift;
  __shared__ ReduceScratch<T, R, 2> sh_stats;
  const int lane = (C > 1 ? cluster_rank() * T : 0) + threadIdx.x % T;
  const int sub = threadIdx.x / T;  // this thread's row among the block's R
  const i64 group = C > 1 ? cluster_index() : blockIdx.x;
  const i64 stride = (C > 1 ? cluster_count() : gridDim.x) * static_cast<i64>(R);
  const int n = p.n;
  auto col_of = [&](int i) { return (i * C * T + lane) * V; };
  auto load_row = [&](Packed<X, P, V>& raw, i64 base) {
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const X* xr = static_cast<const X*>(p.x) + (live ? row_offset(row, p.inner, p.x_so, p.x_si) : 0);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (live && col_of(i) < n) {
        raw.load(i, xr + col_of(i));
      } else {
        raw.zero(i);  // padding, or a row past the end
      }
    }
  };

  Weights<K, kHoldWeights ? P : 1, V> w;
  if constexpr (kHoldWeights) {
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (col_of(i) < n) w.load(p, i, col_of(i));
  }
  i64 base = group * R;
  Packed<X, P, V> raw;
  if (base < p.rows) load_row(raw, base);
  for (; base < p.rows; base += stride) {
    // Every thread runs the reductions, also for a row past the end (live == false).
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const bool more = base + stride < p.rows;
    Packed<X, P, V> next;
    if constexpr (kPrefetchRow) {
      if (more) load_row(next, base + stride);
    }

    auto load = [&](int i, float (&d)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] = raw.get(i, j);
    };
    float shift = 0.f;
    if constexpr (kLN) {
      float sx = 0.f;  // padding is zero
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) sx += raw.get(i, j);
      shift = row_mean<T, R, C>(sx, sh_shift, n);
    }
    float s[2];
    centred_sums<P, V>(shift, n, load, col_of, s[0], s[1]);
    row_sum<T, R, C, 2>(s, sh_stats);
    const Stats st = finish_stats<K::kNorm>(shift, s[0], s[1], n, p.eps);
    if (live) {
      normalize_row<K, P, V, kHoldWeights>(p, st, load, col_of, w, row * n);
      if (lane == 0) save_stats<K>(p, row, st);
    }
    if constexpr (kPrefetchRow) {
      raw = next;
    } else if (more) {
      load_row(raw, base + stride);
    }
  }
  if constexpr (C > 1) cluster_sync();  // no block may exit while another reads its shared memory
}

// ---- one-pass, staged: each cluster block's share of the row in shared memory -------------
// For the longest rows: the C blocks of a cluster each hold P vectors per thread of the
// row in shared memory, read in batches of kBatch vectors (64+ bytes in flight per thread).
// Few registers, so several blocks share an SM and hide each other's barrier waits. Each
// thread reads back only the vectors it wrote: the staging needs no barriers of its own.
template <class K>
__device__ __forceinline__ void one_pass_staged(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, C = K::kCluster, V = K::kVec, P = K::kRepeat;
  constexpr int kBatch = P < 4 ? P : 4;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  static_assert(K::kRowsPerBlock == 1 && P % kBatch == 0, "staged tiles serve one row per block");
  __shared__ ReduceScratch<T, 1, 1> sh_shift;
  __shared__ ReduceScratch<T, 1, 2> sh_stats;
  extern __shared__ uint4 stage_words[];
  X* stage = reinterpret_cast<X*>(stage_words);
  const int lane = (C > 1 ? cluster_rank() * T : 0) + threadIdx.x;
  const int n = p.n;
  auto col_of = [&](int i) { return (i * C * T + lane) * V; };
  auto slot = [&](int i) { return stage + (i * T + threadIdx.x) * V; };  // conflict-free

  for (i64 row = C > 1 ? cluster_index() : blockIdx.x; row < p.rows;
       row += C > 1 ? cluster_count() : gridDim.x) {
    const X* xr = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si);
    float sx = 0.f;  // padding is zero
#pragma unroll
    for (int i0 = 0; i0 < P; i0 += kBatch) {
      Packed<X, kBatch, V> batch;
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (col_of(i0 + b) < n) {
          batch.load(b, xr + col_of(i0 + b));
        } else {
          batch.zero(b);  // padding
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
#pragma unroll
        for (int j = 0; j < V; ++j) sx += batch.get(b, j);
        batch.store(b, slot(i0 + b));
      }
    }
    auto load = [&](int i, float (&d)[V]) {
      Packed<X, 1, V> v;
      v.load(0, slot(i));
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] = v.get(0, j);
    };
    const float shift = kLN ? row_mean<T, 1, C>(sx, sh_shift, n) : 0.f;
    float s[2];
    centred_sums<P, V>(shift, n, load, col_of, s[0], s[1]);
    row_sum<T, 1, C, 2>(s, sh_stats);
    const Stats st = finish_stats<K::kNorm>(shift, s[0], s[1], n, p.eps);
    normalize_row<K, P, V, false>(p, st, load, col_of, Weights<K, 1, V>{}, row * n);
    if (lane == 0) save_stats<K>(p, row, st);
  }
  if constexpr (C > 1) cluster_sync();  // no block may exit while another reads its shared memory
}

// ---- two-pass: statistics over the streamed row, then re-read and normalize -----------
// One row per block, in chunks of T*V*P elements. The shift is the mean of the first
// chunk (the whole row when it fits in one), which keeps the shifted sums well-conditioned.
// The normalize pass walks the chunks backwards so the most recently read ones hit L2.
template <class K>
__device__ __forceinline__ void two_pass(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, V = K::kVec, P = K::kRepeat;
  constexpr int kChunk = T * V * P;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  static_assert(K::kRowsPerBlock == 1 && K::kCluster == 1, "two-pass serves one row per block");
  __shared__ ReduceScratch<T, 1, 1> sh_shift;
  __shared__ ReduceScratch<T, 1, 2> sh_stats;
  const int n = p.n;
  const i64 last_chunk = (static_cast<i64>(n) - 1) / kChunk * kChunk;

  for (i64 row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const X* xr = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si);
    float v[P][V];
    auto load_chunk = [&](i64 c0) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const i64 col = c0 + (i * T + threadIdx.x) * V;
        if (col < n) {
          load_vec<X, V>(v[i], xr + col);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) v[i][j] = 0.f;
        }
      }
    };

    i64 c0 = 0;  // the chunk in v
    auto col_of = [&](int i) { return c0 + (i * T + threadIdx.x) * V; };
    auto load = [&](int i, float (&d)[V]) {
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] = v[i][j];
    };

    load_chunk(0);
    float shift = 0.f;
    if constexpr (kLN) {
      float sx = 0.f;  // padding is zero
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) sx += v[i][j];
      shift = row_mean<T, 1, 1>(sx, sh_shift, n < kChunk ? n : kChunk);
    }
    Compensated sum1, sum2;
    for (;;) {
      float c1, c2;  // this chunk's part
      centred_sums<P, V>(shift, n, load, col_of, c1, c2);
      sum1.add(c1);
      sum2.add(c2);
      c0 += kChunk;
      if (c0 >= n) break;
      load_chunk(c0);
    }
    float s[2] = {sum1.value(), sum2.value()};
    row_sum<T, 1, 1, 2>(s, sh_stats);
    const Stats st = finish_stats<K::kNorm>(shift, s[0], s[1], n, p.eps);

    for (c0 = last_chunk; c0 >= 0; c0 -= kChunk) {
      load_chunk(c0);
      normalize_row<K, P, V, false>(p, st, load, col_of, Weights<K, 1, V>{}, row * n);
    }
    if (threadIdx.x == 0) save_stats<K>(p, row, st);
  }
}

template <class K>
__device__ __forceinline__ void norm_fwd(const Params& p) {
  if constexpr (K::kPipeline == Pipeline::ONE_PASS && K::kStaged) {
    one_pass_staged<K>(p);
  } else if constexpr (K::kPipeline == Pipeline::ONE_PASS) {
    one_pass<K>(p);
  } else {
    two_pass<K>(p);
  }
}

}  // namespace normgen
