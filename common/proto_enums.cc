#include "common/proto_enums.h"

#include "absl/strings/str_cat.h"

namespace gemm {

v1::DataType ToProto(DType dtype) {
  switch (dtype) {
    case DType::kFp16:
      return v1::DATA_TYPE_FP16;
    case DType::kBf16:
      return v1::DATA_TYPE_BF16;
    case DType::kFp8E4m3:
      return v1::DATA_TYPE_FP8_E4M3;
    case DType::kFp8E5m2:
      return v1::DATA_TYPE_FP8_E5M2;
    case DType::kFp32:
      break;
  }
  return v1::DATA_TYPE_FP32;
}

v1::Layout ToProto(Layout layout) {
  return layout == Layout::kColMajor ? v1::LAYOUT_COL_MAJOR : v1::LAYOUT_ROW_MAJOR;
}

absl::StatusOr<DType> FromProto(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_FP32:
      return DType::kFp32;
    case v1::DATA_TYPE_FP16:
      return DType::kFp16;
    case v1::DATA_TYPE_BF16:
      return DType::kBf16;
    case v1::DATA_TYPE_FP8_E4M3:
      return DType::kFp8E4m3;
    case v1::DATA_TYPE_FP8_E5M2:
      return DType::kFp8E5m2;
    case v1::DATA_TYPE_UNSPECIFIED:
      return absl::InvalidArgumentError("the data type is unspecified");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown data type ", static_cast<int>(dtype)));
  }
}

absl::StatusOr<Layout> FromProto(v1::Layout layout) {
  switch (layout) {
    case v1::LAYOUT_UNSPECIFIED:
    case v1::LAYOUT_ROW_MAJOR:
      return Layout::kRowMajor;
    case v1::LAYOUT_COL_MAJOR:
      return Layout::kColMajor;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown layout ", static_cast<int>(layout)));
  }
}

v1::ScaleMode ToProto(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::kTensor:
      return v1::SCALE_MODE_TENSOR;
    case ScaleMode::kChannel:
      return v1::SCALE_MODE_CHANNEL;
    case ScaleMode::kBlock:
      return v1::SCALE_MODE_BLOCK;
    case ScaleMode::kNone:
      break;
  }
  return v1::SCALE_MODE_UNSPECIFIED;
}

absl::StatusOr<ScaleMode> FromProto(v1::ScaleMode mode) {
  switch (mode) {
    case v1::SCALE_MODE_TENSOR:
      return ScaleMode::kTensor;
    case v1::SCALE_MODE_CHANNEL:
      return ScaleMode::kChannel;
    case v1::SCALE_MODE_BLOCK:
      return ScaleMode::kBlock;
    case v1::SCALE_MODE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          "the scale mode is unspecified (SCALE_MODE_TENSOR, _CHANNEL or _BLOCK)");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown scale mode ", static_cast<int>(mode)));
  }
}

v1::Operand ToProto(OperandRole operand) {
  return operand == OperandRole::kA ? v1::OPERAND_A : v1::OPERAND_B;
}

v1::Quantization ToProto(const Fp8Quantization& q) {
  v1::Quantization out;
  out.set_format(ToProto(q.format));
  out.set_mode(ToProto(q.mode));
  out.set_operand(ToProto(q.operand));
  out.set_transposed(q.transposed);
  return out;
}

}  // namespace gemm
