// A thread's share of a row: where its vectors lie (RowCols), the row as loaded (RowIn),
// and floats kept between passes over it (RegisterFloats, SharedFloats).
#pragma once
#include "vectors.cuh"

namespace normgen {

// Where a thread's vectors of a row lie: vector i at column cols(i), inside the row of n
// columns unless it is padding. kFull (a whole-row kernel, Entry::WHOLE): N is the
// tile's whole row, so every vector is inside, known at compile time: every pass loses its
// per-vector comparisons and the branches around each vector's work, and the compiler
// issues all the vectors' loads (shared memory, per-column vectors) ahead of their
// arithmetic.
template <bool kFull, class ColOf> struct RowCols {
  static constexpr bool kPartial = false;  // every vector inside holds V of the row's columns
  ColOf col_of;
  int n;
  __device__ __forceinline__ auto operator()(int i) const { return col_of(i); }
  __device__ __forceinline__ bool inside(int i) const { return kFull || col_of(i) < n; }
};
template <bool kFull, class ColOf>
__device__ __forceinline__ RowCols<kFull, ColOf> row_cols(const ColOf& col_of, int n) {
  return {col_of, n};
}

// A thread's vectors (RowCols, FramedCols), every one taken as inside the row: for a pass
// over values that are zero outside it, where a zero adds nothing to a sum or a maximum, so
// that no vector needs a branch around it and the compiler may share work between passes.
template <class Cols> struct EveryVector : Cols {
  using Of = Cols;
  __device__ __forceinline__ bool inside(int) const { return true; }
};
template <bool kEvery, class Cols>
__device__ __forceinline__ typename Pick<kEvery, EveryVector<Cols>, Cols>::type every_vector(const Cols& cols) {
  return {cols};
}

// Whether a pass over Cols leaves the vectors outside the row uncentred (shift_of): every
// vector of a row of whole vectors. (Framed rows sum only the row's columns, framed_totals:
// their vectors past the row are centred like the rest, which costs no select; with one,
// ptxas spilled fp16 rows that keep their outputs.)
template <class Cols> constexpr bool kUncentredOutside = false;
template <class Cols> constexpr bool kUncentredOutside<EveryVector<Cols>> = !Cols::kPartial;

// The shift vector i is centred on where kUncentredOutside<Cols>: none for a vector outside
// the row, whose zeros then stay zeros and add nothing to the sums. (Callers test the trait
// themselves: a call for other vectors, though it returned the shift, cost ragged rows a
// stack frame in their rolled far-row pass.)
template <class Cols>
__device__ __forceinline__ float shift_of(const Cols& cols, int i, float shift) {
  static_assert(kUncentredOutside<Cols>, "only where the vectors outside hold zeros");
  return cols.Cols::Of::inside(i) ? shift : 0.f;
}

// A thread's share of one row: x, and with a fused add the residual, as loaded.
template <class K, int P, int V> struct RowIn {
  Packed<typename K::X, P, V> x, r;
};

// Vector i of a thread's share of a row: x (and the residual) at column col of rows xr
// (rr), or zeros for padding and rows past the end (!live), loaded with kCache.
template <class K, int P, int V, Cache kCache = Cache::NORMAL>
__device__ __forceinline__ void load_in(RowIn<K, P, V>& in, int i, const typename K::X* xr, const typename K::X* rr,
                                        i64 col, bool live) {
  if (live) {
    in.x.template load<kCache>(i, xr + col);
    if constexpr (K::kFusedAdd != 0) in.r.template load<kCache>(i, rr + col);
  } else {
    in.x.zero(i);
    if constexpr (K::kFusedAdd != 0) in.r.zero(i);
  }
}

// A thread's P vectors of floats kept between passes over a row (the row centred, or its
// outputs): in registers, or in its block's shared memory (staged rows).
template <int P, int V> struct RegisterFloats {
  float v[P][V];
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = v[i][j];
  }
  __device__ __forceinline__ void put(int i, const float (&d)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[i][j] = d[j];
  }
  // v[i] = vector_of(i) - shift for the vectors inside the row (see shift_of for every
  // vector). (A template, not a generic lambda: the device's NVRTC takes a generic lambda in
  // device code for a host function.)
  template <class Cols, class Of>
  __device__ __forceinline__ void centre(const Cols& cols, const Of& vector_of, float shift) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (cols.inside(i)) {
        vector_of(i, v[i]);
        float k = shift;
        if constexpr (kUncentredOutside<Cols>) k = shift_of(cols, i, shift);
#pragma unroll
        for (int j = 0; j < V; ++j) v[i][j] -= k;
      }
    }
  }
};
// In shared memory, in chunks of Q floats (16 bytes at most): chunk c of vector i of thread
// t of T at ((i * V / Q + c) * T + t) * Q, so that a warp's accesses are consecutive.
template <int T, int V> struct SharedFloats {
  static constexpr int Q = V < 4 ? V : 4;
  using Chunk = Pack<float, Q>;
  float* base;  // this thread's first chunk
  __device__ __forceinline__ Chunk* at(int i, int c) const {
    return reinterpret_cast<Chunk*>(base + (i * (V / Q) + c) * T * Q);
  }
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
#pragma unroll
    for (int c = 0; c < V / Q; ++c) {
      const Chunk q = *at(i, c);
#pragma unroll
      for (int j = 0; j < Q; ++j) d[c * Q + j] = q.v[j];
    }
  }
  __device__ __forceinline__ void put(int i, const float (&d)[V]) const {
#pragma unroll
    for (int c = 0; c < V / Q; ++c) {
      Chunk q;
#pragma unroll
      for (int j = 0; j < Q; ++j) q.v[j] = d[c * Q + j];
      *at(i, c) = q;
    }
  }
};

}  // namespace normgen
