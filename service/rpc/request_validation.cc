#include "service/rpc/request_validation.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"

namespace gemm {
namespace {

constexpr size_t kMaxLabelBytes = 256;

std::string Field(int index, absl::string_view name) {
  return absl::StrCat("problems[", index, "].", name);
}

absl::Status BadField(int index, absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(Field(index, name), ": ", why));
}

absl::StatusOr<DType> ParseDType(v1::DataType t, int index, absl::string_view name) {
  if (t == v1::DATA_TYPE_UNSPECIFIED)
    return BadField(index, name, "must be set (DATA_TYPE_FP32, _FP16, _BF16, _FP8_E4M3 or _FP8_E5M2)");
  auto d = FromProto(t);
  if (!d.ok()) return BadField(index, name, d.status().message());
  return *d;
}

absl::StatusOr<Layout> ParseLayout(v1::Layout l, int index, absl::string_view name) {
  auto layout = FromProto(l);
  if (!layout.ok()) return BadField(index, name, layout.status().message());
  return *layout;
}

absl::Status CheckDimension(uint64_t v, int index, absl::string_view name,
                            const ServiceLimits& limits) {
  if (v == 0) return BadField(index, name, "must be at least 1");
  if (v > limits.max_dimension)
    return BadField(index, name,
                    absl::StrCat(v, " exceeds the limit of ", limits.max_dimension));
  return absl::OkStatus();
}

// rows * cols * elem_size, or an error if it overflows or passes the limit.
absl::StatusOr<uint64_t> MatrixBytes(uint64_t rows, uint64_t cols, DType t, int index,
                                     absl::string_view name, const ServiceLimits& limits) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  if (cols != 0 && rows > max / cols) return BadField(index, name, "rows * cols overflows");
  const uint64_t elems = rows * cols;
  if (elems > max / SizeOf(t)) return BadField(index, name, "byte size overflows");
  const uint64_t bytes = elems * SizeOf(t);
  if (bytes > limits.max_matrix_bytes)
    return absl::ResourceExhaustedError(
        absl::StrCat(Field(index, name), ": ", rows, " x ", cols, " ", DTypeName(t), " is ",
                     bytes, " bytes, over the limit of ", limits.max_matrix_bytes));
  return bytes;
}

// Whether a Matrix message carries a matrix: a handle, a place in shared
// memory, or non-empty bytes.
bool HasMatrix(const v1::Matrix& m) {
  return m.source_case() == v1::Matrix::kHandle || m.source_case() == v1::Matrix::kShared ||
         !m.data().empty();
}

// `bytes` at `ref` in a shared-memory region of this caller: a pointer into
// the region, which `residents` then holds. `field` names the reference
// ("a.shared", "output").
absl::StatusOr<char*> ResolveShared(const v1::SharedMemoryRef& ref, uint64_t bytes, int index,
                                    absl::string_view field, ResidentOperands* residents) {
  if (residents == nullptr || !residents->resolve_shared)
    return BadField(index, field, "shared memory is not available here");
  auto region = residents->resolve_shared(ref.region());
  if (!region.ok())
    return absl::Status(region.status().code(), absl::StrCat(Field(index, field), ".region: ",
                                                             region.status().message()));
  const uint64_t size = (*region)->bytes();
  if (ref.offset() > size || bytes > size - ref.offset())
    return BadField(index, absl::StrCat(field, ".offset"),
                    absl::StrCat(bytes, " bytes at offset ", ref.offset(),
                                 " pass the end of the region (", size, " bytes)"));
  char* at = (*region)->base() + ref.offset();
  residents->held_shared.push_back(*std::move(region));
  return at;
}

absl::Status CheckResident(const v1::Matrix& m, uint64_t rows, uint64_t cols, DType t, int index,
                           absl::string_view name, ResidentOperands* residents, MatrixRef* out) {
  const std::string field = absl::StrCat(name, ".handle");
  if (residents == nullptr || !residents->resolve)
    return BadField(index, field, "resident matrices are not available here");
  auto matrix = residents->resolve(m.handle());
  if (!matrix.ok())
    return absl::Status(matrix.status().code(),
                        absl::StrCat(Field(index, field), ": ", matrix.status().message()));
  const MatrixRef& v = (*matrix)->view();
  if (v.dtype != t || v.rows != rows || v.cols != cols)
    return BadField(index, field,
                    absl::StrCat("the resident matrix is ", v.rows, " x ", v.cols, " ",
                                 DTypeName(v.dtype), ", the problem needs ", rows, " x ", cols,
                                 " ", DTypeName(t)));
  if (m.layout() != v1::LAYOUT_UNSPECIFIED) {
    auto layout = ParseLayout(m.layout(), index, absl::StrCat(name, ".layout"));
    if (!layout.ok()) return layout.status();
    if (*layout != v.layout)
      return BadField(index, absl::StrCat(name, ".layout"),
                      "differs from the layout the resident matrix was registered in");
  }
  *out = v;
  residents->held.push_back(std::move(*matrix));
  return absl::OkStatus();
}

absl::Status CheckOperand(const v1::Matrix& m, uint64_t rows, uint64_t cols, DType t, int index,
                          absl::string_view name, const ServiceLimits& limits,
                          ResidentOperands* residents, MatrixRef* out) {
  auto bytes = MatrixBytes(rows, cols, t, index, absl::StrCat(name, ".data"), limits);
  if (!bytes.ok()) return bytes.status();
  if (m.source_case() == v1::Matrix::kHandle)
    return CheckResident(m, rows, cols, t, index, name, residents, out);
  if (m.release_after_use())
    return BadField(index, absl::StrCat(name, ".release_after_use"),
                    "only a matrix given by handle can be released");
  auto layout = ParseLayout(m.layout(), index, absl::StrCat(name, ".layout"));
  if (!layout.ok()) return layout.status();
  if (m.source_case() == v1::Matrix::kShared) {
    auto at = ResolveShared(m.shared(), *bytes, index, absl::StrCat(name, ".shared"), residents);
    if (!at.ok()) return at.status();
    *out = MatrixRef{*at, rows, cols, *layout, t};
    return absl::OkStatus();
  }
  if (m.data().size() != *bytes)
    return BadField(index, absl::StrCat(name, ".data"),
                    absl::StrCat("expected ", *bytes, " bytes (", rows, " x ", cols, " ",
                                 DTypeName(t), "), got ", m.data().size()));
  *out = MatrixRef{m.data().data(), rows, cols, *layout, t};
  return absl::OkStatus();
}


// What this server lacks for a valid FP8 request, by field.
absl::Status NoFp8Here(const BackendFeatures& features, absl::string_view field) {
  return absl::UnimplementedError(absl::StrCat(
      field, ": the ", features.backend,
      " backend of this server runs no FP8 problems (on a GPU they need a Hopper, sm_90, "
      "part); the CPU backend runs FP8"));
}

absl::Status NoQuantizingHere(const BackendFeatures& features, absl::string_view field) {
  return absl::UnimplementedError(absl::StrCat(
      field, ": the ", features.backend,
      " backend does not quantize to FP8 yet; send FP8 codes with their scales (the client "
      "libraries' QuantizeToFp8 / quantize_fp8 follow the server's rule), or use the CPU "
      "backend"));
}

absl::Status NoPartnerQuantizingHere(const BackendFeatures& features, absl::string_view field) {
  if (!features.fp8_quantize_matrices) return NoQuantizingHere(features, field);
  return absl::UnimplementedError(absl::StrCat(
      field, ": the ", features.backend,
      " backend does not quantize an operand per problem yet; register it with `quantize` "
      "(RegisterMatrix or BeginUpload: quantized once, on the server) and name its handle, "
      "send FP8 codes with their scales (the client libraries' QuantizeToFp8 / quantize_fp8 "
      "follow the server's rule), or use the CPU backend"));
}

// The scales of operand `name` (its MatrixRef `ref` already checked): set
// ref->scales from the request, or check the ones a server-quantized
// resident matrix keeps.
absl::Status CheckScales(const v1::Matrix& m, int index, absl::string_view name, OperandRole operand,
                         bool transposed, MatrixRef* ref) {
  const std::string field = absl::StrCat(name, ".scales");
  const bool given = m.has_scales();
  if (!IsFp8(ref->dtype)) {
    if (given) return BadField(index, field, "only FP8 operands carry scales");
    return absl::OkStatus();
  }
  if (ref->resident != nullptr && ref->scales.mode != ScaleMode::kNone) {
    // Quantized by the server at registration: its scales come with it.
    if (given)
      return BadField(index, field,
                      "the resident matrix was quantized by the server and keeps its own "
                      "scales: send none");
    const Fp8Scales& kept = ref->scales;
    if (kept.mode != ScaleMode::kTensor &&
        (kept.operand != operand || kept.transposed != transposed))
      return BadField(
          index, absl::StrCat(name, ".handle"),
          absl::StrCat("the resident matrix was quantized with ", ScaleModeName(kept.mode),
                       " scales as operand ", OperandName(kept.operand),
                       kept.transposed ? " transposed" : " not transposed",
                       "; this problem uses it as operand ", OperandName(operand),
                       transposed ? " transposed" : " not transposed"));
    return absl::OkStatus();
  }
  if (!given)
    return BadField(index, field, "an FP8 operand needs its scales (mode and fp32 values)");
  auto mode = FromProto(m.scales().mode());
  if (!mode.ok()) return BadField(index, absl::StrCat(field, ".mode"), mode.status().message());
  ref->scales = Fp8Scales{*mode, operand, transposed, nullptr, 0};
  const uint64_t count = ScaleCount(ref->fp8_operand());
  const std::string& data = m.scales().data();
  if (data.size() != count * sizeof(float))
    return BadField(index, absl::StrCat(field, ".data"),
                    absl::StrCat("expected ", count, " fp32 values (", count * sizeof(float),
                                 " bytes) for ", ScaleModeName(*mode), " scales of operand ",
                                 OperandName(operand), ", got ", data.size(), " bytes"));
  for (uint64_t i = 0; i < count; ++i) {
    const float v = ScaleAt(data.data(), i);
    if (!(std::isfinite(v) && v > 0.0f))
      return BadField(index, absl::StrCat(field, ".data"),
                      absl::StrCat("scale ", i, " is ", v, ": scales must be finite and > 0"));
  }
  ref->scales.data = data.data();
  ref->scales.count = count;
  return absl::OkStatus();
}

// The dtype rules of FP8 problems, given A's and B's types as sent.
absl::Status CheckFp8Types(const v1::GemmProblem& p, int index, DType a, DType b) {
  const bool a_fp8 = IsFp8(a), b_fp8 = IsFp8(b);
  if (!a_fp8 && !b_fp8) {
    if (a != b) return BadField(index, "b_dtype", "may differ from input_dtype only for FP8 inputs");
    if (p.quantize_partner())
      return BadField(index, "quantize_partner", "needs one FP8 input and one bf16 or fp32 input");
    return absl::OkStatus();
  }
  if (a_fp8 == b_fp8) {
    if (p.quantize_partner())
      return BadField(index, "quantize_partner",
                      "needs one FP8 input and one bf16 or fp32 input; both are FP8");
    return absl::OkStatus();
  }
  if (!p.quantize_partner())
    return BadField(index, "quantize_partner",
                    absl::StrCat("A is ", DTypeName(a), " and B is ", DTypeName(b),
                                 ": FP8 inputs must both be FP8, or set quantize_partner to "
                                 "have the server quantize the other one"));
  const DType partner = a_fp8 ? b : a;
  if (partner != DType::kBf16 && partner != DType::kFp32)
    return BadField(index, a_fp8 ? "b_dtype" : "input_dtype",
                    absl::StrCat("quantize_partner quantizes bf16 or fp32 inputs, not ",
                                 DTypeName(partner)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GemmProblemRef> ValidateProblem(const v1::GemmProblem& p, int index,
                                               const ServiceLimits& limits,
                                               ResidentOperands* residents,
                                               const BackendFeatures& features) {
  GemmProblemRef out;
  GemmShape& s = out.shape;
  for (auto [v, name] : {std::pair{p.m(), "m"}, std::pair{p.n(), "n"}, std::pair{p.k(), "k"}}) {
    if (absl::Status st = CheckDimension(v, index, name, limits); !st.ok()) return st;
  }
  s.m = p.m();
  s.n = p.n();
  s.k = p.k();
  auto in = ParseDType(p.input_dtype(), index, "input_dtype");
  if (!in.ok()) return in.status();
  s.input_dtype = *in;
  DType b_in = *in;
  if (p.has_b_dtype()) {
    auto b = ParseDType(p.b_dtype(), index, "b_dtype");
    if (!b.ok()) return b.status();
    b_in = *b;
  }
  if (absl::Status st = CheckFp8Types(p, index, *in, b_in); !st.ok()) return st;
  const bool fp8 = IsFp8(*in) || IsFp8(b_in);
  if (p.output_dtype() == v1::DATA_TYPE_UNSPECIFIED) {
    if (fp8)
      return BadField(index, "output_dtype",
                      "must be set for FP8 inputs (DATA_TYPE_FP32, _FP16 or _BF16)");
    s.output_dtype = s.input_dtype;
  } else {
    auto o = ParseDType(p.output_dtype(), index, "output_dtype");
    if (!o.ok()) return o.status();
    if (IsFp8(*o))
      return BadField(index, "output_dtype",
                      "FP8 outputs are not offered (DATA_TYPE_FP32, _FP16 or _BF16)");
    s.output_dtype = *o;
  }
  s.transpose_a = p.transpose_a();
  s.transpose_b = p.transpose_b();
  s.allow_tf32 = p.allow_tf32();
  auto ld = ParseLayout(p.output_layout(), index, "output_layout");
  if (!ld.ok()) return ld.status();
  s.layout_d = *ld;

  out.alpha = p.has_alpha() ? p.alpha() : 1.0;
  out.beta = p.has_beta() ? p.beta() : 0.0;
  if (!std::isfinite(out.alpha)) return BadField(index, "alpha", "must be finite");
  if (!std::isfinite(out.beta)) return BadField(index, "beta", "must be finite");

  if (absl::Status st = CheckOperand(p.a(), s.a_rows(), s.a_cols(), s.input_dtype, index, "a",
                                     limits, residents, &out.a);
      !st.ok())
    return st;
  s.layout_a = out.a.layout;
  if (absl::Status st = CheckOperand(p.b(), s.b_rows(), s.b_cols(), b_in, index, "b", limits,
                                     residents, &out.b);
      !st.ok())
    return st;
  s.layout_b = out.b.layout;
  if (absl::Status st = CheckScales(p.a(), index, "a", OperandRole::kA, s.transpose_a, &out.a);
      !st.ok())
    return st;
  if (absl::Status st = CheckScales(p.b(), index, "b", OperandRole::kB, s.transpose_b, &out.b);
      !st.ok())
    return st;
  if (fp8) {
    // What each input runs as: its own FP8 type, or under quantize_partner
    // its FP8 partner's type and scale mode.
    if (!IsFp8(out.a.dtype)) {
      out.quantize = GemmProblemRef::Quantize::kA;
      out.quantize_mode = out.b.scales.mode;
      s.input_dtype = out.b.dtype;
    } else if (!IsFp8(out.b.dtype)) {
      out.quantize = GemmProblemRef::Quantize::kB;
      out.quantize_mode = out.a.scales.mode;
    }
    s.input_dtype_b = IsFp8(out.b.dtype) ? out.b.dtype : out.a.dtype;
  }

  // The result's size must pass the limit even when C is absent.
  auto d_bytes = MatrixBytes(s.m, s.n, s.output_dtype, index, "output", limits);
  if (!d_bytes.ok()) return d_bytes.status();
  if (p.has_output()) {
    auto at = ResolveShared(p.output(), *d_bytes, index, "output", residents);
    if (!at.ok()) return at.status();
    out.d = *at;
  }

  if (p.has_c() && p.c().has_scales())
    return BadField(index, "c.scales", "C carries no scales (only FP8 inputs do)");
  const bool has_c = p.has_c() && HasMatrix(p.c());
  if (out.beta != 0.0) {
    if (!has_c) return BadField(index, "c", "beta is non-zero but C is missing");
    if (absl::Status st = CheckOperand(p.c(), s.m, s.n, s.output_dtype, index, "c", limits,
                                       residents, &out.c);
        !st.ok())
      return st;
    s.layout_c = out.c.layout;
    // Kernels read C in D's layout; a request's C is transposed while it is
    // staged, a resident one is read where it lies.
    if (out.c.resident != nullptr && out.c.layout != s.layout_d)
      return BadField(index, "c.handle",
                      "a resident C must be registered in the output layout (output_layout)");
  } else if (has_c) {
    // C is ignored when beta == 0, but a malformed one is still an error.
    MatrixRef unused;
    if (absl::Status st = CheckOperand(p.c(), s.m, s.n, s.output_dtype, index, "c", limits,
                                       residents, &unused);
        !st.ok())
      return st;
  }
  // Valid; what this backend cannot run is refused last, so that a
  // malformed request gets the same INVALID_ARGUMENT on every backend.
  if (fp8 && !features.fp8)
    return NoFp8Here(features, Field(index, IsFp8(*in) ? "input_dtype" : "b_dtype"));
  if (out.quantize != GemmProblemRef::Quantize::kNone && !features.fp8_quantize_partner)
    return NoPartnerQuantizingHere(features, Field(index, "quantize_partner"));
  if (fp8 && s.layout_d == Layout::kColMajor && !features.fp8_block_scales_column_major_output &&
      (out.a.scales.mode == ScaleMode::kBlock || out.b.scales.mode == ScaleMode::kBlock ||
       out.quantize_mode == ScaleMode::kBlock))
    return absl::UnimplementedError(absl::StrCat(
        Field(index, "output_layout"), ": the ", features.backend,
        " backend runs block scales with a row-major output only (LAYOUT_ROW_MAJOR); tensor and "
        "channel scales take either"));
  return out;
}

absl::StatusOr<std::vector<GemmProblemRef>> ValidateProblems(const v1::GemmRequest& request,
                                                             const ServiceLimits& limits,
                                                             ResidentOperands* residents,
                                                             const BackendFeatures& features) {
  if (request.problems_size() == 0)
    return absl::InvalidArgumentError("problems: the request holds no problem");
  if (static_cast<uint64_t>(request.problems_size()) > limits.max_problems_per_request)
    return absl::ResourceExhaustedError(
        absl::StrCat("problems: ", request.problems_size(), " problems exceed the limit of ",
                     limits.max_problems_per_request, " per request"));
  std::vector<GemmProblemRef> problems;
  problems.reserve(request.problems_size());
  uint64_t result_bytes = 0;
  for (int i = 0; i < request.problems_size(); ++i) {
    if (request.keep_results() && request.problems(i).has_output())
      return BadField(i, "output", "a shared-memory output and keep_results exclude each other");
    auto p = ValidateProblem(request.problems(i), i, limits, residents, features);
    if (!p.ok()) return p.status();
    // Results written into shared memory do not travel in the response.
    if (!request.problems(i).has_output())
      result_bytes += p->shape.m * p->shape.n * SizeOf(p->shape.output_dtype);
    problems.push_back(*p);
  }
  // The response must fit in one message (a little room for framing),
  // unless the results stay on the server.
  if (!request.keep_results() &&
      result_bytes + 1024 * problems.size() > limits.max_message_bytes)
    return absl::ResourceExhaustedError(
        absl::StrCat("problems: the results need ", result_bytes,
                     " bytes, over the max message size of ", limits.max_message_bytes,
                     " (set keep_results and read them with Transfer.Download)"));
  return problems;
}

namespace {

void FillPrecision(const GemmProblemRef& p, const MatrixRef& operand, DType runs_as,
                   GemmProblemRef::Quantize which, v1::OperandPrecision* out) {
  const bool per_problem = p.quantize == which;
  out->set_dtype(ToProto(runs_as));
  out->set_scale_mode(ToProto(per_problem ? p.quantize_mode : operand.scales.mode));
  out->set_quantized_by_server(per_problem || (operand.resident != nullptr &&
                                               operand.resident->view().scales.mode !=
                                                   ScaleMode::kNone));
}

}  // namespace

void AttachResults(const v1::GemmRequest& request, std::vector<GemmProblemRef>* problems,
                   v1::GemmResponse* response) {
  response->set_request_id(request.request_id());
  response->clear_results();
  for (size_t i = 0; i < problems->size(); ++i) {
    GemmProblemRef& p = (*problems)[i];
    v1::GemmResult* r = response->add_results();
    r->set_dtype(ToProto(p.shape.output_dtype));
    r->set_layout(ToProto(p.shape.layout_d));
    r->set_rows(p.shape.m);
    r->set_cols(p.shape.n);
    // D goes into the caller's shared memory (p.d points there already).
    if (const v1::GemmProblem& problem = request.problems(static_cast<int>(i));
        problem.has_output()) {
      *r->mutable_shared() = problem.output();
      continue;
    }
    std::string* d = r->mutable_data();
    d->resize(p.shape.m * p.shape.n * SizeOf(p.shape.output_dtype));
    p.d = d->data();
    if (p.shape.fp8()) {
      FillPrecision(p, p.a, p.shape.input_dtype, GemmProblemRef::Quantize::kA,
                    r->mutable_a_precision());
      FillPrecision(p, p.b, p.shape.b_dtype(), GemmProblemRef::Quantize::kB,
                    r->mutable_b_precision());
    }
  }
}

absl::StatusOr<std::vector<GemmProblemRef>> ValidateRequest(const v1::GemmRequest& request,
                                                            const ServiceLimits& limits,
                                                            v1::GemmResponse* response,
                                                            ResidentOperands* residents,
                                                            const BackendFeatures& features) {
  auto problems = ValidateProblems(request, limits, residents, features);
  if (!problems.ok()) return problems.status();
  AttachResults(request, &*problems, response);
  return problems;
}

uint64_t InflightBytes(const std::vector<GemmProblemRef>& problems) {
  uint64_t total = 0;
  for (const GemmProblemRef& p : problems) {
    total += p.d_bytes();
    for (const MatrixRef* m : {&p.a, &p.b, &p.c})
      if (m->data != nullptr && m->resident == nullptr) total += m->bytes();
  }
  return total;
}

namespace {

// The checks RegisterMatrix and BeginUpload share: a matrix description
// within the limits. Returns its shape (data unset).
absl::StatusOr<MatrixRef> ValidateMatrixShape(v1::DataType dtype_field, uint64_t rows,
                                              uint64_t cols, v1::Layout layout_field,
                                              const std::string& label,
                                              const ServiceLimits& limits) {
  auto bad = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (dtype_field == v1::DATA_TYPE_UNSPECIFIED)
    return bad("dtype", "must be set (DATA_TYPE_FP32, _FP16, _BF16, _FP8_E4M3 or _FP8_E5M2)");
  auto dtype = FromProto(dtype_field);
  if (!dtype.ok()) return bad("dtype", dtype.status().message());
  auto layout = FromProto(layout_field);
  if (!layout.ok()) return bad("layout", layout.status().message());
  for (auto [v, name] : {std::pair{rows, "rows"}, std::pair{cols, "cols"}}) {
    if (v == 0) return bad(name, "must be at least 1");
    if (v > limits.max_dimension)
      return bad(name, absl::StrCat(v, " exceeds the limit of ", limits.max_dimension));
  }
  // Both are below 2^31, so rows * cols cannot overflow; the byte count can.
  const uint64_t elements = rows * cols;
  if (elements > limits.max_matrix_bytes / SizeOf(*dtype))
    return absl::ResourceExhaustedError(absl::StrCat(
        "data: ", rows, " x ", cols, " ", DTypeName(*dtype), " is over the limit of ",
        limits.max_matrix_bytes, " bytes (max_matrix_bytes)"));
  if (label.size() > kMaxLabelBytes)
    return bad("label", absl::StrCat("longer than ", kMaxLabelBytes, " bytes"));
  return MatrixRef{nullptr, rows, cols, *layout, *dtype};
}

}  // namespace

absl::StatusOr<MatrixRef> ValidateRegisterMatrix(const v1::RegisterMatrixRequest& request,
                                                 const ServiceLimits& limits) {
  auto shape = ValidateMatrixShape(request.dtype(), request.rows(), request.cols(),
                                   request.layout(), request.label(), limits);
  if (!shape.ok()) return shape.status();
  if (request.data().size() != shape->bytes())
    return absl::InvalidArgumentError(
        absl::StrCat("data: expected ", shape->bytes(), " bytes (", request.rows(), " x ",
                     request.cols(), " ", DTypeName(shape->dtype), "), got ",
                     request.data().size()));
  shape->data = request.data().data();
  return shape;
}

absl::StatusOr<MatrixRef> ValidateBeginUpload(const v1::BeginUploadRequest& request,
                                              const ServiceLimits& limits) {
  return ValidateMatrixShape(request.dtype(), request.rows(), request.cols(), request.layout(),
                             request.label(), limits);
}

absl::StatusOr<std::optional<Fp8Quantization>> ValidateQuantization(
    bool has_quantize, const v1::Quantization& quantize, const MatrixRef& shape,
    const BackendFeatures& features) {
  auto bad = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (!has_quantize) {
    if (IsFp8(shape.dtype) && !features.fp8) return NoFp8Here(features, "dtype");
    return std::nullopt;
  }
  if (shape.dtype != DType::kBf16 && shape.dtype != DType::kFp32)
    return bad("dtype", absl::StrCat("quantize takes a bf16 or fp32 matrix, not ",
                                     DTypeName(shape.dtype)));
  Fp8Quantization q;
  auto format = FromProto(quantize.format());
  if (!format.ok() || !IsFp8(*format))
    return bad("quantize.format", "must be DATA_TYPE_FP8_E4M3 or DATA_TYPE_FP8_E5M2");
  q.format = *format;
  auto mode = FromProto(quantize.mode());
  if (!mode.ok()) return bad("quantize.mode", mode.status().message());
  q.mode = *mode;
  switch (quantize.operand()) {
    case v1::OPERAND_A:
      q.operand = OperandRole::kA;
      break;
    case v1::OPERAND_B:
      q.operand = OperandRole::kB;
      break;
    case v1::OPERAND_UNSPECIFIED:
      if (q.mode != ScaleMode::kTensor)
        return bad("quantize.operand",
                   "must be OPERAND_A or OPERAND_B for channel and block scales (it fixes "
                   "what a channel and a block are)");
      break;
    default:
      return bad("quantize.operand",
                 absl::StrCat("unknown operand ", static_cast<int>(quantize.operand())));
  }
  q.transposed = quantize.transposed();
  if (!features.fp8_quantize_matrices) return NoQuantizingHere(features, "quantize");
  return q;
}

}  // namespace gemm
