#include "service/security/caller_identity.h"

#include <openssl/sha.h>

#include <grpc/grpc_security_constants.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "service/security/auth.h"

namespace gemm {
namespace {

// The first value of `name`, or "" when there is none.
absl::string_view FirstValue(const grpc::AuthContext& auth, const char* name) {
  const std::vector<grpc::string_ref> values = auth.FindPropertyValues(name);
  if (values.empty()) return {};
  return absl::string_view(values.front().data(), values.front().size());
}

std::string Sha256Hex(absl::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

}  // namespace

std::string CallerIdentity(const grpc::AuthContext* auth) {
  if (auth == nullptr) return "";
  if (absl::string_view caller = FirstValue(*auth, kCallerAuthProperty); !caller.empty())
    return std::string(caller);
  // gRPC's SSL transport sets the x509 properties from the peer's leaf
  // certificate; on the server they exist only when the client sent one.
  const absl::string_view pem = FirstValue(*auth, GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pem.empty()) return "";
  if (absl::string_view subject = FirstValue(*auth, GRPC_X509_SUBJECT_PROPERTY_NAME);
      !subject.empty())
    return absl::StrCat("x509:", subject);
  return absl::StrCat("x509-sha256:", Sha256Hex(pem));
}

std::string CallerIdentity(const grpc::CallbackServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return CallerIdentity(auth.get());
}

}  // namespace gemm
