#include "service/security/caller_identity.h"

#include <map>
#include <string>

#include <grpc/grpc_security_constants.h>
#include <gtest/gtest.h>

#include "service/security/auth.h"

namespace gemm {
namespace {

// An auth context holding given properties, as gRPC's would after the TLS
// handshake (x509_*) and the token check (gemm.caller).
class FakeAuthContext final : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(std::multimap<std::string, std::string> properties)
      : properties_(std::move(properties)) {}

  bool IsPeerAuthenticated() const override { return !properties_.empty(); }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    std::vector<grpc::string_ref> values;
    auto [first, last] = properties_.equal_range(name);
    for (auto it = first; it != last; ++it) values.emplace_back(it->second);
    return values;
  }
  grpc::AuthPropertyIterator begin() const override { return Iterator(); }
  grpc::AuthPropertyIterator end() const override { return Iterator(); }
  void AddProperty(const std::string& key, const grpc::string_ref& value) override {
    properties_.emplace(key, std::string(value.data(), value.size()));
  }
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }

 private:
  // CallerIdentity never iterates; an empty range is enough.
  struct Iterator : grpc::AuthPropertyIterator {};

  std::multimap<std::string, std::string> properties_;
};

using Properties = std::multimap<std::string, std::string>;

std::string IdentityOf(Properties properties) {
  FakeAuthContext auth(std::move(properties));
  return CallerIdentity(&auth);
}

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n";

Properties ClientCertificate(const std::string& subject) {
  return {{GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME, "ssl"},
          {GRPC_X509_CN_PROPERTY_NAME, "build-bot"},
          {GRPC_X509_SUBJECT_PROPERTY_NAME, subject},
          {GRPC_X509_SAN_PROPERTY_NAME, "bot.example"},
          {GRPC_X509_PEM_CERT_PROPERTY_NAME, kPem}};
}

TEST(CallerIdentityTest, NoAuthContextOrNoCredentialIsAnonymous) {
  EXPECT_EQ(CallerIdentity(nullptr), "");
  EXPECT_EQ(IdentityOf({}), "");
  // TLS without a client certificate: the server's transport properties only.
  EXPECT_EQ(IdentityOf({{GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME, "ssl"}}),
            "");
}

TEST(CallerIdentityTest, ClientCertificateNamesTheCallerBySubject) {
  EXPECT_EQ(IdentityOf(ClientCertificate("CN=build-bot,O=Example")),
            "x509:CN=build-bot,O=Example");
  // Two certificates with the same common name but different subjects are
  // two callers.
  EXPECT_NE(IdentityOf(ClientCertificate("CN=build-bot,O=Example")),
            IdentityOf(ClientCertificate("CN=build-bot,O=Other")));
}

TEST(CallerIdentityTest, CertificateWithoutSubjectIsNamedByItsDigest) {
  auto properties = ClientCertificate("");
  const std::string identity = IdentityOf(properties);
  EXPECT_EQ(identity.rfind("x509-sha256:", 0), 0u) << identity;
  EXPECT_EQ(identity.size(), std::string("x509-sha256:").size() + 64);
  properties.find(GRPC_X509_PEM_CERT_PROPERTY_NAME)->second += "x";
  EXPECT_NE(IdentityOf(properties), identity);
}

TEST(CallerIdentityTest, BearerTokenCallerComesBeforeTheCertificate) {
  auto properties = ClientCertificate("CN=gateway");
  properties.emplace(kCallerAuthProperty, "alice");
  EXPECT_EQ(IdentityOf(properties), "alice");
  EXPECT_EQ(IdentityOf({{kCallerAuthProperty, "bob"}}), "bob");
}

// A client whose certificate's subject is spelled like a token caller's
// name still gets a scope of its own.
TEST(CallerIdentityTest, CertificateIdentityNeverEqualsATokenCaller) {
  const std::string by_cert = IdentityOf(ClientCertificate("alice"));
  EXPECT_NE(by_cert, "alice");
  EXPECT_EQ(by_cert, "x509:alice");
}

}  // namespace
}  // namespace gemm
