// One grpc.health.v1.Health/Check call, for the health probe binary and its
// tests. Plain-text channel: the service listens without TLS inside its pod
// or container network.
#ifndef GEMM_TOOLS_HEALTH_PROBE_HEALTH_CHECK_H_
#define GEMM_TOOLS_HEALTH_PROBE_HEALTH_CHECK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gemm {

enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

const char* ServingStatusName(ServingStatus status);

struct HealthCheckOptions {
  std::string target = "127.0.0.1:50051";
  // "" asks about the whole server; a full service name (e.g.
  // "gemm.v1.GemmService") asks about that service.
  std::string service;
  // Covers connecting and the call together.
  absl::Duration deadline = absl::Seconds(1);
};

// Calls Check once. Returns the server's answer, or the RPC's error:
// UNAVAILABLE when nothing listens, DEADLINE_EXCEEDED when it does not answer
// in time, NOT_FOUND when the server does not know `service`.
absl::StatusOr<ServingStatus> CheckHealth(const HealthCheckOptions& options);

}  // namespace gemm

#endif  // GEMM_TOOLS_HEALTH_PROBE_HEALTH_CHECK_H_
