// FP8 (OCP e4m3fn and e5m2) on the host for the kernel tests and
// benchmarks: the codec and quantization rule of common/fp8.h (the one the
// service and the client use), under the kernels' bool-per-format call
// shape. Encoding rounds to nearest even and saturates finite values to the
// format's largest (448 / 57344); a group's scale is amax / max (1 where
// amax is 0).
#pragma once

#include <cstdint>

#include "common/fp8.h"
#include "common/types.h"

namespace gemm_kernels::testing {

inline ::gemm::DType Fp8Format(bool e4m3) {
  return e4m3 ? ::gemm::DType::kFp8E4m3 : ::gemm::DType::kFp8E5m2;
}

inline float Fp8ToFloat(uint8_t code, bool e4m3) { return ::gemm::Fp8ToFloat(code, Fp8Format(e4m3)); }

inline float Fp8Max(bool e4m3) { return ::gemm::Fp8Max(Fp8Format(e4m3)); }

inline uint8_t FloatToFp8(float x, bool e4m3) { return ::gemm::FloatToFp8(x, Fp8Format(e4m3)); }

// The contract's scale of a group with largest magnitude `amax`.
inline float Fp8Scale(float amax, bool e4m3) {
  return ::gemm::ScaleForAmax(amax, Fp8Format(e4m3));
}

}  // namespace gemm_kernels::testing
