// The one start-up log line that says what an operator needs to know of a
// running gemm_server: backend and devices, listen addresses, TLS, mutual TLS
// and tokens on or off, the limits and the batching settings.
#ifndef GEMM_SERVICE_OBSERVE_STARTUP_SUMMARY_H_
#define GEMM_SERVICE_OBSERVE_STARTUP_SUMMARY_H_

#include "service/exec/executor.h"
#include "service/observe/log_format.h"
#include "service/server.h"

namespace gemm {

// The fields of that line; `port` and `metrics_port` are the bound ports
// (0: none).
LogFields StartupFields(const ServerOptions& options, const BackendInfo& backend,
                        int max_concurrent_batches, int port, int metrics_port);

// The devices as "<count> x <name>" per distinct name, comma-separated.
std::string DeviceSummary(const std::vector<DeviceDescription>& devices);

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_STARTUP_SUMMARY_H_
