// The CUDA backend's peak rates: figures set by flag take the place of the
// measured ones for their dtype, and a re-measurement while clients load the
// server (what SIGHUP runs) replaces the others, keeps the flag figures, and
// loses, refuses or corrupts no request. Skips where no CUDA device is
// visible (CI); run on the GPU box with the bundled binary.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/exec/cuda_executor.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

constexpr double kFlagFp16 = 123e12;  // set by "flag", far from the measured rate

class GpuPeaksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaExecutor::DeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device visible: the CUDA executor is tested on the GPU box";
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.backend = "cuda";
    o.cuda.calibrate = true;
    o.cuda.peak_overrides = {{"fp16", kFlagFp16, kPeakMethodFlag}};
    auto s = GemmServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(1 << 30);
    args.SetMaxSendMessageSize(1 << 30);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(10));
  }

  std::vector<v1::PeakRate> ServerPeaks() {
    auto stub = v1::GemmService::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ServerInfo info;
    grpc::Status st = stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return {info.peak_rates().begin(), info.peak_rates().end()};
  }

  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

const v1::PeakRate* Find(const std::vector<v1::PeakRate>& rates, const std::string& kind) {
  for (const v1::PeakRate& r : rates)
    if (r.kind() == kind) return &r;
  return nullptr;
}

void Print(const char* when, const std::vector<v1::PeakRate>& rates) {
  std::printf("%s:", when);
  for (const v1::PeakRate& r : rates)
    std::printf(" %s=%.4g(%s)", r.kind().c_str(), r.per_second(), r.method().c_str());
  std::printf("\n");
}

TEST_F(GpuPeaksTest, AFlagFigureTakesThePlaceOfTheMeasuredOne) {
  const std::vector<v1::PeakRate> rates = ServerPeaks();
  Print("start-up", rates);
  const v1::PeakRate* fp16 = Find(rates, "fp16");
  ASSERT_NE(fp16, nullptr);
  EXPECT_EQ(fp16->per_second(), kFlagFp16);
  EXPECT_EQ(fp16->method(), kPeakMethodFlag);
  for (const char* kind : {"bf16", "memory"}) {
    const v1::PeakRate* r = Find(rates, kind);
    ASSERT_NE(r, nullptr) << kind;
    EXPECT_GT(r->per_second(), 0) << kind;
    EXPECT_EQ(r->method(), kPeakMethodMeasured) << kind;
  }
}

TEST_F(GpuPeaksTest, RemeasuringUnderLoadKeepsFlagsAndAnswersEveryRequestRight) {
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, right{0};
  std::vector<std::string> failures;
  absl::Mutex failures_mu;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      auto stub = v1::GemmService::NewStub(channel_);
      std::mt19937 rng(100 + c);
      std::uniform_int_distribution<int> size(64, 768);
      for (int i = 0; !stop.load(); ++i) {
        test::ProblemSpec s;
        s.m = size(rng);
        s.n = size(rng);
        s.k = size(rng);
        s.input = i % 2 ? DType::kBf16 : DType::kFp16;
        s.output = DType::kFp32;
        v1::GemmRequest request;
        request.set_request_id(absl::StrCat(c, "-", i));
        *request.add_problems() = test::MakeProblem(s, &rng);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        v1::GemmResponse response;
        ++sent;
        const grpc::Status st = stub->Gemm(&ctx, request, &response);
        if (st.ok() && test::ResponseMatches(request, response)) {
          ++right;
        } else {
          absl::MutexLock lock(&failures_mu);
          failures.push_back(absl::StrCat(request.request_id(), ": ", st.error_message()));
        }
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(300));  // the clients are under way
  const std::vector<v1::PeakRate> before = ServerPeaks();
  Print("before", before);
  for (int round = 0; round < 3; ++round) {
    const absl::Time t0 = absl::Now();
    const absl::Status st = server_->RemeasurePeaks();
    EXPECT_TRUE(st.ok()) << st;
    std::printf("re-measurement %d under load took %.1f ms\n", round,
                absl::ToDoubleMilliseconds(absl::Now() - t0));
    absl::SleepFor(absl::Milliseconds(200));
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  const std::vector<v1::PeakRate> after = ServerPeaks();
  Print("after", after);
  std::printf("requests sent %d, answered right %d\n", sent.load(), right.load());

  EXPECT_GT(sent.load(), 0);
  EXPECT_EQ(right.load(), sent.load());
  for (const std::string& f : failures) ADD_FAILURE() << f;
  const v1::PeakRate* fp16 = Find(after, "fp16");
  ASSERT_NE(fp16, nullptr);
  EXPECT_EQ(fp16->per_second(), kFlagFp16);
  EXPECT_EQ(fp16->method(), kPeakMethodFlag);
  for (const char* kind : {"bf16", "tf32", "memory"}) {
    const v1::PeakRate* r = Find(after, kind);
    ASSERT_NE(r, nullptr) << kind;
    EXPECT_GT(r->per_second(), 0) << kind;
    EXPECT_EQ(r->method(), kPeakMethodMeasured) << kind;
  }
}

}  // namespace
}  // namespace gemm
