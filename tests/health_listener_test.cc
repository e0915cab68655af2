// The health-only port (ServerOptions::health_listen) of a server whose main
// port needs TLS and a bearer token: the health port answers plaintext and
// without a token, in step with the main port (SERVING, then NOT_SERVING
// through a drain), while the main port still refuses calls without TLS or
// a token; the health port serves nothing but grpc.health.v1 (GemmService,
// Transfer and reflection are UNIMPLEMENTED there).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/gemm_client.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/exec/cpu_executor.h"
#include "service/server.h"
#include "tests/test_certs.h"
#include "tests/test_executors.h"
#include "tests/test_util.h"
#include "tools/health_probe/health_check.h"

namespace gemm {
namespace {

constexpr char kToken[] = "alice-health-0123456789";

class HealthListenerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto made = test::MakeTestCredentials({{"alice", kToken}});
    ASSERT_TRUE(made.ok()) << made.status();
    creds_ = new test::TestCredentials(*std::move(made));
  }
  static void TearDownTestSuite() { delete creds_; }

  // TLS and tokens on the main port, the CPU backend behind a gate that is
  // open unless `gate_shut`, a health-only port.
  void StartServer(bool gate_shut = false) {
    ServerOptions o = test::LoopbackCpuServerOptions(/*concurrent_requests=*/1);
    o.security.tls_cert_file = creds_->certs.server_cert;
    o.security.tls_key_file = creds_->certs.server_key;
    o.security.auth_tokens_file = creds_->tokens_file;
    o.health_listen = "127.0.0.1:0";
    auto cpu = CpuExecutor::Create(o.cpu);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gate = std::make_unique<test::GatedExecutor>(std::move(*cpu));
    gate_ = gate.get();
    if (!gate_shut) gate_->Open();
    auto server = GemmServer::Start(o, std::move(gate));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_NE(server_->health_port(), 0);
    ASSERT_NE(server_->health_port(), server_->port());
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    gate_->Open();
    server_->Shutdown(absl::ZeroDuration());
  }

  HealthCheckOptions HealthPort(std::string service = "") const {
    HealthCheckOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->health_port());
    o.service = std::move(service);
    o.deadline = absl::Seconds(5);
    return o;
  }

  ClientOptions MainPortClient(bool tls, bool token) const {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    o.tls = tls;
    if (tls) o.tls_root_certs_pem = test::ReadTestFile(creds_->certs.ca_cert);
    if (token) o.bearer_token = kToken;
    o.default_timeout = absl::Seconds(10);
    o.retry.max_attempts = 1;
    return o;
  }

  absl::Status GetServerInfo(const ClientOptions& options) {
    auto client = Client::Create(options);
    if (!client.ok()) return client.status();
    return (*client)->GetServerInfo().status();
  }

  // A unary call of `method` with an empty message on the health port.
  grpc::Status CallHealthPort(const std::string& method) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->health_port()),
                                       grpc::InsecureChannelCredentials());
    grpc::GenericStub generic(channel);
    grpc::Slice slice(std::string{});
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status st) {
                        status = std::move(st);
                        done.Notify();
                      });
    done.WaitForNotification();
    return status;
  }

  static test::TestCredentials* creds_;
  test::GatedExecutor* gate_ = nullptr;  // owned by server_
  std::unique_ptr<GemmServer> server_;
};

test::TestCredentials* HealthListenerTest::creds_ = nullptr;

TEST_F(HealthListenerTest, AnswersPlaintextWhileTheMainPortNeedsTlsAndAToken) {
  StartServer();
  for (const std::string service : {"", "gemm.v1.GemmService"}) {
    absl::StatusOr<ServingStatus> status = CheckHealth(HealthPort(service));
    ASSERT_TRUE(status.ok()) << "service \"" << service << "\": " << status.status();
    EXPECT_EQ(*status, ServingStatus::kServing) << "service \"" << service << "\"";
  }
  absl::StatusOr<ServingStatus> unknown = CheckHealth(HealthPort("no.such.Service"));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();

  EXPECT_EQ(GetServerInfo(MainPortClient(/*tls=*/false, /*token=*/false)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetServerInfo(MainPortClient(/*tls=*/true, /*token=*/false)).code(),
            absl::StatusCode::kUnauthenticated);
  const absl::Status with_both = GetServerInfo(MainPortClient(/*tls=*/true, /*token=*/true));
  EXPECT_TRUE(with_both.ok()) << with_both;
}

TEST_F(HealthListenerTest, ServesNothingButHealth) {
  StartServer();
  EXPECT_TRUE(CallHealthPort("/grpc.health.v1.Health/Check").ok());
  for (const std::string method :
       {"/gemm.v1.GemmService/GetServerInfo", "/gemm.v1.GemmService/Gemm",
        "/gemm.v1.Transfer/Upload",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}) {
    const grpc::Status status = CallHealthPort(method);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << method << ": " << status.error_code() << " " << status.error_message();
  }
  // The health port's own limit on message size: a probe's request is a
  // service name, not a matrix.
  HealthCheckOptions big = HealthPort(std::string(64 << 10, 'x'));
  EXPECT_EQ(CheckHealth(big).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(HealthListenerTest, TurnsNotServingThroughTheDrainAndClosesAfterIt) {
  StartServer(/*gate_shut=*/true);
  // One request held at the backend keeps the drain open.
  auto client = Client::Create(MainPortClient(/*tls=*/true, /*token=*/true));
  ASSERT_TRUE(client.ok()) << client.status();
  std::thread call([&] {
    std::mt19937 rng(3);
    v1::GemmRequest request;
    request.set_request_id("held");
    *request.add_problems() = test::MakeProblem({}, &rng);
    absl::StatusOr<v1::GemmResponse> response = (*client)->Gemm(request);
    EXPECT_TRUE(response.ok()) << response.status();
  });
  ASSERT_TRUE(gate_->WaitEntered(absl::Seconds(30)));

  std::thread shutdown([&] { server_->Shutdown(absl::Seconds(30)); });
  bool not_serving = false;
  for (int i = 0; i < 200 && !not_serving; ++i) {
    absl::StatusOr<ServingStatus> status = CheckHealth(HealthPort());
    ASSERT_TRUE(status.ok()) << "the health port closed before the drain ended: "
                             << status.status();
    not_serving = *status == ServingStatus::kNotServing;
    if (!not_serving) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(not_serving);
  absl::StatusOr<ServingStatus> named = CheckHealth(HealthPort("gemm.v1.GemmService"));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(*named, ServingStatus::kNotServing);

  gate_->Open();
  call.join();
  shutdown.join();
  HealthCheckOptions after = HealthPort();
  after.deadline = absl::Milliseconds(300);
  EXPECT_FALSE(CheckHealth(after).ok()) << "the health port is still open after Shutdown";
  server_.reset();
}

TEST(HealthListenOptionsTest, TheHealthPortMustDifferFromTheMainPort) {
  ServerOptions o = test::LoopbackCpuServerOptions();
  o.listen_address = "127.0.0.1:50999";
  o.health_listen = o.listen_address;
  const absl::Status status = o.Validate();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("health_listen"), std::string::npos) << status;
}

}  // namespace
}  // namespace gemm
