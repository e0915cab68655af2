#include "client/cli/bench_report.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "client/cli/bench_report.pb.h"
#include "client/cli/flags.h"
#include "google/protobuf/util/json_util.h"

namespace gemm::cli {
namespace {

// A count as the report's 32-bit field (a bench run does not reach 2^32
// calls; larger counts print as the largest).
uint32_t Count(int64_t n) {
  return static_cast<uint32_t>(std::clamp<int64_t>(n, 0, std::numeric_limits<uint32_t>::max()));
}

// JSON has no spelling for NaN or infinities; the figures never hold them,
// and 0 stands in should one appear.
double Finite(double x) { return std::isfinite(x) ? x : 0.0; }

BenchRun ToProto(const Figures& f) {
  BenchRun run;
  run.set_m(Count(f.m));
  run.set_n(Count(f.n));
  run.set_k(Count(f.k));
  run.set_batch(Count(f.batch));
  run.set_workload(f.workload);
  run.set_transport(f.transport);
  run.set_requests(Count(f.requests));
  run.set_ok(Count(f.ok));
  run.set_errors(Count(f.requests - f.ok));
  for (const auto& [key, count] : f.failures) {
    BenchFailure* failure = run.add_failures();
    failure->set_code(absl::StatusCodeToString(key.first));
    failure->set_message(key.second);
    failure->set_count(Count(count));
  }
  if (f.stopped_early.empty()) {
    run.mutable_stopped_early()->set_null_value(google::protobuf::NULL_VALUE);
  } else {
    run.mutable_stopped_early()->set_string_value(f.stopped_early);
  }
  run.set_duration_s(Finite(f.seconds));
  run.set_requests_per_s(Finite(f.requests_per_s));
  run.set_gflop_per_s(Finite(f.gflops));
  run.set_mb_per_s(Finite(f.mb_per_s));
  run.set_request_mb_per_s(Finite(f.request_mb_per_s));
  run.set_response_mb_per_s(Finite(f.response_mb_per_s));
  BenchLatency* latency = run.mutable_latency_ms();
  latency->set_p50(Finite(f.p50));
  latency->set_p90(Finite(f.p90));
  latency->set_p99(Finite(f.p99));
  latency->set_max(Finite(f.max));
  run.set_verified(Count(f.verified));
  run.set_mismatches(Count(f.mismatches));
  return run;
}

}  // namespace

void PrintText(const Figures& f, Client* client) {
  absl::PrintF("workload      %s\n", f.workload);
  absl::PrintF("transport     %s\n", f.transport);
  absl::PrintF("requests      %lld (ok %lld, errors %lld)\n", static_cast<long long>(f.requests),
               static_cast<long long>(f.ok), static_cast<long long>(f.requests - f.ok));
  // One line per (code, message): the code and count first, so that scripts
  // can match them, then the server's message.
  for (const auto& [key, count] : f.failures) {
    absl::PrintF("  %-22s %lld  %s\n", absl::StatusCodeToString(key.first),
                 static_cast<long long>(count), key.second);
  }
  if (!f.stopped_early.empty()) absl::PrintF("stopped early %s\n", f.stopped_early);
  absl::PrintF("duration      %.2f s\n", f.seconds);
  absl::PrintF("requests/s    %.1f\n", f.requests_per_s);
  absl::PrintF("GFLOP/s       %.2f\n", f.gflops);
  absl::PrintF("MB/s          %.1f (request %.1f + response %.1f)\n", f.mb_per_s,
               f.request_mb_per_s, f.response_mb_per_s);
  absl::PrintF("latency ms    p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", f.p50, f.p90, f.p99,
               f.max);
  // How the requests were spread over the target's replicas (retries and
  // registrations included).
  const std::vector<Client::ReplicaStats> replicas = client->Replicas();
  uint64_t sent = 0;
  for (const Client::ReplicaStats& r : replicas) sent += r.requests;
  absl::PrintF("replicas      %d (policy %s)\n", replicas.size(),
               absl::GetFlag(FLAGS_replica_policy));
  for (const Client::ReplicaStats& r : replicas) {
    absl::PrintF("  %-30s instance %-16s %lld requests (%.1f%%), %lld failed over%s\n", r.address,
                 r.instance_id.empty() ? "?" : r.instance_id, static_cast<long long>(r.requests),
                 sent == 0 ? 0.0 : 100.0 * static_cast<double>(r.requests) / sent,
                 static_cast<long long>(r.failed_over), r.active ? "" : " (left the set)");
  }
  if (absl::GetFlag(FLAGS_verify_every) > 0) {
    absl::PrintF("verified      %lld responses, %lld mismatches\n",
                 static_cast<long long>(f.verified), static_cast<long long>(f.mismatches));
  }
}

std::string JsonReport(absl::string_view target, const std::vector<Figures>& runs, int exit_code) {
  BenchReport report;
  report.set_target(std::string(target));
  for (const Figures& f : runs) *report.add_runs() = ToProto(f);
  report.set_exit_code(exit_code);
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // zero counts too
  std::string json;
  // Printing a message that holds no Any cannot fail.
  (void)google::protobuf::util::MessageToJsonString(report, &json, options);
  return json;
}

}  // namespace gemm::cli
