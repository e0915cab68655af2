#include "service/security/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gemm {
namespace {

constexpr char kBearerPrefix[] = "Bearer ";

bool ValidCallerName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  return true;
}

bool ValidToken(absl::string_view token) {
  for (char c : token)
    if (!absl::ascii_isgraph(c)) return false;
  return token.size() >= TokenAuthenticator::kMinTokenLength;
}

}  // namespace

const char* AuthFailureReasonName(AuthFailureReason reason) {
  switch (reason) {
    case AuthFailureReason::kMissingToken: return "missing_token";
    case AuthFailureReason::kWrongScheme: return "wrong_scheme";
    case AuthFailureReason::kUnknownToken: return "unknown_token";
    case AuthFailureReason::kOtherCallerOnConnection: return "other_caller_on_connection";
  }
  return "unknown_token";
}

TokenAuthenticator::Digest TokenAuthenticator::Sha256(absl::string_view s) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

absl::StatusOr<std::shared_ptr<const TokenAuthenticator>> TokenAuthenticator::FromText(
    absl::string_view text) {
  auto auth = std::shared_ptr<TokenAuthenticator>(new TokenAuthenticator);
  absl::flat_hash_set<std::string> seen;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos)
      line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    // Messages never quote the token.
    if (fields.size() != 2)
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": want \"<caller-name> <token>\""));
    if (!ValidCallerName(fields[0]))
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": caller names are [A-Za-z0-9._@-]+"));
    if (!ValidToken(fields[1]))
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": the token of ",
                                                     fields[0], " is shorter than ",
                                                     kMinTokenLength, " characters or not printable"));
    if (!seen.insert(std::string(fields[1])).second)
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": the token of ", fields[0], " is listed before"));
    auth->entries_.push_back(Entry{std::string(fields[0]), Sha256(fields[1])});
  }
  if (auth->entries_.empty()) return absl::InvalidArgumentError("no tokens");
  return std::shared_ptr<const TokenAuthenticator>(std::move(auth));
}

absl::StatusOr<std::shared_ptr<const TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the tokens file ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto auth = FromText(text.str());
  if (!auth.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", auth.status().message()));
  return auth;
}

absl::StatusOr<std::string> TokenAuthenticator::Authenticate(
    absl::string_view authorization) const {
  return Authenticate(authorization, nullptr);
}

absl::StatusOr<std::string> TokenAuthenticator::Authenticate(absl::string_view authorization,
                                                             AuthFailureReason* reason) const {
  AuthFailureReason ignored;
  if (reason == nullptr) reason = &ignored;
  if (authorization.empty()) {
    *reason = AuthFailureReason::kMissingToken;
    return absl::UnauthenticatedError("missing \"authorization: Bearer <token>\" metadata");
  }
  if (!absl::StartsWithIgnoreCase(authorization, kBearerPrefix)) {
    *reason = AuthFailureReason::kWrongScheme;
    return absl::UnauthenticatedError(
        "the \"authorization\" metadata is not \"Bearer <token>\" (another scheme?)");
  }
  const Digest presented = Sha256(authorization.substr(sizeof(kBearerPrefix) - 1));
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    // No early exit: the time taken does not depend on which entry matches.
    const bool equal = CRYPTO_memcmp(e.digest.data(), presented.data(), presented.size()) == 0;
    if (equal) match = &e;
  }
  if (match == nullptr) {
    *reason = AuthFailureReason::kUnknownToken;
    return absl::UnauthenticatedError("unknown bearer token");
  }
  return match->caller;
}

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata,
                                           grpc::AuthContext* context,
                                           OutputMetadata* consumed_auth_metadata,
                                           OutputMetadata* /*response_metadata*/) {
  // Health checks are open: probes carry no token, and the answer says only
  // whether the server is serving.
  absl::string_view method;
  if (auto path = auth_metadata.find(":path"); path != auth_metadata.end()) {
    method = absl::string_view(path->second.data(), path->second.size());
    if (absl::StartsWith(method, "/grpc.health.v1.Health/")) return grpc::Status::OK;
  }
  absl::string_view authorization;
  auto it = auth_metadata.find("authorization");
  if (it != auth_metadata.end()) authorization = {it->second.data(), it->second.size()};
  AuthFailureReason reason;
  absl::StatusOr<std::string> caller = tokens_->Authenticate(authorization, &reason);
  if (!caller.ok()) return Refuse(reason, method, std::string(caller.status().message()), context);
  // The token stays out of the handlers' view (and out of any log of them).
  consumed_auth_metadata->emplace("authorization", std::string(authorization));

  absl::MutexLock lock(&mu_);
  const std::vector<grpc::string_ref> known = context->FindPropertyValues(kCallerAuthProperty);
  if (known.empty()) {
    context->AddProperty(kCallerAuthProperty, *caller);
    return grpc::Status::OK;
  }
  if (known.size() == 1 && absl::string_view(known[0].data(), known[0].size()) == *caller)
    return grpc::Status::OK;
  return Refuse(AuthFailureReason::kOtherCallerOnConnection, method,
                "this connection is authenticated as another caller: use a connection of its "
                "own for each token",
                context);
}

grpc::Status BearerTokenProcessor::Refuse(AuthFailureReason reason, absl::string_view method,
                                          std::string message,
                                          const grpc::AuthContext* context) const {
  if (on_failure_) on_failure_(AuthFailure{reason, std::string(method), message, context});
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::move(message));
}

}  // namespace gemm
