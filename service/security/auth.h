// Bearer-token authentication: who may call, checked before any work.
//
// Tokens come from a file of lines "<caller-name> <token>" ('#' starts a
// comment). A call must carry the metadata "authorization: Bearer <token>";
// BearerTokenProcessor, installed on the server's credentials, rejects it
// with UNAUTHENTICATED otherwise, before any handler runs, and records the
// caller's name as the auth-context property kCallerAuthProperty, which
// CallerIdentity() (caller_identity.h) reads.
//
// One caller per connection. gRPC hands the processor the connection's auth
// context, not the call's (gRPC 1.51, verified): a property added for one call
// is seen by every later call on that connection, and a second AddProperty
// would make the property multi-valued. So the first authenticated call names
// the connection's caller, and a call with another caller's token on the same
// connection is UNAUTHENTICATED. gemm::Client gives every client with a token
// connections of its own (a local subchannel pool), so two tenants in one
// process never share one.
#ifndef GEMM_SERVICE_SECURITY_AUTH_H_
#define GEMM_SERVICE_SECURITY_AUTH_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/auth_metadata_processor.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gemm {

// The auth-context property naming the caller (caller_identity.h reads the
// same name).
inline constexpr char kCallerAuthProperty[] = "gemm.caller";

// Why a call failed authentication: a bounded set, for the
// gemm_auth_failures_total{reason} metric and the log.
enum class AuthFailureReason {
  kMissingToken,              // no "authorization" metadata
  kWrongScheme,               // "authorization" present but not "Bearer <token>"
  kUnknownToken,              // a bearer token no entry of the tokens file has
  kOtherCallerOnConnection,   // a valid token of a caller other than the connection's
};
inline constexpr AuthFailureReason kAllAuthFailureReasons[] = {
    AuthFailureReason::kMissingToken, AuthFailureReason::kWrongScheme,
    AuthFailureReason::kUnknownToken, AuthFailureReason::kOtherCallerOnConnection};
// "missing_token", "wrong_scheme", "unknown_token", "other_caller_on_connection".
const char* AuthFailureReasonName(AuthFailureReason reason);

// One refused call, as BearerTokenProcessor reports it.
struct AuthFailure {
  AuthFailureReason reason;
  std::string method;   // the call's path, "/gemm.v1.GemmService/Gemm"
  std::string message;  // the UNAUTHENTICATED status message the client gets
  // The connection's auth context (a client certificate, if any, is in it).
  const grpc::AuthContext* connection = nullptr;
};
// Called on gRPC's thread for every refused call; must not block.
using AuthFailureObserver = std::function<void(const AuthFailure&)>;

class TokenAuthenticator {
 public:
  // Parses "<caller-name> <token>" lines. Names are [A-Za-z0-9._@-]+; tokens
  // are at least kMinTokenLength printable characters without spaces; no
  // token may be listed twice. InvalidArgument names the bad line.
  static constexpr size_t kMinTokenLength = 16;
  static absl::StatusOr<std::shared_ptr<const TokenAuthenticator>> FromText(
      absl::string_view text);
  static absl::StatusOr<std::shared_ptr<const TokenAuthenticator>> FromFile(
      const std::string& path);

  // The caller whose token the `authorization` metadata value ("Bearer
  // <token>") carries, or UNAUTHENTICATED. Takes the same time whichever
  // entry matches and however much of a wrong token is right: every entry is
  // compared, as SHA-256 digests, with a constant-time comparison.
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization) const;
  // The same, and on failure why (`reason` may be null).
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization,
                                           AuthFailureReason* reason) const;

  size_t size() const { return entries_.size(); }

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    std::string caller;
    Digest digest;
  };
  static Digest Sha256(absl::string_view s);

  std::vector<Entry> entries_;
};

// Checks every call's bearer token (see the file comment). Runs on gRPC's
// thread (IsBlocking() is false): the check is a few hashes.
class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `on_failure` (may be empty) hears of every call refused.
  explicit BearerTokenProcessor(std::shared_ptr<const TokenAuthenticator> tokens,
                                AuthFailureObserver on_failure = nullptr)
      : tokens_(std::move(tokens)), on_failure_(std::move(on_failure)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  grpc::Status Refuse(AuthFailureReason reason, absl::string_view method, std::string message,
                      const grpc::AuthContext* context) const;

  const std::shared_ptr<const TokenAuthenticator> tokens_;
  const AuthFailureObserver on_failure_;
  // Makes "read the connection's caller, else set it" atomic across the
  // connection's concurrent first calls.
  absl::Mutex mu_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_SECURITY_AUTH_H_
