// Caller identity from client certificates (service/security/caller_identity.h), over
// loopback with certificates made at test time: on a mutual-TLS server
// without tokens, resident-matrix handles belong to the certificate's subject
// (another certificate gets PERMISSION_DENIED, the same certificate on a new
// connection works) and fair queueing sees one caller per certificate
// whatever the connection; with tokens as well, the token's caller comes
// first.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "service/exec/cpu_executor.h"
#include "service/server.h"
#include "tests/test_certs.h"
#include "tests/test_executors.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kAliceToken[] = "alice-0123456789abcdef";
constexpr char kBobToken[] = "bob-0123456789abcdef01";
// What gRPC 1.51 reports as the subjects of test_certs' two client
// certificates (RFC 2253), behind caller_identity's prefix.
constexpr char kFirstIdentity[] = "x509:CN=gemm-test-client";
constexpr char kSecondIdentity[] = "x509:CN=gemm-test-client-2";

// The CPU executor, noting the fair-queueing identity (WorkItem::client) of
// every request it runs.
class IdentityRecordingExecutor final : public test::ForwardingExecutor {
 public:
  using ForwardingExecutor::ForwardingExecutor;

  void Execute(Batch batch) override {
    {
      absl::MutexLock lock(&mu_);
      for (const auto& item : batch.items) clients_.insert(item->client);
    }
    ForwardingExecutor::Execute(std::move(batch));
  }

  std::set<std::string> clients() const {
    absl::MutexLock lock(&mu_);
    return clients_;
  }

 private:
  mutable absl::Mutex mu_;
  std::set<std::string> clients_ ABSL_GUARDED_BY(mu_);
};

// A client certificate: which of test_certs' pairs.
enum class Cert { kFirst, kSecond };

class MtlsIdentityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = test::TestTempDir() + "/mtls_certs";
    auto certs = test::MakeTestCerts(dir);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new test::TestCerts(*certs);
    tokens_file_ = new std::string(dir + "/tokens");
    std::ofstream(*tokens_file_) << "alice " << kAliceToken << "\nbob " << kBobToken << "\n";
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete tokens_file_;
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  // A mutual-TLS server on the CPU backend, with the tokens file if asked.
  void StartServer(bool tokens) {
    ServerOptions o = test::LoopbackCpuServerOptions();
    o.limits.max_resident_bytes = 1 << 20;
    o.security.tls_cert_file = certs_->server_cert;
    o.security.tls_key_file = certs_->server_key;
    o.security.tls_client_ca_file = certs_->ca_cert;
    if (tokens) o.security.auth_tokens_file = *tokens_file_;
    auto cpu = CpuExecutor::Create(o.cpu);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto executor = std::make_unique<IdentityRecordingExecutor>(std::move(*cpu));
    executor_ = executor.get();
    auto server = GemmServer::Start(o, std::move(executor));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // A client of its own (hence its own connection) presenting `cert`.
  std::unique_ptr<Client> Connect(Cert cert, const std::string& token = "") {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    o.default_timeout = absl::Seconds(30);
    o.retry.max_attempts = 1;
    o.tls = true;
    o.tls_root_certs_pem = test::ReadTestFile(certs_->ca_cert);
    const bool first = cert == Cert::kFirst;
    o.tls_cert_chain_pem =
        test::ReadTestFile(first ? certs_->client_cert : certs_->second_client_cert);
    o.tls_private_key_pem =
        test::ReadTestFile(first ? certs_->client_key : certs_->second_client_key);
    o.bearer_token = token;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  // A request whose B is `b` (bytes or a handle), and the same request with
  // B's bytes for the reference check.
  struct Request {
    v1::GemmRequest sent, checked;
  };
  Request MakeRequest(const Operand& b) {
    Request r;
    EXPECT_TRUE(AddProblem(&r.sent, MatrixView(a_.data(), 4, 8, Layout::kRowMajor), b).ok());
    EXPECT_TRUE(AddProblem(&r.checked, MatrixView(a_.data(), 4, 8, Layout::kRowMajor),
                           BView())
                    .ok());
    return r;
  }
  MatrixView BView() const { return MatrixView(b_.data(), 8, 4, Layout::kRowMajor); }

  // The handle's owner runs `request` and gets the right result.
  static void ExpectRuns(Client* client, const Request& request) {
    GemmResult result = client->Gemm(request.sent);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(test::ResponseMatches(request.checked, *result));
  }
  static void ExpectDenied(Client* client, const Request& request, const ResidentHandle& handle) {
    GemmResult stolen = client->Gemm(request.sent);
    EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied) << stolen.status();
    EXPECT_THAT(std::string(stolen.status().message()), HasSubstr("problems[0].b.handle"));
    EXPECT_EQ(client->ReleaseMatrix(handle).code(), absl::StatusCode::kPermissionDenied);
  }

  static test::TestCerts* certs_;
  static std::string* tokens_file_;
  std::vector<float> a_ = RandomValues(4 * 8, 1), b_ = RandomValues(8 * 4, 2);
  IdentityRecordingExecutor* executor_ = nullptr;  // owned by server_
  std::unique_ptr<GemmServer> server_;

 private:
  static std::vector<float> RandomValues(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  }
};

test::TestCerts* MtlsIdentityTest::certs_ = nullptr;
std::string* MtlsIdentityTest::tokens_file_ = nullptr;

TEST_F(MtlsIdentityTest, ResidentHandlesBelongToTheClientCertificate) {
  StartServer(/*tokens=*/false);
  auto first = Connect(Cert::kFirst);
  auto second = Connect(Cert::kSecond);
  auto handle = first->RegisterMatrix(BView());
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Request request = MakeRequest(*handle);

  ExpectDenied(second.get(), request, *handle);
  ExpectRuns(first.get(), request);
  // The same certificate on another connection is the same caller.
  auto first_again = Connect(Cert::kFirst);
  ExpectRuns(first_again.get(), request);
  EXPECT_TRUE(first_again->ReleaseMatrix(*handle).ok());
  EXPECT_EQ(first->ReleaseMatrix(*handle).code(), absl::StatusCode::kNotFound);
}

// Fair queueing shares the queue across callers: two connections with one
// certificate are one caller, not two (as they would be if told apart by
// their peer addresses).
TEST_F(MtlsIdentityTest, FairQueueingKnowsCallersByCertificate) {
  StartServer(/*tokens=*/false);
  const Request request = MakeRequest(BView());
  for (Cert cert : {Cert::kFirst, Cert::kFirst, Cert::kSecond})
    ExpectRuns(Connect(cert).get(), request);
  EXPECT_THAT(executor_->clients(), UnorderedElementsAre(kFirstIdentity, kSecondIdentity));
}

// With tokens on a mutual-TLS server the token names the caller: one
// certificate carrying two tokens is two callers, and a handle follows its
// token to another certificate.
TEST_F(MtlsIdentityTest, BearerTokenComesBeforeTheCertificate) {
  StartServer(/*tokens=*/true);
  auto alice = Connect(Cert::kFirst, kAliceToken);
  auto bob_same_cert = Connect(Cert::kFirst, kBobToken);
  auto alice_other_cert = Connect(Cert::kSecond, kAliceToken);
  auto handle = alice->RegisterMatrix(BView());
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Request request = MakeRequest(*handle);

  ExpectDenied(bob_same_cert.get(), request, *handle);
  ExpectRuns(alice_other_cert.get(), request);
  ExpectRuns(alice.get(), request);
  EXPECT_THAT(executor_->clients(), UnorderedElementsAre("alice"));
  EXPECT_TRUE(alice_other_cert->ReleaseMatrix(*handle).ok());
}

}  // namespace
}  // namespace gemm
