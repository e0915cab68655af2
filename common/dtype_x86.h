// AVX2/F16C bulk conversions behind common/dtype.h (private to //common:dtype).
// Each converts n elements, handling the tail that does not fill a vector
// with the scalar conversions, and returns bit-for-bit what those return.
// Call them only when X86ConversionsSupported(); they are compiled for
// AVX2/F16C per function, so the rest of a binary still runs on CPUs
// without those extensions.
#ifndef GEMM_COMMON_DTYPE_X86_H_
#define GEMM_COMMON_DTYPE_X86_H_

#include <cstddef>

namespace gemm::dtype_internal {

// False on other architectures and on x86 CPUs without AVX2 or F16C.
bool X86ConversionsSupported();

void HalfToFloatX86(const void* src, float* dst, size_t n);
void FloatToHalfX86(const float* src, void* dst, size_t n);
void Bf16ToFloatX86(const void* src, float* dst, size_t n);
void FloatToBf16X86(const float* src, void* dst, size_t n);

}  // namespace gemm::dtype_internal

#endif  // GEMM_COMMON_DTYPE_X86_H_
