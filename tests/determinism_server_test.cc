// GemmRequest.deterministic over the wire (CPU backend): the response's
// reproducibility record, the server's default, the metric, and identical
// bits for one problem sent alone and beside other requests.
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proto/gemm/v1/gemm.grpc.pb.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

v1::GemmRequest OneProblem(const test::ProblemSpec& spec, uint64_t seed) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  v1::GemmRequest r;
  *r.add_problems() = test::MakeProblem(spec, &rng);
  return r;
}

std::unique_ptr<GemmServer> StartServer(bool deterministic_by_default) {
  ServerOptions o = test::LoopbackCpuServerOptions(3);
  o.cpu.blas_threads = 2;
  o.deterministic_by_default = deterministic_by_default;
  auto s = GemmServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

v1::GemmResponse Call(v1::GemmService::Stub* stub, const v1::GemmRequest& request) {
  grpc::ClientContext ctx;
  v1::GemmResponse response;
  const grpc::Status st = stub->Gemm(&ctx, request, &response);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return response;
}

TEST(DeterminismServerTest, RecordOnlyForDeterministicRequests) {
  auto server = StartServer(false);
  ASSERT_NE(server, nullptr);
  auto stub = test::LoopbackStub(server->port());
  test::ProblemSpec spec;
  spec.m = 33;
  spec.n = 17;
  spec.k = 65;
  spec.input = DType::kBf16;
  v1::GemmRequest request = OneProblem(spec, 1);
  *request.add_problems() = request.problems(0);

  const v1::GemmResponse plain = Call(stub.get(), request);
  EXPECT_FALSE(plain.has_reproducibility());

  request.set_deterministic(true);
  const v1::GemmResponse det = Call(stub.get(), request);
  ASSERT_TRUE(det.has_reproducibility());
  const v1::Reproducibility& r = det.reproducibility();
  EXPECT_EQ(r.backend(), "cpu");
  EXPECT_NE(r.device_model().find("2 BLAS threads"), std::string::npos) << r.device_model();
  EXPECT_FALSE(r.build().empty());
  ASSERT_EQ(r.problems_size(), 2);
  EXPECT_EQ(r.problems(1).kernel_family(), "openblas_sgemm");
  EXPECT_EQ(r.problems(1).splits(), 1u);
  EXPECT_EQ(det.results(0).data(), plain.results(0).data());
  const std::string metrics = server->metrics()->Scrape();
  EXPECT_NE(metrics.find("gemm_deterministic_requests_total{backend=\"cpu\"} 1"),
            std::string::npos)
      << metrics;
}

TEST(DeterminismServerTest, ServerDefaultAppliesOnlyWhereTheFieldIsUnset) {
  auto server = StartServer(true);
  ASSERT_NE(server, nullptr);
  auto stub = test::LoopbackStub(server->port());
  test::ProblemSpec spec;
  spec.m = spec.n = spec.k = 8;
  v1::GemmRequest request = OneProblem(spec, 2);
  EXPECT_TRUE(Call(stub.get(), request).has_reproducibility());
  request.set_deterministic(false);
  EXPECT_FALSE(Call(stub.get(), request).has_reproducibility());
}

// One problem alone and then beside many concurrent requests (same shape,
// other data, so they batch with it): the same bytes every time.
TEST(DeterminismServerTest, SameBitsAloneAndUnderLoad) {
  auto server = StartServer(false);
  ASSERT_NE(server, nullptr);
  auto stub = test::LoopbackStub(server->port());
  test::ProblemSpec spec;
  spec.m = 150;
  spec.n = 130;
  spec.k = 700;
  spec.input = DType::kFp16;
  spec.beta = 0.5;
  v1::GemmRequest mine = OneProblem(spec, 3);
  mine.set_deterministic(true);
  const std::string alone = Call(stub.get(), mine).results(0).data();
  std::vector<std::thread> load;
  for (int t = 0; t < 6; ++t) {
    load.emplace_back([&, t] {
      auto own = test::LoopbackStub(server->port());
      for (int i = 0; i < 6; ++i) {
        v1::GemmRequest other = OneProblem(spec, 100 + 10 * t + i);
        other.set_deterministic(true);
        Call(own.get(), other);
      }
    });
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Call(stub.get(), mine).results(0).data(), alone);
  for (std::thread& t : load) t.join();
}

}  // namespace
}  // namespace gemm
