// ---- one-pass, staged, rows in pairs (an experiment: scripts/tune_tiles.py "pairU") -----
// As one_pass_staged, but each block (cluster) takes two rows at a time, staged side by side
// in 16-bit (launch with twice the tile's shared memory: "sK"), and its threads serve the
// same columns of both: each pass over the stage loads a vector's per-column vectors once
// for the two rows, and each reduction combines both rows' values (one barrier and one
// cluster exchange for two rows). Rows of x alone (no fused add or x-bias), outputs not kept.
// Launch with a grid of row pairs ("gK"). PAIRU vectors at a time in the output passes.
template <class K, int P, int V, class Load, class Cols, class Fn>
__device__ __forceinline__ void for_each_output_pair(const Params& p, const Stats (&st)[2], const Load& load,
                                                     const Cols& cols, const Fn& fn) {
  constexpr int U = P < PAIRU ? P : PAIRU;
#pragma unroll 1
  for (int i0 = 0; i0 < P; i0 += U) {
#pragma unroll
    for (int b = 0; b < U; ++b) {
      const int i = i0 + b;
      if (cols.inside(i)) {
        Columns<K, 1, V> ci;
        ci.load_epilogue(p, 0, cols(i));
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float d[V], out[V];
          load(r, i, d);
#pragma unroll
          for (int j = 0; j < V; ++j) d[j] -= st[r].shift;
          outputs<K, 1, V>(out, p, st[r], d, ci, 0);
          fn(r, i, out);
        }
      }
    }
  }
}

template <int NV, int S> struct PairOp {  // per row: NV values, the first S summed, the rest maxed
  __device__ __forceinline__ static float op(int k, float a, float b) { return k % NV < S ? a + b : fmaxf(a, b); }
};

template <class K, int T, int C>
__device__ __forceinline__ void pair_stats(Stats (&st)[2], const float (&k)[2], const float (&s1)[2],
                                           const float (&s2)[2], const float (&m)[2],
                                           ReduceScratch<T, 1, 2 * stat_values<K>()>& sh, int n, float eps) {
  constexpr int kS = stat_sums<K>(), NV = stat_values<K>();
  float s[2 * NV];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    s[r * NV + kS - 1] = s2[r];
    if constexpr (kS == 2) s[r * NV] = s1[r];
    if constexpr (merged_max<K>()) s[r * NV + kS] = m[r];
  }
  row_reduce<PairOp<NV, kS>, T, 1, C, 2 * NV>(s, sh);
  const float inv_n = 1.f / static_cast<float>(n);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float c = kS == 2 ? s[r * NV] * inv_n : 0.f;
    const float var = fmaxf(s[r * NV + kS - 1] * inv_n - c * c, 0.f);
    const float rstd = 1.f / sqrtf(var + eps);
    st[r] = Stats{k[r], c, rstd, merged_max<K>() ? s[r * NV + kS] * rstd : 0.f, c * c > var};
  }
}

template <class K, bool kFull>
__device__ __forceinline__ void one_pass_paired(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, C = K::kCluster, V = K::kVec, P = K::kRepeat;
  static_assert(K::kFusedAdd == 0 && !K::kXBias, "rows of x alone");
  constexpr int kBatch = P < 4 ? P : 4;
  static_assert(K::kRowsPerBlock == 1 && P % kBatch == 0, "staged tiles");
  constexpr int S = scratch_sets<K>();
  constexpr int NV = stat_values<K>();
  __shared__ ReduceScratch<T, 1, 2> sh_max[S];
  __shared__ ReduceScratch<T, 1, 2 * NV> sh_stats[S], sh_again[S];
  extern __shared__ uint4 stage_words[];
  X* stage = reinterpret_cast<X*>(stage_words);
  const int lane = (C > 1 ? cluster_rank() * T : 0) + threadIdx.x;
  const int n = p.n;
  const float static_mul = static_qmul<K>(p);
  const auto cols = row_cols<kFull>([=](int i) { return (i * C * T + lane) * V; }, n);
  auto slot = [&](int r, int i) { return stage + ((r * P + i) * T + threadIdx.x) * V; };
  auto load = [&](int r, int i, float (&d)[V]) {
    Packed<X, 1, V> v;
    v.load(0, slot(r, i));
    v.get(0, d);
  };
  constexpr bool kNarrow = P > 8;

  int ph = 0;
  for (i64 pair = C > 1 ? cluster_index() : blockIdx.x; 2 * pair < p.rows;
       pair += C > 1 ? cluster_count() : gridDim.x, ph = (ph + 1) % S) {
    bool live[2];
    float k[2] = {0.f, 0.f}, s1[2] = {0.f, 0.f}, s2[2] = {0.f, 0.f}, m[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const i64 row = 2 * pair + r;
      live[r] = row < p.rows;
      const X* xr = static_cast<const X*>(p.x) + row_offset(live[r] ? row : 2 * pair, p.inner, p.x_so, p.x_si);
#pragma unroll
      for (int i0 = 0; i0 < P; i0 += kBatch) {
        RowIn<K, kBatch, V> batch;
        const auto batch_cols = row_cols<kFull>([=](int b) { return cols(i0 + b); }, n);
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          load_in<K, kBatch, V, K::kRowCache>(batch, b, xr, xr, batch_cols(b), live[r] && batch_cols.inside(b));
        if constexpr (K::kNorm == Norm::LAYERNORM) {
          if (i0 == 0) k[r] = Pilot<K, V>::shift(p, xr, xr, n);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) batch.x.store(b, slot(r, i0 + b));
        asm volatile("" ::: "memory");
        if constexpr (K::kNorm == Norm::LAYERNORM) {
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
            if (batch_cols.inside(b)) {
              float d[V];
              batch.x.get(b, d);
              add_centred<V>(d, k[r], s1[r], s2[r]);
            }
          }
        }
      }
    }
    if constexpr (merged_max<K>()) {
      Stats unit[2] = {Stats{0.f, 0.f, 1.f, 0.f, false}, Stats{0.f, 0.f, 1.f, 0.f, false}};
      for_each_output_pair<K, P, V>(p, unit, load, cols, [&](int r, int, const float (&out)[V]) {
#pragma unroll
        for (int j = 0; j < V; ++j) m[r] = fmaxf(m[r], fabsf(out[j]));
      });
    }
    if constexpr (K::kNorm == Norm::RMSNORM) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        centred_sums<P, V, kNarrow>(0.f, [&](int i, float (&d)[V]) { load(r, i, d); }, cols, s1[r], s2[r]);
    }
    Stats st[2];
    pair_stats<K, T, C>(st, k, s1, s2, m, sh_stats[ph], n, p.eps);
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      if (st[0].far || st[1].far) {  // the same in every thread: summed again around k + c
        float k2[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          k2[r] = __fadd_rn(st[r].shift, st[r].c);
          centred_sums<P, V, true>(k2[r], [&](int i, float (&d)[V]) { load(r, i, d); }, cols, s1[r], s2[r]);
        }
        Stats st2[2];
        pair_stats<K, T, C>(st2, k2, s1, s2, m, sh_again[ph], n, p.eps);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (st[r].far) {
            st[r] = st2[r];
            st[r].far = true;
          }
        }
      }
    }
    float qmul[2] = {static_mul, static_mul};
    const bool leader = lane == 0;
    if constexpr (merged_max<K>()) {
#pragma unroll
      for (int r = 0; r < 2; ++r) qmul[r] = dynamic_scale<K>(p, st[r].amax, 2 * pair + r, live[r] && leader);
    } else if constexpr (K::kQuant == Quant::DYNAMIC) {
      float mx[2] = {0.f, 0.f};
      for_each_output_pair<K, P, V>(p, st, load, cols, [&](int r, int, const float (&out)[V]) {
#pragma unroll
        for (int j = 0; j < V; ++j) mx[r] = fmaxf(mx[r], fabsf(out[j]));
      });
      row_reduce<Max, T, 1, C, 2>(mx, sh_max[ph]);
#pragma unroll
      for (int r = 0; r < 2; ++r) qmul[r] = dynamic_scale<K>(p, mx[r], 2 * pair + r, live[r] && leader);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (live[r] && leader) save_stats<K>(p, 2 * pair + r, st[r]);
    for_each_output_pair<K, P, V>(p, st, load, cols, [&](int r, int i, float (&out)[V]) {
      if (live[r]) {
        if constexpr (K::kQuant != Quant::NONE) {
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] *= qmul[r];
        }
        store_vec<typename K::Y, V>(static_cast<typename K::Y*>(p.y) + (2 * pair + r) * n + cols(i), out);
      }
    });
  }
  if constexpr (C > 1) cluster_sync();
}

