// Register rows: the whole row in registers, over one block or a cluster's blocks.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "finish.cuh"

namespace normgen {

// A block serves R rows at a time with T threads per row, or, with a cluster of C blocks
// (SpanOf), one row with C*T threads. Row thread t holds the P vectors at columns
// (i*C*T + t)*V, in their input precision (half the registers of floats; converting is one
// instruction). Blocks (clusters) stride over the rows, so any number of rows works. Two
// things keep DRAM busy across a block's rows: the next row's loads are issued before this
// row's reductions, and the per-column vectors (the same for every row) are loaded once per
// block -- each when it fits the register budget. LayerNorm shifts per warp (warp_shift) in
// a block's rows, by the row's first columns (Pilot) over a cluster.
template <class K>
__device__ __forceinline__ void register_rows(const Params& p) {
  using X = typename K::X;
  using Span = SpanOf<K>;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, C = K::kCluster;
  constexpr int V = K::kVec, P = K::kRepeat;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kAdd = K::kFusedAdd != 0;
  // K::kLean (Tile.lean, normgen/recipe.py): built for few registers, which the row takes alone
  constexpr bool kHold = !K::kLean && V > 1 && Columns<K, P, V>::kWords <= 32;
  constexpr bool kPrefetchRow = !K::kLean && V > 1 && (kAdd ? 2 : 1) * Packed<X, P, V>::kWords <= 16;
  constexpr bool kWarpShifted = kLN && C == 1 && T > 32;
  constexpr bool kKeep = K::kKeepOutputs;
  static_assert(!K::kFloatColumns || kHold, "float columns: copies of held columns");
  constexpr int S = scratch_sets<K>();
  __shared__ ReduceScratch<T, R, 1> sh_max[S];
  __shared__ ReduceScratch<T, R, stat_values<K>() + kWarpShifted> sh_stats[S];
  __shared__ ReduceScratch<T, R, stat_values<K>()> sh_again[S];
  __shared__ float warp_counts[kWarpShifted ? T / 32 : 1];  // elements of each warp of a row
  const int lane = Span::rank() * T + threadIdx.x % T;
  const int sub = threadIdx.x / T;  // this thread's row among the block's R
  const i64 group = Span::group();
  const i64 stride = Span::groups() * static_cast<i64>(R);
  const int n = p.n;
  const auto cols = row_cols<false>([=](int i) { return (i * C * T + lane) * V; }, n);
  auto row_x = [&](i64 row) { return static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si); };
  auto row_r = [&](i64 row) {
    return static_cast<const X*>(p.residual) + (kAdd ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
  };
  auto load_row = [&](RowIn<K, P, V>& in, i64 base) {
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const X* xr = live ? row_x(row) : static_cast<const X*>(p.x);
    const X* rr = live ? row_r(row) : static_cast<const X*>(p.residual);
#pragma unroll
    for (int i = 0; i < P; ++i) load_in<K, P, V, K::kRowCache>(in, i, xr, rr, cols(i), live && cols.inside(i));
  };

  // RMSNorm's sums and LayerNorm's kept rows' (with their centring) take every vector
  // unbranched, and so does RMSNorm's maximum where the columns are held: x is zero outside
  // the row (load_row), and so are the held columns there; a vector outside is not centred
  // (shift_of), so its zeros add nothing. LayerNorm's other rows test each vector: unbranched,
  // the lean 64-register tiles spilled for sm_100 and sm_120, and they ran no faster on sm_90.
  constexpr bool kEvery = !kLN || kKeep;
  const auto sums_cols = every_vector<kEvery>(cols);
  const auto max_cols = every_vector<!kLN && kHold>(cols);
  Columns<K, kHold ? P : 1, V> c;
  if constexpr (kHold) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (cols.inside(i)) {
        c.load(p, i, cols(i));
      } else if constexpr (kEvery) {
        c.zero(i);
      }
    }
  }
  auto&& held = output_columns(c);  // what the outputs read the held columns from
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
  if (base < p.rows) load_row(in, base);
  for (int ph = 0; base < p.rows; base += stride, ph = (ph + 1) % S) {
    // Every thread runs the reductions, also for a row past the end (live == false).
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const bool more = base + stride < p.rows;
    RowIn<K, P, V> next;
    if constexpr (kHold && K::kPackColumns) c.keep_packed();
    if constexpr (kPrefetchRow) {
      if (more) load_row(next, base + stride);
    }
    fuse_row<K, P, V, kHold>(in, p, c, cols,
                             K::kFusedAdd == 1 && live ? static_cast<X*>(p.res_out) + row * n : nullptr);

    float k = 0.f, s1, s2;
    if constexpr (kLN && C == 1) {
      k = warp_shift<T, P>(in.x);
    } else if constexpr (kLN) {
      if (live) k = Pilot<K, V>::shift(p, row_x(row), row_r(row), n);  // a row past the end: zeros, shift 0
    }
    // kKeep: the row as floats centred on the shift, from here on (what the sums take and
    // the outputs start from: two instructions per element fewer than converting and
    // centring it again for the outputs, in the registers the kept outputs need anyway)
    RegisterFloats<kKeep ? P : 1, V> kept;
    if constexpr (kKeep) kept.centre(sums_cols, [&](int i, float (&d)[V]) { in.x.get(i, d); }, k);
    auto load = [&](int i, float (&d)[V]) {  // vector i of the row (kKeep: centred)
      if constexpr (kKeep) {
        kept.get(i, d);
      } else {
        in.x.get(i, d);
      }
    };
    centred_sums<P, V>(kKeep ? 0.f : k, load, sums_cols, s1, s2);
    const float m = unscaled_absmax<K, P, V, kHold>(p, load, max_cols, held);
    auto reload = [&](int i, float (&d)[V]) { reload_h<K, V>(p, row_x, row_r, row, cols, i, n, live, d); };
    auto again = [&](int i, float (&d)[V]) { reload(i, d); };  // a far row's second sums (see share_stats)
    Stats st = share_stats<K, P, V, T, R, C, kWarpShifted>(p, k, s1, s2, m, again, cols, sh_stats[ph],
                                                           sh_again[ph], warp_counts);
    if constexpr (kKeep) {
      if (st.far) {  // summed again around the mean (rare): the row centred on that, from memory
        kept.centre(cols, reload, st.shift);
        k = st.shift;
      }
      // else the row is centred on this warp's shift k, the statistics on the first warp's:
      // the mean relative to k is (shift - k) + c, whose rounding is within that of the
      // terms' (each warp's shift lies within its warp's deviation of its mean, and a warp's
      // mean within sqrt(warps) row deviations of the row's); in warp 0 (the leader, which
      // writes the mean) k is the shift and c stays as it is.
      st.c += st.shift - k;
      st.shift = k;
    }
    finish_row<K, P, V, kHold, kKeep, kKeep, T, R, C, P>(p, st, load, cols, held, sh_max[ph], kept, qmul, row, live,
                                                        lane == 0);
    if constexpr (kPrefetchRow) {
      in = next;
    } else if (more) {
      load_row(in, base + stride);
    }
  }
  Span::finish();
}

}  // namespace normgen
