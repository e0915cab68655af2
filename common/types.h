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

// The names of each DType, indexed by it: the API's (the CLI's --dtype,
// metrics labels, messages) and the short one kernel names and tuning tables
// are built from.
struct DTypeNames {
  const char* name;
  const char* short_name;
};
inline constexpr DTypeNames kDTypeNames[] = {
    {"fp32", "f32"}, {"fp16", "f16"}, {"bf16", "bf16"}, {"fp8_e4m3", "e4m3"}, {"fp8_e5m2", "e5m2"},
};
static_assert(sizeof(kDTypeNames) / sizeof(kDTypeNames[0]) ==
                  static_cast<size_t>(DType::kFp8E5m2) + 1,
              "kDTypeNames has one entry per DType");

// "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2".
constexpr const char* DTypeName(DType t) {
  const size_t i = static_cast<size_t>(t);
  return i < sizeof(kDTypeNames) / sizeof(kDTypeNames[0]) ? kDTypeNames[i].name : "unknown";
}

// "f32", "f16", "bf16", "e4m3", "e5m2".
constexpr const char* DTypeShortName(DType t) {
  const size_t i = static_cast<size_t>(t);
  return i < sizeof(kDTypeNames) / sizeof(kDTypeNames[0]) ? kDTypeNames[i].short_name : "unknown";
}

// How a matrix's elements are laid out: row-major means consecutive
// elements of a row are adjacent, column-major those of a column.
enum class Layout { kRowMajor, kColMajor };

// "row", "col" (the CLI's --layout, tuning-table keys, test names).
constexpr const char* LayoutName(Layout l) { return l == Layout::kRowMajor ? "row" : "col"; }

// How an FP8 operand's fp32 scales are laid out (common/fp8.h has the
// layouts): none (16-bit and fp32 operands), one per tensor, one per
// channel (row of op(A), column of op(B)), or one per block.
enum class ScaleMode { kNone, kTensor, kChannel, kBlock };

// "none", "tensor", "channel", "block".
constexpr const char* ScaleModeName(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::kNone:
      return "none";
    case ScaleMode::kTensor:
      return "tensor";
    case ScaleMode::kChannel:
      return "channel";
    case ScaleMode::kBlock:
      return "block";
  }
  return "unknown";
}

}  // namespace gemm

#endif  // GEMM_COMMON_TYPES_H_
