// health_probe: asks a gRPC server's grpc.health.v1.Health/Check once, for
// container HEALTHCHECKs and exec probes (grpc_health_probe is not packaged
// in Debian). Plaintext by default (gemm_server's --health_listen port); with
// --tls (or --tls_ca) over TLS, with a client certificate for mutual TLS and
// a bearer token where the port asks for them.
//
//   health_probe --addr=127.0.0.1:50052 [--service=gemm.v1.GemmService] [--deadline=1s]
//   health_probe --addr=gemm:50051 --tls_ca=ca.pem [--tls_cert=c.pem --tls_key=c.key]
//                [--tls_server_name=gemm.example] [--token_file=FILE]
//
// Exit status (kExit* below): 0 SERVING; 1 the server answered but is not
// serving (NOT_SERVING, or it does not know --service); 2 usage (flags that do
// not hold together, a file that cannot be read); 3 no answer (nothing
// listens, TLS handshake failed, deadline passed, any other RPC error);
// 4 the server refused the call (UNAUTHENTICATED, PERMISSION_DENIED: a token
// is missing or wrong). Abseil's own parser exits 1 on a flag it does not
// know or a value it cannot parse, before the probe runs.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tools/health_probe/health_check.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "the server, host:port");
ABSL_FLAG(std::string, service, "",
          "service to ask about; empty means the server as a whole");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(1),
          "time allowed for connecting and answering together");
ABSL_FLAG(bool, quiet, false, "print nothing, only set the exit status");
ABSL_FLAG(bool, tls, false, "connect with TLS, trusting the system's roots unless --tls_ca");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle the server's certificate must chain to (implies --tls)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain, for mutual TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "name the server's certificate must carry when it is not the host of --addr");
ABSL_FLAG(std::string, token_file, "",
          "file holding a bearer token (surrounding spaces dropped), sent as \"authorization: "
          "Bearer <token>\"; needs TLS");

namespace {

constexpr int kExitServing = 0;
constexpr int kExitNotServing = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoAnswer = 3;
constexpr int kExitRefused = 4;

// The file's contents, or InvalidArgument naming the flag.
absl::StatusOr<std::string> ReadFlagFile(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<gemm::HealthCheckOptions> OptionsFromFlags() {
  gemm::HealthCheckOptions options;
  options.target = absl::GetFlag(FLAGS_addr);
  options.service = absl::GetFlag(FLAGS_service);
  options.deadline = absl::GetFlag(FLAGS_deadline);
  options.tls = absl::GetFlag(FLAGS_tls) || !absl::GetFlag(FLAGS_tls_ca).empty();
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  struct FileFlag {
    const char* name;
    std::string path;
    std::string* into;
  };
  const FileFlag files[] = {
      {"tls_ca", absl::GetFlag(FLAGS_tls_ca), &options.tls_root_certs_pem},
      {"tls_cert", absl::GetFlag(FLAGS_tls_cert), &options.tls_cert_chain_pem},
      {"tls_key", absl::GetFlag(FLAGS_tls_key), &options.tls_private_key_pem},
      {"token_file", absl::GetFlag(FLAGS_token_file), &options.bearer_token},
  };
  for (const FileFlag& f : files) {
    if (f.path.empty()) continue;
    absl::StatusOr<std::string> text = ReadFlagFile(f.name, f.path);
    if (!text.ok()) return text.status();
    *f.into = std::move(*text);
  }
  options.bearer_token = std::string(absl::StripAsciiWhitespace(options.bearer_token));
  if (!absl::GetFlag(FLAGS_token_file).empty() && options.bearer_token.empty())
    return absl::InvalidArgumentError("--token_file: the file is empty");
  // The library names its fields; name the flags instead.
  if (absl::Status valid = options.Validate(); !valid.ok())
    return absl::InvalidArgumentError(absl::StrCat(
        valid.message(), " (flags: --tls/--tls_ca, --tls_cert, --tls_key, --tls_server_name, "
                         "--token_file)"));
  return options;
}

int ExitCodeFor(const absl::Status& rpc) {
  switch (rpc.code()) {
    case absl::StatusCode::kNotFound:  // the server does not know --service
      return kExitNotServing;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitRefused;
    default:
      return kExitNoAnswer;
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "health_probe: grpc.health.v1 Check; exit 0 SERVING, 1 not serving, 2 usage, 3 no "
      "answer, 4 refused (token)");
  absl::ParseCommandLine(argc, argv);
  const bool quiet = absl::GetFlag(FLAGS_quiet);

  absl::StatusOr<gemm::HealthCheckOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    // Usage errors are printed even with --quiet: nothing was probed.
    std::fprintf(stderr, "health_probe: %s\n", std::string(options.status().message()).c_str());
    return kExitUsage;
  }
  const std::string what =
      options->service.empty() ? options->target : options->target + " " + options->service;

  const absl::StatusOr<gemm::ServingStatus> status = gemm::CheckHealth(*options);
  if (!status.ok()) {
    if (!quiet) std::fprintf(stderr, "%s: %s\n", what.c_str(), status.status().ToString().c_str());
    return ExitCodeFor(status.status());
  }
  if (!quiet) std::printf("%s: %s\n", what.c_str(), gemm::ServingStatusName(*status));
  return *status == gemm::ServingStatus::kServing ? kExitServing : kExitNotServing;
}
