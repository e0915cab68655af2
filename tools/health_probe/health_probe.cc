// health_probe: asks a gRPC server's grpc.health.v1.Health/Check once and
// exits 0 when the answer is SERVING, 1 otherwise (NOT_SERVING, unknown
// service, unreachable, deadline passed). Made for container HEALTHCHECKs and
// exec probes, where grpc_health_probe is not available:
//
//   health_probe --addr=127.0.0.1:50051 [--service=gemm.v1.GemmService] [--deadline=1s]
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "tools/health_probe/health_check.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "the server, host:port");
ABSL_FLAG(std::string, service, "",
          "service to ask about; empty means the server as a whole");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(1),
          "time allowed for connecting and answering together");
ABSL_FLAG(bool, quiet, false, "print nothing, only set the exit status");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "health_probe: grpc.health.v1 Check; exit 0 on SERVING, 1 otherwise");
  absl::ParseCommandLine(argc, argv);

  gemm::HealthCheckOptions options;
  options.target = absl::GetFlag(FLAGS_addr);
  options.service = absl::GetFlag(FLAGS_service);
  options.deadline = absl::GetFlag(FLAGS_deadline);
  const bool quiet = absl::GetFlag(FLAGS_quiet);
  const std::string what =
      options.service.empty() ? options.target : options.target + " " + options.service;

  const absl::StatusOr<gemm::ServingStatus> status = gemm::CheckHealth(options);
  if (!status.ok()) {
    if (!quiet) std::fprintf(stderr, "%s: %s\n", what.c_str(), status.status().ToString().c_str());
    return 1;
  }
  if (!quiet) std::printf("%s: %s\n", what.c_str(), gemm::ServingStatusName(*status));
  return *status == gemm::ServingStatus::kServing ? 0 : 1;
}
