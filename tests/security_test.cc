// Who may call, over loopback with certificates made at test time: TLS
// (a plaintext client is refused, a TLS client works, a client trusting
// another CA is refused), mutual TLS (no client certificate or one from
// another CA is refused) and bearer tokens (missing or wrong token is
// UNAUTHENTICATED before any work, the right one works, one connection
// carries one caller), on TLS and on plaintext loopback.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/gemm_client.h"
#include "service/server.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBobToken[] = "bob-0123456789abcdef01";

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto made = test::MakeTestCredentials({{"alice", kAliceToken}, {"bob", kBobToken}});
    ASSERT_TRUE(made.ok()) << made.status();
    creds_ = new test::TestCredentials(*std::move(made));
  }
  static void TearDownTestSuite() { delete creds_; }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::ZeroDuration());
  }

  static ServerOptions Options() {
    ServerOptions o = test::LoopbackCpuServerOptions(/*concurrent_requests=*/1);
    o.cpu.calibrate = true;  // starts like the server binary does
    o.limits.max_message_bytes = 1 << 20;
    return o;
  }

  void StartServer(const SecurityOptions& security) {
    ServerOptions o = Options();
    o.security = security;
    auto server = GemmServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  SecurityOptions Tls() const {
    SecurityOptions s;
    s.tls_cert_file = creds_->certs.server_cert;
    s.tls_key_file = creds_->certs.server_key;
    return s;
  }

  ClientOptions TlsClient(const std::string& host = "127.0.0.1") const {
    ClientOptions o;
    o.target = absl::StrCat(host, ":", server_->port());
    o.tls = true;
    o.tls_root_certs_pem = test::ReadTestFile(creds_->certs.ca_cert);
    o.default_timeout = absl::Seconds(10);
    o.retry.max_attempts = 1;
    return o;
  }

  ClientOptions PlainClient() const {
    ClientOptions o = TlsClient();
    o.tls = false;
    o.tls_root_certs_pem.clear();
    return o;
  }

  // A 3x5x4 fp32 Gemm through `options`; its status, with the result
  // checked when OK.
  absl::Status CallGemm(const ClientOptions& options) {
    auto client = Client::Create(options);
    if (!client.ok()) return client.status();
    std::mt19937 rng(7);
    test::ProblemSpec spec;
    spec.m = 3;
    spec.n = 5;
    spec.k = 4;
    v1::GemmRequest request;
    request.set_request_id("sec");
    *request.add_problems() = test::MakeProblem(spec, &rng);
    auto response = (*client)->Gemm(request);
    if (response.ok()) {
      EXPECT_TRUE(test::ResponseMatches(request, *response));
    }
    return response.status();
  }

  double GemmRequestsSeen() {
    const std::string scrape = server_->metrics()->Scrape();
    double total = 0;
    for (const auto& s : test::MetricSamples(scrape, "gemm_requests_total"))
      if (s.labels.find("method=\"Gemm\"") != std::string::npos) total += s.value;
    return total;
  }

  static test::TestCredentials* creds_;
  std::unique_ptr<GemmServer> server_;
};

test::TestCredentials* SecurityTest::creds_ = nullptr;

TEST_F(SecurityTest, TlsClientWorksAndPlaintextClientIsRefused) {
  StartServer(Tls());
  EXPECT_TRUE(CallGemm(TlsClient()).ok());
  EXPECT_TRUE(CallGemm(TlsClient("localhost")).ok());
  const absl::Status plain = CallGemm(PlainClient());
  EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable) << plain;
  EXPECT_EQ(GemmRequestsSeen(), 2);
}

TEST_F(SecurityTest, ClientTrustingAnotherCaIsRefused) {
  StartServer(Tls());
  ClientOptions o = TlsClient();
  o.tls_root_certs_pem = test::ReadTestFile(creds_->certs.other_ca_cert);
  EXPECT_EQ(CallGemm(o).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsNeedsAClientCertificateFromTheTrustedCa) {
  SecurityOptions s = Tls();
  s.tls_client_ca_file = creds_->certs.ca_cert;
  StartServer(s);
  EXPECT_EQ(CallGemm(TlsClient()).code(), absl::StatusCode::kUnavailable);  // no certificate
  ClientOptions other = TlsClient();
  other.tls_cert_chain_pem = test::ReadTestFile(creds_->certs.other_client_cert);
  other.tls_private_key_pem = test::ReadTestFile(creds_->certs.other_client_key);
  EXPECT_EQ(CallGemm(other).code(), absl::StatusCode::kUnavailable);
  ClientOptions good = TlsClient();
  good.tls_cert_chain_pem = test::ReadTestFile(creds_->certs.client_cert);
  good.tls_private_key_pem = test::ReadTestFile(creds_->certs.client_key);
  EXPECT_TRUE(CallGemm(good).ok());
  EXPECT_EQ(GemmRequestsSeen(), 1);
}

TEST_F(SecurityTest, BearerTokenOverTls) {
  SecurityOptions s = Tls();
  s.auth_tokens_file = creds_->tokens_file;
  StartServer(s);
  ClientOptions o = TlsClient();
  const absl::Status missing = CallGemm(o);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated) << missing;
  o.bearer_token = "alice-0123456789abcdeX";
  EXPECT_EQ(CallGemm(o).code(), absl::StatusCode::kUnauthenticated);
  o.bearer_token = kBobToken + std::string("0");
  EXPECT_EQ(CallGemm(o).code(), absl::StatusCode::kUnauthenticated);
  // Rejected before the service saw them: no request was counted.
  EXPECT_EQ(GemmRequestsSeen(), 0);
  o.bearer_token = kAliceToken;
  EXPECT_TRUE(CallGemm(o).ok());
  o.bearer_token = kBobToken;
  EXPECT_TRUE(CallGemm(o).ok());
  EXPECT_EQ(GemmRequestsSeen(), 2);
}

TEST_F(SecurityTest, BearerTokenOnPlaintextLoopback) {
  SecurityOptions s;
  s.auth_tokens_file = creds_->tokens_file;
  StartServer(s);
  ClientOptions o = PlainClient();
  EXPECT_EQ(CallGemm(o).code(), absl::StatusCode::kUnauthenticated);
  o.bearer_token = kAliceToken;
  EXPECT_TRUE(CallGemm(o).ok());
}

// Health checks need no token: orchestrators (Kubernetes' gRPC probes,
// tools/health_probe) speak neither TLS client certificates nor tokens. The
// health service tells nothing but serving or not.
TEST_F(SecurityTest, HealthChecksNeedNoToken) {
  SecurityOptions s;
  s.auth_tokens_file = creds_->tokens_file;
  StartServer(s);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::Slice slice(std::string{});
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status st) {
                      status = std::move(st);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_TRUE(status.ok()) << status.error_message();
  // Everything else still needs the token.
  EXPECT_EQ(CallGemm(PlainClient()).code(), absl::StatusCode::kUnauthenticated);
}

// Two clients with different tokens in one process both work (each keeps
// its own connection); a connection that switches token is refused, so one
// caller's identity never applies to another's call.
TEST_F(SecurityTest, OneCallerPerConnection) {
  SecurityOptions s;
  s.auth_tokens_file = creds_->tokens_file;
  StartServer(s);
  ClientOptions alice = PlainClient();
  alice.bearer_token = kAliceToken;
  ClientOptions bob = PlainClient();
  bob.bearer_token = kBobToken;
  auto a = Client::Create(alice).value();
  auto b = Client::Create(bob).value();
  EXPECT_TRUE(a->GetServerInfo().ok());
  EXPECT_TRUE(b->GetServerInfo().ok());
  EXPECT_TRUE(a->GetServerInfo().ok());

  auto stub = v1::GemmService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  for (const auto& [token, code] :
       {std::pair{kAliceToken, grpc::StatusCode::OK}, {kBobToken, grpc::StatusCode::UNAUTHENTICATED},
        {kAliceToken, grpc::StatusCode::OK}}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::ServerInfo info;
    const grpc::Status st = stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    EXPECT_EQ(st.error_code(), code) << token << ": " << st.error_message();
  }
}

TEST_F(SecurityTest, BadSettingsStopTheStart) {
  ServerOptions o = Options();
  o.security.tls_cert_file = creds_->certs.server_cert;
  EXPECT_EQ(GemmServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.security.tls_key_file = creds_->certs.dir + "/missing.key";
  EXPECT_FALSE(GemmServer::Start(o).ok());
  o = Options();
  o.security.tls_client_ca_file = creds_->certs.ca_cert;
  EXPECT_EQ(GemmServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.security.auth_tokens_file = creds_->certs.dir + "/missing_tokens";
  EXPECT_FALSE(GemmServer::Start(o).ok());
}

}  // namespace
}  // namespace gemm
