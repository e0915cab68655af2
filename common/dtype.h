// Element types of the service and their conversions to and from fp32.
//
// fp16 and bf16 are stored as raw 16-bit patterns; conversions round to
// nearest even and keep NaN and infinities, so the CPU backend rounds exactly
// like the GPU's cvt instructions do.
#ifndef GEMM_COMMON_DTYPE_H_
#define GEMM_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gemm {

enum class DType { kFp32, kFp16, kBf16 };

constexpr size_t SizeOf(DType t) { return t == DType::kFp32 ? 4 : 2; }
const char* DTypeName(DType t);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

// Converts n elements of type `t` at `src` to fp32 (src may be unaligned).
void ToFloat(DType t, const void* src, float* dst, size_t n);
// Converts n fp32 values to type `t` at `dst` (dst may be unaligned).
void FromFloat(DType t, const float* src, void* dst, size_t n);

}  // namespace gemm

#endif  // GEMM_COMMON_DTYPE_H_
