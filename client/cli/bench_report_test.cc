#include "client/cli/bench_report.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemm::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Figures SomeRun() {
  Figures f;
  f.workload = "16x16x16 fp32 -> fp32, batch 1, concurrency 2";
  f.m = f.n = f.k = 16;
  f.batch = 1;
  f.transport = "unary";
  f.requests = 12;
  f.ok = 10;
  f.failures[{absl::StatusCode::kUnauthenticated, "no \"token\"\n"}] = 2;
  f.seconds = 0.5;
  f.requests_per_s = 20;
  f.p50 = 1.25;
  f.max = 3;
  f.verified = 5;
  return f;
}

TEST(BenchReportTest, JsonIsOneLineWithTheDocumentedFieldsAsNumbers) {
  const std::string json = JsonReport("host:1", {SomeRun()}, 3);
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_THAT(json, HasSubstr("\"target\":\"host:1\""));
  EXPECT_THAT(json, HasSubstr("\"m\":16,\"n\":16,\"k\":16,\"batch\":1"));
  EXPECT_THAT(json, HasSubstr("\"requests\":12,\"ok\":10,\"errors\":2"));
  // The message is escaped, the count a number.
  EXPECT_THAT(json, HasSubstr("\"failures\":[{\"code\":\"UNAUTHENTICATED\","
                              "\"message\":\"no \\\"token\\\"\\n\",\"count\":2}]"));
  EXPECT_THAT(json, HasSubstr("\"stopped_early\":null"));
  EXPECT_THAT(json, HasSubstr("\"duration_s\":0.5"));
  // Zero figures are printed, not left out.
  EXPECT_THAT(json, HasSubstr("\"gflop_per_s\":0"));
  EXPECT_THAT(json, HasSubstr("\"mismatches\":0"));
  EXPECT_THAT(json, HasSubstr("\"latency_ms\":{\"p50\":1.25,\"p90\":0,\"p99\":0,\"max\":3}"));
  EXPECT_THAT(json, HasSubstr("\"exit_code\":3"));
}

TEST(BenchReportTest, AStoppedRunSaysWhyAndASweepListsEveryRun) {
  Figures stopped = SomeRun();
  stopped.stopped_early = "5 consecutive failures";
  Figures second = SomeRun();
  second.m = second.n = second.k = 48;
  const std::string json = JsonReport("t", {SomeRun(), stopped, second}, 0);
  EXPECT_THAT(json, HasSubstr("\"stopped_early\":\"5 consecutive failures\""));
  EXPECT_THAT(json, HasSubstr("\"m\":48"));
  EXPECT_THAT(JsonReport("t", {}, 2), Not(HasSubstr("\"m\"")));
  EXPECT_THAT(JsonReport("t", {}, 2), HasSubstr("\"runs\":[]"));
}

}  // namespace
}  // namespace gemm::cli
