// gemm_cli info: what the server says of itself (GetServerInfo).
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/connection.h"
#include "client/cli/flags.h"
#include "client/cli/problem.h"

namespace gemm::cli {

int Info() {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  absl::StatusOr<v1::ServerInfo> info = (*client)->GetServerInfo();
  if (!info.ok()) return absl::FPrintF(stderr, "error: %s\n", info.status().ToString()), kExitRpc;

  absl::PrintF("server        %s\n", absl::GetFlag(FLAGS_target));
  absl::PrintF("version       %s\n", info->version());
  absl::PrintF("instance      %s\n", info->instance_id().empty() ? "(not reported)" : info->instance_id());
  absl::PrintF("backend       %s\n", info->backend());
  std::vector<std::string> dtypes;
  for (int t : info->input_dtypes()) dtypes.push_back(Name(static_cast<v1::DataType>(t)));
  absl::PrintF("input dtypes  %s\n", absl::StrJoin(dtypes, ", "));
  absl::PrintF("kernels       %s\n", info->kernels().empty() ? "-" : absl::StrJoin(info->kernels(), ", "));
  absl::PrintF("devices\n");
  for (int i = 0; i < info->devices_size(); ++i) {
    const v1::DeviceInfo& d = info->devices(i);
    absl::PrintF("  [%d] %s", i, d.name());
    if (!d.compute_capability().empty()) absl::PrintF("  sm_%s", d.compute_capability());
    if (d.multiprocessors() > 0) absl::PrintF("  %u SMs", d.multiprocessors());
    if (d.memory_bytes() > 0) absl::PrintF("  %.1f GiB", d.memory_bytes() / double(1ull << 30));
    if (d.threads() > 0) absl::PrintF("  %u threads", d.threads());
    absl::PrintF("\n");
  }
  absl::PrintF("peak rates\n");
  for (const v1::PeakRate& r : info->peak_rates()) {
    const bool memory = r.kind() == "memory";
    absl::PrintF("  %-7s %10.1f %-8s %s\n", r.kind(), r.per_second() / 1e9,
                 memory ? "GB/s" : "GFLOP/s", r.method().empty() ? "" : "(" + r.method() + ")");
  }
  const v1::Limits& l = info->limits();
  absl::PrintF("limits\n");
  absl::PrintF("  max message bytes        %u (%.1f MiB)\n", l.max_message_bytes(),
               l.max_message_bytes() / double(1 << 20));
  absl::PrintF("  max dimension            %u\n", l.max_dimension());
  absl::PrintF("  max problem bytes        %u\n", l.max_problem_bytes());
  absl::PrintF("  max problems per request %u\n", l.max_problems_per_request());
  absl::PrintF("  max queued requests      %u\n", l.max_queued_requests());
  absl::PrintF("  max queued bytes         %u\n", l.max_queued_bytes());
  return 0;
}

// ---------------------------------------------------------------------------
// run

// With --shared_memory, `request` placed in a new shared-memory region with

}  // namespace gemm::cli
