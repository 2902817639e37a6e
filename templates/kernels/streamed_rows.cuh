// Streamed rows: a row held in registers while the copy engine streams the next one into
// shared memory.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "finish.cuh"

namespace normgen {

// One block an SM holds its row in registers while the copy engine brings its next row into
// shared memory (cp.async.bulk, completing on an mbarrier): the next row's DRAM reads overlap
// this row's reductions and output passes. The row's gamma and beta sit in shared memory
// beside the stage, copied once (absent ones as ones and zeros), for both output passes.
// The copy is issued in kPieces pieces by as many threads, each the first of its own group
// of warps: issued by one thread, it held that thread's warp back by its instructions, and
// every other warp then waited for it at the row's next barrier.
// A row whose columns do not fit beside a stage spans a cluster of C blocks, block r
// holding its r-th kShare columns (first(), streamed_rows' column map) and streaming them into
// its stage, with its share of gamma and beta beside it; their reductions push their
// totals to each other (PushSlots).
// Shared memory: [stage: a share of X][gamma: a share of W][beta: a share of W][mbarrier].
template <class K> struct Stream {
  using X = typename K::X;
  using W = typename K::W;
  static constexpr int C = K::kCluster;
  static constexpr int kShare = K::kThreadsPerRow * K::kRepeat * K::kVec, kPieces = 8;  // a block's columns
  static constexpr int kPieceBytes = kShare * sizeof(X) / kPieces;
  static_assert(kPieceBytes % 16 == 0 && K::kThreadsPerRow % (32 * kPieces) == 0, "whole pieces, whole warps");
  // This block's first column of the row.
  __device__ static int first() { return C == 1 ? 0 : static_cast<int>(cluster_rank()) * kShare; }
  // Where column `col` of the row (one of this block's) lies in the stage, gamma and beta.
  __device__ static int local(int col) {
    if constexpr (C == 1) {
      return col;
    } else {
      return col - first();
    }
  }
  __device__ static unsigned char* base() {
    // on a 128-byte line past the static scratch: bulk copies into a stage off such a line
    // are slower
    extern __shared__ __align__(128) uint4 stage_words[];
    return reinterpret_cast<unsigned char*>(stage_words);
  }
  __device__ static X* stage() { return reinterpret_cast<X*>(base()); }
  __device__ static W* gamma() { return reinterpret_cast<W*>(base() + kShare * sizeof(X)); }
  __device__ static W* beta() { return gamma() + kShare; }
  __device__ static unsigned barrier() { return shared_address(beta() + kShare); }
  __device__ static void init() {  // thread 0; a block barrier before any wait
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(barrier()), "r"(kPieces));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // The piece this thread issues (-1: none).
  // kFresh: threadIdx.x read afresh at each call (volatile), for rows that keep their outputs:
  // held across the row, the piece took a register ptxas then spilled; elsewhere the fresh
  // reads cost time.
  template <bool kFresh = false>
  __device__ static int piece() {
    constexpr int kEvery = K::kThreadsPerRow / kPieces;
    unsigned t = threadIdx.x;
    if constexpr (kFresh) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t % kEvery == 0 ? static_cast<int>(t) / kEvery : -1;
  }
  // Piece q of the row of n elements at xr (its bytes q * kPieceBytes on, up to the row's
  // 2n: none, or fewer, for shorter rows; 16-byte multiples, as rows are of whole 16-byte
  // vectors) into the stage. The stage's earlier reads (by every thread, before a block
  // barrier) are ordered before the copy's writes.
  __device__ static void fetch(const X* xr, int n, int q) {
    const int off = q * kPieceBytes, from = first() * static_cast<int>(sizeof(X)) + off;
    const unsigned bytes = max(min(n * static_cast<int>(sizeof(X)) - from, kPieceBytes), 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier()), "r"(bytes) : "memory");
    if (bytes > 0)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(shared_address(stage()) + off),
                     "l"(reinterpret_cast<const char*>(xr) + from), "r"(bytes), "r"(barrier()) : "memory");
  }
  // Waits for the fetch of the given parity (0, 1, 0, ...: one per row) to land.
  __device__ static void wait(unsigned parity) { wait_parity(barrier(), parity); }
};

// Streamed rows keep gamma and beta in shared memory, copied there once (stream_columns).
template <class K> struct SharedColumns<K, true> {
  static constexpr bool kShared = true;
  template <class G, class B>
  __device__ __forceinline__ static void load(G& g, B& b, int i, i64 col) {
    g.load(i, Stream<K>::gamma() + Stream<K>::local(col));
    if constexpr (K::kNorm == Norm::LAYERNORM) b.load(i, Stream<K>::beta() + Stream<K>::local(col));
  }
};

// A streamed block's gamma and beta (ones and zeros where absent) copied to shared memory:
// each thread its own vectors, which only it reads.
template <class K, int P, int V, class Cols>
__device__ __forceinline__ void stream_columns(const Params& p, const Cols& cols) {
  using W = typename K::W;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (cols.inside(i)) {
      Columns<K, 1, V> c;
      if (p.gamma != nullptr) {
        c.g.load(0, static_cast<const W*>(p.gamma) + cols(i));
      } else {
        float one[V];
#pragma unroll
        for (int j = 0; j < V; ++j) one[j] = 1.f;
        c.g.set(0, one);
      }
      c.g.store(0, Stream<K>::gamma() + Stream<K>::local(cols(i)));
      if constexpr (K::kNorm == Norm::LAYERNORM) {
        if (p.beta != nullptr) {
          c.b.load(0, static_cast<const W*>(p.beta) + cols(i));
        } else {
          c.b.zero(0);
        }
        c.b.store(0, Stream<K>::beta() + Stream<K>::local(cols(i)));
      }
    }
  }
}

// Streamed rows: a block (or a cluster's blocks, SpanOf) holds its row in registers, as
// register rows do, while the next row comes into shared memory by the copy engine (Stream);
// the per-column vectors are read from shared memory. Over a cluster, block r's thread t
// holds the vectors at r*P*T*V + (i*T + t)*V, so that a block's share is one span of the row.
// LayerNorm shifts per warp (warp_shift) in a block's rows; over a cluster the shift is
// zero, a constant, and a row whose mean lies more than a deviation from zero is summed
// again around its mean (share_stats), from its registers. kFull: a whole-row kernel
// (RowCols), the only one that keeps its outputs (the other's column checks spilled) and
// which then does not fold its shift.
template <class K, bool kFull>
__device__ __forceinline__ void streamed_rows(const Params& p) {
  using X = typename K::X;
  using Span = SpanOf<K>;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, C = K::kCluster;
  constexpr int V = K::kVec, P = K::kRepeat;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kWarpShifted = kLN && C == 1 && T > 32;
  constexpr bool kKeep = K::kKeepOutputs && kFull;
  constexpr bool kFold = K::kFoldShift && !kKeep;
  constexpr int S = scratch_sets<K>();
  constexpr int kPush = C > 1 ? C : 0;  // rows over a cluster push their totals
  __shared__ ReduceScratch<T, R, 1, kPush> sh_max[S];
  __shared__ ReduceScratch<T, R, stat_values<K>() + kWarpShifted, kPush> sh_stats[S];
  __shared__ ReduceScratch<T, R, stat_values<K>(), kPush> sh_again[S];
  __shared__ float warp_counts[kWarpShifted ? T / 32 : 1];  // elements of each warp of a row
  const int lane = Span::rank() * T + threadIdx.x % T;
  const int sub = threadIdx.x / T;  // this thread's row among the block's R
  const i64 group = Span::group();
  const i64 stride = Span::groups() * static_cast<i64>(R);
  const int n = p.n;
  int first = 0;  // over a cluster: each block a contiguous share of the row (Stream::first)
  if constexpr (C > 1) first = Stream<K>::first();
  const auto cols = row_cols<kFull>([=](int i) {
    return C > 1 ? first + (i * T + lane % T) * V : (i * C * T + lane) * V;
  }, n);
  auto row_x = [&](i64 row) { return static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si); };
  auto row_r = [&](i64 row) {
    return static_cast<const X*>(p.residual) + (K::kFusedAdd != 0 ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
  };

  Columns<K, 1, V> c;
  if constexpr (kWarpShifted) {
    if (threadIdx.x < T && threadIdx.x % 32 == 0) {  // warp w of a row: lanes 32w..32w+31
      int count = 0;
#pragma unroll
      for (int i = 0; i < P; ++i) count += min(max(n / V - i * T - static_cast<int>(threadIdx.x), 0), 32);
      warp_counts[threadIdx.x / 32] = static_cast<float>(count * V);
    }
    __syncthreads();
  }
  const float qmul = static_qmul<K>(p);
  i64 base = group * R;
  RowIn<K, P, V> in;
  unsigned parity = 0;  // of the row's fetch
  stream_columns<K, P, V>(p, cols);
  if (threadIdx.x == 0) {
    for (int j = 0; j < S; ++j) {
      sh_max[j].init();
      sh_stats[j].init();
      sh_again[j].init();
    }
    Stream<K>::init();  // (its fence covers the scratches' mbarriers too)
  }
  __syncthreads();
  if constexpr (C > 1) cluster_sync();  // every block's mbarriers ready before any push
  if (const int q = Stream<K>::template piece<kKeep>(); q >= 0 && base < p.rows) Stream<K>::fetch(row_x(base), n, q);
  for (int ph = 0; base < p.rows; base += stride, ph = (ph + 1) % S) {
    // Every thread runs the reductions, also for a row past the end (live == false).
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const bool more = base + stride < p.rows;
    // this row from the stage, then the next one into it
    Stream<K>::wait(parity);
    parity ^= 1;
#pragma unroll
    for (int i = 0; i < P; ++i)
      load_in<K, P, V>(in, i, Stream<K>::stage(), nullptr, Stream<K>::local(cols(i)), cols.inside(i));
    __syncthreads();
    if (const int q = Stream<K>::template piece<kKeep>(); q >= 0 && more) Stream<K>::fetch(row_x(base + stride), n, q);
    fuse_row<K, P, V, false>(in, p, c, cols,
                             K::kFusedAdd == 1 && live ? static_cast<X*>(p.res_out) + row * n : nullptr);

    float k = 0.f, s1, s2;
    if constexpr (kLN && C == 1) k = warp_shift<T, P>(in.x);
    // kKeep: the row as floats centred on the shift, as in register_rows
    RegisterFloats<kKeep ? P : 1, V> kept;
    if constexpr (kKeep) kept.centre(cols, [&](int i, float (&d)[V]) { in.x.get(i, d); }, k);
    auto load = [&](int i, float (&d)[V]) {  // vector i of the row (kKeep: centred)
      if constexpr (kKeep) {
        kept.get(i, d);
      } else {
        in.x.get(i, d);
      }
    };
    centred_sums<P, V>(kKeep ? 0.f : k, load, cols, s1, s2);
    const float m = unscaled_absmax<K, P, V, false>(p, load, cols, c);
    // Vector i of the row selected from its registers by a run-time index (rolled passes:
    // little code).
    auto held = [&](int i, float (&d)[V]) {
      constexpr int kW = Packed<X, 1, V>::kWords;
      Packed<X, 1, V> one;
#pragma unroll
      for (int k = 0; k < kW; ++k) one.w[k] = in.x.w[k];
#pragma unroll
      for (int j = 1; j < P; ++j) {
#pragma unroll
        for (int k = 0; k < kW; ++k) one.w[k] = i == j ? in.x.w[j * kW + k] : one.w[k];
      }
      one.get(0, d);
    };
    auto reload = [&](int i, float (&d)[V]) { reload_h<K, V>(p, row_x, row_r, row, cols, i, n, live, d); };
    auto again = [&](int i, float (&d)[V]) { held(i, d); };  // a far row's second sums (see share_stats)
    Stats st = share_stats<K, P, V, T, R, C, kWarpShifted>(p, k, s1, s2, m, again, cols, sh_stats[ph],
                                                           sh_again[ph], warp_counts);
    if constexpr (kKeep) {
      if (st.far) {  // summed again around the mean (rare): the row centred on that, from memory
        kept.centre(cols, reload, st.shift);
        k = st.shift;
      }
      st.c += st.shift - k;  // as in register_rows
      st.shift = k;
    }
    bool fold = false;  // as in staged_rows
    Stats st_folded = st;
    if constexpr (kFold) st_folded = folded(st, fold);
    if (fold) {
      if constexpr (kFold)
        finish_row<K, P, V, false, kKeep, true, T, R, C, P>(p, st_folded, load, cols, c, sh_max[ph], kept, qmul,
                                                            row, live, lane == 0);
    } else if constexpr (!kKeep) {
      // A row that keeps its shift (its mean more than a deviation from zero: rare), in
      // rolled passes of two vectors a step, each vector selected from the row's registers
      // by its run-time index: little code beside the folded passes.
      finish_row<K, P, V, false, false, false, T, R, C, (P % 2 ? 1 : 2)>(p, st, held, cols, c, sh_max[ph], kept,
                                                                         qmul, row, live, lane == 0);
    } else {
      finish_row<K, P, V, false, kKeep, kKeep, T, R, C, P>(p, st, load, cols, c, sh_max[ph], kept, qmul, row, live,
                                                          lane == 0);
    }
  }
  Span::finish();
}

}  // namespace normgen
