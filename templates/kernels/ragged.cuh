// Ragged rows (K::kRagged): rows that start anywhere and have any length, moved in aligned
// chunks of V elements while each thread keeps the aligned pipelines' fixed columns
// (i*C*T + lane)*V -- so a row's sums, and its results, do not depend on where it lies.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "columns.cuh"

namespace normgen {

// Words of V elements of T: 4 (16-byte chunks of the float types), 2 or 1 (8 or 4 codes of
// a byte, beside 16-bit or fp32 rows).
template <typename T, int V> __host__ __device__ constexpr int chunk_words() {
  return V * static_cast<int>(sizeof(T)) / 4;
}

// Elements [e, e + V) of the 2V elements held in ab (a's V, then b's), 0 <= e < V: the
// word shift by a two-level select (e is the same for a whole row, not known at compile
// time), then a funnel shift by the part of a word.
template <typename T, int V>
__device__ __forceinline__ void window(const uint32_t (&ab)[2 * chunk_words<T, V>()], int e,
                                       uint32_t (&out)[chunk_words<T, V>()]) {
  constexpr int W = chunk_words<T, V>(), E = 4 / sizeof(T);
  static_assert(W == 1 || W == 2 || W == 4, "4-, 8- or 16-byte chunks");
  const int ws = e / E, bits = (e % E) * 8 * static_cast<int>(sizeof(T));
  uint32_t r[W + 1];  // r[q] = ab[q + ws]
  if constexpr (W == 4) {
    uint32_t t[7];
#pragma unroll
    for (int m = 0; m < 7; ++m) t[m] = ws & 1 ? ab[m + 1] : ab[m];
#pragma unroll
    for (int q = 0; q <= W; ++q) r[q] = ws & 2 ? t[q + 2] : t[q];
  } else if constexpr (W == 2) {
#pragma unroll
    for (int q = 0; q <= W; ++q) r[q] = ws & 1 ? ab[q + 1] : ab[q];
  } else {  // one word: e < V <= E, no word shift
    r[0] = ab[0];
    r[1] = ab[1];
  }
#pragma unroll
  for (int q = 0; q < W; ++q) out[q] = E == 1 ? r[q] : __funnelshift_r(r[q], r[q + 1], bits);
}

template <int Bytes> struct RawOf;
template <> struct RawOf<1> { using type = unsigned char; };
template <> struct RawOf<2> { using type = unsigned short; };
template <> struct RawOf<4> { using type = uint32_t; };

// A row of T read from anywhere: `base` is the aligned chunk holding column 0, at element
// `s` of it. Column c lies in the chunk at base + (c + s) / V * V.
template <typename T, int V> struct RaggedIn {
  static constexpr int kWords = chunk_words<T, V>();
  static_assert(kWords == 4, "rows move in 16-byte chunks");
  using Raw = typename RawOf<sizeof(T)>::type;
  const T* base;
  int s, n;

  __device__ __forceinline__ RaggedIn(const T* row, int n_) : n(n_) {
    s = static_cast<int>((reinterpret_cast<unsigned long long>(row) / sizeof(T)) % V);
    base = row - s;
  }
  // The chunk at base + at (a multiple of V): the row's columns at - s .. at - s + V - 1.
  // Whole where it ends within the row (what precedes a row in its first chunk is of the
  // same allocation, which starts chunk-aligned); else the row's elements of it one by one,
  // zeros elsewhere (past the row's end may lie past the allocation's); zeros where !live.
  __device__ __forceinline__ void chunk(int at, bool live, uint32_t (&w)[kWords]) const {
    const int first = at - s;
    if (live && first + V <= n) {
      const uint4 q = *reinterpret_cast<const uint4*>(base + at);
      w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
      return;
    }
#pragma unroll
    for (int k = 0; k < kWords; ++k) w[k] = 0u;
    if (live && first < n) {  // unrolled: the loads issued together, not one latency each
      constexpr int E = 4 / sizeof(T);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (first + j >= 0 && first + j < n) {
          const uint32_t bits = reinterpret_cast<const Raw*>(base)[at + j];
          w[j / E] |= bits << ((j % E) * 8 * sizeof(T));
        }
      }
    }
  }
  // The chunk at base + at, which lies inside the row: whole (zeros where !live).
  __device__ __forceinline__ void whole(int at, bool live, uint32_t (&w)[kWords]) const {
    const uint4 q = live ? *reinterpret_cast<const uint4*>(base + at) : make_uint4(0u, 0u, 0u, 0u);
    w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
  }
  // The chunk at base + at into shared memory at `to`, as chunk() reads it: whole by
  // cp.async (which the caller waits for), else through registers (for staged rows this
  // measured faster than copy_chunk_async's partial copies: docs/perf-notes.md, ragged rows).
  __device__ __forceinline__ void copy_chunk(uint4* to, int at, bool live) const {
    if (live && at - s + V <= n) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(to))),
                   "l"(__cvta_generic_to_global(base + at))
                   : "memory");
    } else {
      uint32_t w[kWords];
      chunk(at, live, w);
      *to = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  // The row's bytes in the chunk at base + at: 16 inside the row (what precedes the row in
  // its first chunk counts), fewer at its end, 0 past it.
  __device__ __forceinline__ int bytes_in(int at) const {
    return min(max((n - (at - s)) * static_cast<int>(sizeof(T)), 0), 16);
  }
  // The chunk at `from` (in this row) into shared memory at address `to` by cp.async, which
  // the caller waits for: whole (kWhole), else its first `bytes` bytes and zeros.
  template <bool kWhole>
  __device__ __forceinline__ static void copy_async(unsigned to, const T* from, int bytes = 16) {
    const size_t global = __cvta_generic_to_global(from);
    if constexpr (kWhole) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(global) : "memory");
    } else {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(global), "r"(bytes) : "memory");
    }
  }
  // A vector's columns from its chunk *a and the chunk after it *b (read only where the row
  // does not start on a chunk: s != 0), both as copied into shared memory.
  __device__ __forceinline__ void join(const uint4* a, const uint4* b, uint32_t (&w)[kWords]) const {
    const uint4 qa = *a;
    w[0] = qa.x; w[1] = qa.y; w[2] = qa.z; w[3] = qa.w;
    if (s != 0) {
      const uint4 qb = *b;
      const uint32_t ab[2 * kWords] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
      window<T, V>(ab, s, w);
    }
  }
  // Columns col .. col + V - 1 (zeros past the row), read by this thread alone.
  __device__ __forceinline__ void vector(int col, bool live, uint32_t (&w)[kWords]) const {
    uint32_t ab[2 * kWords], a[kWords], b[kWords];
    chunk(col, live, a);
    chunk(col + V, live && s != 0, b);
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      ab[k] = a[k];
      ab[kWords + k] = b[k];
    }
    window<T, V>(ab, s, w);
  }
  // The same for the W lanes of a segment whose vectors lie side by side (lane l at column
  // col, lane l + 1 at col + V), in steps, so that a thread's loads of several vectors are
  // all issued before any is waited for: fetch loads the chunk of lane l's vector into a
  // (kWhole: every lane's vector lies inside the row, and so does its chunk); `after`, in
  // the last lane, the chunk after it into b (which the other lanes take from their
  // neighbour); realign, in all W lanes, pairs each chunk with the next and shifts the pair
  // into columns.
  template <bool kWhole>
  __device__ __forceinline__ void fetch(int col, bool live, uint32_t (&a)[kWords]) const {
    if (kWhole) {
      whole(col, live, a);
    } else {
      chunk(col, live, a);
    }
  }
  template <int W>
  __device__ __forceinline__ void after(int col, int l, bool live, uint32_t (&b)[kWords]) const {
    if (l == W - 1 && s != 0) chunk(col + V, live, b);
  }
  template <int W>
  __device__ __forceinline__ void realign(int l, const uint32_t (&a)[kWords], const uint32_t (&b)[kWords],
                                          uint32_t (&w)[kWords]) const {
    uint32_t ab[2 * kWords];
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      ab[k] = a[k];
      const uint32_t next = __shfl_sync(0xffffffffu, a[k], (l + 1) % W, W);
      ab[kWords + k] = l == W - 1 ? b[k] : next;
    }
    window<T, V>(ab, s, w);
  }
};

// A row of T written anywhere (base and s as in RaggedIn), by the W lanes of a segment whose
// vectors lie side by side, all of which call store: lane l writes the chunk its vector
// starts in, completed with lane l - 1's last s elements. Lane 0 gets lane W - 1's instead
// (the previous vector lies in another segment): it writes its own part of its chunk, and
// lane W - 1's part of the chunk after lane W - 1's vector, at W * V columns past its own --
// whose other part that chunk's lane 0 writes. Partial chunks and the row's ends go element
// by element: nothing outside the row is written.
template <typename T, int V> struct RaggedOut {
  static constexpr int kWords = chunk_words<T, V>();
  using Raw = typename RawOf<sizeof(T)>::type;
  T* base;
  int s, n;

  __device__ __forceinline__ RaggedOut(T* row, int n_) : n(n_) {
    s = static_cast<int>((reinterpret_cast<unsigned long long>(row) / sizeof(T)) % V);
    base = row - s;
  }
  // store<W, kWhole> for a step: kWhole where every lane's vector lies inside the row (`all`,
  // the same in all lanes of a row).
  template <int W>
  __device__ __forceinline__ void store_step(bool all, int col, int l, bool live, const uint32_t (&mine)[kWords]) const {
    if (all) {
      store<W, true>(col, l, live, mine);
    } else {
      store<W, false>(col, l, live, mine);
    }
  }
  // kWhole: every lane's vector lies inside the row (then so do the chunks they write).
  template <int W, bool kWhole>
  __device__ __forceinline__ void store(int col, int l, bool live, const uint32_t (&mine)[kWords]) const {
    uint32_t ab[2 * kWords], c[kWords];
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      ab[k] = __shfl_sync(0xffffffffu, mine[k], (l + W - 1) % W, W);
      ab[kWords + k] = mine[k];
    }
    window<T, V>(ab, (V - s) % V, c);
#pragma unroll
    for (int k = 0; k < kWords; ++k) c[k] = s == 0 ? mine[k] : c[k];
    const int first = col - s;  // the chunk's first column
    const bool split = l == 0 && s != 0;
    if (!live) return;
    // inside: the chunk lies in the row (split: this lane's part of it, and the part of the
    // chunk after lane W - 1's vector that lane W - 1 holds)
    const bool inside = kWhole || (split ? col + W * V <= n : first + V <= n);
    if (inside && !split) {
      store_bytes<kWords * 4>(base + col, c, 0);
    } else if (inside) {  // this chunk from byte a on, the chunk W * V columns on up to byte a
      const int a = s * static_cast<int>(sizeof(T));
      store_bytes<kWords * 4>(base + col, c, a);
      store_below<kWords * 4>(base + col + W * V, c, a);
    } else if (split || first < n) {  // the row's end: element by element
      unsigned long long lo = c[0], hi = 0;  // the chunk's bytes 0-7 and 8-15
      if constexpr (kWords >= 2) lo |= static_cast<unsigned long long>(c[1]) << 32;
      if constexpr (kWords == 4) hi = c[2] | static_cast<unsigned long long>(c[3]) << 32;
#pragma unroll 1
      for (int j = 0; j < V; ++j) {
        const int past = split && j < s ? W * V : 0;
        const int at = first + past + j;
        const int bit = j * 8 * static_cast<int>(sizeof(T));
        const unsigned long long bits = bit < 64 ? lo >> bit : hi >> (bit - 64);
        if (at >= 0 && at < n) reinterpret_cast<Raw*>(base)[col + past + j] = static_cast<Raw>(bits);
      }
    }
  }

 private:
  // Bytes [a, B) of the B bytes in c (B = 4, 8 or 16) to the chunk at `to`, in aligned
  // accesses of 1 to 8 bytes (at most four; one of B bytes where a is 0).
  template <int B>
  __device__ __forceinline__ static void store_bytes(T* to, const uint32_t (&c)[B / 4], int a) {
    char* p = reinterpret_cast<char*>(to);
    if (a == 0) {
      if constexpr (B == 16) {
        *reinterpret_cast<uint4*>(p) = make_uint4(c[0], c[1], c[2], c[3]);
      } else if constexpr (B == 8) {
        *reinterpret_cast<uint2*>(p) = make_uint2(c[0], c[1]);
      } else {
        *reinterpret_cast<uint32_t*>(p) = c[0];
      }
      return;
    }
    if (a & 1) {
      p[a] = static_cast<char>(byte_at<B>(c, a));
      a += 1;
    }
    if ((a & 2) && a < B) {
      *reinterpret_cast<unsigned short*>(p + a) = static_cast<unsigned short>(word_at<B>(c, a / 4) >> (8 * (a & 3)));
      a += 2;
    }
    if ((a & 4) && a < B) {
      *reinterpret_cast<uint32_t*>(p + a) = word_at<B>(c, a / 4);
      a += 4;
    }
    if constexpr (B == 16) {
      if (a == 8) *reinterpret_cast<uint2*>(p + 8) = make_uint2(c[2], c[3]);
    }
  }
  // Bytes [0, a) of c to the chunk at `to` (0 < a < B).
  template <int B>
  __device__ __forceinline__ static void store_below(T* to, const uint32_t (&c)[B / 4], int a) {
    char* p = reinterpret_cast<char*>(to);
    int at = 0;
    if constexpr (B == 16) {
      if (a & 8) {
        *reinterpret_cast<uint2*>(p) = make_uint2(c[0], c[1]);
        at = 8;
      }
    }
    if (a & 4) {
      *reinterpret_cast<uint32_t*>(p + at) = word_at<B>(c, at / 4);
      at += 4;
    }
    if (a & 2) {
      *reinterpret_cast<unsigned short*>(p + at) = static_cast<unsigned short>(word_at<B>(c, at / 4) >> (8 * (at & 3)));
      at += 2;
    }
    if (a & 1) p[at] = static_cast<char>(byte_at<B>(c, at));
  }
  template <int B>
  __device__ __forceinline__ static uint32_t word_at(const uint32_t (&c)[B / 4], int k) {
    if constexpr (B == 16) {
      const uint32_t lo = k & 1 ? c[1] : c[0], hi = k & 1 ? c[3] : c[2];
      return k & 2 ? hi : lo;
    } else if constexpr (B == 8) {
      return k & 1 ? c[1] : c[0];
    } else {
      return c[0];
    }
  }
  template <int B>
  __device__ __forceinline__ static uint32_t byte_at(const uint32_t (&c)[B / 4], int a) {
    return (word_at<B>(c, a / 4) >> (8 * (a & 3))) & 0xffu;
  }
};

// V float outputs as words of Y (quantized codes four to a word).
template <typename Y, int V>
__device__ __forceinline__ void to_words(const float (&out)[V], uint32_t (&w)[chunk_words<Y, V>()]) {
  if constexpr (sizeof(Y) == 1) {
#pragma unroll
    for (int k = 0; k < V / 4; ++k) w[k] = pack4<Y>(out[4 * k], out[4 * k + 1], out[4 * k + 2], out[4 * k + 3]);
  } else if constexpr (sizeof(Y) == 2) {
#pragma unroll
    for (int k = 0; k < V / 2; ++k) w[k] = float_to_bits<Y>(out[2 * k]) | (float_to_bits<Y>(out[2 * k + 1]) << 16);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) w[k] = __float_as_uint(out[k]);
  }
}

// A ragged row's columns: vector i of a thread at column (i * kStride + lane) * V, holding
// count(i) of the row's n columns (the last vector inside may hold fewer than V). Steps
// below `whole` hold V of the row's columns in every lane, step `whole` the rest, later
// steps none. kSegment: counted for the W lanes of this lane's segment (position l of W,
// side by side), which take each step together: segments before the row's end take more
// steps whole, and those past it skip the last (takes, ends); the same in every lane of a
// warp (its segments are rows at the same columns where W < 32). Else counted for the row:
// the same in all threads (branches on them need no reconvergence).
template <int kStride, int V, int W, bool kSegment> struct RaggedCols {
  static constexpr bool kPartial = true;  // a vector may hold columns past the row's end
  int lane, n, whole;
  int steps;  // (kSegment) the steps holding any of the segment's columns: whole or whole + 1
  __device__ __forceinline__ RaggedCols(int lane_, int l, int n_) : lane(lane_), n(n_) {
    if constexpr (kSegment) {
      const int first = (lane - l) * V;  // the segment's first column at step 0
      const int room = n - first - W * V;
      whole = room < 0 ? 0 : room / (kStride * V) + 1;
      steps = whole + (whole * kStride * V + first < n ? 1 : 0);
    } else {
      whole = n / (kStride * V);
      steps = whole + 1;
    }
  }
  static constexpr int kStep = kStride * V;  // columns from a thread's vector to its next
  __device__ __forceinline__ int operator()(int i) const { return (i * kStride + lane) * V; }
  __device__ __forceinline__ bool inside(int i) const { return (*this)(i) < n; }
  __device__ __forceinline__ int count(int i) const { return min(max(n - (*this)(i), 0), V); }
  // d's columns past the row's end set to `fill` (what adds nothing to sums around it)
  __device__ __forceinline__ void fill_outside(int i, float (&d)[V], float fill) const {
    const int c = count(i);
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = j < c ? d[j] : fill;
  }
  // Whether step i is taken (holds any of the segment's columns, or of the row's).
  __device__ __forceinline__ bool takes(int i) const {
    if constexpr (kSegment) {
      return i < steps;
    } else {
      return i <= whole;
    }
  }
  // Whether step i >= whole, the step holding the row's end, is taken (per row: i == whole,
  // which compiles to other code than takes' i <= whole there).
  __device__ __forceinline__ bool ends(int i) const {
    if constexpr (kSegment) {
      return i < steps;
    } else {
      return i == whole;
    }
  }
};

}  // namespace normgen
