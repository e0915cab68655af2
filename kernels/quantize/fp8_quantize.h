// FP8 quantization on the GPU: the rule of common/fp8.h (amax per group,
// scale = amax / FMT_MAX, codes rounded to nearest even and saturated),
// computed with common/fp8_rule.h's functions, so the codes and scales are
// bit for bit those of the host's QuantizeFp8 for the same input. The
// server runs it for RegisterMatrix / BeginUpload with `quantize` on a GPU.
// Plain C++ header; the stream is an opaque cudaStream_t.
#pragma once

#include <cstdint>
#include <string>

#include "common/fp8_rule.h"
#include "common/types.h"

namespace gemm_kernels {

// Bytes of device workspace LaunchFp8Quantize needs for `g`.
uint64_t Fp8QuantizeWorkspaceBytes(const gemm::Fp8Operand& g);

struct Fp8QuantizeArgs {
  // g.rows x g.cols elements of `values_type` (fp32, bf16 or fp16), dense in
  // g.layout, in device memory.
  const void* values = nullptr;
  gemm::DType values_type = gemm::DType::kFp32;
  gemm::Fp8Operand geometry;
  gemm::DType format = gemm::DType::kFp8E4m3;  // e4m3 or e5m2
  // Outputs in device memory: the codes (g.rows x g.cols bytes, same layout
  // as `values`) and ScaleCount(g) fp32 scales.
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  // The storage index of the first NaN or infinite value, or
  // gemm::kQuantizeOk (all ones) when every value is finite; one uint64 of
  // device memory. When it is not kQuantizeOk the codes and scales are
  // undefined, as on the host.
  uint64_t* first_non_finite = nullptr;
  // Fp8QuantizeWorkspaceBytes(geometry) bytes of device memory.
  void* workspace = nullptr;
};

// Enqueues the quantization on `stream`; returns the launch error, or an
// empty string. Empty matrices are refused (the API has none).
std::string LaunchFp8Quantize(const Fp8QuantizeArgs& args, void* stream);

}  // namespace gemm_kernels
