// What a gemm_cli bench run measured, and its two reports: text for a
// person, JSON (client/cli/bench_report.proto) for a script.
#ifndef GEMM_CLIENT_CLI_BENCH_REPORT_H_
#define GEMM_CLIENT_CLI_BENCH_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/gemm_client.h"

namespace gemm::cli {

// What one bench run measured.
struct Figures {
  std::string workload;
  uint64_t m = 0, n = 0, k = 0;
  int batch = 0;
  std::string transport;
  int64_t requests = 0, ok = 0;
  // (code, message) -> count.
  std::map<std::pair<absl::StatusCode, std::string>, int64_t> failures;
  std::string stopped_early;  // why, when it stopped before its duration/count
  double seconds = 0, requests_per_s = 0, gflops = 0, mb_per_s = 0, request_mb_per_s = 0,
         response_mb_per_s = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t verified = 0, mismatches = 0;
};

// The text report of `f`, with how `client` spread its calls over the
// target's replicas.
void PrintText(const Figures& f, Client* client);

// The JSON report of a sweep: one line, field names as in
// bench_report.proto.
std::string JsonReport(absl::string_view target, const std::vector<Figures>& runs, int exit_code);

}  // namespace gemm::cli

#endif  // GEMM_CLIENT_CLI_BENCH_REPORT_H_
