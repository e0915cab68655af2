// What gemm_server logs (call_log.h, log_format.h, startup_summary.h), read
// from the default logger of an in-process GemmServer with a fake executor:
// the start-up line, a line for each kind of refusal with its code, caller,
// method and field or limit, auth failures with their reason (and their
// metric), the drain summary, and JSON lines that parse.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/observe/log_format.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "service/testing/fake_executor.h"
#include "service/testing/flat_json.h"
#include "service/testing/rpc_helpers.h"

namespace gemm {
namespace {

using fake::AsyncGemm;
using fake::Eventually;
using fake::FakeExecutor;
using fake::QueueDepth;
using fake::OneProblemRequest;
using ::testing::HasSubstr;

constexpr char kAliceToken[] = "alice-token-0123456789";

// Keeps what the logger writes, for the test to read while the server logs.
class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    text_.append(formatted.data(), formatted.size());
  }
  void flush_() override {}

 private:
  std::string text_;
};

class ServerLogTest : public ::testing::TestWithParam<LogFormat> {
 protected:
  ServerLogTest() : saved_(spdlog::default_logger()), sink_(std::make_shared<CaptureSink>()) {
    auto logger = std::make_shared<spdlog::logger>("gemm_server", sink_);
    logger->set_formatter(MakeLogFormatter(GetParam()));
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~ServerLogTest() override {
    if (server_) server_->Shutdown(absl::ZeroDuration());
    server_.reset();
    spdlog::set_default_logger(saved_);
    spdlog::drop("gemm_server");  // the registry keeps default loggers by name
    if (!tokens_file_.empty()) std::remove(tokens_file_.c_str());
  }

  void StartServer(ServerOptions o) {
    auto executor = std::make_unique<FakeExecutor>();
    executor_ = executor.get();
    auto server = GemmServer::Start(o, std::move(executor));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::GemmService::NewStub(channel_);
  }

  static ServerOptions Loopback() {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.batcher.budget.max_requests = 1;  // one request per batch: A runs, B queues
    o.admission.reject_predicted_late = false;
    return o;
  }

  std::string WriteTokens() {
    tokens_file_ = absl::StrCat(testing::TempDir(), "/server_log_test_tokens_", getpid());
    std::ofstream(tokens_file_) << "alice " << kAliceToken << "\n";
    return tokens_file_;
  }

  // Every line so far, as the fields of each: JSON lines parsed, text lines
  // split into their key=value pairs and the whole line as "line".
  std::vector<std::map<std::string, std::string>> Lines() {
    std::vector<std::map<std::string, std::string>> out;
    const std::string text = sink_->text();
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::map<std::string, std::string> fields{{"line", std::string(line)}};
      if (GetParam() == LogFormat::kJson) {
        auto parsed = testing_json::ParseFlatObject(line);
        EXPECT_TRUE(parsed.has_value()) << "not a JSON object of strings: " << line;
        if (parsed.has_value()) fields.insert(parsed->begin(), parsed->end());
      } else {
        // "[time] [level] message key=value ..."
        const size_t open = line.find("] [");
        if (open != absl::string_view::npos) {
          const size_t close = line.find(']', open + 3);
          fields["level"] = std::string(line.substr(open + 3, close - open - 3));
        }
        for (absl::string_view word : absl::StrSplit(line, ' ')) {
          const size_t eq = word.find('=');
          if (eq != absl::string_view::npos)
            fields[std::string(word.substr(0, eq))] = std::string(word.substr(eq + 1));
        }
      }
      out.push_back(std::move(fields));
    }
    return out;
  }

  // The first line whose fields include every one of `want`.
  std::map<std::string, std::string> Find(const std::map<std::string, std::string>& want) {
    for (auto& fields : Lines()) {
      bool all = true;
      for (const auto& [k, v] : want) {
        auto it = fields.find(k);
        if (it == fields.end() || it->second != v) all = false;
      }
      if (all) return fields;
    }
    return {};
  }

  std::string Text() { return sink_->text(); }

  std::shared_ptr<spdlog::logger> saved_;
  std::shared_ptr<CaptureSink> sink_;
  std::string tokens_file_;
  FakeExecutor* executor_ = nullptr;
  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
};

TEST_P(ServerLogTest, StartUpLineSaysWhatMatters) {
  ServerOptions o = Loopback();
  o.limits.max_queued_requests = 7;
  o.security.auth_tokens_file = WriteTokens();
  StartServer(o);
  auto started = Find({{"backend", FakeExecutor::kBackend}});
  ASSERT_FALSE(started.empty()) << Text();
  EXPECT_THAT(started["line"], HasSubstr("serving gemm.v1 on 127.0.0.1:0"));
  EXPECT_EQ(started["port"], std::to_string(server_->port()));
  EXPECT_EQ(started["tls"], "off");
  EXPECT_EQ(started["mtls"], "off");
  EXPECT_EQ(started["tokens"], "on");
  EXPECT_EQ(started["max_queued_requests"], "7");
  EXPECT_EQ(started["batch_max_requests"], "1");
  EXPECT_FALSE(started["max_message_bytes"].empty());
  EXPECT_FALSE(started["max_queue_delay"].empty());
  EXPECT_FALSE(started["devices"].empty());
}

TEST_P(ServerLogTest, EachRefusalIsLoggedWithCodeCallerMethodAndFieldOrLimit) {
  ServerOptions o = Loopback();
  o.limits.max_queued_requests = 1;
  StartServer(o);
  // INVALID_ARGUMENT: a dimension of 0.
  AsyncGemm invalid;
  invalid.Start(stub_.get(), OneProblemRequest("bad", 0));
  EXPECT_EQ(invalid.Wait().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto line = Find({{"code", "INVALID_ARGUMENT"}, {"method", "Gemm"}});
  ASSERT_FALSE(line.empty()) << Text();
  EXPECT_EQ(line["caller"], "anonymous");
  EXPECT_EQ(line["field"], "problems[0].m");
  EXPECT_EQ(line["level"], "info");

  // RESOURCE_EXHAUSTED: A runs (held), B fills the queue of one, C is refused.
  executor_->Hold();
  AsyncGemm a, b, c;
  a.Start(stub_.get(), OneProblemRequest("a"));
  ASSERT_TRUE(executor_->WaitHeld(1));
  b.Start(stub_.get(), OneProblemRequest("b"));
  ASSERT_TRUE(Eventually([&] { return QueueDepth(server_->metrics()->Scrape()) == 1; }));
  c.Start(stub_.get(), OneProblemRequest("c"));
  EXPECT_EQ(c.Wait().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  line = Find({{"code", "RESOURCE_EXHAUSTED"}, {"method", "Gemm"}});
  ASSERT_FALSE(line.empty()) << Text();
  EXPECT_EQ(line["limit"], "max_queued_requests");
  // (Which of a queued request's expiry, DEADLINE_EXCEEDED, or the client's
  // cancellation reaches the server first is a race here; call_log_test
  // checks the DEADLINE_EXCEEDED line.)
  executor_->Open();
  EXPECT_TRUE(a.Wait().ok()) << a.status.error_message();
  EXPECT_TRUE(b.Wait().ok()) << b.status.error_message();

  // UNAVAILABLE while draining, and the drain summary.
  executor_->Hold();
  AsyncGemm d, e;
  d.Start(stub_.get(), OneProblemRequest("d"));
  ASSERT_TRUE(executor_->WaitHeld(1));
  std::thread shutdown([&] { server_->Shutdown(absl::Seconds(60)); });
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(Text(), "shutting down: draining"); }));
  e.Start(stub_.get(), OneProblemRequest("e"));
  EXPECT_EQ(e.Wait().error_code(), grpc::StatusCode::UNAVAILABLE);
  line = Find({{"code", "UNAVAILABLE"}, {"method", "Gemm"}});
  ASSERT_FALSE(line.empty()) << Text();
  executor_->Open();
  EXPECT_TRUE(d.Wait().ok());
  shutdown.join();
  line = Find({{"under_way_at_start", "1"}});
  ASSERT_FALSE(line.empty()) << Text();
  EXPECT_THAT(line["line"], HasSubstr("drain summary"));
  EXPECT_EQ(line["finished"], "1");
  EXPECT_EQ(line["refused"], "1");
  EXPECT_EQ(line["cut_off"], "0");
}

TEST_P(ServerLogTest, UnparsableMessageIsInvalidArgumentAndLogged) {
  StartServer(Loopback());
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  // Field 1 (request_id) claims 127 bytes that are not there.
  grpc::Slice slice(std::string("\x0a\x7f", 2));
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/gemm.v1.GemmService/Gemm", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status st) {
                      status = std::move(st);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("did not parse"));
  EXPECT_FALSE(Find({{"code", "INVALID_ARGUMENT"}, {"method", "Gemm"}}).empty()) << Text();
}

TEST_P(ServerLogTest, AFailedTransferIsLogged) {
  StartServer(Loopback());
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  auto next = [&cq] {
    void* tag;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  };
  auto call = generic.PrepareCall(&ctx, "/gemm.v1.Transfer/Download", &cq);
  call->StartCall(nullptr);
  ASSERT_TRUE(next());
  v1::DownloadRequest request;
  request.set_handle("no-such-handle");
  grpc::Slice slice(request.SerializeAsString());
  call->Write(grpc::ByteBuffer(&slice, 1), nullptr);
  next();
  grpc::Status status;
  call->Finish(&status, nullptr);
  ASSERT_TRUE(next());
  ASSERT_FALSE(status.ok());
  ASSERT_TRUE(Eventually([&] { return !Find({{"method", "Download"}}).empty(); })) << Text();
  auto line = Find({{"method", "Download"}});
  EXPECT_EQ(line["caller"], "anonymous");
  EXPECT_FALSE(line["code"].empty());
}

TEST_P(ServerLogTest, AuthFailuresAreWarningsWithTheirReasonAndCounted) {
  ServerOptions o = Loopback();
  o.security.auth_tokens_file = WriteTokens();
  StartServer(o);
  AsyncGemm missing, unknown, scheme, good;
  missing.Start(stub_.get(), OneProblemRequest("m"));
  EXPECT_EQ(missing.Wait().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  unknown.Start(stub_.get(), OneProblemRequest("u"), absl::Seconds(60), "not-a-known-token-at-all");
  EXPECT_EQ(unknown.Wait().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  scheme.ctx.AddMetadata("authorization", "Basic YWxpY2U6cGFzc3dvcmQ=");
  scheme.Start(stub_.get(), OneProblemRequest("s"));
  EXPECT_EQ(scheme.Wait().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  good.Start(stub_.get(), OneProblemRequest("g"), absl::Seconds(60), kAliceToken);
  EXPECT_TRUE(good.Wait().ok()) << good.status.error_message();

  for (const char* reason : {"missing_token", "unknown_token", "wrong_scheme"}) {
    auto line = Find({{"reason", reason}});
    ASSERT_FALSE(line.empty()) << reason << "\n" << Text();
    EXPECT_EQ(line["code"], "UNAUTHENTICATED");
    EXPECT_EQ(line["method"], "/gemm.v1.GemmService/Gemm");
    EXPECT_EQ(line["level"], "warning");
  }
  const std::string scrape = server_->metrics()->Scrape();
  for (const char* reason : {"missing_token", "unknown_token", "wrong_scheme"})
    EXPECT_THAT(scrape, HasSubstr(absl::StrCat("gemm_auth_failures_total{reason=\"", reason,
                                               "\"} 1")));
  EXPECT_THAT(scrape,
              HasSubstr("gemm_auth_failures_total{reason=\"other_caller_on_connection\"} 0"));
}

INSTANTIATE_TEST_SUITE_P(Formats, ServerLogTest,
                         ::testing::Values(LogFormat::kText, LogFormat::kJson),
                         [](const auto& info) {
                           return info.param == LogFormat::kJson ? "Json" : "Text";
                         });

}  // namespace
}  // namespace gemm
