#include "tests/test_util.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/proto_enums.h"
#include "common/reference_gemm.h"

namespace gemm {
namespace test {
std::string Describe(const ProblemSpec& s) {
  return absl::StrCat(s.m, "x", s.n, "x", s.k, " ", DTypeName(s.input), "->",
                      s.output ? DTypeName(*s.output) : "(default)", " ta=", s.transpose_a,
                      " tb=", s.transpose_b, " a=", LayoutName(s.layout_a),
                      " b=", LayoutName(s.layout_b), " c=", LayoutName(s.layout_c),
                      " d=", LayoutName(s.layout_d),
                      s.alpha ? absl::StrCat(" alpha=", *s.alpha) : "",
                      s.beta ? absl::StrCat(" beta=", *s.beta) : "");
}

std::string RandomMatrixBytes(DType t, uint64_t elements, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(elements);
  for (float& v : values) v = dist(*rng);
  std::string out(elements * SizeOf(t), '\0');
  FromFloat(t, values.data(), out.data(), elements);
  return out;
}

v1::GemmProblem MakeProblem(const ProblemSpec& s, std::mt19937* rng) {
  v1::GemmProblem p;
  p.set_m(s.m);
  p.set_n(s.n);
  p.set_k(s.k);
  p.set_input_dtype(ToProto(s.input));
  if (s.output) p.set_output_dtype(ToProto(*s.output));
  p.set_transpose_a(s.transpose_a);
  p.set_transpose_b(s.transpose_b);
  p.set_allow_tf32(s.allow_tf32);
  if (s.alpha) p.set_alpha(*s.alpha);
  if (s.beta) p.set_beta(*s.beta);
  p.mutable_a()->set_layout(ToProto(s.layout_a));
  p.mutable_a()->set_data(RandomMatrixBytes(s.input, s.m * s.k, rng));
  p.mutable_b()->set_layout(ToProto(s.layout_b));
  p.mutable_b()->set_data(RandomMatrixBytes(s.input, s.k * s.n, rng));
  if (s.beta && *s.beta != 0.0) {
    p.mutable_c()->set_layout(ToProto(s.layout_c));
    p.mutable_c()->set_data(RandomMatrixBytes(s.output.value_or(s.input), s.m * s.n, rng));
  }
  if (s.layout_d == Layout::kColMajor) p.set_output_layout(v1::LAYOUT_COL_MAJOR);
  return p;
}

::testing::AssertionResult ResultMatches(const v1::GemmProblem& problem,
                                         const v1::GemmResult& result) {
  absl::StatusOr<GemmProblemRef> viewed = ViewProblem(problem);
  if (!viewed.ok()) return ::testing::AssertionFailure() << "problem: " << viewed.status();
  const GemmProblemRef& ref = *viewed;
  const GemmShape& s = ref.shape;
  if (result.dtype() != ToProto(s.output_dtype))
    return ::testing::AssertionFailure()
           << "dtype " << v1::DataType_Name(result.dtype()) << ", want "
           << v1::DataType_Name(ToProto(s.output_dtype));
  if (result.layout() != ToProto(s.layout_d))
    return ::testing::AssertionFailure() << "layout " << v1::Layout_Name(result.layout());
  if (result.rows() != s.m || result.cols() != s.n)
    return ::testing::AssertionFailure()
           << "shape " << result.rows() << "x" << result.cols() << ", want " << s.m << "x" << s.n;
  const uint64_t bytes = s.m * s.n * SizeOf(s.output_dtype);
  if (result.data().size() != bytes)
    return ::testing::AssertionFailure()
           << result.data().size() << " bytes of data, want " << bytes;
  const std::vector<double> out =
      ReadMatrix(MatrixRef{result.data().data(), s.m, s.n, s.layout_d, s.output_dtype});
  const double err = RelativeError(out, ReferenceGemm(ref));
  const double tol = Tolerance(s.input_dtype, s.output_dtype, s.allow_tf32);
  if (!(err <= tol))
    return ::testing::AssertionFailure() << "relative error " << err << " over " << tol;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult ResponseMatches(const v1::GemmRequest& request,
                                           const v1::GemmResponse& response) {
  if (response.request_id() != request.request_id())
    return ::testing::AssertionFailure()
           << "request_id \"" << response.request_id() << "\", want \"" << request.request_id()
           << "\"";
  if (response.status_code() != 0)
    return ::testing::AssertionFailure()
           << "status " << response.status_code() << ": " << response.status_message();
  if (response.results_size() != request.problems_size())
    return ::testing::AssertionFailure()
           << response.results_size() << " results for " << request.problems_size()
           << " problems";
  if (response.backend().empty()) return ::testing::AssertionFailure() << "no backend named";
  for (int i = 0; i < request.problems_size(); ++i) {
    ::testing::AssertionResult r = ResultMatches(request.problems(i), response.results(i));
    if (!r) return ::testing::AssertionFailure() << "problems[" << i << "]: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

std::vector<MetricSample> MetricSamples(const std::string& scrape, const std::string& name) {
  std::vector<MetricSample> out;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    const absl::string_view key = line.substr(0, space);
    const size_t brace = key.find('{');
    if (key.substr(0, brace) != name) continue;
    MetricSample sample;
    if (brace != absl::string_view::npos) sample.labels = std::string(key.substr(brace));
    if (!absl::SimpleAtod(line.substr(space + 1), &sample.value)) continue;
    out.push_back(std::move(sample));
  }
  return out;
}

double MetricValue(const std::string& scrape, const std::string& name,
                   const std::vector<std::string>& labels) {
  for (const MetricSample& s : MetricSamples(scrape, name)) {
    bool all = true;
    for (const std::string& l : labels) all = all && s.labels.find(l) != std::string::npos;
    if (all) return s.value;
  }
  return 0;
}

std::shared_ptr<grpc::Channel> LoopbackChannel(int port, bool own_connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<v1::GemmService::Stub> LoopbackStub(int port, bool own_connection) {
  return v1::GemmService::NewStub(LoopbackChannel(port, own_connection));
}

ServerOptions LoopbackCpuServerOptions(int concurrent_requests) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = "cpu";
  o.cpu.concurrent_requests = concurrent_requests;
  o.cpu.blas_threads = 1;
  o.cpu.calibrate = false;
  return o;
}

}  // namespace test
}  // namespace gemm
