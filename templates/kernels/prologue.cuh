// The prologue: the fused residual add and x-bias, applied to a row as it is loaded.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "columns.cuh"

namespace normgen {

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

// Vector i of row `row`'s h (at cols(i)) loaded from global memory again (x at row_x(row),
// the residual at row_r(row)) and fused as fuse_row made it, into d: a far row's second pass
// where registers hold the row (by run-time index, which registers cannot serve).
template <class K, int V, class RowX, class RowR, class Cols>
__device__ __forceinline__ void reload_h(const Params& p, const RowX& row_x, const RowR& row_r, i64 row,
                                         const Cols& cols, int i, int n, bool live, float (&d)[V]) {
  RowIn<K, 1, V> one;
  const auto one_cols = row_cols<false>([&](int) { return cols(i); }, n);
  load_in<K, 1, V>(one, 0, row_x(row), row_r(row), cols(i), live);
  fuse_row<K, 1, V, false>(one, p, Columns<K, 1, V>{}, one_cols, nullptr);
  one.x.get(0, d);
}

}  // namespace normgen
