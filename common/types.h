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

// fp16 and bf16 values are stored as raw 16-bit patterns.
enum class DType { kFp32, kFp16, kBf16 };

constexpr size_t SizeOf(DType t) { return t == DType::kFp32 ? 4 : 2; }

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
  }
  return "unknown";
}

// How a matrix's elements are laid out: row-major means consecutive
// elements of a row are adjacent, column-major those of a column.
enum class Layout { kRowMajor, kColMajor };

}  // namespace gemm

#endif  // GEMM_COMMON_TYPES_H_
