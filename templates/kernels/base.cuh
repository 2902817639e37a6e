// The vocabulary every kernel header uses: integer types, the traits' enums, and
// conversions between floats and the element types.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace normgen {

typedef long long i64;
typedef unsigned int uint32_t;
typedef signed char int8_t;
enum class Norm { LAYERNORM, RMSNORM };
enum class Pipeline { ONE_PASS, TWO_PASS };
enum class Quant { NONE, DYNAMIC, STATIC };

// Pick<B, A, C>::type: A where B holds, else C (std::conditional_t, which NVRTC lacks
// without the C++ standard headers).
template <bool B, class A, class C> struct Pick { using type = A; };
template <class A, class C> struct Pick<false, A, C> { using type = C; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
// Quantized outputs: int8 rounds half to even and clamps to [-128, 127] (NaN -> 0); fp8
// e4m3 rounds to nearest even and saturates to +-448.
template <> __device__ __forceinline__ int8_t from_float<int8_t>(float v) {
  int q;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(q) : "f"(v));
  return static_cast<int8_t>(q);
}
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 q;
  q.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return q;
}
// v rounded to T's precision, as a float (exact in float for every T here).
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_float(from_float<T>(v)); }
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }

// The bits of a float rounded to T, in the low bits of a word.
template <typename T> __device__ __forceinline__ uint32_t float_to_bits(float v);
template <> __device__ __forceinline__ uint32_t float_to_bits<float>(float v) { return __float_as_uint(v); }
template <> __device__ __forceinline__ uint32_t float_to_bits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ uint32_t float_to_bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

}  // namespace normgen
