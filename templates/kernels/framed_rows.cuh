// Framed rows: rows whose start or length is not a whole number of 16-byte vectors (K::kFramed).
// Each row of x is read in the aligned 16-byte vectors of its frame, which begins s elements
// before the row (s: where the row's first element lies in its 16 bytes); the frame's first
// and last vectors hold elements outside the row, which are loaded as zeros, enter no sum
// and are not written. The row tensors that start at the same element of their 16 bytes as
// x's row (y, the residual and the stored sum of a dense batch) are moved in the same
// aligned vectors; an output that starts elsewhere (x a slice of wider rows, a single row
// of a batch), through per-warp bounce slots (store_unlike), and a residual so, element by
// element. The per-column vectors are read realigned (load_skewed). A row's sums are taken
// in the order of its columns (framed_totals), not of its frame: its statistics' bits depend
// on its data and N alone, never on s (a row of an odd-N batch starts at rN mod 8), the
// other rows of the batch or where its outputs go. LayerNorm takes two passes over the
// registers (the sum; then the sums of h - mean and of its squares): no shift, whose choice
// would have to be the same at every s.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "finish.cuh"
#include "ragged.cuh"

namespace normgen {

// Where a thread's vectors of a row lie: vector i holds the row's columns cols(i) ..
// cols(i) + V - 1 (the first vector's start lies before the row where s > 0). Each warp
// holds P * 32 consecutive frame vectors, 32 a step (a row of T <= 32 threads: all of
// them, T a step), so that a thread's next vector is the next lane's of the same step, or
// lane 0's of the next step, within the warp but for its last one (framed_totals).
template <int T, int P, int V> struct FramedCols {
  static constexpr bool kPartial = true;  // a vector may hold columns outside the row
  static constexpr int kWd = T < 32 ? T : 32;  // the threads of a warp's segment of the row
  int lane, n, s;
  // the steps whose vectors end inside the row in every lane of this warp (the first vector
  // of lane 0 starts s columns before it)
  __device__ __forceinline__ int full() const { return max(((n + s) / V - lane / kWd * kWd * P) / kWd, 0); }

  __device__ __forceinline__ int frame(int i) const { return (lane / kWd * kWd * P + i * kWd + lane % kWd) * V; }
  __device__ __forceinline__ int operator()(int i) const { return frame(i) - s; }
  __device__ __forceinline__ bool inside(int i) const { return frame(i) < n + s; }
  // all V columns inside the row
  __device__ __forceinline__ bool whole(int i) const { return frame(i) >= s && frame(i) + V <= n + s; }
  __device__ __forceinline__ bool keeps(int i, int j) const {
    const int c = (*this)(i) + j;
    return c >= 0 && c < n;
  }
  // d's columns outside the row set to `fill` (what adds nothing to sums around it)
  __device__ __forceinline__ void fill_outside(int i, float (&d)[V], float fill) const {
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = keeps(i, j) ? d[j] : fill;
  }
};

// Elements j < lo and j >= hi of vector i set to `bits` (an element's bits in the low bits).
template <typename T, int P, int V>
__device__ __forceinline__ void set_outside(Packed<T, P, V>& v, int i, int lo, int hi, uint32_t bits) {
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (j < lo || j >= hi) {
      const int e = i * V + j;
      if constexpr (sizeof(T) == 4) {
        v.w[e] = bits;
      } else {
        const int sh = 16 * (e % 2);
        v.w[e / 2] = (v.w[e / 2] & ~(0xffffu << sh)) | (bits << sh);
      }
    }
  }
}

// One vector's words, by value: what the element paths and the stores below take and give.
template <typename T, int V> struct VecWords {
  uint32_t w[(V * static_cast<int>(sizeof(T)) + 3) / 4];
};

// The rare paths: a vector of row's columns col .. col + V - 1 element by element, zeros (or
// `absent` where row is null) outside [0, n); and a vector's columns inside [0, n) stored so.
template <typename T, int V>
__device__ __forceinline__ VecWords<T, V> elements_in(const T* row, int col, int n, float absent) {
  float f[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = col + j;
    f[j] = c >= 0 && c < n ? (row != nullptr ? to_float(row[c]) : absent) : 0.f;
  }
  Packed<T, 1, V> v;
  v.set(0, f);
  VecWords<T, V> out;
#pragma unroll
  for (int k = 0; k < Packed<T, 1, V>::kWords; ++k) out.w[k] = v.w[k];
  return out;
}
template <typename T, int V>
__device__ __forceinline__ void elements_out(T* row, int col, int n, int lo, int hi, VecWords<T, V> w) {
  using Raw = typename RawOf<sizeof(T)>::type;
  constexpr int E = 4 / sizeof(T);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const uint32_t bits = E == 1 ? w.w[j] : (w.w[j / E] >> (8 * sizeof(T) * (j % E))) & ((1u << (8 * sizeof(T))) - 1u);
    if (j >= lo && j < hi && col + j >= 0 && col + j < n) reinterpret_cast<Raw*>(row)[col + j] = static_cast<Raw>(bits);
  }
}
template <typename T, int P, int V>
__device__ __forceinline__ void put_words(Packed<T, P, V>& v, int i, const VecWords<T, V>& w) {
#pragma unroll
  for (int k = 0; k < Packed<T, 1, V>::kWords; ++k) v.w[i * Packed<T, 1, V>::kWords + k] = w.w[k];
}
template <typename T, int P, int V>
__device__ __forceinline__ VecWords<T, V> words_of(const Packed<T, P, V>& v, int i) {
  VecWords<T, V> w;
#pragma unroll
  for (int k = 0; k < Packed<T, 1, V>::kWords; ++k) w.w[k] = v.w[i * Packed<T, 1, V>::kWords + k];
  return w;
}
template <typename Y, int V> __device__ __forceinline__ VecWords<Y, V> output_words(const float (&out)[V]) {
  VecWords<Y, V> w;
  to_words<Y, V>(out, w.w);
  return w;
}

// Vector i of a framed row (row: the row's first element) at column col. Where the row starts
// at x's element of its 16 bytes (`alike`) and the vector ends inside the row, an aligned
// 16-byte access (its columns before the row, which share the 16 bytes of the row's first
// element, are zeroed by the caller); else element by element, zeros outside the row, so
// that nothing past the row is read.
template <Cache kCache, typename T, int P, int V>
__device__ __forceinline__ void load_framed(Packed<T, P, V>& v, int i, const T* row, int col, int n, bool alike) {
  if (alike && col + V <= n) {
    v.template load<kCache>(i, row + col);
  } else {
    put_words(v, i, elements_in<T, V>(row, col, n, 0.f));
  }
}

// Vector i of v from a per-column vector `from` (16-byte aligned) at column col, which need
// not be a multiple of V: the aligned 16-byte chunks around it loaded and shifted into place
// (a word select by the offset's word, a funnel shift by its half-word). Columns outside
// [0, n) read zero; a null `from` reads `absent` inside. Vectors whose chunks would pass the
// vector's end or start before it are read element by element.
template <typename T, int P, int V>
__device__ __forceinline__ void load_skewed(Packed<T, P, V>& v, int i, const T* from, int col, int n, float absent) {
  constexpr int E = sizeof(T), NW = V * E / 4, NC = NW / 4, kPer = 16 / E;
  static_assert(V * E >= 16, "whole 16-byte chunks");
  const int off = col & (kPer - 1);  // (col >= 0 on this path) elements past the chunk start
  const int start = col - off;
  if (from != nullptr && col >= 0 && start + (NC + (off != 0)) * kPer <= n) {
    uint32_t wd[NW + 4];
    const uint4* at = reinterpret_cast<const uint4*>(from + start);
#pragma unroll
    for (int c = 0; c <= NC; ++c) {
      const uint4 q = c < NC || off != 0 ? at[c] : make_uint4(0u, 0u, 0u, 0u);
      wd[4 * c] = q.x; wd[4 * c + 1] = q.y; wd[4 * c + 2] = q.z; wd[4 * c + 3] = q.w;
    }
    const int b = off * E, q = b >> 2, r = (b & 3) * 8;
    uint32_t pick[NW + 1];
#pragma unroll
    for (int k = 0; k <= NW; ++k) {
      const uint32_t lo = q & 1 ? wd[k + 1] : wd[k], hi = q & 1 ? wd[k + 3] : wd[k + 2];
      pick[k] = q & 2 ? hi : lo;
    }
#pragma unroll
    for (int k = 0; k < NW; ++k) v.w[i * NW + k] = E == 4 ? pick[k] : __funnelshift_r(pick[k], pick[k + 1], r);
  } else {
    put_words(v, i, elements_in<T, V>(from, col, n, absent));
  }
}

// Vector ci of c: the per-column vectors at column col (load_skewed); zeros outside the row,
// so that the outputs there are zero.
template <class K, int PC, int V>
__device__ __forceinline__ void load_framed_columns(Columns<K, PC, V>& c, const Params& p, int ci, int col) {
  using W = typename K::W;
  if constexpr (K::kXBias) load_skewed(c.bias, ci, static_cast<const typename K::X*>(p.x_bias), col, p.n, 0.f);
  load_skewed(c.g, ci, static_cast<const W*>(p.gamma), col, p.n, 1.f);
  if constexpr (K::kNorm == Norm::LAYERNORM) load_skewed(c.b, ci, static_cast<const W*>(p.beta), col, p.n, 0.f);
  if constexpr (K::kSmooth) load_skewed(c.sm, ci, static_cast<const typename K::SM*>(p.smooth), col, p.n, 0.f);
}

// Whether vector i of a row holds V columns of it: the steps inside the row in every lane
// (cols.full) hold them but lane 0's first where the row starts inside it; others, tested.
template <int T, int P, int V>
__device__ __forceinline__ bool whole_vector(const FramedCols<T, P, V>& cols, int i, int full) {
  return i < full ? i > 0 || cols.lane != 0 || cols.s == 0 : cols(i) >= 0 && cols(i) + V <= cols.n;
}

// Vector i of a row (its words w, of T2) stored at row `to` whose first element lies at x's
// row's element of its 16 bytes: in one access where it holds V columns of the row (whole),
// else element by element.
template <typename T2, int T, int P, int V>
__device__ __forceinline__ void store_alike(T2* to, const FramedCols<T, P, V>& cols, int i, bool whole,
                                            const VecWords<T2, V>& w) {
  if (whole) {
    store_words<chunk_words<T2, V>(), false>(to + cols(i), w.w);
  } else {
    elements_out<T2, V>(to, cols(i), cols.n, 0, V, w);
  }
}

// A row's vectors stored at row `to` whose first element lies delta (1 .. V - 1) elements of
// its 16 bytes after x's row's (mod V), from this warp's bounce slots (slots[i * 33 + l]: lane
// l's vector i, put there by the caller; rows of whole warps): in a loop over the steps (one
// copy of it in the kernel), lane l stores the aligned chunk of `to` that begins delta
// columns into its vector (the rest of its vector and the first delta of the next lane's)
// in one access, but for the chunks the warp shares with its neighbours (lane 0's first
// delta columns, lane 31's last V - delta) and those crossing the row's ends, element by
// element. Called by every lane of the warp, after the slots are written and __syncwarp.
template <typename T2, int P, int T, int V>
__device__ __forceinline__ void store_unlike(T2* to, const FramedCols<T, P, V>& cols, int delta, const uint4* slots) {
  constexpr int YW = chunk_words<T2, V>();
  static_assert(T % 32 == 0, "whole warps a row");
  const int l = cols.lane % 32, n = cols.n;
#pragma unroll 1
  for (int i = 0; i < P; ++i) {
    const int col = cols(i);  // this lane's vector's first column
    if (col - l * V >= n) break;  // (the same in every lane of the warp: its first column)
    const uint4 a = slots[i * 33 + l], b = slots[i * 33 + l + 1];
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
    uint32_t ab[2 * YW];
    VecWords<T2, V> own, chunk;
#pragma unroll
    for (int k = 0; k < YW; ++k) {
      ab[k] = own.w[k] = aw[k];
      ab[YW + k] = bw[k];
    }
    window<T2, V>(ab, delta, chunk.w);
    const int c = col + delta;  // the chunk's first column
    if (l < 31 && c >= 0 && c + V <= n) {
      store_words<YW, false>(to + c, chunk.w);
    } else if (l < 31) {
      elements_out<T2, V>(to, c, n, 0, V, chunk);
    } else {
      elements_out<T2, V>(to, col, n, delta, V, own);
    }
    if (l == 0) elements_out<T2, V>(to, col, n, 0, delta, own);
  }
}
template <typename T2, int V> __device__ __forceinline__ void put_slot(uint4* slot, const VecWords<T2, V>& w) {
  uint32_t q[4] = {};
#pragma unroll
  for (int k = 0; k < chunk_words<T2, V>(); ++k) q[k] = w.w[k];
  *slot = make_uint4(q[0], q[1], q[2], q[3]);
}

// A row's P vectors (words(i): vector i's words, of T2) stored at row `to`: in x's aligned
// vectors where `to` starts at x's row's element of its 16 bytes (the dense batch's case),
// else through the warp's bounce slots (rows of whole warps; store_unlike) or element by
// element. One branch a row: the alike loop carries no test of where each vector goes.
// kAlike: every row's `to` starts so (the dispatcher's promise), and the other paths are not built.
template <bool kAlike, typename T2, int P, int T, int V, class Words>
__device__ __forceinline__ void store_row(T2* to, const FramedCols<T, P, V>& cols, uint4* slots, Words words) {
  const int ts = static_cast<int>(reinterpret_cast<unsigned long long>(to) / sizeof(T2) % V);
  if (kAlike || ts == cols.s) {
    const int full = cols.full();
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (cols.inside(i)) store_alike(to, cols, i, whole_vector(cols, i, full), words(i));
  } else if constexpr (T % 32 == 0) {
#pragma unroll
    for (int i = 0; i < P; ++i)
      put_slot(slots + i * 33 + cols.lane % 32, cols.inside(i) ? words(i) : VecWords<T2, V>{});
    __syncwarp();
    store_unlike<T2, P>(to, cols, (cols.s - ts + V) % V, slots);
    __syncwarp();  // (the next store through the slots writes them again)
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (cols.inside(i)) elements_out<T2, V>(to, cols(i), cols.n, 0, V, words(i));
  }
}

// ---- a row's sums in the order of its columns ----
// Chunk j of a row: its columns jV .. jV + V - 1. Frame vector g holds chunk g's columns
// 0 .. V - s - 1 at positions s .. V - 1, and chunk g - 1's columns V - s .. V - 1 at
// positions 0 .. s - 1. A thread owns the chunks of its vectors' frame indices. It sums
// each position of its vectors over its steps (acc, by the Sums below, which take a zero as no
// change); its positions q < s hold the previous thread's chunks (lane - 1's at the same
// step; lane 0's, the warp's last lane's a step before, and at its first step the previous
// warp's: left out there, see add_step). column_order_total then takes this thread's chunk
// columns V - s .. V - 1 from the next lane's positions 0 .. s - 1 (the warp's last lane:
// lane 0's, and `tail`, its last chunk's from the next warp's first vector), and sums the V
// column sums pairwise. Each thread's total is then a fixed order over chunks fixed by the
// row's columns: the same bits for every s.

// What a row's pass sums (Sums::kStats values; op(k, a, d): sum k with d added, a zero no
// change): RMSNorm's and LayerNorm's second pass, the squares of d (and LayerNorm's, d too,
// d being h less the first pass's mean); LayerNorm's first, h.
struct SumOf {
  static constexpr int kStats = 1;
  __device__ __forceinline__ float operator()(int, float a, float d) const { return a + d; }
};
struct SquaresOf {
  static constexpr int kStats = 1;
  __device__ __forceinline__ float operator()(int, float a, float d) const { return fmaf(d, d, a); }
};
struct SumAndSquaresOf {
  static constexpr int kStats = 2;
  __device__ __forceinline__ float operator()(int k, float a, float d) const { return k == 0 ? a + d : fmaf(d, d, a); }
};

// Adds vector i of a thread's frame (d: its values, zero outside the row) to acc; the
// positions before s of a warp's first vector are the previous warp's (its last lane's
// tail) and stay out.
template <int T, int V, class Sums>
__device__ __forceinline__ void add_step(float (&acc)[Sums::kStats][V], const float (&d)[V], int i, int lane, int s,
                                         const Sums& op) {
  constexpr int Wd = T < 32 ? T : 32;
  const bool first = i == 0 && lane % Wd == 0;
#pragma unroll
  for (int q = 0; q < V; ++q) {
    const float v = first && q < s ? 0.f : d[q];
#pragma unroll
    for (int k = 0; k < Sums::kStats; ++k) acc[k][q] = op(k, acc[k][q], v);
  }
}

// r[c] = r[c + s] for c < V, s < 2B: by s's bits from B down (each stage reads r[c + b]
// before it writes it), every index a constant.
template <int B, int V> __device__ __forceinline__ void shift_down(float (&r)[2 * V], int s) {
  if constexpr (B > 0) {
    const bool take = (s & B) != 0;
#pragma unroll
    for (int c = 0; c < V + B - 1; ++c) r[c] = take ? r[c + B] : r[c];
    shift_down<B / 2, V>(r, s);
  }
}

// This thread's chunk sums of statistic k, in column order and then pairwise over the V
// columns (see above). tail: for the last lane of a warp before the row's last, its last
// step's chunk's columns V - s .. V - 1 (the next warp's first vector at positions 0 ..
// s - 1), else zeros. Called by every thread of the warp.
template <int T, int V, class Sums>
__device__ __forceinline__ float column_order_total(const float (&acc)[V], const float (&tail)[V], int lane, int s,
                                                   const Sums& op, int k) {
  constexpr int Wd = T < 32 ? T : 32;
  float r[2 * V];
#pragma unroll
  for (int q = 0; q < V; ++q) {
    r[q] = acc[q];
    r[V + q] = op(k, __shfl_sync(0xffffffffu, acc[q], (lane % Wd + 1) % Wd, Wd), tail[q]);
  }
  shift_down<V / 2, V>(r, s);
#pragma unroll
  for (int w = V / 2; w > 0; w /= 2)
#pragma unroll
    for (int c = 0; c < w; ++c) r[c] += r[c + w];
  return r[0];
}

// This thread's totals of a row's values in column order (add_step, column_order_total).
// get(i, d): vector i of the thread's frame; value_of(col, d): d (the vector at column col)
// made the values to sum, zero outside the row; h_at(col, d): the vector at column col from
// memory. The last lane of a warp before the row's last takes the end of its last chunk from
// the next warp's first vector so (an L1 hit: that warp loaded it).
template <int T, int P, int V, class Cols, class Get, class HAt, class Value, class Sums>
__device__ __forceinline__ void framed_totals(const Cols& cols, const Get& get, const HAt& h_at, const Value& value_of,
                                              const Sums& op, float (&total)[Sums::kStats]) {
  const int s = cols.s;
  float acc[Sums::kStats][V], tail[V];
#pragma unroll
  for (int q = 0; q < V; ++q) {
    tail[q] = 0.f;
#pragma unroll
    for (int k = 0; k < Sums::kStats; ++k) acc[k][q] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (cols.inside(i)) {
      float d[V];
      get(i, d);
      value_of(cols(i), d);
      add_step<T, V>(acc, d, i, cols.lane, s, op);
    }
  }
  if constexpr (T > 32) {
    const int w = cols.lane / 32;
    const int col = (w + 1) * 32 * P * V - s;  // the next warp's first vector
    if (cols.lane % 32 == 31 && w + 1 < T / 32 && s > 0 && col < cols.n) {
      h_at(col, tail);
      value_of(col, tail);
#pragma unroll
      for (int q = 0; q < V; ++q) tail[q] = q < s ? tail[q] : 0.f;
    }
  }
#pragma unroll
  for (int k = 0; k < Sums::kStats; ++k) total[k] = column_order_total<T, V>(acc[k], tail, cols.lane, s, op, k);
}

// Rows in registers, one block's T threads a row (R rows a block), thread `lane` holding
// the P frame vectors of FramedCols::frame. The per-column vectors are held across a
// block's rows where they fit (realigned again where a row's s
// differs from the last row's: launches of framed instances take a multiple of V blocks,
// so a block's rows of a dense batch share one s); else loaded per vector. The next row is
// loaded before this row's reductions where it fits. kAlike: the kernel for calls whose row
// tensors all start at x's row's element of their 16 bytes (dispatch: _alike_rows); its
// rows store nothing through the bounce slots, and its code has no path that would. Both
// kernels compute a row's outputs alike, bit for bit: only where they are stored differs.
template <class K, bool kAlike>
__device__ __forceinline__ void framed_rows(const Params& p) {
  using X = typename K::X;
  using Y = typename K::Y;
  using Span = SpanOf<K>;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, V = K::kVec, P = K::kRepeat;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kAdd = K::kFusedAdd != 0;
  constexpr bool kPrologue = kAdd || K::kXBias;
  constexpr bool kHold = !K::kLean && Columns<K, P, V>::kWords <= 32;
  constexpr bool kKeep = K::kKeepOutputs;
  // The sums and the kept centring take every vector unbranched (EveryVector: x is zero
  // outside the row as load_row leaves it, and so are the held columns, loaded for every
  // vector), and so does RMSNorm's maximum where its columns are held; LayerNorm's rows that
  // do not keep their outputs, and LayerNorm's maximum, test each vector: unbranched, ptxas
  // spilled there (fused adds, quant, kept fp16 rows) or the rows ran slower (unfused).
  constexpr bool kEvery = !kLN || kKeep;
  constexpr bool kEveryMax = !kLN && kHold;
  // (rows that keep their outputs load the next row after the stores: ahead, it spilled)
  constexpr bool kPrefetchRow = !K::kLean && (kAdd ? 2 : 1) * Packed<X, P, V>::kWords <= 16 && !kKeep;
  constexpr int S = scratch_sets<K>();
  static_assert(K::kCluster == 1 && !K::kStaged, "framed rows: in registers, one block a row");
  static_assert(!kKeep || (kLN && K::kQuant == Quant::DYNAMIC), "kept outputs: LayerNorm's dynamic quant");
  __shared__ ReduceScratch<T, R, 1> sh_max[S];
  __shared__ ReduceScratch<T, R, 1> sh_mean[S];
  __shared__ ReduceScratch<T, R, stat_values<K>()> sh_stats[S];
  // rows of whole warps store rows that start unlike x's through each warp's bounce slots,
  // P steps of 33 in dynamic shared memory (Recipe.image_bytes)
  constexpr bool kWarps = T % 32 == 0;
  // K::kFloatColumns: the held columns' float copy first (Recipe.column_bytes), then the slots
  constexpr int kColumnWords = K::kColumnBytes / static_cast<int>(sizeof(uint4));
  static_assert(!K::kFloatColumns || (Columns<K, P, V>::kWords <= 32 && !K::kLean), "float columns: of held columns");
  extern __shared__ uint4 stage_words[];
  uint4* const slots = stage_words + kColumnWords + (kWarps ? threadIdx.x / 32 * P * 33 : 0);
  const int lane = threadIdx.x % T;
  const int sub = threadIdx.x / T;
  const i64 stride = Span::groups() * static_cast<i64>(R);
  const int n = p.n;
  auto row_x = [&](i64 row) { return static_cast<const X*>(p.x) + row_offset(row, p.inner, p.x_so, p.x_si); };
  auto row_r = [&](i64 row) {
    return static_cast<const X*>(p.residual) + (kAdd ? row_offset(row, p.inner, p.r_so, p.r_si) : 0);
  };
  // where a row's first element lies in its 16 bytes (V elements of x's; of y's precision
  // for y, whose vectors hold as many elements)
  auto skew = [](const void* row, int size) {
    return static_cast<int>(reinterpret_cast<unsigned long long>(row) / size % V);
  };
  // row base + sub's vectors into `in`, its s into s: the steps inside the row in every
  // lane by plain 16-byte loads, the step holding its end by load_framed
  auto load_row = [&](RowIn<K, P, V>& in, int& s, i64 base) {
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const X* xr = row_x(live ? row : 0);
    const X* rr = row_r(live ? row : 0);
    s = skew(xr, sizeof(X));
    const bool r_alike = kAlike || !kAdd || skew(rr, sizeof(X)) == s;
    const FramedCols<T, P, V> cols{lane, n, s};
    const int full = live ? cols.full() : 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (i < full) {
        in.x.template load<K::kRowCache>(i, xr + cols(i));
        if constexpr (kAdd) {
          if (r_alike) {
            in.r.template load<K::kRowCache>(i, rr + cols(i));
          } else {
            load_framed<K::kRowCache>(in.r, i, rr, cols(i), n, false);
          }
        }
      } else if (live && cols.inside(i)) {
        load_framed<K::kRowCache>(in.x, i, xr, cols(i), n, true);
        if constexpr (kAdd) load_framed<K::kRowCache>(in.r, i, rr, cols(i), n, r_alike);
      } else {
        in.x.zero(i);
        if constexpr (kAdd) in.r.zero(i);
      }
    }
    if (lane == 0 && s != 0) {  // (the rest of the frame: zeros already)
      set_outside(in.x, 0, s, V, 0u);
      if (kAdd && r_alike) set_outside(in.r, 0, s, V, 0u);
    }
  };
  const float qmul = static_qmul<K>(p);
  Columns<K, kHold ? P : 1, V> held;
  FloatColumns<K, P, V> floats;  // (K::kFloatColumns) held's copy, rewritten with it
  int held_s = -1;
  i64 base = Span::group() * static_cast<i64>(R);
  RowIn<K, P, V> in;
  int s = 0;
  if (base < p.rows) load_row(in, s, base);
  for (int ph = 0; base < p.rows; base += stride, ph = (ph + 1) % S) {
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const bool more = base + stride < p.rows;
    const FramedCols<T, P, V> cols{lane, n, s};
    const auto pass = every_vector<kEvery>(cols);
    const auto max_pass = every_vector<kEveryMax>(cols);
    if constexpr (kHold) {
      if (s != held_s) {
#pragma unroll
        for (int i = 0; i < P; ++i)
          if (pass.inside(i)) load_framed_columns(held, p, i, cols(i));
        if constexpr (K::kFloatColumns) floats = FloatColumns<K, P, V>(stage_words, held);
        held_s = s;
      }
    }
    RowIn<K, P, V> next;
    int s_next = 0;
    if constexpr (kPrefetchRow) {
      if (more) load_row(next, s_next, base + stride);
    }
    if constexpr (kPrologue) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (cols.inside(i)) {
          if constexpr (kHold) {
            fuse<K, P, V, P>(in.x, in.r, i, held, i, nullptr);
          } else {
            Columns<K, 1, V> one;
            if constexpr (K::kXBias) load_skewed(one.bias, 0, static_cast<const X*>(p.x_bias), cols(i), n, 0.f);
            fuse<K, P, V, 1>(in.x, in.r, i, one, 0, nullptr);
          }
        }
      }
      if (K::kFusedAdd == 1 && live) {
        store_row<kAlike, X, P>(static_cast<X*>(p.res_out) + row * n, cols, slots, [&](int i) { return words_of(in.x, i); });
      }
    }
    // h at column col of the frame, from memory: x there, and the residual and x-bias added
    // as fuse adds them (the bits of in.x's vector there)
    auto h_at = [&](int col, float (&d)[V]) {
      RowIn<K, 1, V> one;
      if (live) {
        load_framed<Cache::NORMAL>(one.x, 0, row_x(row), col, n, true);
        if constexpr (kAdd) load_framed<Cache::NORMAL>(one.r, 0, row_r(row), col, n, skew(row_r(row), sizeof(X)) == s);
      } else {
        one.x.zero(0);
        one.r.zero(0);
      }
      if constexpr (kPrologue) {
        Columns<K, 1, V> bias;
        if constexpr (K::kXBias) load_skewed(bias.bias, 0, static_cast<const X*>(p.x_bias), col, n, 0.f);
        fuse<K, 1, V, 1>(one.x, one.r, 0, bias, 0, nullptr);
      }
      one.x.get(0, d);
    };
    auto get = [&](int i, float (&d)[V]) { in.x.get(i, d); };
    // The row's sums in column order: RMSNorm's of h^2; LayerNorm's of h, then of h - mean
    // and its squares (mean + their mean: the mean to rounding): two passes over the
    // registers, and no shift whose choice could depend on s.
    // kKeep (K::kKeepOutputs, LayerNorm's dynamic quant): the row as floats less its mean from
    // the first sums on, which the second sums and the outputs take, and then the outputs its
    // maximum is taken from, for the stores (as register_rows keeps them): x converted once,
    // the outputs computed once.
    RegisterFloats<kKeep ? P : 1, V> kept;
    float mean = 0.f, s1[1] = {0.f}, s2[2];
    if constexpr (kLN) {
      framed_totals<T, P, V>(pass, get, h_at, [](int, float(&)[V]) {}, SumOf{}, s1);
      mean = row_mean<T, R, 1>(s1[0], sh_mean[ph], n);
      if constexpr (kKeep) {
        kept.centre(pass, get, mean);
        auto inside_only = [&](int col, float (&d)[V]) {  // zeros outside the row
          if (!(col >= 0 && col + V <= n)) {
#pragma unroll
            for (int j = 0; j < V; ++j) d[j] = col + j >= 0 && col + j < n ? d[j] : 0.f;
          }
        };
        auto tail_at = [&](int col, float (&d)[V]) {
          h_at(col, d);
#pragma unroll
          for (int j = 0; j < V; ++j) d[j] -= mean;
        };
        framed_totals<T, P, V>(pass, [&](int i, float (&d)[V]) { kept.get(i, d); }, tail_at, inside_only,
                               SumAndSquaresOf{}, s2);
      } else {
        auto less_mean = [&](int col, float (&d)[V]) {  // h - mean, zeros outside the row
          if (col >= 0 && col + V <= n) {
#pragma unroll
            for (int j = 0; j < V; ++j) d[j] -= mean;
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) d[j] = col + j >= 0 && col + j < n ? d[j] - mean : 0.f;
          }
        };
        framed_totals<T, P, V>(pass, get, h_at, less_mean, SumAndSquaresOf{}, s2);
      }
    } else {
      framed_totals<T, P, V>(pass, get, h_at, [](int, float(&)[V]) {}, SquaresOf{}, s1);
      s2[0] = 0.f;
      s2[1] = s1[0];
    }
    // The outputs of vector i (from h minus the mean); those outside the row are zero: its
    // per-column vectors read zero there.
    auto outputs_of = [&](int i, const Stats& st, float (&out)[V]) {
      float d[V];
      if constexpr (kKeep) {
        kept.get(i, d);  // h - mean, and st.shift is that mean
      } else {
        in.x.get(i, d);
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] -= st.shift;
      }
      if constexpr (K::kFloatColumns) {
        outputs<K, P, V>(out, p, st, d, floats, i);
      } else if constexpr (kHold) {
        outputs<K, P, V>(out, p, st, d, held, i);
      } else {
        Columns<K, 1, V> one;
        load_framed_columns(one, p, 0, cols(i));
        outputs<K, 1, V>(out, p, st, d, one, 0);
      }
    };
    // (kKeep rows are LayerNorm's, whose one call here is the maximum of the outputs they keep)
    auto row_absmax = [&](const Stats& st) {
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (max_pass.inside(i)) {
          float out[V];
          outputs_of(i, st, out);
          if constexpr (kLN) {
            if (!cols.whole(i)) cols.fill_outside(i, out, 0.f);
          }
          if constexpr (kKeep) kept.put(i, out);
#pragma unroll
          for (int j = 0; j < V; ++j) m = max_nan(m, fabsf(out[j]));
        }
      }
      return m;
    };
    // merged_max: the outputs' maximum with rstd = 1 (exactly the unscaled products)
    const float m = merged_max<K>() ? row_absmax(Stats{0.f, 0.f, 1.f, 0.f, false}) : 0.f;
    const Stats st = row_stats<K, T, R, 1>(mean, s2[0], s2[1], m, sh_stats[ph], n, p.eps);
    float mul = qmul;
    if constexpr (merged_max<K>()) {
      mul = dynamic_scale<K>(p, st.amax, row, live && lane == 0);
    } else if constexpr (K::kQuant == Quant::DYNAMIC) {
      float mx[1] = {row_absmax(st)};
      row_reduce<Max, T, R, 1, 1>(mx, sh_max[ph]);
      mul = dynamic_scale<K>(p, mx[0], row, live && lane == 0);
    }
    if (live) {
      if (lane == 0) save_stats<K>(p, row, st);
      Y* y = static_cast<Y*>(p.y) + row * n;
      store_row<kAlike, Y, P>(y, cols, slots, [&](int i) {
        float out[V];
        if constexpr (kKeep) {
          kept.get(i, out);
        } else {
          outputs_of(i, st, out);
        }
        if constexpr (K::kQuant != Quant::NONE) {
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] *= mul;
        }
        return output_words<Y, V>(out);
      });
    }
    if constexpr (kPrefetchRow) {
      in = next;
      s = s_next;
    } else if (more) {
      load_row(in, s, base + stride);
    }
  }
  Span::finish();
}

}  // namespace normgen
