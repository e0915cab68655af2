#include "service/request_validation.h"

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
    return BadField(index, name, "must be set (DATA_TYPE_FP32, _FP16 or _BF16)");
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

}  // namespace

absl::StatusOr<GemmProblemRef> ValidateProblem(const v1::GemmProblem& p, int index,
                                               const ServiceLimits& limits,
                                               ResidentOperands* residents) {
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
  if (p.output_dtype() == v1::DATA_TYPE_UNSPECIFIED) {
    s.output_dtype = s.input_dtype;
  } else {
    auto o = ParseDType(p.output_dtype(), index, "output_dtype");
    if (!o.ok()) return o.status();
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
  if (absl::Status st = CheckOperand(p.b(), s.b_rows(), s.b_cols(), s.input_dtype, index, "b",
                                     limits, residents, &out.b);
      !st.ok())
    return st;
  s.layout_b = out.b.layout;

  // The result's size must pass the limit even when C is absent.
  auto d_bytes = MatrixBytes(s.m, s.n, s.output_dtype, index, "output", limits);
  if (!d_bytes.ok()) return d_bytes.status();
  if (p.has_output()) {
    auto at = ResolveShared(p.output(), *d_bytes, index, "output", residents);
    if (!at.ok()) return at.status();
    out.d = *at;
  }

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
  return out;
}

absl::StatusOr<std::vector<GemmProblemRef>> ValidateProblems(const v1::GemmRequest& request,
                                                             const ServiceLimits& limits,
                                                             ResidentOperands* residents) {
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
    auto p = ValidateProblem(request.problems(i), i, limits, residents);
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
  }
}

absl::StatusOr<std::vector<GemmProblemRef>> ValidateRequest(const v1::GemmRequest& request,
                                                            const ServiceLimits& limits,
                                                            v1::GemmResponse* response,
                                                            ResidentOperands* residents) {
  auto problems = ValidateProblems(request, limits, residents);
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
    return bad("dtype", "must be set (DATA_TYPE_FP32, _FP16 or _BF16)");
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

}  // namespace gemm
