// The service's Prometheus metrics (prometheus-cpp). One object per server,
// with its own registry; the HTTP exposer is optional (metrics_listen flag).
//
// Naming follows Prometheus conventions: one gemm_ prefix, base units
// (_seconds, _bytes), counters end in _total. Label values are bounded: method,
// gRPC code, dtype, backend, kernel kind and a five-value shape class — never a
// request id or a raw shape. deploy/prometheus/ derives the roofline figures
// (achieved FLOP/s, intensity, fraction of peak, attainable bound) from these.
#ifndef GEMM_SERVICE_METRICS_H_
#define GEMM_SERVICE_METRICS_H_

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

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gemm_problem.h"
#include "service/auth.h"
#include "service/executor.h"

namespace prometheus {
class Exposer;
}

namespace gemm {

class GaugeProbe;
class ProcessCollector;

// Problem size classes by 2*M*N*K, for the flops counter's label.
const char* ShapeClass(const GemmShape& shape);

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
  // One kernel launch (or BLAS call) and the time it took.
  // `gpu` is the device index, or -1 (no gpu label) on the CPU.
  void RecordLaunch(const std::string& backend, const std::string& kernel_kind,
                    absl::Duration compute, int gpu = -1);
  void AddTransferBytes(const std::string& direction, double bytes, int gpu = -1);
  // Bytes of resident matrices moved in chunks by gemm.v1.Transfer,
  // direction "upload" or "download".
  void AddChunkBytes(const std::string& direction, double bytes);
  // gemm_device_healthy{gpu}: 1 while the GPU serves, 0 once it went out of
  // service after a fault (Executor::healthy). Thread-safe.
  void SetDeviceHealthy(int gpu, bool healthy);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int exposer_port_ = 0;

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_seconds_;
  prometheus::Histogram& queue_wait_seconds_;
  prometheus::Histogram& batch_requests_;
  prometheus::Histogram& batch_problems_;
  prometheus::Family<prometheus::Counter>& launches_;
  prometheus::Family<prometheus::Counter>& compute_seconds_;
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
};

// Latency buckets (seconds) from 50 us to 60 s: GEMMs run from microseconds
// (64^3 on a GPU) to seconds (large fp32 on a CPU).
std::vector<double> LatencyBuckets();

}  // namespace gemm

#endif  // GEMM_SERVICE_METRICS_H_
