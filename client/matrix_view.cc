#include "client/matrix_view.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gemm {
namespace {

// Abseil here predates std::string_view support in StrCat.
std::string TypeName(DType t) { return std::string(DTypeName(t)); }

std::string ShapeString(uint64_t rows, uint64_t cols) { return absl::StrCat(rows, "x", cols); }

// rows * cols * elem_size, or nullopt on overflow.
std::optional<uint64_t> CheckedBytes(uint64_t rows, uint64_t cols, uint64_t elem_size) {
  if (rows == 0 || cols == 0) return 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (rows > kMax / cols) return std::nullopt;
  const uint64_t elems = rows * cols;
  if (elems > kMax / elem_size) return std::nullopt;
  return elems * elem_size;
}

absl::Status CheckShape(absl::string_view name, const Operand& v, uint64_t rows,
                        uint64_t cols) {
  if (v.rows() == rows && v.cols() == cols) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " is ", ShapeString(v.rows(), v.cols()),
                                                 ", expected ", ShapeString(rows, cols)));
}

void FillMatrix(v1::Matrix* out, const Operand& operand) {
  out->set_layout(ToProto(operand.layout()));
  if (const ResidentHandle* r = operand.resident()) {
    out->set_handle(r->handle);
    return;
  }
  // The one copy of the operand: into the message's bytes field.
  const MatrixView& v = *operand.view();
  out->mutable_data()->assign(static_cast<const char*>(v.data()), v.ref().bytes());
  const Fp8Scales& scales = v.ref().scales;
  if (scales.mode != ScaleMode::kNone) {
    out->mutable_scales()->set_mode(ToProto(scales.mode));
    out->mutable_scales()->set_data(static_cast<const char*>(scales.data),
                                    scales.count * sizeof(float));
  }
}

// The element-type rules of a problem of `a` and `b` (gemm.v1): both FP8,
// or one FP8 and one bf16/fp32 under quantize_partner, or one shared type.
absl::Status CheckTypes(const Operand& a, const Operand& b, const ProblemOptions& o) {
  const bool a_fp8 = IsFp8(a.dtype()), b_fp8 = IsFp8(b.dtype());
  auto mismatch = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("a is ", TypeName(a.dtype()), " but b is ",
                                                   TypeName(b.dtype()), why));
  };
  if (!a_fp8 && !b_fp8) {
    if (o.quantize_partner)
      return absl::InvalidArgumentError(
          "quantize_partner: needs one FP8 operand and one bf16 or fp32 operand");
    return a.dtype() == b.dtype() ? absl::OkStatus() : mismatch("");
  }
  if (!o.output_dtype.has_value() || IsFp8(*o.output_dtype))
    return absl::InvalidArgumentError(
        "output_dtype: FP8 problems need an fp32, fp16 or bf16 output type set");
  if (a_fp8 == b_fp8) {
    if (o.quantize_partner)
      return absl::InvalidArgumentError(
          "quantize_partner: needs one FP8 operand and one bf16 or fp32 operand; both are FP8");
    return absl::OkStatus();
  }
  const DType partner = a_fp8 ? b.dtype() : a.dtype();
  if (!o.quantize_partner)
    return mismatch(" (set quantize_partner to have the server quantize the non-FP8 one)");
  if (partner != DType::kBf16 && partner != DType::kFp32)
    return mismatch(" (quantize_partner quantizes bf16 or fp32 operands only)");
  return absl::OkStatus();
}

// An FP8 view's scales must be laid out for the slot it fills.
absl::Status CheckScaleLayout(absl::string_view name, const Operand& operand, OperandRole role,
                              bool transposed) {
  const MatrixView* v = operand.view();
  if (v == nullptr || !IsFp8(v->dtype())) return absl::OkStatus();
  const Fp8Scales& s = v->ref().scales;
  if (s.mode == ScaleMode::kNone)
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": an FP8 operand needs its scales (see QuantizeToFp8)"));
  if (s.mode != ScaleMode::kTensor && (s.operand != role || s.transposed != transposed))
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": its ", ScaleModeName(s.mode), " scales are laid out for operand ",
        OperandName(s.operand), s.transposed ? " transposed" : "", ", not operand ",
        OperandName(role), transposed ? " transposed" : ""));
  return absl::OkStatus();
}

absl::Status CheckBytes(absl::string_view name, const std::string& data, uint64_t rows,
                        uint64_t cols, DType dtype) {
  const std::optional<uint64_t> want = CheckedBytes(rows, cols, SizeOf(dtype));
  if (!want.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", ShapeString(rows, cols), " overflows a 64-bit size"));
  }
  if (data.size() != *want) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".data has ", data.size(),
                                                   " bytes, expected ", *want, " for ",
                                                   ShapeString(rows, cols), " ",
                                                   TypeName(dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

MatrixView::MatrixView(const float* data, uint64_t rows, uint64_t cols, Layout layout)
    : ref_{data, rows, cols, layout, DType::kFp32} {}

MatrixView::MatrixView(const uint16_t* data, uint64_t rows, uint64_t cols, DType dtype,
                       Layout layout)
    : ref_{data, rows, cols, layout, dtype},
      dtype_matches_pointer_(dtype == DType::kFp16 || dtype == DType::kBf16) {}

MatrixView::MatrixView(const uint8_t* codes, uint64_t rows, uint64_t cols, DType format,
                       const Fp8Scales& scales, Layout layout)
    : ref_{codes, rows, cols, layout, format}, dtype_matches_pointer_(IsFp8(format)) {
  ref_.scales = scales;
}

absl::Status MatrixView::Validate(absl::string_view name) const {
  if (!dtype_matches_pointer_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": a uint16_t matrix must be fp16 or bf16, a uint8_t one FP8, not ",
        TypeName(ref_.dtype)));
  }
  if (ref_.scales.mode != ScaleMode::kNone) {
    const uint64_t want = ScaleCount(ref_.fp8_operand());
    if (ref_.scales.count != want || ref_.scales.data == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", ScaleModeName(ref_.scales.mode), " scales of this operand are ", want,
          " fp32 values, the view has ", ref_.scales.count,
          ref_.scales.data == nullptr ? " (and no data)" : ""));
  }
  if (ref_.rows == 0 || ref_.cols == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dimensions must be positive, got ", ShapeString(rows(), cols())));
  }
  if (!CheckedBytes(ref_.rows, ref_.cols, SizeOf(ref_.dtype)).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", ShapeString(rows(), cols()), " overflows a 64-bit size"));
  }
  if (ref_.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": data is null"));
  return absl::OkStatus();
}

absl::Status Operand::Validate(absl::string_view name) const {
  if (!resident_) return view_.Validate(name);
  if (resident_->handle.empty())
    return absl::InvalidArgumentError(absl::StrCat(name, ": the resident handle is empty"));
  if (resident_->rows == 0 || resident_->cols == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dimensions must be positive, got ", ShapeString(rows(), cols())));
  }
  return absl::OkStatus();
}

absl::Status AddProblem(v1::GemmRequest* request, const Operand& a, const Operand& b,
                        const ProblemOptions& o) {
  GEMM_RETURN_IF_ERROR(a.Validate("a"));
  GEMM_RETURN_IF_ERROR(b.Validate("b"));
  GEMM_RETURN_IF_ERROR(CheckTypes(a, b, o));
  GEMM_RETURN_IF_ERROR(CheckScaleLayout("a", a, OperandRole::kA, o.transpose_a));
  GEMM_RETURN_IF_ERROR(CheckScaleLayout("b", b, OperandRole::kB, o.transpose_b));
  const uint64_t m = o.transpose_a ? a.cols() : a.rows();
  const uint64_t k = o.transpose_a ? a.rows() : a.cols();
  const uint64_t kb = o.transpose_b ? b.cols() : b.rows();
  const uint64_t n = o.transpose_b ? b.rows() : b.cols();
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: op(a) is ",
                                                   ShapeString(m, k), ", op(b) is ",
                                                   ShapeString(kb, n)));
  }
  const DType out_dtype = o.output_dtype.value_or(a.dtype());
  if (o.beta != 0.0 && !o.c.has_value()) {
    return absl::InvalidArgumentError("c is required when beta != 0");
  }
  if (o.c.has_value()) {
    GEMM_RETURN_IF_ERROR(o.c->Validate("c"));
    GEMM_RETURN_IF_ERROR(CheckShape("c", *o.c, m, n));
    if (o.c->resident() != nullptr && o.c->layout() != o.output_layout) {
      return absl::InvalidArgumentError(
          "c: a resident C must be stored in the output layout");
    }
    if (o.c->dtype() != out_dtype) {
      return absl::InvalidArgumentError(absl::StrCat("c is ", TypeName(o.c->dtype()),
                                                     ", expected the output type ",
                                                     TypeName(out_dtype)));
    }
  }

  v1::GemmProblem* p = request->add_problems();
  p->set_m(m);
  p->set_n(n);
  p->set_k(k);
  p->set_input_dtype(ToProto(a.dtype()));
  if (b.dtype() != a.dtype()) p->set_b_dtype(ToProto(b.dtype()));
  p->set_quantize_partner(o.quantize_partner);
  p->set_output_dtype(ToProto(out_dtype));
  p->set_transpose_a(o.transpose_a);
  p->set_transpose_b(o.transpose_b);
  p->set_allow_tf32(o.allow_tf32);
  p->set_alpha(o.alpha);
  p->set_beta(o.beta);
  p->set_output_layout(ToProto(o.output_layout));
  FillMatrix(p->mutable_a(), a);
  FillMatrix(p->mutable_b(), b);
  // C only travels when it is read.
  if (o.c.has_value() && o.beta != 0.0) FillMatrix(p->mutable_c(), *o.c);
  return absl::OkStatus();
}

absl::StatusOr<v1::GemmProblem> MakeProblem(const Operand& a, const Operand& b,
                                            const ProblemOptions& options) {
  v1::GemmRequest holder;
  GEMM_RETURN_IF_ERROR(AddProblem(&holder, a, b, options));
  // Moving out of the repeated field swaps buffers; the bytes are not copied.
  return std::move(*holder.mutable_problems(0));
}

namespace {

// The scales of an FP8 operand of a problem message, viewed in place.
absl::Status ViewScales(absl::string_view name, const v1::Matrix& m, OperandRole role,
                        bool transposed, MatrixRef* ref) {
  if (!IsFp8(ref->dtype)) return absl::OkStatus();
  GEMM_ASSIGN_OR_RETURN(const ScaleMode mode, FromProto(m.scales().mode()));
  ref->scales = Fp8Scales{mode, role, transposed, m.scales().data().data(), 0};
  ref->scales.count = ScaleCount(ref->fp8_operand());
  if (m.scales().data().size() != ref->scales.count * sizeof(float))
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".scales.data has ", m.scales().data().size(), " bytes, expected ",
        ref->scales.count * sizeof(float), " for ", ScaleModeName(mode), " scales"));
  return absl::OkStatus();
}

}  // namespace

MatrixView QuantizedMatrix::view() const {
  const Fp8Scales s{how.mode, how.operand, how.transposed, scales.data(), scales.size()};
  return MatrixView(codes.data(), rows, cols, how.format, s, layout);
}

absl::StatusOr<QuantizedMatrix> QuantizeToFp8(const MatrixView& source,
                                              const Fp8Quantization& how) {
  GEMM_RETURN_IF_ERROR(source.Validate("source"));
  if (IsFp8(source.dtype()))
    return absl::InvalidArgumentError("source: already FP8 (quantize fp32, fp16 or bf16 data)");
  if (!IsFp8(how.format))
    return absl::InvalidArgumentError(
        absl::StrCat("format: ", TypeName(how.format), " is not an FP8 type"));
  if (how.mode == ScaleMode::kNone)
    return absl::InvalidArgumentError("mode: choose tensor, channel or block scales");
  QuantizedMatrix q;
  q.rows = source.rows();
  q.cols = source.cols();
  q.layout = source.layout();
  q.how = how;
  const Fp8Operand g{q.rows, q.cols, q.layout, how.operand, how.transposed, how.mode};
  const uint64_t n = q.rows * q.cols;
  std::vector<float> values;
  const float* in = static_cast<const float*>(source.data());
  if (source.dtype() != DType::kFp32) {
    values.resize(n);
    ToFloat(source.dtype(), source.data(), values.data(), n);
    in = values.data();
  }
  q.codes.resize(n);
  q.scales.resize(ScaleCount(g));
  const uint64_t bad = QuantizeFp8(in, g, how.format, q.codes.data(), q.scales.data());
  if (bad != kQuantizeOk)
    return absl::InvalidArgumentError(absl::StrCat(
        "source: element ", bad, " (in storage order) is ", std::isnan(in[bad]) ? "NaN" : "infinite",
        ": only finite values quantize to FP8"));
  return q;
}

absl::StatusOr<GemmProblemRef> ViewProblem(const v1::GemmProblem& p) {
  GemmProblemRef ref;
  GemmShape& s = ref.shape;
  s.m = p.m();
  s.n = p.n();
  s.k = p.k();
  if (s.m == 0 || s.n == 0 || s.k == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("m, n and k must be positive, got ", s.m, ", ", s.n, ", ", s.k));
  }
  GEMM_ASSIGN_OR_RETURN(s.input_dtype, FromProto(p.input_dtype()));
  s.output_dtype = s.input_dtype;
  if (p.output_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    GEMM_ASSIGN_OR_RETURN(s.output_dtype, FromProto(p.output_dtype()));
  }
  s.transpose_a = p.transpose_a();
  s.transpose_b = p.transpose_b();
  s.allow_tf32 = p.allow_tf32();
  GEMM_ASSIGN_OR_RETURN(s.layout_a, FromProto(p.a().layout()));
  GEMM_ASSIGN_OR_RETURN(s.layout_b, FromProto(p.b().layout()));
  GEMM_ASSIGN_OR_RETURN(s.layout_c, FromProto(p.c().layout()));
  GEMM_ASSIGN_OR_RETURN(s.layout_d, FromProto(p.output_layout()));
  ref.alpha = p.has_alpha() ? p.alpha() : 1.0;
  ref.beta = p.has_beta() ? p.beta() : 0.0;

  if (p.has_b_dtype()) {
    GEMM_ASSIGN_OR_RETURN(const DType b, FromProto(p.b_dtype()));
    s.input_dtype_b = b;
  }
  if (p.quantize_partner())
    return absl::InvalidArgumentError(
        "quantize_partner: the server quantizes one operand of this problem; it has no local "
        "view (quantize on the client with QuantizeToFp8 to check it locally)");
  GEMM_RETURN_IF_ERROR(CheckBytes("a", p.a().data(), s.a_rows(), s.a_cols(), s.input_dtype));
  GEMM_RETURN_IF_ERROR(CheckBytes("b", p.b().data(), s.b_rows(), s.b_cols(), s.b_dtype()));
  ref.a = MatrixA(s, p.a().data().data());
  ref.b = MatrixB(s, p.b().data().data());
  GEMM_RETURN_IF_ERROR(ViewScales("a", p.a(), OperandRole::kA, s.transpose_a, &ref.a));
  GEMM_RETURN_IF_ERROR(ViewScales("b", p.b(), OperandRole::kB, s.transpose_b, &ref.b));
  if (ref.beta != 0.0) {
    GEMM_RETURN_IF_ERROR(CheckBytes("c", p.c().data(), s.m, s.n, s.output_dtype));
    ref.c = MatrixC(s, p.c().data().data());
  } else {
    ref.c = MatrixC(s, nullptr);
  }
  return ref;
}

absl::StatusOr<MatrixRef> ViewResult(const v1::GemmResult& r) {
  MatrixRef ref;
  GEMM_ASSIGN_OR_RETURN(ref.dtype, FromProto(r.dtype()));
  GEMM_ASSIGN_OR_RETURN(ref.layout, FromProto(r.layout()));
  ref.rows = r.rows();
  ref.cols = r.cols();
  GEMM_RETURN_IF_ERROR(CheckBytes("result", r.data(), ref.rows, ref.cols, ref.dtype));
  ref.data = r.data().data();
  return ref;
}

absl::Status ReadResult(const v1::GemmResult& result, float* out, size_t capacity,
                        Layout layout) {
  GEMM_ASSIGN_OR_RETURN(const MatrixRef src, ViewResult(result));
  const uint64_t n = src.elements();
  if (capacity < n) {
    return absl::InvalidArgumentError(absl::StrCat("output buffer holds ", capacity,
                                                   " floats, the result has ", n));
  }
  if (src.layout == layout || src.rows == 1 || src.cols == 1) {
    // A vector is laid out the same either way.
    ToFloat(src.dtype, src.data, out, n);
    return absl::OkStatus();
  }
  // Convert, then transpose into the requested layout. The source is read in
  // order; a row-major destination index is r * cols + c, col-major c * rows + r.
  std::vector<float> tmp(n);
  ToFloat(src.dtype, src.data, tmp.data(), n);
  const uint64_t outer = src.layout == Layout::kRowMajor ? src.rows : src.cols;
  const uint64_t inner = src.layout == Layout::kRowMajor ? src.cols : src.rows;
  for (uint64_t i = 0; i < outer; ++i)
    for (uint64_t j = 0; j < inner; ++j) out[j * outer + i] = tmp[i * inner + j];
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadResult(const v1::GemmResult& result, Layout layout) {
  GEMM_ASSIGN_OR_RETURN(const MatrixRef src, ViewResult(result));
  std::vector<float> out(src.elements());
  GEMM_RETURN_IF_ERROR(ReadResult(result, out.data(), out.size(), layout));
  return out;
}

}  // namespace gemm
