// Staged rows: each block's share of the row in shared memory, for the longest rows.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "finish.cuh"

namespace normgen {

// For the longest rows: the C blocks of a cluster (SpanOf) each hold P vectors per thread of the
// row in shared memory, read in batches of four loads (x's vectors, or x's and the
// residual's: 64 bytes in flight per thread at 16-byte vectors, within the 64 registers).
// Few registers, so several blocks share an SM and hide each other's barrier waits. Each
// thread reads back only the vectors it wrote: the staging needs no barriers of its own.
// Some rows are loaded past L1 (K::kRowCache, Recipe.row_cache), which shared memory
// shrinks, leaving it to the per-column vectors that every row reads.
// kKeep (LayerNorm's dynamic quant, K::kKeepOutputs): the row is staged as floats, and the
// outputs computed for its absolute maximum replace it there for the stores (the recipe's tile
// gives such blocks the float row's shared memory).
template <class K, bool kFull>
__device__ __forceinline__ void staged_rows(const Params& p) {
  using X = typename K::X;
  using Span = SpanOf<K>;
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
  const int lane = Span::rank() * T + threadIdx.x;
  const int n = p.n;
  const float qmul = static_qmul<K>(p);
  const auto cols = row_cols<kFull>([=](int i) { return (i * C * T + lane) * V; }, n);
  auto slot = [&](int i) { return stage + (i * T + threadIdx.x) * V; };  // conflict-free
  const SharedFloats<T, V> floats{reinterpret_cast<float*>(stage_words) + threadIdx.x * SharedFloats<T, V>::Q};

  int ph = 0;
  for (i64 row = Span::group(); row < p.rows; row += Span::groups(), ph = (ph + 1) % S) {
    const X* xr = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si);
    const X* rr = static_cast<const X*>(p.residual) + (kAdd ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
    X* res_out = K::kFusedAdd == 1 ? static_cast<X*>(p.res_out) + row * n : nullptr;
    // LayerNorm's sums are taken as the row is staged, RMSNorm's in a pass over the staged
    // row (taken while staging, they were slower and spilled the whole-row fused kernels)
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
    constexpr int U = K::kOutputStep;  // the output passes' vectors at a time (Recipe.output_step)
    const float m = unscaled_absmax<K, P, V, false, U>(p, load, cols, Columns<K, 1, V>{});
    // rolled over narrow vectors: unrolled, RMSNorm with a fused add spilled 4-68 bytes there
    // (ptxas; fp32 and 16-bit, 32768-262144)
    if constexpr (!kSumsWhileStaging) centred_sums<P, V, kNarrow>(0.f, load, cols, s1, s2);
    // the first output step's columns, fetched while the reduction's barriers wait (Recipe.column_prefetch)
    prefetch_columns<K, K::kColumnPrefetch>(p, cols);
    // the first output step's first columns, in registers while the reduction's barriers wait (Recipe.column_registers)
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
      // from zero: rare) take their output passes kFarStep vectors at a time (all at once
      // there too, they spill)
      constexpr int kFarStep = K::kFoldShift ? 4 : U;
      finish_row<K, P, V, false, kKeep, false, T, 1, C, kFarStep>(
          p, st, load, cols, Columns<K, 1, V>{}, sh_max[ph], floats, qmul, row, true, lane == 0, early);
    }
  }
  Span::finish();
}

}  // namespace normgen
