// The epilogue's output passes: normalized, scaled and shifted outputs of a row, stored;
// and the saved statistics.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "stats.cuh"

namespace normgen {

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

// The same outputs from float columns (no smooth scale: FloatColumns serves none).
template <class K, int P, int V>
__device__ __forceinline__ void outputs(float (&out)[V], const Params& p, const Stats& st, const float (&d)[V],
                                        const FloatColumns<K, P, V>& c, int ci) {
  float g[V], b[V];
  c.gamma(ci, g);
  if constexpr (K::kNorm == Norm::LAYERNORM) c.beta(ci, b);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      out[j] = fmaf(fmaf(d[j], st.rstd, -st.c * st.rstd), g[j], b[j]);
    } else {
      out[j] = d[j] * st.rstd * (g[j] + p.weight_offset);
    }
  }
}

template <class K>
__device__ __forceinline__ void save_stats(const Params& p, i64 row, const Stats& st) {
  if constexpr (K::kSaveStats) {
    if constexpr (K::kNorm == Norm::LAYERNORM) static_cast<float*>(p.mean)[row] = st.shift + st.c;
    static_cast<float*>(p.rstd)[row] = st.rstd;
  }
}

// One step of for_each_output: vectors i0 .. i0 + U - 1; the first early.kCount of them
// (where i0 = 0) with early's columns. Columns loaded per vector are loaded A =
// K::kColumnAhead vectors ahead of their use (Recipe.column_ahead), in a ring of A + 1: a load
// may not pass an earlier store that might alias it, so in a pass that stores, ptxas issues
// each vector's loads after the stores of the vector before, unless the source does so.
template <class K, int P, int V, bool kHeld, bool kCentred, int U, class Load, class Cols, class Held, class Fn,
          class Early>
__device__ __forceinline__ void output_step(int i0, const Params& p, const Stats& st, const Load& load,
                                            const Cols& cols, const Held& c,
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
// from c when kHeld (the same for every row: Columns, or FloatColumns), else loaded per
// vector, the first step's from `early` where it holds them (at most U). kCentred: `load` gives the values minus st.shift
// already. U < P: a loop over U vectors at a time (for `load` from memory only), which bounds
// the loads ptxas issues ahead of their use.
template <class K, int P, int V, bool kHeld, bool kCentred = false, int U = P, class Load, class Cols, class Held,
          class Fn, class Early = EarlyColumns<K, 0, V>>
__device__ __forceinline__ void for_each_output(const Params& p, const Stats& st, const Load& load,
                                                const Cols& cols, const Held& c,
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

// Normalize, quantize (times qmul) and store this thread's vectors of a row at y_off;
// kCentred as in for_each_output; kWhole: the stores by intrinsic (store_words).
template <class K, int P, int V, bool kHeld, bool kCentred = false, int U = P, bool kWhole = false, class Load,
          class Cols, class Held, class Early = EarlyColumns<K, 0, V>>
__device__ __forceinline__ void normalize_row(const Params& p, const Stats& st, const Load& load,
                                              const Cols& cols, const Held& c,
                                              float qmul, i64 y_off, const Early& early = Early{}) {
  for_each_output<K, P, V, kHeld, kCentred, U>(p, st, load, cols, c, [&](int i, float (&out)[V]) {
    if constexpr (K::kQuant != Quant::NONE) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] *= qmul;
    }
    store_vec<typename K::Y, V, kWhole>(static_cast<typename K::Y*>(p.y) + y_off + cols(i), out);
  }, early);
}

}  // namespace normgen
