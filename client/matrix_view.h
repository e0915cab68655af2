// Typed views over caller-owned host matrices, and the conversions between
// them and the gemm.v1 messages: building a GemmProblem (one copy of each
// operand into the request's bytes fields) and reading a GemmResult back.
#ifndef GEMM_CLIENT_MATRIX_VIEW_H_
#define GEMM_CLIENT_MATRIX_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/proto_enums.h"  // ToProto / FromProto for dtypes and layouts
#include "common/dtype.h"
#include "common/gemm_problem.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {

// A dense rows x cols matrix in host memory, not owned. The constructors tie
// the pointer type to the element type: `const float*` is fp32, and
// `const uint16_t*` holds fp16 or bf16 bit patterns, named by `dtype`.
class MatrixView {
 public:
  MatrixView(const float* data, uint64_t rows, uint64_t cols,
             Layout layout = Layout::kRowMajor);
  // `dtype` must be kFp16 or kBf16; Validate() reports anything else.
  MatrixView(const uint16_t* data, uint64_t rows, uint64_t cols, DType dtype,
             Layout layout = Layout::kRowMajor);
  // FP8 codes (`format` kFp8E4m3 or kFp8E5m2). With `scales` (their mode,
  // the operand and transpose they are laid out for, and ScaleCount of them
  // at scales.data, which must outlive the view like the codes) it is an
  // operand of an FP8 problem; without (mode kNone) only bytes to register.
  // QuantizeToFp8 makes both from float or bf16 data.
  MatrixView(const uint8_t* codes, uint64_t rows, uint64_t cols, DType format,
             const Fp8Scales& scales = {}, Layout layout = Layout::kRowMajor);

  const void* data() const { return ref_.data; }
  uint64_t rows() const { return ref_.rows; }
  uint64_t cols() const { return ref_.cols; }
  Layout layout() const { return ref_.layout; }
  DType dtype() const { return ref_.dtype; }
  const MatrixRef& ref() const { return ref_; }

  // Non-null data, non-zero dimensions, a byte size that fits in 64 bits and
  // an element type that matches the pointer type. `name` prefixes messages.
  absl::Status Validate(absl::string_view name) const;

 private:
  MatrixRef ref_;
  bool dtype_matches_pointer_ = true;
};

// An FP8 copy of a matrix with its scales, owned: what QuantizeToFp8 makes.
struct QuantizedMatrix {
  std::vector<uint8_t> codes;  // rows x cols in `layout`
  std::vector<float> scales;   // as common/fp8.h lays them out for `how`
  uint64_t rows = 0;
  uint64_t cols = 0;
  Layout layout = Layout::kRowMajor;
  Fp8Quantization how;

  // The operand view AddProblem takes (valid while this object lives and is
  // not changed): an operand of the role and transpose it was quantized for.
  MatrixView view() const;
};

// Quantizes `source` (fp32, fp16 or bf16) on the client by the rule the
// server uses (common/fp8.h): per group amax, scale = amax / FMT_MAX (1 for
// an all-zero group), codes rounded to nearest even and saturated. The scale
// groups follow how.operand and how.transposed: quantize A for the A slot of
// problems that transpose it as `how` says, and so on. INVALID_ARGUMENT
// naming the element for a NaN or infinity. Block scales take any K: the
// last of the ceil(K/128) blocks along K holds the K % 128 remaining elements.
absl::StatusOr<QuantizedMatrix> QuantizeToFp8(const MatrixView& source,
                                              const Fp8Quantization& how);

// A matrix stored on the server by Client::RegisterMatrix: its handle and the
// shape it was registered with. Problems name it instead of carrying bytes.
struct ResidentHandle {
  std::string handle;
  uint64_t rows = 0;
  uint64_t cols = 0;
  Layout layout = Layout::kRowMajor;
  DType dtype = DType::kFp32;
  // Bytes it holds against the server's max_resident_bytes.
  uint64_t bytes = 0;
};

// An operand of a problem: host data sent in the request, or a resident
// matrix named by handle. Converts implicitly from either.
class Operand {
 public:
  Operand(const MatrixView& view) : view_(view) {}  // NOLINT: implicit by design
  Operand(const ResidentHandle& resident)           // NOLINT: implicit by design
      : view_(static_cast<const float*>(nullptr), resident.rows, resident.cols, resident.layout),
        resident_(resident) {}

  uint64_t rows() const { return resident_ ? resident_->rows : view_.rows(); }
  uint64_t cols() const { return resident_ ? resident_->cols : view_.cols(); }
  Layout layout() const { return resident_ ? resident_->layout : view_.layout(); }
  DType dtype() const { return resident_ ? resident_->dtype : view_.dtype(); }
  // The host data, or nullptr for a resident matrix.
  const MatrixView* view() const { return resident_ ? nullptr : &view_; }
  const ResidentHandle* resident() const { return resident_ ? &*resident_ : nullptr; }

  // MatrixView::Validate, or a non-empty handle and positive dimensions.
  absl::Status Validate(absl::string_view name) const;

 private:
  MatrixView view_;
  std::optional<ResidentHandle> resident_;
};

// Everything about a problem besides A and B.
struct ProblemOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  // Type of C and of the result; unset means the input type.
  std::optional<DType> output_dtype;
  // Layout of the result D.
  Layout output_layout = Layout::kRowMajor;
  double alpha = 1.0;
  double beta = 0.0;
  // Let fp32 inputs run on TF32 tensor cores.
  bool allow_tf32 = false;
  // Required when beta != 0: M x N in the output type. A resident C must be
  // stored in `output_layout` (the server reads it in place).
  std::optional<Operand> c;
  // One operand FP8 (with scales, or a resident matrix the server quantized)
  // and the other bf16 or fp32: the server quantizes the other one for this
  // problem to its partner's format and scale mode (gemm.v1
  // GemmProblem.quantize_partner). Otherwise a and b must both be FP8 or
  // both share one non-FP8 type. FP8 problems need output_dtype set.
  bool quantize_partner = false;
};

// Builds a problem computing alpha * op(a) * op(b) + beta * c. M, N and K
// follow from the stored shapes and transposes. InvalidArgument names the
// operand at fault for a bad view, mismatched inner dimensions or types, a
// missing or mis-shaped C. Host operands are copied into the request; a
// resident one travels as its handle.
absl::StatusOr<v1::GemmProblem> MakeProblem(const Operand& a, const Operand& b,
                                            const ProblemOptions& options = {});

// The same, appended to `request` in place.
absl::Status AddProblem(v1::GemmRequest* request, const Operand& a, const Operand& b,
                        const ProblemOptions& options = {});

// Views a problem message as the internal description (no copy; the message
// must outlive the result), with d == nullptr. Checks byte lengths against
// the shape, so the view can be read safely, e.g. by ReferenceGemm; a problem
// that names a resident matrix has no bytes to view (InvalidArgument).
absl::StatusOr<GemmProblemRef> ViewProblem(const v1::GemmProblem& problem);

// Views a result message as a matrix (no copy), checking its byte length.
absl::StatusOr<MatrixRef> ViewResult(const v1::GemmResult& result);

// Converts a result to fp32 in `layout` into a caller-owned buffer of
// `capacity` floats, which must hold at least rows * cols.
absl::Status ReadResult(const v1::GemmResult& result, float* out, size_t capacity,
                        Layout layout = Layout::kRowMajor);
absl::StatusOr<std::vector<float>> ReadResult(const v1::GemmResult& result,
                                              Layout layout = Layout::kRowMajor);

}  // namespace gemm

#endif  // GEMM_CLIENT_MATRIX_VIEW_H_
