// Helpers shared by the integration tests: random operands of any dtype,
// gemm.v1 problems built from a compact spec, and checks of results against
// the float64 reference. The checks read the request on their own (they do
// not reuse the server's validation), so a wrong server reading of a field
// cannot hide itself.
#ifndef GEMM_TESTS_TEST_UTIL_H_
#define GEMM_TESTS_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/gemm_problem.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/server.h"

namespace gemm {
namespace test {

// The base every in-process test server starts from: loopback, a free port,
// the CPU backend with `concurrent_requests` at a time and one OpenBLAS
// thread each, no start-up calibration, no metrics port. Tests set the
// limits they exercise on top.
ServerOptions LoopbackCpuServerOptions(int concurrent_requests = 2);

// A test suite whose tests share one server, started before its first test
// and stopped after its last. `Suite` is the suite's fixture (each suite
// gets its own server); it provides `static ServerOptions Options()`.
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = GemmServer::Start(Suite::Options());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr) << "the suite's server did not start"; }

  inline static GemmServer* server_ = nullptr;
};

// A channel to 127.0.0.1:`port` with no client-side message size limit (the
// tests exercise the server's); with `own_connection`, one not shared with
// other channels of the process.
std::shared_ptr<grpc::Channel> LoopbackChannel(int port, bool own_connection = false);
// A GemmService stub on LoopbackChannel(port, own_connection).
std::unique_ptr<v1::GemmService::Stub> LoopbackStub(int port, bool own_connection = false);

// A compact description of one problem. Unset optionals stay unset in the
// proto, so the server's defaults are exercised too.
struct ProblemSpec {
  uint64_t m = 1;
  uint64_t n = 1;
  uint64_t k = 1;
  DType input = DType::kFp32;
  std::optional<DType> output;  // unset: output_dtype left UNSPECIFIED
  bool transpose_a = false;
  bool transpose_b = false;
  Layout layout_a = Layout::kRowMajor;
  Layout layout_b = Layout::kRowMajor;
  Layout layout_c = Layout::kRowMajor;
  Layout layout_d = Layout::kRowMajor;
  std::optional<double> alpha;
  std::optional<double> beta;  // C is generated when beta is set and non-zero
  bool allow_tf32 = false;
};

std::string Describe(const ProblemSpec& spec);

// `elements` values uniform in [-1, 1], rounded to `t`, as little-endian bytes.
std::string RandomMatrixBytes(DType t, uint64_t elements, std::mt19937* rng);

// A problem with random operands (and C when spec.beta is non-zero).
v1::GemmProblem MakeProblem(const ProblemSpec& spec, std::mt19937* rng);

// Checks dtype, layout and shape of `result` and its values against
// ReferenceGemm within the tolerance of the problem's dtypes.
::testing::AssertionResult ResultMatches(const v1::GemmProblem& problem,
                                         const v1::GemmResult& result);

// Checks request_id, the result count and every result, and that the
// response names a backend.
::testing::AssertionResult ResponseMatches(const v1::GemmRequest& request,
                                           const v1::GemmResponse& response);

// One sample of a Prometheus text scrape: its label text ("{...}", empty
// when it has none) and its value.
struct MetricSample {
  std::string labels;
  double value = 0;
};

// Every sample named exactly `name` in `scrape` (the text exposition format).
std::vector<MetricSample> MetricSamples(const std::string& scrape, const std::string& name);

// The value of the first sample named `name` whose labels contain every one
// of `labels` (each like code="OK"); 0 when there is none.
double MetricValue(const std::string& scrape, const std::string& name,
                   const std::vector<std::string>& labels = {});

}  // namespace test
}  // namespace gemm

#endif  // GEMM_TESTS_TEST_UTIL_H_
