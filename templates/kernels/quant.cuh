// Quantized outputs: a dynamic quant's per-row scale from the row's absolute maximum, and a
// static quant's given scale.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "epilogue.cuh"

namespace normgen {

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

// The largest |output| among this thread's vectors of a row (0 for none); U as in
// for_each_output (here and below).
template <class K, int P, int V, bool kHeld, int U = P, class Load, class Cols, class Held>
__device__ __forceinline__ float absmax(const Params& p, const Stats& st, const Load& load, const Cols& cols,
                                        const Held& c) {
  float m = 0.f;
  for_each_output<K, P, V, kHeld, false, U>(p, st, load, cols, c, [&](int, const float (&out)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) m = max_nan(m, fabsf(out[j]));
  });
  return m;
}

// With merged_max, this thread's largest |h * (gamma + offset) * smooth| (its outputs with
// rstd = 1, exactly: multiplying by 1 rounds nothing); else 0.
template <class K, int P, int V, bool kHeld, int U = P, class Load, class Cols, class Held>
__device__ __forceinline__ float unscaled_absmax(const Params& p, const Load& load, const Cols& cols,
                                                 const Held& c) {
  if constexpr (merged_max<K>()) {
    return absmax<K, P, V, kHeld, U>(p, Stats{0.f, 0.f, 1.f, 0.f, false}, load, cols, c);
  }
  return 0.f;
}

}  // namespace normgen
