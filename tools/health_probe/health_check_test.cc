// CheckHealth against real servers on 127.0.0.1:0: the GemmServer (SERVING,
// then unreachable after Shutdown), a bare gRPC server whose health
// statuses the test sets (NOT_SERVING, named services, unknown service), and
// a bare TLS server that wants a bearer token on every call, health checks
// included, as a proxy in front of the service might (TLS roots, client
// certificates, server name override, token).
#include "tools/health_probe/health_check.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <memory>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "service/server.h"
#include "tests/test_certs.h"

namespace gemm {
namespace {

HealthCheckOptions Options(int port, std::string service = "") {
  HealthCheckOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.service = std::move(service);
  o.deadline = absl::Seconds(2);
  return o;
}

TEST(HealthCheckTest, GemmServerIsServingUntilShutdown) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "cpu";
  options.cpu.calibrate = false;
  auto server = GemmServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);

  (*server)->Shutdown(absl::ZeroDuration());
  HealthCheckOptions after = Options(port);
  after.deadline = absl::Milliseconds(300);
  status = CheckHealth(after);
  EXPECT_FALSE(status.ok() && *status == ServingStatus::kServing)
      << "still SERVING after Shutdown";
}

class BareServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  grpc::HealthCheckServiceInterface* health() { return server_->GetHealthCheckService(); }

  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(BareServerTest, ReportsNotServing) {
  health()->SetServingStatus(false);
  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port_));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kNotServing);
}

TEST_F(BareServerTest, AsksAboutANamedService) {
  health()->SetServingStatus("gemm.v1.GemmService", true);
  health()->SetServingStatus("other.Service", false);
  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port_, "gemm.v1.GemmService"));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
  status = CheckHealth(Options(port_, "other.Service"));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kNotServing);
}

TEST_F(BareServerTest, UnknownServiceIsNotFound) {
  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port_, "no.such.Service"));
  EXPECT_EQ(status.status().code(), absl::StatusCode::kNotFound) << status.status();
}

TEST(HealthCheckTest, NothingListeningFailsWithinTheDeadline) {
  // Port 1 on loopback: privileged and unused in the test sandbox.
  HealthCheckOptions o = Options(1);
  o.deadline = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<ServingStatus> status = CheckHealth(o);
  EXPECT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

constexpr char kToken[] = "probe-token-0123456789";

// Every call needs "authorization: Bearer kToken".
class TokenEverywhere final : public grpc::AuthMetadataProcessor {
 public:
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    auto it = metadata.find("authorization");
    if (it != metadata.end() && std::string(it->second.data(), it->second.size()) ==
                                    std::string("Bearer ") + kToken)
      return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no or wrong token");
  }
};

class TlsServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto certs = test::MakeTestCerts(test::TestTempDir() + "/probe_certs");
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new test::TestCerts(*certs);
  }
  static void TearDownTestSuite() { delete certs_; }

  void Start(bool mutual) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::SslServerCredentialsOptions ssl(
        mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_key_cert_pairs.push_back({test::ReadTestFile(certs_->server_key),
                                      test::ReadTestFile(certs_->server_cert)});
    if (mutual) ssl.pem_root_certs = test::ReadTestFile(certs_->ca_cert);
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(ssl);
    creds->SetAuthMetadataProcessor(std::make_shared<TokenEverywhere>());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  HealthCheckOptions Tls() const {
    HealthCheckOptions o = Options(port_);
    o.tls = true;
    o.tls_root_certs_pem = test::ReadTestFile(certs_->ca_cert);
    o.bearer_token = kToken;
    return o;
  }

  static test::TestCerts* certs_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

test::TestCerts* TlsServerTest::certs_ = nullptr;

TEST_F(TlsServerTest, TlsAndTheTokenAreServing) {
  Start(/*mutual=*/false);
  absl::StatusOr<ServingStatus> status = CheckHealth(Tls());
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
}

TEST_F(TlsServerTest, WithoutTheTokenIsUnauthenticated) {
  Start(/*mutual=*/false);
  HealthCheckOptions o = Tls();
  o.bearer_token.clear();
  EXPECT_EQ(CheckHealth(o).status().code(), absl::StatusCode::kUnauthenticated);
  o.bearer_token = "wrong-token-0123456789";
  EXPECT_EQ(CheckHealth(o).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(TlsServerTest, PlaintextOrAnotherCaGetsNoAnswer) {
  Start(/*mutual=*/false);
  HealthCheckOptions plain = Options(port_);
  plain.deadline = absl::Milliseconds(500);
  EXPECT_FALSE(CheckHealth(plain).ok());
  HealthCheckOptions other = Tls();
  other.tls_root_certs_pem = test::ReadTestFile(certs_->other_ca_cert);
  other.deadline = absl::Milliseconds(500);
  absl::StatusOr<ServingStatus> status = CheckHealth(other);
  EXPECT_TRUE(status.status().code() == absl::StatusCode::kUnavailable ||
              status.status().code() == absl::StatusCode::kDeadlineExceeded)
      << status.status();
}

TEST_F(TlsServerTest, ServerNameOverrideIsChecked) {
  Start(/*mutual=*/false);
  // The certificate names localhost and 127.0.0.1 (test_certs.h).
  HealthCheckOptions o = Tls();
  o.tls_server_name = "localhost";
  absl::StatusOr<ServingStatus> status = CheckHealth(o);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
  o.tls_server_name = "gemm.wrong.example";
  o.deadline = absl::Milliseconds(500);
  EXPECT_FALSE(CheckHealth(o).ok());
}

TEST_F(TlsServerTest, MutualTlsNeedsTheClientCertificate) {
  Start(/*mutual=*/true);
  HealthCheckOptions o = Tls();
  o.deadline = absl::Milliseconds(500);
  EXPECT_FALSE(CheckHealth(o).ok());
  o.deadline = absl::Seconds(2);
  o.tls_cert_chain_pem = test::ReadTestFile(certs_->client_cert);
  o.tls_private_key_pem = test::ReadTestFile(certs_->client_key);
  absl::StatusOr<ServingStatus> status = CheckHealth(o);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
}

TEST(HealthCheckOptionsTest, RefusesWhatDoesNotHoldTogether) {
  HealthCheckOptions token_in_clear;
  token_in_clear.bearer_token = kToken;
  HealthCheckOptions half_pair;
  half_pair.tls = true;
  half_pair.tls_cert_chain_pem = "PEM";
  HealthCheckOptions roots_without_tls;
  roots_without_tls.tls_root_certs_pem = "PEM";
  HealthCheckOptions spaced_token;
  spaced_token.tls = true;
  spaced_token.bearer_token = "two words";
  for (const auto& [o, field] :
       {std::pair{token_in_clear, "bearer_token"}, std::pair{half_pair, "tls_private_key_pem"},
        std::pair{roots_without_tls, "tls_root_certs_pem"},
        std::pair{spaced_token, "bearer_token"}}) {
    const absl::Status status = o.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(status.message().find(field), std::string::npos) << status;
    EXPECT_EQ(CheckHealth(o).status().code(), absl::StatusCode::kInvalidArgument) << field;
  }
}

}  // namespace
}  // namespace gemm
