#include "service/observe/call_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "service/base/limits.h"
#include "service/observe/log_format.h"

namespace gemm {
namespace {

class CallLogTest : public testing::Test {
 protected:
  CallLogTest() : saved_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("gemm_test", sink);
    logger->set_formatter(MakeLogFormatter(LogFormat::kText));
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~CallLogTest() override {
    spdlog::set_default_logger(saved_);
    // The registry keeps every default logger by name: drop this one, whose
    // sink writes into a member that is about to go.
    spdlog::drop("gemm_test");
  }

  std::vector<std::string> Lines() const {
    return absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  }

  static LogRateLimiter::Options Rate(double per_second, uint32_t burst) {
    LogRateLimiter::Options o;
    o.lines_per_second = per_second;
    o.burst = burst;
    return o;
  }

  FakeClock clock_;
  std::shared_ptr<spdlog::logger> saved_;
  std::ostringstream out_;
};

TEST_F(CallLogTest, RefusalNamesCodeCallerMethodFieldAndLimit) {
  CallLog log(Rate(5, 20), &clock_);
  log.Failed("Gemm", "alice", absl::InvalidArgumentError("problems[0].m: 0 is not positive"));
  log.Failed("GemmStream", "",
             WithLimit(absl::ResourceExhaustedError("the queue is full (4 requests)"),
                       "max_queued_requests"));
  log.Failed("Gemm", "bob", absl::OkStatus());  // not logged
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  EXPECT_TRUE(absl::StrContains(lines[0], "[info] Gemm refused: problems[0].m: 0 is not positive"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "code=INVALID_ARGUMENT method=Gemm caller=alice "
                                          "field=problems[0].m"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "code=RESOURCE_EXHAUSTED method=GemmStream "
                                          "caller=anonymous limit=max_queued_requests"))
      << lines[1];
  EXPECT_FALSE(absl::StrContains(lines[1], "field=")) << lines[1];
}

TEST_F(CallLogTest, DeadlineExceededAndDrainRefusalsAreLogged) {
  CallLog log(Rate(5, 20), &clock_);
  log.Failed("GemmStream", "x509:CN=bot",
             absl::DeadlineExceededError("the deadline passed while the request was queued"));
  log.Failed("Gemm", "alice",
             absl::UnavailableError("Gemm: the server is shutting down (draining)"));
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  EXPECT_TRUE(absl::StrContains(lines[0], "[info] GemmStream refused: the deadline passed"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "code=DEADLINE_EXCEEDED method=GemmStream "
                                          "caller=\"x509:CN=bot\""))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "code=UNAVAILABLE method=Gemm caller=alice")) << lines[1];
  // The method's own name at the head of a message is no field.
  EXPECT_FALSE(absl::StrContains(lines[1], "field=")) << lines[1];
}

TEST_F(CallLogTest, AuthFailureIsAWarningWithItsReason) {
  CallLog log(Rate(5, 20), &clock_);
  log.AuthFailed("unknown_token", "/gemm.v1.GemmService/Gemm", "x509:CN=client",
                 "unknown bearer token");
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines[0], "[warning] authentication failed: unknown bearer token "
                                          "code=UNAUTHENTICATED reason=unknown_token "
                                          "method=/gemm.v1.GemmService/Gemm peer=\"x509:CN=client\""))
      << lines[0];
}

TEST_F(CallLogTest, FloodIsCutToTheBurstAndSummarized) {
  CallLog log(Rate(1, 3), &clock_);
  for (int i = 0; i < 100; ++i)
    log.Failed("Gemm", "alice", absl::ResourceExhaustedError("the queue is full"));
  for (int i = 0; i < 10; ++i) log.AuthFailed("missing_token", "/m", "", "missing");
  EXPECT_EQ(Lines().size(), 6u) << out_.str();  // 3 of each key
  log.FlushSuppressed();
  std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 8u) << out_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "suppressed 97 similar lines (Gemm RESOURCE_EXHAUSTED)"))
      << out_.str();
  EXPECT_TRUE(absl::StrContains(out_.str(), "suppressed 7 similar lines (auth missing_token)"))
      << out_.str();
  // Nothing more to summarize; a second later one more line gets through.
  log.FlushSuppressed();
  EXPECT_EQ(Lines().size(), 8u);
  clock_.Advance(absl::Seconds(1));
  log.Failed("Gemm", "alice", absl::ResourceExhaustedError("the queue is full"));
  EXPECT_EQ(Lines().size(), 9u);
}

TEST_F(CallLogTest, LinesBelowTheLevelUseNoBudget) {
  CallLog log(Rate(0, 1), &clock_);
  // CANCELLED logs at debug, below the logger's info.
  for (int i = 0; i < 5; ++i) log.Failed("Gemm", "", absl::CancelledError("gone"));
  log.FlushSuppressed();
  EXPECT_TRUE(Lines().empty()) << out_.str();
}

TEST_F(CallLogTest, LevelsAndFields) {
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kUnauthenticated), spdlog::level::warn);
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kPermissionDenied), spdlog::level::warn);
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kInternal), spdlog::level::err);
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kCancelled), spdlog::level::debug);
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kResourceExhausted), spdlog::level::info);
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kDeadlineExceeded), spdlog::level::info);
  EXPECT_EQ(CallLog::LevelFor(absl::StatusCode::kUnavailable), spdlog::level::info);
  EXPECT_EQ(CallLog::FieldOf("problems[3].a.handle: unknown"), "problems[3].a.handle");
  EXPECT_EQ(CallLog::FieldOf("request_id: required on GemmStream"), "request_id");
  EXPECT_EQ(CallLog::FieldOf("the queue is full: retry"), "");
  EXPECT_EQ(CallLog::FieldOf("no colon here"), "");
}

}  // namespace
}  // namespace gemm
