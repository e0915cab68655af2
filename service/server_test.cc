// GemmServer start-up and shutdown (server.h) with a fake executor on
// loopback: the bound port, options refused by name, health status, and how
// shutdown treats work that is running or queued.
#include "service/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/generic/generic_stub.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/observe/metrics.h"
#include "service/testing/fake_executor.h"
#include "service/testing/rpc_helpers.h"

namespace gemm {
namespace {

using fake::AsyncGemm;
using fake::Eventually;
using fake::FakeExecutor;
using fake::QueueDepth;
using fake::OneProblemRequest;
using ::testing::HasSubstr;

ServerOptions Loopback() {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.batcher.budget.max_requests = 1;  // one request per batch: A runs, B queues
  return o;
}

// grpc.health.v1 spoken as raw protobuf bytes (no generated code for it is
// available here): HealthCheckRequest{service = 1} and the ServingStatus in
// HealthCheckResponse{status = 1}.
constexpr int kServing = 1, kNotServing = 2;

grpc::ByteBuffer HealthRequest(const std::string& service) {
  std::string bytes;
  if (!service.empty()) {
    bytes.push_back('\x0a');
    bytes.push_back(static_cast<char>(service.size()));
    bytes += service;
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

int ServingStatusOf(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return 0;  // UNKNOWN, the default
  return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : -1;
}

// A Health.Watch stream on its own completion queue.
class HealthWatch {
 public:
  explicit HealthWatch(const std::shared_ptr<grpc::Channel>& channel) : stub_(channel) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    call_ = stub_.PrepareCall(&ctx_, "/grpc.health.v1.Health/Watch", &cq_);
    call_->StartCall(nullptr);
    Next();
    call_->Write(HealthRequest(""), nullptr);
    Next();
    call_->WritesDone(nullptr);
    Next();
  }
  ~HealthWatch() {
    ctx_.TryCancel();
    grpc::Status st;
    call_->Finish(&st, nullptr);
    Next();
  }
  // The next status the server sends; -1 when the stream ends.
  int Read() {
    grpc::ByteBuffer in;
    call_->Read(&in, nullptr);
    return Next() ? ServingStatusOf(in) : -1;
  }

 private:
  bool Next() {
    void* tag;
    bool ok = false;
    cq_.Next(&tag, &ok);
    return ok;
  }
  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

// A one-GPU CUDA executor as the server sees it (backend "cuda"), whose GPU
// the test takes out of service: from then on it answers UNAVAILABLE, as
// CudaExecutor does after a sticky error or a watchdog expiry.
class LosableGpuExecutor final : public Executor {
 public:
  LosableGpuExecutor() : info_(inner_.info()) { info_.backend = "cuda"; }
  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return inner_.peak_rates(); }
  int max_concurrent_batches() const override { return inner_.max_concurrent_batches(); }
  void Execute(Batch batch) override {
    if (healthy()) return inner_.Execute(std::move(batch));
    for (auto& item : batch.items) item->Complete(absl::UnavailableError("GPU 0 is out of service"));
    if (batch.on_done) batch.on_done();
  }
  bool healthy() const override { return healthy_.load(); }
  void SetHealthListener(HealthListener listener) override {
    absl::MutexLock lock(&mu_);
    listener_ = std::move(listener);
  }
  void LoseGpu() {
    absl::MutexLock lock(&mu_);
    healthy_ = false;
    if (listener_) listener_(0, absl::InternalError("GPU 0: test fault"));
  }

 private:
  FakeExecutor inner_;
  BackendInfo info_;
  std::atomic<bool> healthy_{true};
  absl::Mutex mu_;
  HealthListener listener_ ABSL_GUARDED_BY(mu_);
};

// An executor whose peak rates a re-measurement replaces: each
// RemeasurePeaks doubles its bf16 rate (and fails once told to).
class RemeasurableExecutor final : public Executor {
 public:
  const BackendInfo& info() const override { return inner_.info(); }
  std::vector<PeakRate> peak_rates() const override {
    absl::MutexLock lock(&mu_);
    return {{"bf16", bf16_, kPeakMethodMeasured}, {"fp16", 7e12, kPeakMethodFlag}};
  }
  absl::Status RemeasurePeaks() override {
    absl::MutexLock lock(&mu_);
    if (!fail_.ok()) return fail_;
    bf16_ *= 2;
    return absl::OkStatus();
  }
  int max_concurrent_batches() const override { return inner_.max_concurrent_batches(); }
  void Execute(Batch batch) override { inner_.Execute(std::move(batch)); }
  void FailWith(absl::Status st) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(st);
  }

 private:
  FakeExecutor inner_;
  mutable absl::Mutex mu_;
  double bf16_ ABSL_GUARDED_BY(mu_) = 1e12;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
};

class ServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = Loopback()) {
    auto executor = std::make_unique<FakeExecutor>();
    executor_ = executor.get();
    auto server = GemmServer::Start(options, std::move(executor));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::GemmService::NewStub(channel_);
  }

  // Health.Check of `service` (empty: the server as a whole).
  int Health(const std::string& service) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::ByteBuffer request = HealthRequest(service), response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status st) {
                        status = std::move(st);
                        done.Notify();
                      });
    done.WaitForNotification();
    return status.ok() ? ServingStatusOf(response) : -1;
  }

  FakeExecutor* executor_ = nullptr;  // owned by the server
  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
};

TEST_F(ServerTest, StartsOnPortZeroReportsTheBoundPortAndServes) {
  StartServer();
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->backend().backend, FakeExecutor::kBackend);
  v1::ServerInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backend(), FakeExecutor::kBackend);
  // GetServerInfo's latency is recorded like the other RPCs' (it was 0).
  const std::string scrape = server_->metrics()->Scrape();
  const std::string sum = "gemm_request_duration_seconds_sum{method=\"GetServerInfo\"} ";
  const size_t at = scrape.find(sum);
  ASSERT_NE(at, std::string::npos) << scrape;
  EXPECT_GT(std::stod(scrape.substr(at + sum.size())), 0.0);
  EXPECT_EQ(Health(""), kServing);
  EXPECT_EQ(Health("gemm.v1.GemmService"), kServing);
  // The batcher runs admitted work on the injected executor.
  AsyncGemm call;
  call.Start(stub_.get(), OneProblemRequest("a"));
  call.done.WaitForNotification();
  EXPECT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(call.response.backend(), FakeExecutor::kBackend);
  server_->Shutdown(absl::Seconds(5));
}

TEST(ServerOptionsTest, BadOptionsAreRefusedNamingTheOption) {
  struct Case {
    const char* option;
    std::function<void(ServerOptions*)> spoil;
  } cases[] = {
      {"listen_address", [](ServerOptions* o) { o->listen_address = ""; }},
      {"backend", [](ServerOptions* o) { o->backend = "tpu"; }},
      {"max_queue_delay", [](ServerOptions* o) { o->batcher.max_queue_delay = -absl::Seconds(1); }},
      {"budget.max_requests", [](ServerOptions* o) { o->batcher.budget.max_requests = 0; }},
      {"safety_factor", [](ServerOptions* o) { o->admission.safety_factor = 0; }},
      {"transient_idle_timeout",
       [](ServerOptions* o) { o->transient_idle_timeout = absl::ZeroDuration(); }},
      {"max_queued_requests", [](ServerOptions* o) { o->limits.max_queued_requests = 0; }},
      {"max_matrix_bytes", [](ServerOptions* o) { o->limits.max_matrix_bytes = 0; }},
      {"tls_key_file", [](ServerOptions* o) { o->security.tls_cert_file = "cert.pem"; }},
  };
  for (const Case& c : cases) {
    ServerOptions o = Loopback();
    c.spoil(&o);
    EXPECT_FALSE(o.Validate().ok()) << c.option;
    auto server = GemmServer::Start(o, std::make_unique<FakeExecutor>());
    ASSERT_FALSE(server.ok()) << c.option;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << c.option;
    EXPECT_THAT(server.status().message(), HasSubstr(c.option));
  }
}

TEST(ServerStartTest, AnAddressItCannotListenOnIsUnavailable) {
  ServerOptions o = Loopback();
  o.listen_address = "256.1.1.1:0";  // not an address
  auto server = GemmServer::Start(o, std::make_unique<FakeExecutor>());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("could not listen on 256.1.1.1:0"));
}

TEST_F(ServerTest, ShutdownWithNoWorkReturnsAndRefusesLaterCalls) {
  StartServer();
  server_->Shutdown(absl::Seconds(30));  // nothing to drain: returns without waiting
  server_->Shutdown(absl::Seconds(30));  // idempotent
  AsyncGemm call;
  call.Start(stub_.get(), OneProblemRequest("late"));
  call.done.WaitForNotification();
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(executor_->items_run(), 0);
}

TEST_F(ServerTest, ShutdownLetsRunningAndQueuedWorkFinishWithinTheDrain) {
  StartServer();
  executor_->Hold();
  AsyncGemm a, b;
  a.Start(stub_.get(), OneProblemRequest("a"));
  ASSERT_TRUE(executor_->WaitHeld(1));  // A is running (held)
  b.Start(stub_.get(), OneProblemRequest("b"));
  ASSERT_TRUE(Eventually([&] { return QueueDepth(server_->metrics()->Scrape()) == 1; }));  // B is queued
  // Health turns NOT_SERVING first: a Watch started now hears it. (The
  // watch is itself a call the drain would wait for: it ends here.)
  std::thread shutdown;
  {
    HealthWatch watch(channel_);
    EXPECT_EQ(watch.Read(), kServing);
    shutdown = std::thread([&] { server_->Shutdown(absl::Seconds(60)); });
    EXPECT_EQ(watch.Read(), kNotServing);
  }
  // The drain waits for A and B: let them run.
  executor_->Open();
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  EXPECT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(b.response.request_id(), "b");
  shutdown.join();
  EXPECT_EQ(executor_->items_run(), 2);
}

TEST_F(ServerTest, WorkLeftAtTheDrainDeadlineIsAnsweredAndNeverRuns) {
  StartServer();
  executor_->Hold();
  AsyncGemm a, b;
  a.Start(stub_.get(), OneProblemRequest("a"));
  ASSERT_TRUE(executor_->WaitHeld(1));
  b.Start(stub_.get(), OneProblemRequest("b"));
  ASSERT_TRUE(Eventually([&] { return QueueDepth(server_->metrics()->Scrape()) == 1; }));
  std::thread shutdown([&] { server_->Shutdown(absl::Milliseconds(100)); });
  // Past the drain both calls are ended without their results.
  a.done.WaitForNotification();
  b.done.WaitForNotification();
  // gRPC cancels the calls still open at the drain deadline: the clients see
  // UNAVAILABLE, the running one and the queued one alike.
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::UNAVAILABLE) << a.status.error_message();
  EXPECT_EQ(b.status.error_code(), grpc::StatusCode::UNAVAILABLE) << b.status.error_message();
  EXPECT_EQ(b.response.results_size(), 0);
  // The server drops B from its queue (its OnCancel, or Abandon after the
  // drain) on its own time; only then does A's batch end, so that the
  // batcher, which Shutdown stops next, cannot take B first.
  ASSERT_TRUE(Eventually([&] { return QueueDepth(server_->metrics()->Scrape()) == 0; }));
  executor_->Open();
  shutdown.join();
  EXPECT_EQ(executor_->items_run(), 1) << "B never reached the executor";
}

double DeviceHealthy(GemmServer* server) {
  const std::string scrape = server->metrics()->Scrape();
  const std::string name = "gemm_device_healthy{gpu=\"0\"} ";
  const size_t at = scrape.find(name);
  return at == std::string::npos ? -1 : std::stod(scrape.substr(at + name.size()));
}

TEST_F(ServerTest, LosingTheLastGpuTurnsHealthNotServingAndAnswersEveryRequest) {
  auto executor = std::make_unique<LosableGpuExecutor>();
  LosableGpuExecutor* gpu = executor.get();
  auto server = GemmServer::Start(Loopback(), std::move(executor));
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                 grpc::InsecureChannelCredentials());
  stub_ = v1::GemmService::NewStub(channel_);
  EXPECT_EQ(Health(""), kServing);
  EXPECT_EQ(DeviceHealthy(server_.get()), 1);
  EXPECT_FALSE(server_->no_device_left().HasBeenNotified());
  {
    AsyncGemm call;
    call.Start(stub_.get(), OneProblemRequest("before"));
    call.done.WaitForNotification();
    EXPECT_TRUE(call.status.ok()) << call.status.error_message();
  }

  gpu->LoseGpu();
  EXPECT_EQ(Health(""), kNotServing);
  EXPECT_EQ(DeviceHealthy(server_.get()), 0);
  EXPECT_TRUE(server_->no_device_left().HasBeenNotified());
  AsyncGemm call;
  call.Start(stub_.get(), OneProblemRequest("after"));
  call.done.WaitForNotification();
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  server_->Shutdown(absl::Seconds(5));
}

TEST_F(ServerTest, RemeasuringThePeaksUpdatesTheGaugesAndServerInfo) {
  auto executor = std::make_unique<RemeasurableExecutor>();
  RemeasurableExecutor* ex = executor.get();
  auto server = GemmServer::Start(Loopback(), std::move(executor));
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  stub_ = v1::GemmService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  const std::string bf16 = "gemm_peak_flops_per_second{dtype=\"bf16\",method=\"measured\"} ";
  const std::string fp16 = "gemm_peak_flops_per_second{dtype=\"fp16\",method=\"flag\"} ";
  auto gauge = [&](const std::string& series) {
    const std::string scrape = server_->metrics()->Scrape();
    const size_t at = scrape.find(series);
    return at == std::string::npos ? -1.0 : std::stod(scrape.substr(at + series.size()));
  };
  EXPECT_EQ(gauge(bf16), 1e12);

  ASSERT_TRUE(server_->RemeasurePeaks().ok());
  EXPECT_EQ(gauge(bf16), 2e12);
  EXPECT_EQ(gauge(fp16), 7e12);
  v1::ServerInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  ASSERT_EQ(info.peak_rates_size(), 2);
  EXPECT_EQ(info.peak_rates(0).kind(), "bf16");
  EXPECT_EQ(info.peak_rates(0).per_second(), 2e12);

  // A failed re-measurement keeps the figures it had and says why.
  ex->FailWith(absl::UnavailableError("GPU 0 is out of service"));
  const absl::Status st = server_->RemeasurePeaks();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(gauge(bf16), 2e12);
  server_->Shutdown(absl::Seconds(5));
}

}  // namespace
}  // namespace gemm
