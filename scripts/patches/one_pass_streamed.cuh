// An experiment of the eleventh session, kept for scripts/tune_tiles.py's "streamK" patches,
// which insert this text into the rendered header (PIECES replaced by K) and call
// one_pass_streamed instead of one_pass_staged. Not part of the kernel family: on an H100 it
// ran slower than the committed staged rows everywhere it was tried (docs/perf-notes.md,
// "Eleventh session"). Launch it with the ring's shared memory ("sK") and a grid of one
// wave: the ring holds as many pieces as the dynamic shared memory does (at least a row's).
// ---- bulk copies into shared memory (sm_90's copy engine), completing on an mbarrier ----
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void barrier_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}
// The barrier's phase completes once `bytes` (16-byte aligned, a multiple of 16; 0: at
// once) have come from global src to shared dst.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
  if (bytes)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_address(dst)),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(shared_address(bar))
                 : "memory");
}
__device__ __forceinline__ void barrier_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(shared_address(bar)), "r"(parity)
                 : "memory");
  } while (!done);
}

// ---- one-pass, streamed: a persistent block's rows through a ring of shared memory --------
// One block (cluster) per SM strides over the rows; each block's share of a row is kPieces
// contiguous pieces, which the copy engine brings into a ring of kSlots piece slots ahead of
// use (one thread issues each piece: no registers, no load instructions), so that DRAM
// streams the next rows while the block computes. A slot is refilled as soon as the output
// pass is done with it. A block's columns are contiguous (its share), so that its per-column
// vectors stay in L1 (what the ring leaves of it) for all its rows.
template <class K, bool kFull>
__device__ __forceinline__ void one_pass_streamed(const Params& p) {
  using X = typename K::X;
  constexpr int T = K::kThreadsPerRow, C = K::kCluster, V = K::kVec, P = K::kRepeat;
  constexpr int kMaxSlots = 16, kPieces = P < PIECES ? P : PIECES;
  constexpr int PH = P / kPieces;  // a thread's vectors in a piece
  constexpr int kPieceElems = T * PH * V;
  static_assert(K::kRowsPerBlock == 1 && P % kPieces == 0, "whole pieces of one row");
  static_assert(K::kFusedAdd == 0 && !K::kXBias && V * sizeof(X) == 16, "x alone, in 16-byte vectors");
  constexpr int S = scratch_sets<K>();
  __shared__ ReduceScratch<T, 1, 1> sh_max[S];
  __shared__ ReduceScratch<T, 1, stat_values<K>()> sh_stats[S], sh_again[S];
  __shared__ unsigned long long full[kMaxSlots];
  extern __shared__ uint4 stage_words[];
  X* ring = reinterpret_cast<X*>(stage_words);
  unsigned dynamic_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
  const int slots = min(static_cast<int>(dynamic_bytes / (kPieceElems * sizeof(X))), kMaxSlots);
  if (slots < kPieces) __trap();  // a row's pieces must all fit
  const int n = p.n;
  const int share0 = (C > 1 ? cluster_rank() : 0) * T * P * V;  // the block's first column
  const bool leader = share0 == 0 && threadIdx.x == 0;
  const float static_mul = static_qmul<K>(p);
  const auto cols = row_cols<kFull>([=](int i) { return share0 + (i * T + threadIdx.x) * V; }, n);
  const i64 first = C > 1 ? cluster_index() : blockIdx.x, step = C > 1 ? cluster_count() : gridDim.x;
  const Columns<K, 1, V> none{};

  // thread 0: the block's pieces in sequence (piece g % kPieces of its row g / kPieces),
  // each into the next slot of the ring
  int next_g = 0, next_slot = 0;
  auto issue = [&]() {
    const int g = next_g++, s = next_slot;
    next_slot = s + 1 == slots ? 0 : s + 1;
    const i64 row = first + (g / kPieces) * step;
    if (row >= p.rows) return;
    const int lo = share0 + (g % kPieces) * kPieceElems, hi = min(lo + kPieceElems, n);
    const X* src = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si) + lo;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's last reads before the copy
    bulk_load(ring + s * kPieceElems, src, hi > lo ? (hi - lo) * sizeof(X) : 0u, &full[s]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) barrier_init(&full[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int s = 0; s < slots; ++s) issue();
  }
  __syncthreads();

  int ph = 0, s0 = 0;  // s0: the slot of the row's first piece
  unsigned parity = 0;  // bit s: the phase of slot s to wait for next
  for (i64 row = first; row < p.rows; row += step, ph = (ph + 1) % S) {
    const X* xr = static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si);
    auto slot = [&](int h) { return s0 + h < slots ? s0 + h : s0 + h - slots; };
    auto load = [&](int i, float (&d)[V]) {
      Packed<X, 1, V> v;
      v.load(0, ring + slot(i / PH) * kPieceElems + ((i % PH) * T + threadIdx.x) * V);
      v.get(0, d);
    };
    float k = 0.f, s1 = 0.f, s2 = 0.f;
    if constexpr (K::kNorm == Norm::LAYERNORM) k = Pilot<K, V>::shift(p, xr, xr, n);
#pragma unroll
    for (int h = 0; h < kPieces; ++h) {
      const int s = slot(h);
      barrier_wait(&full[s], (parity >> s) & 1u);
      parity ^= 1u << s;
#pragma unroll
      for (int b = 0; b < PH; ++b) {
        if (cols.inside(h * PH + b)) {
          float d[V];
          load(h * PH + b, d);
          add_centred<V>(d, k, s1, s2);
        }
      }
    }
    const float m = unscaled_absmax<K, P, V, false>(p, load, cols, none);
    const Stats st = share_stats<K, P, V, T, 1, C>(p, k, s1, s2, m, load, cols, sh_stats[ph], sh_again[ph]);
    float qmul = static_mul;
    if constexpr (merged_max<K>()) {
      qmul = dynamic_scale<K>(p, st.amax, row, leader);
    } else if constexpr (K::kQuant == Quant::DYNAMIC) {
      float amax[1] = {absmax<K, P, V, false>(p, st, load, cols, none)};
      row_reduce<Max, T, 1, C, 1>(amax, sh_max[ph]);
      qmul = dynamic_scale<K>(p, amax[0], row, leader);
    }
    if (leader) save_stats<K>(p, row, st);
#pragma unroll
    for (int h = 0; h < kPieces; ++h) {
      const auto piece_cols = row_cols<kFull>([=](int b) { return cols(h * PH + b); }, n);
      auto piece_load = [&](int b, float (&d)[V]) { load(h * PH + b, d); };
      normalize_row<K, PH, V, false>(p, st, piece_load, piece_cols, none, qmul, row * n);
      __syncthreads();  // every thread is done with the piece's slot
      if (threadIdx.x == 0) issue();
    }
    s0 = slot(kPieces);
  }
  if constexpr (C > 1) cluster_sync();  // no block may exit while another reads its shared memory
}

