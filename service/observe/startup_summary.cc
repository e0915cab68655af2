#include "service/observe/startup_summary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace gemm {
namespace {

const char* OnOff(bool on) { return on ? "on" : "off"; }

}  // namespace

std::string DeviceSummary(const std::vector<DeviceDescription>& devices) {
  // In order of first appearance, so that device 0's kind comes first.
  std::vector<std::pair<std::string, int>> counts;
  for (const DeviceDescription& d : devices) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == d.name; });
    if (it == counts.end()) {
      counts.push_back({d.name, 1});
    } else {
      ++it->second;
    }
  }
  return absl::StrJoin(counts, ", ", [](std::string* out, const auto& c) {
    absl::StrAppend(out, c.second, " x ", c.first);
  });
}

LogFields StartupFields(const ServerOptions& options, const BackendInfo& backend,
                        int max_concurrent_batches, int port, int metrics_port) {
  const ServiceLimits& l = options.limits;
  const BatcherOptions& b = options.batcher;
  return {
      {"backend", backend.backend},
      {"devices", DeviceSummary(backend.devices)},
      {"listen", options.listen_address},
      {"port", std::to_string(port)},
      {"metrics", metrics_port != 0 ? options.metrics_listen : "off"},
      {"metrics_port", std::to_string(metrics_port)},
      {"tls", OnOff(options.security.tls())},
      {"mtls", OnOff(options.security.tls() && !options.security.tls_client_ca_file.empty())},
      {"tokens", OnOff(!options.security.auth_tokens_file.empty())},
      {"max_message_bytes", std::to_string(l.max_message_bytes)},
      {"max_dimension", std::to_string(l.max_dimension)},
      {"max_matrix_bytes", std::to_string(l.max_matrix_bytes)},
      {"max_problems_per_request", std::to_string(l.max_problems_per_request)},
      {"max_queued_requests", std::to_string(l.max_queued_requests)},
      {"max_inflight_bytes", std::to_string(l.max_inflight_bytes)},
      {"max_stream_inflight", std::to_string(l.max_stream_inflight)},
      {"max_resident_bytes", std::to_string(l.max_resident_bytes)},
      {"max_shared_memory_regions", std::to_string(l.max_shared_memory_regions)},
      {"max_shared_memory_bytes", std::to_string(l.max_shared_memory_bytes)},
      {"batches_in_flight", std::to_string(max_concurrent_batches)},
      {"max_queue_delay", absl::FormatDuration(b.max_queue_delay)},
      {"dispatch_when_idle", b.dispatch_when_idle ? "true" : "false"},
      {"dispatch_on_arrival", b.dispatch_on_arrival ? "true" : "false"},
      {"run_on_arrival_max", absl::FormatDuration(b.run_on_arrival_max)},
      {"batch_max_requests", std::to_string(b.budget.max_requests)},
      {"batch_max_flops", absl::StrCat(b.budget.max_flops)},
      {"batch_max_bytes", std::to_string(b.budget.max_bytes)},
      {"large_problem_flops", absl::StrCat(b.plan.large_problem_flops)},
      {"reject_predicted_late", options.admission.reject_predicted_late ? "true" : "false"},
      {"deadline_safety_factor", absl::StrCat(options.admission.safety_factor)},
  };
}

}  // namespace gemm
