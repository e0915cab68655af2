#include "client/cli/connection.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "client/cli/flags.h"
#include "client/cli/size_check.h"
#include "common/status_macros.h"

namespace gemm::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// TLS and bearer-token settings from the flags.
absl::Status SetSecurityOptions(ClientOptions* options) {
  options->tls = absl::GetFlag(FLAGS_tls) || !absl::GetFlag(FLAGS_tls_ca).empty();
  if (const std::string ca = absl::GetFlag(FLAGS_tls_ca); !ca.empty()) {
    GEMM_ASSIGN_OR_RETURN(options->tls_root_certs_pem, ReadFile(ca));
  }
  if (const std::string cert = absl::GetFlag(FLAGS_tls_cert); !cert.empty()) {
    GEMM_ASSIGN_OR_RETURN(options->tls_cert_chain_pem, ReadFile(cert));
  }
  if (const std::string key = absl::GetFlag(FLAGS_tls_key); !key.empty()) {
    GEMM_ASSIGN_OR_RETURN(options->tls_private_key_pem, ReadFile(key));
  }
  options->bearer_token = absl::GetFlag(FLAGS_token);
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    GEMM_ASSIGN_OR_RETURN(std::string token, ReadFile(file));
    options->bearer_token = std::string(absl::StripAsciiWhitespace(token));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FlagNames(const absl::Status& s) {
  if (s.ok()) return s;
  std::string m(s.message());
  m = absl::StrReplaceAll(m, {{"retry.max_attempts", "--max_attempts"},
                              {"default_timeout", "--deadline_ms"},
                              {"tls_root_certs_pem", "--tls_ca"},
                              {"tls_cert_chain_pem", "--tls_cert"},
                              {"tls_private_key_pem", "--tls_key"},
                              {"bearer_token", "--token"},
                              {"replica_policy", "--replica_policy"}});
  return absl::Status(s.code(), m);
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient() {
  if (absl::GetFlag(FLAGS_deadline_ms) <= 0) {
    return absl::InvalidArgumentError("--deadline_ms must be positive");
  }
  if (absl::GetFlag(FLAGS_max_attempts) < 1) {
    return absl::InvalidArgumentError("--max_attempts must be >= 1");
  }
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  GEMM_RETURN_IF_ERROR(SetSecurityOptions(&options));
  options.default_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  options.retry.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  const std::string policy = absl::GetFlag(FLAGS_replica_policy);
  if (policy == "least_outstanding") {
    options.replica_policy = ClientOptions::ReplicaPolicy::kLeastOutstanding;
  } else if (policy == "round_robin") {
    options.replica_policy = ClientOptions::ReplicaPolicy::kRoundRobin;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replica_policy must be least_outstanding or round_robin, got \"", policy, "\""));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) return FlagNames(client.status());
  return client;
}


CheckLimits FetchLimits(Client* client) {
  CallOptions call;
  call.timeout = std::min(absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms)), absl::Seconds(10));
  absl::StatusOr<v1::ServerInfo> info = client->GetServerInfo(call);
  if (info.ok()) return {info->limits(), true};
  absl::FPrintF(stderr,
                "note: GetServerInfo failed (%s); sizes are checked against local limits only\n",
                info.status().ToString());
  return {LocalLimits(), false};
}

std::unique_ptr<SharedRequests> SharedOrNull(Client* client, const v1::GemmRequest& request,
                                             int slots) {
  if (!absl::GetFlag(FLAGS_shared_memory)) return nullptr;
  absl::StatusOr<std::unique_ptr<SharedRequests>> shared =
      SharedRequests::Create(client, request, slots);
  if (!shared.ok()) {
    absl::FPrintF(stderr, "note: shared memory not used (%s); sending the bytes in messages\n",
                  shared.status().ToString());
    return nullptr;
  }
  return std::move(*shared);
}

}  // namespace gemm::cli
