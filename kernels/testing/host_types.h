// Host-side bf16 / fp16 encoding for the kernel tests and benchmarks (no CUDA
// headers): the service's one host conversion (common/dtype.h), round to
// nearest even with NaN and infinities kept, under the names these callers
// use.
#pragma once

#include "common/dtype.h"

namespace gemm_kernels::testing {

using ::gemm::Bf16ToFloat;
using ::gemm::FloatToBf16;
using ::gemm::FloatToHalf;
using ::gemm::HalfToFloat;

}  // namespace gemm_kernels::testing
