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
  return (row / inner) * so + (row % inner) * si;
}

// ---- row reduction ------------------------------------------------------------------
// Sums K values over the T threads that share a row (T a power of two; rows are T-aligned
// groups of the block). The xor butterfly adds the same two values in both partners, so
// every thread ends with the same bits, and the order is fixed: results do not depend on
// which block or which batch the row is in. Rows wider than a warp combine their warps'
// sums through `scratch` (R * T/32 * K floats) in warp order.
template <int T, int R, int K>
__device__ __forceinline__ void row_sum(float (&v)[K], float* scratch) {
#pragma unroll
  for (int off = (T < 32 ? T : 32) / 2; off > 0; off /= 2) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], off);
  }
  if constexpr (T > 32) {
    constexpr int W = T / 32;
    const int warp = threadIdx.x / 32;
    float* row = scratch + (warp / W) * W * K;
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
}

template <int T, int R, int K> __host__ __device__ constexpr int scratch_floats() { return T > 32 ? R * (T / 32) * K : 1; }

// ---- statistics ----------------------------------------------------------------------
// Shifted sums: with a shift k near the row mean, s1 = sum(x - k) and s2 = sum((x - k)^2)
// give mean = k + s1/n and var = s2/n - (s1/n)^2 without cancellation (s1/n is tiny), and
// x - k is exact for x near k (Sterbenz), so a large common offset costs no precision.
// RMSNorm uses k = 0 and only s2. Padding lanes never enter either sum.
struct Stats {
  float shift, c, rstd;  // mean = shift + c; normalized value = ((x - shift) - c) * rstd
};

template <Norm kNorm>
__device__ __forceinline__ Stats finish_stats(float shift, float s1, float s2, int n, float eps) {
  const float inv_n = 1.f / static_cast<float>(n);
  const float c = kNorm == Norm::LAYERNORM ? s1 * inv_n : 0.f;
  const float var = fmaxf(s2 * inv_n - c * c, 0.f);
  return Stats{shift, c, 1.f / sqrtf(var + eps)};
}

// ---- epilogue: normalize one vector of V values already shifted by stats.shift --------
template <class K, int V>
__device__ __forceinline__ void normalize_store(const Params& p, const Stats& st, const float (&d)[V],
                                                i64 y_off, i64 col) {
  using W = typename K::W;
  float g[V], out[V];
  load_vec<W, V>(g, static_cast<const W*>(p.gamma) + col);
  if constexpr (K::kNorm == Norm::LAYERNORM) {
    float b[V];
    if (p.beta != nullptr) {
      load_vec<W, V>(b, static_cast<const W*>(p.beta) + col);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) b[j] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = fmaf((d[j] - st.c) * st.rstd, g[j], b[j]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = d[j] * st.rstd * (g[j] + p.weight_offset);
  }
  store_vec<typename K::Y, V>(static_cast<typename K::Y*>(p.y) + y_off + col, out);
}

template <class K>
__device__ __forceinline__ void save_stats(const Params& p, i64 row, const Stats& st) {
  if constexpr (K::kSaveStats) {
    if constexpr (K::kNorm == Norm::LAYERNORM) static_cast<float*>(p.mean)[row] = st.shift + st.c;
    static_cast<float*>(p.rstd)[row] = st.rstd;
  }
}

// ---- one-pass: the whole row in registers ----------------------------------------------
// Each block serves R rows at a time, T threads per row; thread t holds the P vectors at
// columns (i*T + t)*V. Blocks stride over the rows, so any number of rows works.
template <class K>
__device__ __forceinline__ void one_pass(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, V = K::kVec, P = K::kRepeat;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  __shared__ float scratch[2][scratch_floats<T, R, 2>()];
  const int lane = threadIdx.x % T;
  const int n = p.n;
  const X* x = static_cast<const X*>(p.x);

  for (i64 base = static_cast<i64>(blockIdx.x) * R; base < p.rows; base += static_cast<i64>(gridDim.x) * R) {
    // Every thread runs the reductions, also for a row past the end (live == false).
    const i64 row = base + threadIdx.x / T;
    const bool live = row < p.rows;
    const X* xr = x + (live ? row_offset(row, p.inner, p.x_so, p.x_si) : 0);

    float v[P][V];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int col = (i * T + lane) * V;
      if (live && col < n) {
        load_vec<X, V>(v[i], xr + col);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v[i][j] = 0.f;
      }
    }

    float shift = 0.f;
    if constexpr (kLN) {
      float s[1] = {0.f};
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) s[0] += v[i][j];
      row_sum<T, R, 1>(s, scratch[0]);
      shift = s[0] / static_cast<float>(n);
    }
    float s[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if ((i * T + lane) * V < n) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          v[i][j] -= shift;
          s[0] += v[i][j];
          s[1] = fmaf(v[i][j], v[i][j], s[1]);
        }
      }
    }
    row_sum<T, R, 2>(s, scratch[1]);
    const Stats st = finish_stats<K::kNorm>(shift, s[0], s[1], n, p.eps);

    if (live) {
      const i64 y_off = row * n;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const int col = (i * T + lane) * V;
        if (col < n) normalize_store<K, V>(p, st, v[i], y_off, col);
      }
      if (lane == 0) save_stats<K>(p, row, st);
    }
  }
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
  static_assert(K::kRowsPerBlock == 1, "two-pass serves one row per block");
  __shared__ float scratch[2][scratch_floats<T, 1, 2>()];
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

    load_chunk(0);
    float shift = 0.f;
    if constexpr (kLN) {
      float s[1] = {0.f};
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) s[0] += v[i][j];
      row_sum<T, 1, 1>(s, scratch[0]);
      shift = s[0] / static_cast<float>(n < kChunk ? n : kChunk);
    }
    float s[2] = {0.f, 0.f};
    for (i64 c0 = 0;;) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (c0 + (i * T + threadIdx.x) * V < n) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float d = v[i][j] - shift;
            s[0] += d;
            s[1] = fmaf(d, d, s[1]);
          }
        }
      }
      c0 += kChunk;
      if (c0 >= n) break;
      load_chunk(c0);
    }
    row_sum<T, 1, 2>(s, scratch[1]);
    const Stats st = finish_stats<K::kNorm>(shift, s[0], s[1], n, p.eps);

    const i64 y_off = row * n;
    for (i64 c0 = last_chunk; c0 >= 0; c0 -= kChunk) {
      load_chunk(c0);
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const i64 col = c0 + (i * T + threadIdx.x) * V;
        if (col < n) {
#pragma unroll
          for (int j = 0; j < V; ++j) v[i][j] -= shift;
          normalize_store<K, V>(p, st, v[i], y_off, col);
        }
      }
    }
    if (threadIdx.x == 0) save_stats<K>(p, row, st);
  }
}

template <class K>
__device__ __forceinline__ void norm_fwd(const Params& p) {
  if constexpr (K::kPipeline == Pipeline::ONE_PASS) {
    one_pass<K>(p);
  } else {
    two_pass<K>(p);
  }
}

}  // namespace normgen
