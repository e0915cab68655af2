// Enum conversions between the internal types (common/) and gemm.v1, in one
// place for the server, the client and the tests.
#ifndef GEMM_COMMON_PROTO_ENUMS_H_
#define GEMM_COMMON_PROTO_ENUMS_H_

#include "absl/status/statusor.h"
#include "common/gemm_problem.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {

v1::DataType ToProto(DType dtype);
v1::Layout ToProto(Layout layout);
// Unspecified or unknown is an error for a data type; unspecified means
// row-major for a layout, unknown is an error.
absl::StatusOr<DType> FromProto(v1::DataType dtype);
absl::StatusOr<Layout> FromProto(v1::Layout layout);
// Scale modes of FP8 operands: unspecified or unknown is an error.
v1::ScaleMode ToProto(ScaleMode mode);
absl::StatusOr<ScaleMode> FromProto(v1::ScaleMode mode);
v1::Operand ToProto(OperandRole operand);
// The gemm.v1 Quantization asking the server for `q`.
v1::Quantization ToProto(const Fp8Quantization& q);

}  // namespace gemm

#endif  // GEMM_COMMON_PROTO_ENUMS_H_
