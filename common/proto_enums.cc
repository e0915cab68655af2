#include "common/proto_enums.h"

#include "absl/strings/str_cat.h"

namespace gemm {

v1::DataType ToProto(DType dtype) {
  switch (dtype) {
    case DType::kFp16:
      return v1::DATA_TYPE_FP16;
    case DType::kBf16:
      return v1::DATA_TYPE_BF16;
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

}  // namespace gemm
