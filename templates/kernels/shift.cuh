// LayerNorm's shift: the value its shifted sums are taken around -- per warp in a row of one
// block (warp_shift), the row's first columns where it spans a cluster (Pilot).
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "prologue.cuh"
#include "reduce.cuh"

namespace normgen {

// Each warp shifts by the mean of the first vectors of L of its lanes, evenly spaced over
// its W (where rows share a warp, over each row's W = T lanes): 32 elements where a vector
// is 16 bytes (four lanes of bf16, eight of fp32), L shuffles, no reduction before the sums,
// no memory access. Only a warp whose first vector is padding holds no element of the row
// (padding comes last), and its sums are zero. Lane 0's vector alone lies more than a
// standard deviation from its warp's mean in a few percent of normal rows (each such row is
// summed again by share_stats); 32 elements miss so in about 1e-8 of warps. With one vector a thread (P == 1) later lanes may hold padding, so lane
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
  static_assert(whole_warps(T), "whole warps; 16 or more a butterfly of them");
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

// LayerNorm's shift for a row spread over a cluster (staged rows): the mean of h over the
// row's first kCols columns (all of them if fewer), which every thread reads itself with
// its first loads of the row (the same 16 bytes: a broadcast) -- so that the row's sums
// need no reduction before them, and are taken as the row is staged. In exact arithmetic
// any shift gives the same statistics; this one is almost always within a standard
// deviation of the mean, and share_stats sums the rare row where it is not again. (Rows of
// one block: warp_shift; streamed clusters: zero, see streamed_rows.)
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

}  // namespace normgen
