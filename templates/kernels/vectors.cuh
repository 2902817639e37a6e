// Vector access: a thread's vectors of a row packed in 32-bit words, loaded and stored in
// 4- to 16-byte accesses; quantized codes packed four to a word.
#pragma once
#include "base.cuh"

namespace normgen {

// Where a 16-byte load of global memory leaves its line. PAST_L1: in L2 only (ld.global.cg),
// for a row read once, which leaves L1 to the per-column vectors every row reads (see
// staged_rows). KEEP_L2: with L2's evict_last policy, as torch.compile's Triton kernels
// load x (see register_rows).
enum class Cache { NORMAL, PAST_L1, KEEP_L2 };

__device__ __forceinline__ uint4 load_keep_l2(const uint4* at) {
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  uint4 q;
  asm("ld.global.L2::cache_hint.v4.u32 { %0, %1, %2, %3 }, [%4], %5;"
      : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
      : "l"(__cvta_generic_to_global(at)), "l"(policy));
  return q;
}

template <typename T, int V> struct alignas(sizeof(T) * V) Pack { T v[V]; };

// A thread's P vectors of V elements, kept as loaded: packed in 32-bit words, two 16-bit
// elements to a word (the compiler gives each __nv_bfloat16 a register of its own otherwise).
template <typename T> __device__ __forceinline__ float bits_to_float(uint32_t word, int half);
template <> __device__ __forceinline__ float bits_to_float<float>(uint32_t word, int) {
  return __uint_as_float(word);
}
template <> __device__ __forceinline__ float bits_to_float<__nv_bfloat16>(uint32_t word, int half) {
  return __uint_as_float(half ? word & 0xffff0000u : word << 16);
}
template <> __device__ __forceinline__ float bits_to_float<__half>(uint32_t word, int half) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(half ? word >> 16 : word)));
}

template <typename T, int P, int V> struct Packed {
  static constexpr int kVec = V;
  static constexpr int kVecBytes = V * sizeof(T);
  static constexpr int kWords = (P * kVecBytes + 3) / 4;
  uint32_t w[kWords];

  // Element j of vector i (compile-time indices once unrolled).
  __device__ __forceinline__ float get(int i, int j) const {
    const int e = i * V + j;
    return sizeof(T) == 4 ? bits_to_float<T>(w[e], 0) : bits_to_float<T>(w[e / 2], e % 2);
  }
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
#pragma unroll
    for (int j = 0; j < V; ++j) d[j] = get(i, j);
  }
  // Vector i from p; vectors are loaded in ascending i (a 2-byte vector shares its word).
  // kCache: where 16-byte accesses (global memory only) leave their lines.
  template <Cache kCache = Cache::NORMAL>
  __device__ __forceinline__ void load(int i, const T* p) {
    if constexpr (kVecBytes >= 16) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 16; ++c) {
        const uint4* at = reinterpret_cast<const uint4*>(p) + c;
        const uint4 q = kCache == Cache::PAST_L1 ? __ldcg(at) : kCache == Cache::KEEP_L2 ? load_keep_l2(at) : *at;
        uint32_t* d = w + i * kVecBytes / 4 + 4 * c;
        d[0] = q.x; d[1] = q.y; d[2] = q.z; d[3] = q.w;
      }
    } else if constexpr (kVecBytes == 8) {
      const uint2 q = *reinterpret_cast<const uint2*>(p);
      w[2 * i] = q.x;
      w[2 * i + 1] = q.y;
    } else if constexpr (kVecBytes == 4) {
      w[i] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      const uint32_t bits = *reinterpret_cast<const unsigned short*>(p);
      w[i / 2] = i % 2 ? (w[i / 2] & 0xffffu) | (bits << 16) : bits;
    }
  }
  // Vector i from floats (rounded to T); the word's other half is kept.
  __device__ __forceinline__ void set(int i, const float (&v)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int e = i * V + j;
      const uint32_t bits = float_to_bits<T>(v[j]);
      if constexpr (sizeof(T) == 4) {
        w[e] = bits;
      } else {
        w[e / 2] = e % 2 ? (w[e / 2] & 0xffffu) | (bits << 16) : (w[e / 2] & 0xffff0000u) | bits;
      }
    }
  }
  // Vector i to p (whole words: kVecBytes >= 4).
  __device__ __forceinline__ void store(int i, T* p) const {
    static_assert(kVecBytes >= 4, "stores whole words");
    if constexpr (kVecBytes >= 16) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 16; ++c) {
        const uint32_t* s = w + i * kVecBytes / 4 + 4 * c;
        reinterpret_cast<uint4*>(p)[c] = make_uint4(s[0], s[1], s[2], s[3]);
      }
    } else if constexpr (kVecBytes == 8) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w[2 * i], w[2 * i + 1]);
    } else {
      *reinterpret_cast<uint32_t*>(p) = w[i];
    }
  }
  __device__ __forceinline__ void zero(int i) {  // 0 bits are 0.0 in every float type
    if constexpr (kVecBytes >= 4) {
#pragma unroll
      for (int c = 0; c < kVecBytes / 4; ++c) w[i * kVecBytes / 4 + c] = 0u;
    } else {
      w[i / 2] = i % 2 ? w[i / 2] & 0xffffu : 0u;
    }
  }
};

// Four quantized codes in one word (first in the low byte).
template <typename T> __device__ __forceinline__ uint32_t pack4(float a, float b, float c, float d);
// int8: each value rounded to a 32-bit integer, then two saturating packs (d's byte 1 and 0
// from the first two operands, its upper half from the third's lower half): the same codes
// as from_float<int8_t>, in 6 instructions instead of 4 conversions, 4 masks and 3 permutes.
template <> __device__ __forceinline__ uint32_t pack4<int8_t>(float a, float b, float c, float d) {
  const auto r = [](float v) {
    int i;
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(i) : "f"(v));
    return i;
  };
  uint32_t hi, w;
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;" : "=r"(hi) : "r"(r(d)), "r"(r(c)));
  asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;" : "=r"(w) : "r"(r(b)), "r"(r(a)), "r"(hi));
  return w;
}
template <> __device__ __forceinline__ uint32_t pack4<__nv_fp8_e4m3>(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// W words (one 4-, 8- or 16-byte access) stored at p. kWhole: by intrinsic (st.global.wb, the
// default policy), which NVVM cannot split -- for the two-pass kernels, whose plain vector
// stores NVVM splits into 32-, 16- and 8-bit ones; the one-pass kernels' stay whole as
// plain stores, and the intrinsic there changes their scheduling (some spill).
template <int W, bool kWhole>
__device__ __forceinline__ void store_words(void* p, const uint32_t (&w)[W]) {
  static_assert(W == 1 || W == 2 || W == 4, "accesses of up to 16 bytes");
  if constexpr (W == 4) {
    const uint4 v = make_uint4(w[0], w[1], w[2], w[3]);
    if constexpr (kWhole) __stwb(static_cast<uint4*>(p), v); else *static_cast<uint4*>(p) = v;
  } else if constexpr (W == 2) {
    const uint2 v = make_uint2(w[0], w[1]);
    if constexpr (kWhole) __stwb(static_cast<uint2*>(p), v); else *static_cast<uint2*>(p) = v;
  } else {
    if constexpr (kWhole) __stwb(static_cast<unsigned int*>(p), w[0]); else *static_cast<uint32_t*>(p) = w[0];
  }
}

template <typename T, int V> __host__ __device__ constexpr int access_elems() {
  return V * sizeof(T) > 16 ? 16 / sizeof(T) : V;
}

template <typename T, int V, bool kWhole = false>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V]) {
  if constexpr (sizeof(T) == 1 && V >= 4) {  // quantized codes, whole words (V <= 16)
    uint32_t w[V / 4];
#pragma unroll
    for (int k = 0; k < V / 4; ++k) w[k] = pack4<T>(in[4 * k], in[4 * k + 1], in[4 * k + 2], in[4 * k + 3]);
    store_words<V / 4, kWhole>(p, w);
  } else if constexpr (kWhole && sizeof(T) * V >= 4) {  // floats, or two 16-bit elements to a word
    constexpr int kPer = 4 / sizeof(T);
    uint32_t w[V / kPer];
#pragma unroll
    for (int k = 0; k < V / kPer; ++k) {
      w[k] = float_to_bits<T>(in[k * kPer]);
      if constexpr (kPer == 2) w[k] |= float_to_bits<T>(in[k * kPer + 1]) << 16;
    }
    store_words<V / kPer, true>(p, w);
  } else {
    constexpr int A = access_elems<T, V>();
#pragma unroll
    for (int c = 0; c < V; c += A) {
      Pack<T, A> r;
#pragma unroll
      for (int i = 0; i < A; ++i) r.v[i] = from_float<T>(in[c + i]);
      *reinterpret_cast<Pack<T, A>*>(p + c) = r;
    }
  }
}

__device__ __forceinline__ i64 row_offset(i64 row, i64 inner, i64 so, i64 si) {
  if (so == 0) return row * si;  // one row stride (the common case): no 64-bit division
  return (row / inner) * so + (row % inner) * si;
}

}  // namespace normgen
