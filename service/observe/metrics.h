// The service's Prometheus metrics (prometheus-cpp). One object per server,
// with its own registry; the HTTP exposer is optional (metrics_listen flag).
//
// Naming follows Prometheus conventions: one gemm_ prefix, base units
// (_seconds, _bytes), counters end in _total. Label values are bounded: method,
// gRPC code, dtype, backend, kernel kind and a five-value shape class — never a
// request id or a raw shape. The tenant label (gemm_tenant_*) takes only
// the configured tenants' names and "other". deploy/prometheus/ derives the roofline figures
// (achieved FLOP/s, intensity, fraction of peak, attainable bound) from these.
#ifndef GEMM_SERVICE_OBSERVE_METRICS_H_
#define GEMM_SERVICE_OBSERVE_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/gemm_problem.h"
#include "service/exec/executor.h"
#include "service/queue/tenants.h"
#include "service/security/auth.h"

namespace prometheus {
class Exposer;
}

namespace gemm {

class GaugeProbe;
class ProcessCollector;

// Problem size classes by 2*M*N*K, for the flops counter's label.
const char* ShapeClass(const GemmShape& shape);

// The stages of gemm_request_stage_seconds, in the order a request passes
// them (docs/operations.md describes each). "staging", "h2d", "kernel" and
// "d2h" are parts of "execute" as the executor reports them (the CPU
// backend: staging and kernel; a GPU: h2d, kernel, d2h); "respond",
// its part "serialize", and "total" are unary calls only.
inline constexpr const char* kRequestStages[] = {
    "admit", "queue",    "batch",     "execute", "staging", "h2d", "kernel",
    "d2h",   "complete", "serialize", "respond", "total"};

class ServiceMetrics {
 public:
  ServiceMetrics();
  ~ServiceMetrics();

  // Serves /metrics on `address` (host:port). Port 0 picks a free port.
  absl::Status StartExposer(const std::string& address);
  // The bound port of the exposer, 0 if none.
  int exposer_port() const;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The current metrics in the text exposition format.
  std::string Scrape() const;

  // Static facts, set once at start-up.
  void SetBuildInfo(const std::string& version, const std::string& backend);
  void SetPeakRates(const std::vector<PeakRate>& rates);

  // One finished RPC (unary call, or one request of a stream).
  void RecordRequest(const std::string& method, int grpc_code, absl::Duration latency);
  void RecordQueueWait(absl::Duration wait);
  // One request's time in one stage on its way through the server:
  // gemm_request_stage_seconds{stage}, `stage` one of kRequestStages.
  void RecordRequestStage(absl::string_view stage, absl::Duration d);
  // gemm_auth_failures_total{reason}: one call refused by the token check.
  void RecordAuthFailure(AuthFailureReason reason);
  // Gauges read at scrape time: queue depth and in-flight bytes.
  void SetQueueProbe(std::function<double()> queued_requests,
                     std::function<double()> inflight_bytes);
  // The configured limits those gauges run up against, for saturation alerts.
  void SetLimits(double max_queued_requests, double max_inflight_bytes);
  // Any other gauge whose value is read when scraped (e.g. device memory).
  void AddProbe(const std::string& name, const std::string& help,
                const std::map<std::string, std::string>& labels, std::function<double()> read);
  // One batch handed to an executor: its request count and problem count.
  void RecordBatch(size_t requests, size_t problems);
  // One request run under the deterministic contract
  // (gemm_deterministic_requests_total{backend}).
  void RecordDeterministicRequest(const std::string& backend);
  // One finished problem's work.
  void RecordProblem(const GemmProblemRef& problem, const std::string& backend);
  // One kernel launch (or BLAS call): its count, time and FLOPs under its
  // kernel kind. `gpu` is the device index, or -1 (no gpu label) on the CPU.
  void RecordLaunch(const std::string& backend, const LaunchRecord& launch, int gpu = -1);
  void AddTransferBytes(const std::string& direction, double bytes, int gpu = -1);
  // Bytes of resident matrices moved in chunks by gemm.v1.Transfer,
  // direction "upload" or "download".
  void AddChunkBytes(const std::string& direction, double bytes);
  // gemm_device_healthy{gpu}: 1 while the GPU serves, 0 once it went out of
  // service after a fault (Executor::healthy). Thread-safe.
  void SetDeviceHealthy(int gpu, bool healthy);

  // Per-tenant series. SetTenants makes `tenants` the configured set (null:
  // none, and the Record* calls below record nothing): gemm_tenant_weight
  // then holds each configured tenant's weight and drops the others, and
  // each configured tenant's rejections by its own limits (tenant.*) are
  // exported from then on, at 0 until the first. A
  // tenant name outside the configured set (one a reload removed) is
  // recorded as "other". Thread-safe.
  void SetTenants(const TenantsConfig* tenants);
  // The label tenant `name` is recorded under: `name` when configured, else
  // "other".
  std::string TenantLabel(absl::string_view name) const;
  // One answered Gemm request (one request of a GemmStream) of `tenant`:
  // gemm_tenant_requests_total{tenant,code}.
  void RecordTenantRequest(absl::string_view tenant, int grpc_code);
  // One request of `tenant` that reached an executor: the FLOPs it did (0
  // when it failed), its device time (its part of the launches that ran it,
  // ExecutionReport::device_share) and its queue wait.
  void RecordTenantWork(absl::string_view tenant, double flops, absl::Duration device,
                        absl::Duration queue_wait);
  // One call of `tenant` refused RESOURCE_EXHAUSTED by `limit` (the
  // status's limit payload, limits.h: "tenant.max_inflight_bytes",
  // "max_queued_requests", ...): gemm_tenant_rejections_total{tenant,limit}.
  void RecordTenantRejection(absl::string_view tenant, absl::string_view limit);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int exposer_port_ = 0;

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_seconds_;
  prometheus::Histogram& queue_wait_seconds_;
  prometheus::Family<prometheus::Histogram>& request_stage_seconds_;
  // One per kRequestStages entry, in its order.
  std::vector<prometheus::Histogram*> stage_histograms_;
  prometheus::Histogram& batch_requests_;
  prometheus::Histogram& batch_problems_;
  prometheus::Family<prometheus::Counter>& launches_;
  prometheus::Family<prometheus::Counter>& compute_seconds_;
  prometheus::Family<prometheus::Counter>& launch_flops_;
  prometheus::Family<prometheus::Counter>& flops_;
  prometheus::Family<prometheus::Counter>& algorithmic_bytes_;
  prometheus::Family<prometheus::Counter>& transfer_bytes_;
  prometheus::Family<prometheus::Gauge>& peak_flops_;
  prometheus::Family<prometheus::Gauge>& peak_memory_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  std::shared_ptr<GaugeProbe> probes_;
  std::shared_ptr<ProcessCollector> process_;  // process_* from /proc
  prometheus::Gauge& queue_limit_;
  prometheus::Gauge& inflight_limit_;
  prometheus::Family<prometheus::Counter>& deterministic_requests_;
  prometheus::Family<prometheus::Counter>& chunk_bytes_;
  prometheus::Counter& upload_chunk_bytes_;
  prometheus::Counter& download_chunk_bytes_;
  // gemm_device_healthy, registered by the first SetDeviceHealthy.
  std::once_flag device_healthy_once_;
  prometheus::Family<prometheus::Gauge>* device_healthy_ = nullptr;
  prometheus::Family<prometheus::Counter>& auth_failures_;
  prometheus::Family<prometheus::Counter>& tenant_requests_;
  prometheus::Family<prometheus::Counter>& tenant_flops_;
  prometheus::Family<prometheus::Counter>& tenant_device_seconds_;
  prometheus::Family<prometheus::Histogram>& tenant_queue_wait_;
  prometheus::Family<prometheus::Counter>& tenant_rejections_;
  prometheus::Family<prometheus::Gauge>& tenant_weight_;
  mutable absl::Mutex tenants_mu_;
  bool tenants_on_ ABSL_GUARDED_BY(tenants_mu_) = false;
  absl::flat_hash_set<std::string> tenant_names_ ABSL_GUARDED_BY(tenants_mu_);
  // The gemm_tenant_weight series set, by tenant, for removal on reload.
  std::map<std::string, prometheus::Gauge*> weight_gauges_ ABSL_GUARDED_BY(tenants_mu_);
};

// Latency buckets (seconds) from 50 us to 60 s: GEMMs run from microseconds
// (64^3 on a GPU) to seconds (large fp32 on a CPU).
std::vector<double> LatencyBuckets();

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_METRICS_H_
