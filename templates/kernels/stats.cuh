// A row's statistics: shifted sums, their reduction, and the second pass of a row whose
// shift lies far from its mean.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "shift.cuh"

namespace normgen {

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

// The statistics for outputs computed from h itself instead of h - shift (Recipe.fold_shift):
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

// This thread's sums of (x - shift) and (x - shift)^2; padding vectors stay out (or, taken
// by a pass over every vector, add their zeros uncentred: shift_of). kRolled:
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
      float k = shift;
      if constexpr (kUncentredOutside<Cols>) k = shift_of(cols, i, shift);
      else if constexpr (Cols::kPartial) cols.fill_outside(i, d, shift);  // columns outside the row add nothing
      add_centred<V>(d, k, s1, s2);
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
      // shift they are recorded with must be the same float, which a plain addition, where
      // one copy is contracted into an fma, is not.
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

}  // namespace normgen
