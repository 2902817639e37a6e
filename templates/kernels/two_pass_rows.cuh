// Two-pass rows: statistics over the row in chunks, then the row read again and normalized.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "finish.cuh"

namespace normgen {

// One row per block, in chunks of T*V*P elements. The shift is the mean of the first
// chunk (the whole row when it fits in one), which keeps the shifted sums well-conditioned;
// a LayerNorm row whose first chunk's mean lies more than a deviation from the row's (c^2 >
// var, as share_stats tests) is summed again around shift + c, in another pass. Each later
// pass walks the chunks in the opposite direction of the one before, so the most recently
// read ones hit L2 (the far rows' extra pass walks back, as the next one does). A fused
// prologue is recomputed on every pass (the sum is stored in the first); LayerNorm's
// dynamic quant adds a pass for the row's absolute maximum.
template <class K>
__device__ __forceinline__ void two_pass_rows(const Params& p) {
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

}  // namespace normgen
