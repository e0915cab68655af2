// The service's vocabulary below the proto: element types and matrix layouts.
//
// Header-only and free of dependencies (no Abseil, gRPC, protobuf or CUDA),
// so that every layer, kernels/ included, can share these enums instead of
// defining its own. Conversions between element types live in
// common/dtype.h; the proto's enums map onto these in common/proto_enums.h.
#ifndef GEMM_COMMON_TYPES_H_
#define GEMM_COMMON_TYPES_H_

#include <cstddef>

namespace gemm {

// fp16 and bf16 values are stored as raw 16-bit patterns, the FP8 formats
// (OCP 8-bit floating point: e4m3 with no infinities and a 448 maximum, e5m2
// with IEEE-style infinities and a 57344 maximum) as raw bytes.
enum class DType { kFp32, kFp16, kBf16, kFp8E4m3, kFp8E5m2 };

constexpr bool IsFp8(DType t) { return t == DType::kFp8E4m3 || t == DType::kFp8E5m2; }

constexpr size_t SizeOf(DType t) { return t == DType::kFp32 ? 4 : IsFp8(t) ? 1 : 2; }

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
    case DType::kFp8E4m3:
      return "fp8_e4m3";
    case DType::kFp8E5m2:
      return "fp8_e5m2";
  }
  return "unknown";
}

// How a matrix's elements are laid out: row-major means consecutive
// elements of a row are adjacent, column-major those of a column.
enum class Layout { kRowMajor, kColMajor };

}  // namespace gemm

#endif  // GEMM_COMMON_TYPES_H_
