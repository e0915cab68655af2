#include "service/observe/metrics.h"

#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <exception>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "service/observe/process_metrics.h"

namespace gemm {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",        "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS", "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",    "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code < 0 || code > 16) return "UNKNOWN";
  return kNames[code];
}

}  // namespace

// Gauges whose values are read when scraped, so they are never stale.
class GaugeProbe : public prometheus::Collectable {
 public:
  void Add(std::string name, std::string help, std::map<std::string, std::string> labels,
           std::function<double()> read) {
    absl::MutexLock lock(&mu_);
    gauges_.push_back({std::move(name), std::move(help), std::move(labels), std::move(read)});
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    std::vector<prometheus::MetricFamily> out;
    for (const Entry& g : gauges_) {
      prometheus::ClientMetric metric;
      for (const auto& [k, v] : g.labels) metric.label.push_back({k, v});
      metric.gauge.value = g.read();
      // Gauges of one name (different labels) share a family.
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const prometheus::MetricFamily& f) { return f.name == g.name; });
      if (it == out.end()) {
        out.emplace_back();
        it = out.end() - 1;
        it->name = g.name;
        it->help = g.help;
        it->type = prometheus::MetricType::Gauge;
      }
      it->metric.push_back(std::move(metric));
    }
    return out;
  }

 private:
  struct Entry {
    std::string name;
    std::string help;
    std::map<std::string, std::string> labels;
    std::function<double()> read;
  };
  mutable absl::Mutex mu_;
  std::vector<Entry> gauges_ ABSL_GUARDED_BY(mu_);
};

const char* ShapeClass(const GemmShape& s) {
  const double f = s.flops();
  if (f <= 2.0 * 64 * 64 * 64) return "tiny";
  if (f <= 2.0 * 256 * 256 * 256) return "small";
  if (f <= 2.0 * 1024 * 1024 * 1024) return "medium";
  if (f <= 2.0 * 4096 * 4096 * 4096) return "large";
  return "huge";
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0,  30.0, 60.0};
}

// Stages last from microseconds (a hop between threads) to seconds.
std::vector<double> StageBuckets() {
  return {5e-6,   10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3,
          10e-3, 25e-3, 50e-3, 0.1,   0.25,   0.5,    1.0,    2.5,  5.0,    10.0};
}

ServiceMetrics::ServiceMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildCounter()
                    .Name("gemm_requests_total")
                    .Help("Finished requests by RPC method and gRPC status code.")
                    .Register(*registry_)),
      request_seconds_(BuildHistogram()
                           .Name("gemm_request_duration_seconds")
                           .Help("Time from receipt to answer, by RPC method.")
                           .Register(*registry_)),
      queue_wait_seconds_(BuildHistogram()
                              .Name("gemm_queue_wait_seconds")
                              .Help("Time admitted requests waited in the queue.")
                              .Register(*registry_)
                              .Add({}, LatencyBuckets())),
      request_stage_seconds_(
          BuildHistogram()
              .Name("gemm_request_stage_seconds")
              .Help("Time requests spent in each stage on their way through the server: "
                    "admit (parse, validate, admit, queue), queue, batch (taken from the queue "
                    "to handed to the executor), execute (its parts: staging, h2d, kernel, "
                    "d2h), complete (results kept, metrics, response filled), respond "
                    "(serialized and written, unary calls; its part serialize), total (unary "
                    "calls).")
              .Register(*registry_)),
      batch_requests_(BuildHistogram()
                          .Name("gemm_batch_requests")
                          .Help("Requests per batch handed to an executor.")
                          .Register(*registry_)
                          .Add({}, prometheus::Histogram::BucketBoundaries{
                                       1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024})),
      batch_problems_(BuildHistogram()
                          .Name("gemm_batch_problems")
                          .Help("Problems per batch handed to an executor.")
                          .Register(*registry_)
                          .Add({}, prometheus::Histogram::BucketBoundaries{
                                       1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096})),
      launches_(BuildCounter()
                    .Name("gemm_launches_total")
                    .Help("Kernel launches (BLAS calls on the CPU) by backend and kernel kind.")
                    .Register(*registry_)),
      compute_seconds_(BuildCounter()
                           .Name("gemm_compute_seconds_total")
                           .Help("Time spent computing (kernel time from CUDA events on a GPU).")
                           .Register(*registry_)),
      launch_flops_(BuildCounter()
                        .Name("gemm_launch_floating_point_operations_total")
                        .Help("Floating-point operations of kernel launches by backend and kernel "
                              "kind: the work each path ran (2*M*N*K per problem).")
                        .Register(*registry_)),
      flops_(BuildCounter()
                 .Name("gemm_floating_point_operations_total")
                 .Help("Floating-point operations done, 2*M*N*K per problem.")
                 .Register(*registry_)),
      algorithmic_bytes_(BuildCounter()
                             .Name("gemm_algorithmic_bytes_total")
                             .Help("Bytes of A, B, C read and D written, each counted once.")
                             .Register(*registry_)),
      transfer_bytes_(BuildCounter()
                          .Name("gemm_transfer_bytes_total")
                          .Help("Bytes actually moved between host and device, by direction.")
                          .Register(*registry_)),
      peak_flops_(BuildGauge()
                      .Name("gemm_peak_flops_per_second")
                      .Help("The backend's peak rate by dtype, and how it was obtained.")
                      .Register(*registry_)),
      peak_memory_(BuildGauge()
                       .Name("gemm_peak_memory_bytes_per_second")
                       .Help("The backend's memory bandwidth, and how it was obtained.")
                       .Register(*registry_)),
      build_info_(BuildGauge()
                      .Name("gemm_build_info")
                      .Help("Always 1; labels carry the version and backend.")
                      .Register(*registry_)),
      probes_(std::make_shared<GaugeProbe>()),
      process_(std::make_shared<ProcessCollector>()),
      queue_limit_(BuildGauge()
                       .Name("gemm_queue_limit_requests")
                       .Help("The configured --max_queued_requests.")
                       .Register(*registry_)
                       .Add({})),
      inflight_limit_(BuildGauge()
                          .Name("gemm_inflight_limit_bytes")
                          .Help("The configured --max_inflight_bytes.")
                          .Register(*registry_)
                          .Add({})),
      deterministic_requests_(BuildCounter()
                                  .Name("gemm_deterministic_requests_total")
                                  .Help("Requests answered under the deterministic contract "
                                        "(GemmRequest.deterministic or the server's default), "
                                        "by backend.")
                                  .Register(*registry_)),
      chunk_bytes_(BuildCounter()
                       .Name("gemm_chunk_bytes_total")
                       .Help("Bytes of resident matrices moved in chunks by gemm.v1.Transfer "
                             "(large operands and kept results), by direction.")
                       .Register(*registry_)),
      upload_chunk_bytes_(chunk_bytes_.Add({{"direction", "upload"}})),
      download_chunk_bytes_(chunk_bytes_.Add({{"direction", "download"}})),
      auth_failures_(BuildCounter()
                         .Name("gemm_auth_failures_total")
                         .Help("Calls refused UNAUTHENTICATED by the bearer-token check, by "
                               "reason.")
                         .Register(*registry_)),
      tenant_requests_(BuildCounter()
                           .Name("gemm_tenant_requests_total")
                           .Help("Answered Gemm requests (requests of a GemmStream included) by "
                                 "tenant and gRPC status code.")
                           .Register(*registry_)),
      tenant_flops_(BuildCounter()
                        .Name("gemm_tenant_floating_point_operations_total")
                        .Help("Floating-point operations done for the tenant, 2*M*N*K per "
                              "problem.")
                        .Register(*registry_)),
      tenant_device_seconds_(BuildCounter()
                                 .Name("gemm_tenant_device_seconds_total")
                                 .Help("Device time of the launches (BLAS calls on the CPU) "
                                       "attributed to the tenant's requests.")
                                 .Register(*registry_)),
      tenant_queue_wait_(BuildHistogram()
                             .Name("gemm_tenant_queue_wait_seconds")
                             .Help("Time the tenant's admitted requests waited in the queue.")
                             .Register(*registry_)),
      tenant_rejections_(BuildCounter()
                             .Name("gemm_tenant_rejections_total")
                             .Help("Calls refused RESOURCE_EXHAUSTED, by tenant and the limit "
                                   "they ran into.")
                             .Register(*registry_)),
      tenant_weight_(BuildGauge()
                         .Name("gemm_tenant_weight")
                         .Help("The tenant's configured weight (its share of the device under "
                               "contention, relative to the other backlogged tenants).")
                         .Register(*registry_)) {
  // Every reason from the start, at 0: rate() and alerts see the series
  // before the first failure.
  for (AuthFailureReason r : kAllAuthFailureReasons)
    auth_failures_.Add({{"reason", AuthFailureReasonName(r)}});
  for (const char* stage : kRequestStages)
    stage_histograms_.push_back(&request_stage_seconds_.Add({{"stage", stage}}, StageBuckets()));
}

ServiceMetrics::~ServiceMetrics() = default;

absl::Status ServiceMetrics::StartExposer(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(probes_);
  exposer_->RegisterCollectable(process_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  exposer_port_ = ports.empty() ? 0 : ports.front();
  return absl::OkStatus();
}

int ServiceMetrics::exposer_port() const { return exposer_port_; }

std::string ServiceMetrics::Scrape() const {
  std::ostringstream out;
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& f : probes_->Collect()) families.push_back(std::move(f));
  for (auto& f : process_->Collect()) families.push_back(std::move(f));
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void ServiceMetrics::SetBuildInfo(const std::string& version, const std::string& backend) {
  build_info_.Add({{"version", version}, {"backend", backend}}).Set(1);
}

void ServiceMetrics::SetPeakRates(const std::vector<PeakRate>& rates) {
  for (const PeakRate& r : rates) {
    if (r.kind == "memory") {
      peak_memory_.Add({{"method", r.method}}).Set(r.per_second);
    } else {
      peak_flops_.Add({{"dtype", r.kind}, {"method", r.method}}).Set(r.per_second);
    }
  }
}

void ServiceMetrics::SetDeviceHealthy(int gpu, bool healthy) {
  std::call_once(device_healthy_once_, [this] {
    device_healthy_ = &prometheus::BuildGauge()
                           .Name("gemm_device_healthy")
                           .Help("1 while the GPU serves, 0 once a fault took it out of service.")
                           .Register(*registry_);
  });
  device_healthy_->Add({{"gpu", std::to_string(gpu)}}).Set(healthy ? 1 : 0);
}

void ServiceMetrics::RecordRequest(const std::string& method, int grpc_code,
                                   absl::Duration latency) {
  requests_.Add({{"method", method}, {"code", GrpcCodeName(grpc_code)}}).Increment();
  request_seconds_.Add({{"method", method}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(latency));
}

void ServiceMetrics::RecordAuthFailure(AuthFailureReason reason) {
  auth_failures_.Add({{"reason", AuthFailureReasonName(reason)}}).Increment();
}

void ServiceMetrics::RecordRequestStage(absl::string_view stage, absl::Duration d) {
  // Several stages a request on the completion path: the histograms made at
  // construction, found by name, not a labelled lookup in the family.
  for (size_t i = 0; i < stage_histograms_.size(); ++i) {
    if (stage == kRequestStages[i]) {
      stage_histograms_[i]->Observe(absl::ToDoubleSeconds(d));
      return;
    }
  }
}

void ServiceMetrics::RecordQueueWait(absl::Duration wait) {
  queue_wait_seconds_.Observe(absl::ToDoubleSeconds(wait));
}

void ServiceMetrics::SetQueueProbe(std::function<double()> queued_requests,
                                   std::function<double()> inflight_bytes) {
  probes_->Add("gemm_queue_depth", "Requests waiting in the queue.", {},
               std::move(queued_requests));
  probes_->Add("gemm_inflight_bytes", "Operand and result bytes held by admitted requests.", {},
               std::move(inflight_bytes));
}

void ServiceMetrics::SetLimits(double max_queued_requests, double max_inflight_bytes) {
  queue_limit_.Set(max_queued_requests);
  inflight_limit_.Set(max_inflight_bytes);
}

void ServiceMetrics::AddProbe(const std::string& name, const std::string& help,
                              const std::map<std::string, std::string>& labels,
                              std::function<double()> read) {
  probes_->Add(name, help, labels, std::move(read));
}

void ServiceMetrics::RecordBatch(size_t requests, size_t problems) {
  batch_requests_.Observe(static_cast<double>(requests));
  batch_problems_.Observe(static_cast<double>(problems));
}

void ServiceMetrics::RecordDeterministicRequest(const std::string& backend) {
  deterministic_requests_.Add({{"backend", backend}}).Increment();
}

void ServiceMetrics::RecordProblem(const GemmProblemRef& p, const std::string& backend) {
  // fp32 inputs on tensor cores count as tf32: their peak is a different
  // one. FP8 problems count as fp8 whatever their formats (one peak).
  const std::string kind = p.shape.fp8() ? "fp8"
                           : p.shape.input_dtype == DType::kFp32 && p.shape.allow_tf32 &&
                                   backend != "cpu"
                               ? "tf32"
                               : DTypeName(p.shape.input_dtype);
  flops_.Add({{"dtype", kind}, {"shape_class", ShapeClass(p.shape)}, {"backend", backend}})
      .Increment(p.shape.flops());
  algorithmic_bytes_.Add({{"dtype", kind}, {"backend", backend}})
      .Increment(static_cast<double>(p.algorithmic_bytes()));
}

void ServiceMetrics::RecordLaunch(const std::string& backend, const LaunchRecord& launch,
                                  int gpu) {
  prometheus::Labels labels{{"backend", backend}, {"kernel_kind", launch.kernel_kind}};
  if (gpu >= 0) labels["gpu"] = std::to_string(gpu);
  launches_.Add(labels).Increment();
  compute_seconds_.Add(labels).Increment(absl::ToDoubleSeconds(launch.time));
  launch_flops_.Add(labels).Increment(launch.flops);
}

void ServiceMetrics::AddTransferBytes(const std::string& direction, double bytes, int gpu) {
  prometheus::Labels labels{{"direction", direction}};
  if (gpu >= 0) labels["gpu"] = std::to_string(gpu);
  transfer_bytes_.Add(labels).Increment(bytes);
}

void ServiceMetrics::SetTenants(const TenantsConfig* tenants) {
  absl::MutexLock lock(&tenants_mu_);
  tenants_on_ = tenants != nullptr;
  tenant_names_.clear();
  std::map<std::string, prometheus::Gauge*> gauges;
  if (tenants != nullptr) {
    for (const TenantSpec& t : tenants->tenants()) {
      tenant_names_.insert(t.name);
      prometheus::Gauge& g = tenant_weight_.Add({{"tenant", t.name}});
      g.Set(t.weight);
      gauges[t.name] = &g;
      // The tenant's own limits from the start, at 0: rate() and alerts
      // see the series before the first refusal.
      for (const char* limit : {"tenant.max_inflight_bytes", "tenant.max_requests_in_flight",
                                "tenant.max_flops_per_s", "tenant.max_resident_bytes"})
        tenant_rejections_.Add({{"tenant", t.name}, {"limit", limit}});
    }
  }
  for (const auto& [name, gauge] : weight_gauges_)
    if (gauges.count(name) == 0) tenant_weight_.Remove(gauge);
  weight_gauges_ = std::move(gauges);
}

std::string ServiceMetrics::TenantLabel(absl::string_view name) const {
  absl::MutexLock lock(&tenants_mu_);
  return tenant_names_.contains(name) ? std::string(name) : std::string(kOtherTenant);
}

void ServiceMetrics::RecordTenantRequest(absl::string_view tenant, int grpc_code) {
  if (tenant.empty()) return;
  tenant_requests_.Add({{"tenant", TenantLabel(tenant)}, {"code", GrpcCodeName(grpc_code)}})
      .Increment();
}

void ServiceMetrics::RecordTenantWork(absl::string_view tenant, double flops,
                                      absl::Duration device, absl::Duration queue_wait) {
  if (tenant.empty()) return;
  const prometheus::Labels labels{{"tenant", TenantLabel(tenant)}};
  tenant_flops_.Add(labels).Increment(flops);
  tenant_device_seconds_.Add(labels).Increment(absl::ToDoubleSeconds(device));
  tenant_queue_wait_.Add(labels, LatencyBuckets()).Observe(absl::ToDoubleSeconds(queue_wait));
}

void ServiceMetrics::RecordTenantRejection(absl::string_view tenant, absl::string_view limit) {
  if (tenant.empty()) return;
  const std::string limit_label = limit.empty() ? "unnamed" : std::string(limit);
  tenant_rejections_.Add({{"tenant", TenantLabel(tenant)}, {"limit", limit_label}}).Increment();
}

void ServiceMetrics::AddChunkBytes(const std::string& direction, double bytes) {
  (direction == "upload" ? upload_chunk_bytes_ : download_chunk_bytes_).Increment(bytes);
}

}  // namespace gemm
