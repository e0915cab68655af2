// Host-side element encoding for the kernel tests and benchmarks (no CUDA
// headers): the service's one host conversion (common/dtype.h), round to
// nearest even with NaN and infinities kept, under the names these callers
// use, and one element of any type at a time.
#pragma once

#include "common/dtype.h"

namespace gemm_kernels::testing {

using ::gemm::Bf16ToFloat;
using ::gemm::FloatToBf16;
using ::gemm::FloatToHalf;
using ::gemm::HalfToFloat;

// The element of type `t` at `p` (unaligned) as fp32.
inline float DecodeElement(::gemm::DType t, const void* p) {
  float f;
  ::gemm::ToFloat(t, p, &f, 1);
  return f;
}
// `v` stored at `p` (unaligned) as type `t`.
inline void EncodeElement(::gemm::DType t, float v, void* p) { ::gemm::FromFloat(t, &v, p, 1); }

}  // namespace gemm_kernels::testing
