// Conversions between the service's element types and fp32: the one host
// implementation, used by the CPU backend, the client, the tests and the
// benchmarks.
//
// fp16 and bf16 are stored as raw 16-bit patterns; conversions round to
// nearest even and keep NaN and infinities, so the CPU backend rounds exactly
// like the GPU's cvt instructions do. FP8 codes decode exactly and encode
// unscaled, rounding to nearest even and saturating (common/fp8.h, where
// the scaled quantization of FP8 operands lives). The bulk conversions run on AVX2/F16C
// where the CPU has them (chosen at run time) and give bit-for-bit the same
// results as the scalar ones.
#ifndef GEMM_COMMON_DTYPE_H_
#define GEMM_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace gemm {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

// Converts n elements of type `t` at `src` to fp32 (src may be unaligned).
void ToFloat(DType t, const void* src, float* dst, size_t n);
// Converts n fp32 values to type `t` at `dst` (dst may be unaligned).
void FromFloat(DType t, const float* src, void* dst, size_t n);

// The implementations behind ToFloat and FromFloat, named so that tests and
// benchmarks can compare them. ToFloat/FromFloat use kVector when
// VectorConversionsSupported() and kScalar otherwise.
enum class ConversionPath { kScalar, kVector };

// Whether this CPU runs the vector path (x86-64 with AVX2 and F16C).
bool VectorConversionsSupported();

// ToFloat / FromFloat through `path`; kVector falls back to kScalar on a CPU
// without support.
void ToFloatVia(ConversionPath path, DType t, const void* src, float* dst, size_t n);
void FromFloatVia(ConversionPath path, DType t, const float* src, void* dst, size_t n);

}  // namespace gemm

#endif  // GEMM_COMMON_DTYPE_H_
