// Per-column vectors: gamma, beta, x-bias and smooth scale, read like the row.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "row.cuh"

namespace normgen {

// Packed like the row. Pipelines hold them in registers for all of a block's rows when
// they fit the budget (they are the same for every row), else load them per vector.
// Where a pipeline keeps gamma and beta in shared memory (streamed rows, streamed_rows.cuh),
// it specializes this for its traits, with kShared true and load(g, b, i, col) reading
// column col's vectors into vector i of g and b; elsewhere they are read from global memory.
template <class K, bool = K::kStreamed> struct SharedColumns {
  static constexpr bool kShared = false;
};

template <class K, int P, int V> struct Columns {
  using W = typename K::W;
  Packed<W, P, V> g, b;
  Packed<typename K::X, P, V> bias;
  Packed<typename K::SM, P, V> sm;
  static constexpr int kWords = Packed<W, P, V>::kWords * (K::kNorm == Norm::LAYERNORM ? 2 : 1) +
                                (K::kXBias ? Packed<typename K::X, P, V>::kWords : 0) +
                                (K::kSmooth ? Packed<typename K::SM, P, V>::kWords : 0);

  // Called once per row: the words look changed to the compiler, which then converts them at
  // each use instead of keeping float copies for all rows (K::kPackColumns).
  __device__ __forceinline__ void keep_packed() {
    constexpr int kW = Packed<W, P, V>::kWords;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      asm volatile("" : "+r"(g.w[k]));
      if constexpr (K::kNorm == Norm::LAYERNORM) asm volatile("" : "+r"(b.w[k]));
    }
#pragma unroll
    for (int k = 0; k < Packed<typename K::X, P, V>::kWords; ++k)
      if constexpr (K::kXBias) asm volatile("" : "+r"(bias.w[k]));
#pragma unroll
    for (int k = 0; k < Packed<typename K::SM, P, V>::kWords; ++k)
      if constexpr (K::kSmooth) asm volatile("" : "+r"(sm.w[k]));
  }
  __device__ __forceinline__ void load_bias(const Params& p, int i, i64 col) {
    if constexpr (K::kXBias) bias.load(i, static_cast<const typename K::X*>(p.x_bias) + col);
  }
  __device__ __forceinline__ void load_epilogue(const Params& p, int i, i64 col) {
    if constexpr (SharedColumns<K>::kShared) {  // a pipeline's copies in shared memory
      SharedColumns<K>::load(g, b, i, col);
      return;
    }
    if (p.gamma != nullptr) {
      g.load(i, static_cast<const W*>(p.gamma) + col);
    } else {  // no scale
      float one[V];
#pragma unroll
      for (int j = 0; j < V; ++j) one[j] = 1.f;
      g.set(i, one);
    }
    if constexpr (K::kNorm == Norm::LAYERNORM) {
      if (p.beta != nullptr) {
        b.load(i, static_cast<const W*>(p.beta) + col);
      } else {
        b.zero(i);
      }
    }
    if constexpr (K::kSmooth) sm.load(i, static_cast<const typename K::SM*>(p.smooth) + col);
  }
  __device__ __forceinline__ void load(const Params& p, int i, i64 col) {
    load_bias(p, i, col);
    load_epilogue(p, i, col);
  }
  // Vector i all zeros (a vector outside the row, where a pass takes every vector).
  __device__ __forceinline__ void zero(int i) {
    g.zero(i);
    b.zero(i);
    bias.zero(i);
    sm.zero(i);
  }
  // As load, for the first `count` columns of a vector (a ragged row's last one: the
  // columns end inside it), one by one; zeros for the rest (none where count <= 0).
  __device__ __forceinline__ void load_part(const Params& p, int i, i64 col, int count) {
    if constexpr (K::kXBias) load_part_of(bias, i, static_cast<const typename K::X*>(p.x_bias), col, count, 0.f);
    load_part_of(g, i, static_cast<const W*>(p.gamma), col, count, 1.f);
    if constexpr (K::kNorm == Norm::LAYERNORM) load_part_of(b, i, static_cast<const W*>(p.beta), col, count, 0.f);
    if constexpr (K::kSmooth) load_part_of(sm, i, static_cast<const typename K::SM*>(p.smooth), col, count, 0.f);
  }
  // load or load_part: a vector's columns inside the row (a ragged row's last may end in it).
  __device__ __forceinline__ void load_part_or_all(const Params& p, int i, i64 col, int count) {
    if (count == V) {
      load(p, i, col);
    } else {
      load_part(p, i, col, count);
    }
  }
  // Vector i of v: from's first count columns at col (`absent` where from is null), then zeros.
  template <typename T>
  __device__ __forceinline__ static void load_part_of(Packed<T, P, V>& v, int i, const T* from, i64 col, int count,
                                                      float absent) {
    float f[V];
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = j < count ? (from != nullptr ? to_float(from[col + j]) : absent) : 0.f;
    v.set(i, f);
  }
};

// Held gamma (and LayerNorm's beta) as floats in a block's dynamic shared memory
// (K::kFloatColumns): converted once a block from a thread's held packed vectors, then read by
// each row's outputs as two 16-byte loads for eight columns of each, instead of a conversion
// an element, and the packed words' registers are free after it. A thread's float4 q of
// vector i lies at at[(i * kQ + q) * kStride]: a warp's reads are consecutive 16-byte words.
template <class K, int P, int V> struct FloatColumns {
  static constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  static constexpr int kQ = (kLN ? 2 : 1) * V / 4;  // a vector's float4s
  static constexpr int kStride = K::kThreadsPerRow * K::kRowsPerBlock;  // the block's threads
  float4* at;

  FloatColumns() = default;
  // c's vectors written at `shared` (Recipe.column_bytes of dynamic shared memory); each thread
  // reads back only what it wrote, so no barrier.
  __device__ __forceinline__ FloatColumns(uint4* shared, const Columns<K, P, V>& c)
      : at(reinterpret_cast<float4*>(shared) + threadIdx.x) {
    // (here, not at class scope: overload resolution of outputs instantiates the class at any V)
    static_assert(V % 4 == 0 && sizeof(typename K::W) == 2, "float columns: 16-bit vectors of whole float4s");
    static_assert(K::kColumnBytes == P * kQ * kStride * static_cast<int>(sizeof(float4)),
                  "Recipe.column_bytes: the block's float copy, as laid out here");
#pragma unroll
    for (int i = 0; i < P; ++i) {
      float f[V];
      c.g.get(i, f);
      put(i, 0, f);
      if constexpr (kLN) {
        c.b.get(i, f);
        put(i, V / 4, f);
      }
    }
  }
  __device__ __forceinline__ void gamma(int i, float (&f)[V]) const { get(i, 0, f); }
  __device__ __forceinline__ void beta(int i, float (&f)[V]) const { get(i, V / 4, f); }

 private:
  __device__ __forceinline__ void put(int i, int q0, const float (&f)[V]) {
#pragma unroll
    for (int q = 0; q < V / 4; ++q)
      at[(i * kQ + q0 + q) * kStride] = make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
  }
  __device__ __forceinline__ void get(int i, int q0, float (&f)[V]) const {
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      const float4 v = at[(i * kQ + q0 + q) * kStride];
      f[4 * q] = v.x;
      f[4 * q + 1] = v.y;
      f[4 * q + 2] = v.z;
      f[4 * q + 3] = v.w;
    }
  }
};

// The held columns a register row's outputs read: the float copy where K::kFloatColumns (in
// the block's dynamic shared memory; its packed vectors then serve nothing else), else the
// packed vectors themselves.
template <class K, int P, int V>
__device__ __forceinline__ decltype(auto) output_columns(const Columns<K, P, V>& c) {
  if constexpr (K::kFloatColumns) {
    extern __shared__ uint4 stage_words[];
    return FloatColumns<K, P, V>(stage_words, c);
  } else {
    return (c);
  }
}

// Gamma and beta of a thread's first N vectors of a row brought into L1 ahead of their use
// (prefetch.global.L1: no registers held, nothing waited for); `cols` as in RowCols.
template <class K, int N, class Cols>
__device__ __forceinline__ void prefetch_columns(const Params& p, const Cols& cols) {
  using W = typename K::W;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (cols.inside(i)) {
      if (p.gamma != nullptr) asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const W*>(p.gamma) + cols(i)));
      if (K::kNorm == Norm::LAYERNORM && p.beta != nullptr)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const W*>(p.beta) + cols(i)));
    }
  }
}

// The per-column vectors of a thread's first E vectors of a staged row, loaded into registers
// before the row's statistics are reduced, so that the first output step does not wait for
// them after it (Recipe.column_registers); E = 0: none.
template <class K, int E, int V> struct EarlyColumns {
  static constexpr int kCount = E;
  Columns<K, (E > 0 ? E : 1), V> c;
  template <class Cols>
  __device__ __forceinline__ void load(const Params& p, const Cols& cols) {
#pragma unroll
    for (int i = 0; i < E; ++i)
      if (cols.inside(i)) c.load_epilogue(p, i, cols(i));
  }
};

}  // namespace normgen
