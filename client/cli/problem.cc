#include "client/cli/problem.h"

#include <optional>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/cli/flags.h"
#include "client/matrix_view.h"
#include "common/reference_gemm.h"
#include "common/status_macros.h"

namespace gemm::cli {
namespace {

absl::StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "fp32") return DType::kFp32;
  if (s == "fp16") return DType::kFp16;
  if (s == "bf16") return DType::kBf16;
  if (s == "fp8_e4m3") return DType::kFp8E4m3;
  if (s == "fp8_e5m2") return DType::kFp8E5m2;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", s, "\" (fp32, fp16, bf16, fp8_e4m3, fp8_e5m2)"));
}

absl::StatusOr<ScaleMode> ParseScale(const std::string& s) {
  if (s == "tensor") return ScaleMode::kTensor;
  if (s == "channel") return ScaleMode::kChannel;
  if (s == "block") return ScaleMode::kBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("--scale: unknown scale mode \"", s, "\" (tensor, channel, block)"));
}

// The input types of the flags: A's, B's (--b_dtype, else A's) and the
// output's (--out_dtype, else the input type; fp32 for FP8 inputs).
struct FlagTypes {
  DType a, b, out;
};
absl::StatusOr<FlagTypes> ParseTypes() {
  FlagTypes t;
  GEMM_ASSIGN_OR_RETURN(t.a, ParseDType(absl::GetFlag(FLAGS_dtype)));
  t.b = t.a;
  if (!absl::GetFlag(FLAGS_b_dtype).empty()) {
    GEMM_ASSIGN_OR_RETURN(t.b, ParseDType(absl::GetFlag(FLAGS_b_dtype)));
  }
  if (IsFp8(t.a) != IsFp8(t.b) || (!IsFp8(t.a) && t.a != t.b))
    return absl::InvalidArgumentError(
        "--b_dtype: may differ from --dtype only between FP8 formats");
  t.out = IsFp8(t.a) ? DType::kFp32 : t.a;
  if (!absl::GetFlag(FLAGS_out_dtype).empty()) {
    GEMM_ASSIGN_OR_RETURN(t.out, ParseDType(absl::GetFlag(FLAGS_out_dtype)));
  }
  if (IsFp8(t.out))
    return absl::InvalidArgumentError("--out_dtype: FP8 outputs are not offered");
  return t;
}

absl::StatusOr<Layout> ParseLayout(const std::string& s) {
  if (s == "row") return Layout::kRowMajor;
  if (s == "col") return Layout::kColMajor;
  return absl::InvalidArgumentError(absl::StrCat("unknown layout \"", s, "\" (row, col)"));
}

}  // namespace

std::string Name(DType t) { return std::string(DTypeName(t)); }
std::string Name(v1::DataType t) {
  absl::StatusOr<DType> d = FromProto(t);
  return d.ok() ? Name(*d) : "unspecified";
}

absl::StatusOr<Shape> FlagShape(uint64_t m, uint64_t n, uint64_t k, bool references) {
  const bool sweep = !absl::GetFlag(FLAGS_sizes).empty();
  GEMM_ASSIGN_OR_RETURN(const FlagTypes types, ParseTypes());
  const DType in = types.a, out = types.out;
  Shape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.batch = absl::GetFlag(FLAGS_batch);
  s.in_bytes = SizeOf(in);
  s.out_bytes = SizeOf(out);
  s.with_c = absl::GetFlag(FLAGS_beta) != 0.0;
  s.references = references;
  if (sweep) s.m_flag = s.n_flag = s.k_flag = "--sizes";
  return s;
}

// The limits to check shapes against: the server's when GetServerInfo

absl::Status CheckSize(const Shape& s, const CheckLimits& l) {
  uint64_t budget = absl::GetFlag(FLAGS_max_client_bytes);
  if (budget == 0) budget = DefaultClientBudget();
  return CheckShape(s, l.limits, budget, l.from_server);
}

absl::StatusOr<v1::GemmRequest> BuildRequest(uint64_t m, uint64_t n, uint64_t k) {
  GEMM_ASSIGN_OR_RETURN(const FlagTypes types, ParseTypes());
  const DType in = types.a, out = types.out;
  GEMM_ASSIGN_OR_RETURN(const ScaleMode scale, ParseScale(absl::GetFlag(FLAGS_scale)));
  GEMM_ASSIGN_OR_RETURN(const Layout layout, ParseLayout(absl::GetFlag(FLAGS_layout)));
  ProblemOptions options;
  GEMM_ASSIGN_OR_RETURN(options.output_layout, ParseLayout(absl::GetFlag(FLAGS_out_layout)));
  options.transpose_a = absl::GetFlag(FLAGS_transpose_a);
  options.transpose_b = absl::GetFlag(FLAGS_transpose_b);
  options.output_dtype = out;
  options.alpha = absl::GetFlag(FLAGS_alpha);
  options.beta = absl::GetFlag(FLAGS_beta);
  options.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  if (absl::GetFlag(FLAGS_batch) < 1) return absl::InvalidArgumentError("--batch must be >= 1");

  GemmShape shape;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  shape.transpose_a = options.transpose_a;
  shape.transpose_b = options.transpose_b;

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Random values stored as `t`; the storage outlives the views below only
  // until AddProblem has copied it into the request.
  struct Storage {
    std::vector<float> f32;
    std::vector<uint16_t> f16;
    QuantizedMatrix fp8;
  };
  auto random_matrix = [&](Storage* s, DType t, uint64_t rows, uint64_t cols) {
    s->f32.resize(rows * cols);
    for (float& x : s->f32) x = dist(rng);
    if (t == DType::kFp32) return MatrixView(s->f32.data(), rows, cols, layout);
    s->f16.resize(s->f32.size());
    FromFloat(t, s->f32.data(), s->f16.data(), s->f32.size());
    return MatrixView(s->f16.data(), rows, cols, t, layout);
  };
  // FP8 operands: random floats quantized on the client with --scale scales
  // laid out for their slot; the reference multiplies what they dequantize to.
  auto random_fp8 = [&](Storage* s, DType format, OperandRole role, bool transposed,
                        uint64_t rows, uint64_t cols) -> absl::StatusOr<MatrixView> {
    const MatrixView source = random_matrix(s, DType::kFp32, rows, cols);
    GEMM_ASSIGN_OR_RETURN(s->fp8,
                          QuantizeToFp8(source, Fp8Quantization{format, scale, role, transposed}));
    return s->fp8.view();
  };

  v1::GemmRequest request;
  if (absl::GetFlag(FLAGS_deterministic)) request.set_deterministic(true);
  request.set_request_id("gemm_cli");
  for (int i = 0; i < absl::GetFlag(FLAGS_batch); ++i) {
    Storage a, b, c;
    std::optional<MatrixView> va, vb;
    if (IsFp8(in)) {
      GEMM_ASSIGN_OR_RETURN(va, random_fp8(&a, in, OperandRole::kA, shape.transpose_a,
                                           shape.a_rows(), shape.a_cols()));
      GEMM_ASSIGN_OR_RETURN(vb, random_fp8(&b, types.b, OperandRole::kB, shape.transpose_b,
                                           shape.b_rows(), shape.b_cols()));
    } else {
      va = random_matrix(&a, in, shape.a_rows(), shape.a_cols());
      vb = random_matrix(&b, in, shape.b_rows(), shape.b_cols());
    }
    if (options.beta != 0.0) options.c = random_matrix(&c, out, shape.m, shape.n);
    GEMM_RETURN_IF_ERROR(AddProblem(&request, *va, *vb, options));
  }
  return request;
}


absl::StatusOr<std::vector<std::vector<double>>> References(const v1::GemmRequest& request) {
  std::vector<std::vector<double>> refs;
  for (const v1::GemmProblem& p : request.problems()) {
    GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(p));
    refs.push_back(ReferenceGemm(ref));
  }
  return refs;
}

absl::StatusOr<Check> CheckResult(const v1::GemmProblem& problem, const v1::GemmResult& result,
                                  const std::vector<double>& reference) {
  GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(problem));
  GEMM_ASSIGN_OR_RETURN(const MatrixRef d, ViewResult(result));
  if (d.rows != ref.shape.m || d.cols != ref.shape.n) {
    return absl::DataLossError(absl::StrCat("result is ", d.rows, "x", d.cols, ", expected ",
                                            ref.shape.m, "x", ref.shape.n));
  }
  if (d.dtype != ref.shape.output_dtype) {
    return absl::DataLossError(absl::StrCat("result is ", Name(d.dtype), ", expected ",
                                            Name(ref.shape.output_dtype)));
  }
  Check c;
  c.error = RelativeError(ReadMatrix(d), reference);
  c.tolerance = Tolerance(ref.shape.input_dtype, ref.shape.output_dtype, ref.shape.allow_tf32);
  return c;
}

double RequestFlops(const v1::GemmRequest& request) {
  double flops = 0.0;
  for (const v1::GemmProblem& p : request.problems()) {
    flops += 2.0 * static_cast<double>(p.m()) * static_cast<double>(p.n()) *
             static_cast<double>(p.k());
  }
  return flops;
}

}  // namespace gemm::cli
