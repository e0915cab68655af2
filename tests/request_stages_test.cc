// The per-stage latency histograms (gemm_request_stage_seconds) end to end
// on the CPU backend: every request that ran is counted once in each of its
// stages, unary calls also in respond and total, the CPU backend's parts of
// execute are staging and kernel (no GPU copies), and requests refused
// before the queue count in none.
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

double StageCount(const std::string& scrape, const std::string& stage) {
  return test::MetricValue(scrape, "gemm_request_stage_seconds_count",
                           {absl::StrCat("stage=\"", stage, "\"")});
}

double StageSum(const std::string& scrape, const std::string& stage) {
  return test::MetricValue(scrape, "gemm_request_stage_seconds_sum",
                           {absl::StrCat("stage=\"", stage, "\"")});
}

TEST(RequestStagesTest, EachRequestThatRanIsCountedOnceInEachOfItsStages) {
  auto server = GemmServer::Start(test::LoopbackCpuServerOptions(1));
  ASSERT_TRUE(server.ok()) << server.status();
  // Every stage is exported from the start, at 0.
  std::string scrape = (*server)->metrics()->Scrape();
  for (const char* stage : kRequestStages) EXPECT_EQ(StageCount(scrape, stage), 0) << stage;

  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", (*server)->port());
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  std::mt19937 rng(3);
  test::ProblemSpec spec;
  spec.m = spec.n = spec.k = 64;
  constexpr int kUnary = 3;
  for (int i = 0; i < kUnary; ++i) {
    v1::GemmRequest request;
    *request.add_problems() = test::MakeProblem(spec, &rng);
    GemmResult r = (*client)->Gemm(request);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  {
    std::unique_ptr<GemmStreamSession> stream = (*client)->OpenStream();
    v1::GemmRequest request;
    *request.add_problems() = test::MakeProblem(spec, &rng);
    auto answer = stream->Send(request);
    ASSERT_TRUE(answer.ok()) << answer.status();
    GemmResult r = answer->get();
    ASSERT_TRUE(r.ok()) << r.status();
    stream->CloseSend();
    EXPECT_TRUE(stream->Finish().ok());
  }
  // Refused by validation: counted in no stage.
  v1::GemmRequest bad;
  bad.add_problems()->set_m(0);
  EXPECT_FALSE((*client)->Gemm(bad).ok());
  client->reset();

  // A unary call's respond and total are recorded when the server's side of
  // the call ends (OnDone), which may follow the client's receipt.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  do {
    scrape = (*server)->metrics()->Scrape();
  } while (StageCount(scrape, "total") < kUnary && absl::Now() < give_up &&
           (absl::SleepFor(absl::Milliseconds(1)), true));
  for (const char* stage : {"admit", "queue", "batch", "execute", "staging", "kernel", "complete"})
    EXPECT_EQ(StageCount(scrape, stage), kUnary + 1) << stage;
  for (const char* stage : {"serialize", "respond", "total"}) EXPECT_EQ(StageCount(scrape, stage), kUnary) << stage;
  for (const char* stage : {"h2d", "d2h"}) EXPECT_EQ(StageCount(scrape, stage), 0) << stage;
  // The stages lie inside the unary calls' totals.
  EXPECT_GT(StageSum(scrape, "total"), 0);
  EXPECT_GT(StageSum(scrape, "execute"), 0);
  EXPECT_GE(StageSum(scrape, "execute"), StageSum(scrape, "kernel") * 0.99);
  (*server)->Shutdown(absl::Seconds(5));
}

}  // namespace
}  // namespace gemm
