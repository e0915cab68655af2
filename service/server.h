// GemmServer: the whole service in one object — queue, batcher, executor and
// the gRPC server with health checking and reflection, and optionally a
// health-only port beside it (health_listener.h). The server binary and the
// integration tests both start it this way.
#ifndef GEMM_SERVICE_SERVER_H_
#define GEMM_SERVICE_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/http2_tuning.h"
#include "service/base/limits.h"
#include "service/exec/cpu_executor.h"
#include "service/exec/cuda_executor.h"
#include "service/exec/executor.h"
#include "service/observe/log_rate_limiter.h"
#include "service/queue/batcher.h"
#include "service/queue/tenants.h"
#include "service/security/transport_security.h"

namespace grpc {
class Server;
}

namespace gemm {

class CallLog;
class GemmServiceImpl;
class HealthListener;
class ServiceMetrics;
class RequestQueue;
class ResidentStore;
class SharedMemoryStore;
class TransferService;

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see GemmServer::port).
  std::string listen_address = "0.0.0.0:50051";
  // "auto" (CUDA when a GPU is visible, else the CPU), "cuda" or "cpu".
  std::string backend = "auto";
  ServiceLimits limits;
  CpuExecutor::Options cpu;
  // CUDA backend: options for each device's executor (its `device` is set
  // per device), and which devices serve; empty means every visible one.
  CudaExecutor::Options cuda;
  std::vector<int> cuda_devices;
  BatcherOptions batcher;
  // Refusing at once requests predicted to finish past their deadline.
  AdmissionOptions admission;
  // Tenants' weights and limits (tenants.h); null (the default) shares the
  // queue across callers with no per-tenant weights or limits.
  std::shared_ptr<const TenantsConfig> tenants;
  // Requests that leave GemmRequest.deterministic unset run deterministic
  // (batch-invariant results, at the cost docs/api.md gives).
  bool deterministic_by_default = false;
  // host:port for the Prometheus /metrics endpoint; empty (the default here,
  // so that embedded servers and tests open no extra port) turns it off. The
  // server binary's flag defaults to 0.0.0.0:9464; bind it to 127.0.0.1 (or a
  // private interface) to keep it off the public one.
  std::string metrics_listen;
  // host:port of a plaintext port that serves grpc.health.v1 alone, without
  // TLS or tokens (health_listener.h), for probes that cannot present them;
  // empty (the default) turns it off. It reports what the main port does.
  std::string health_listen;
  // TLS, mutual TLS and bearer tokens for the gRPC port; all off by default.
  SecurityOptions security;
  // Transient resident matrices (uploads the client library makes for one
  // request, kept results) and unfinished uploads are freed after this long
  // unused, so that clients that vanish leave no memory behind.
  absl::Duration transient_idle_timeout = absl::Seconds(60);
  // HTTP/2 settings of the gRPC port for bulk transfer.
  Http2Tuning http2;
  // How many log lines of refused calls and auth failures each (method,
  // code) or auth reason may write (call_log.h).
  LogRateLimiter::Options log_rate;

  absl::Status Validate() const;
};

class GemmServer {
 public:
  // Builds the executor named by options.backend and starts serving.
  static absl::StatusOr<std::unique_ptr<GemmServer>> Start(const ServerOptions& options);
  // Starts serving on a given executor (tests inject fakes this way).
  static absl::StatusOr<std::unique_ptr<GemmServer>> Start(const ServerOptions& options,
                                                           std::unique_ptr<Executor> executor);
  ~GemmServer();

  int port() const { return port_; }
  // The health-only port (options.health_listen), or 0 when it is off.
  int health_port() const;
  // Names this process: new at every start, the prefix of every handle it
  // issues, reported by GetServerInfo.
  const std::string& instance_id() const { return instance_id_; }
  const BackendInfo& backend() const;
  ServiceMetrics* metrics() const { return metrics_.get(); }

  // Measures the executor's peak rates again (Executor::RemeasurePeaks:
  // batches wait meanwhile, none is lost; rates set by flag stay), then
  // updates the roofline gauges and logs the new figures. gemm_server
  // calls it on SIGHUP. Errors are logged and returned.
  absl::Status RemeasurePeaks();

  // Replaces the tenants configuration (ServerOptions::tenants; null turns
  // tenants off) without dropping anything: the queue's shares and limits
  // (RequestQueue::SetTenants), the resident store's per-tenant
  // max_resident_bytes and the per-tenant metrics follow it.
  void SetTenants(std::shared_ptr<const TenantsConfig> tenants);
  // Reads the tenants file at `path` and applies it (SetTenants), logging
  // "tenants from <path> applied: ..."; a file that does not parse is
  // refused and the configuration in force kept, with an error log naming
  // the file, the line and the field at fault, which is also returned.
  // gemm_server calls it on SIGHUP with --tenants_file.
  absl::Status ReloadTenants(const std::string& path);

  // Graceful shutdown: health turns NOT_SERVING; new work gets UNAVAILABLE
  // (GemmServiceImpl::StartDrain) while every request already under way
  // runs to its end, the downloads and releases of its transient matrices
  // included, for up to `drain`; then the port closes and whatever is still
  // running is cancelled (UNAVAILABLE / CANCELLED to its client). Idempotent.
  void Shutdown(absl::Duration drain);

  // Notified once the executor has no healthy GPU left (every device out of
  // service after a fault): health is NOT_SERVING and every request is
  // answered UNAVAILABLE; the binary then exits or stays per --on_gpu_loss.
  const absl::Notification& no_device_left() const { return no_device_left_; }

 private:
  GemmServer() = default;
  // Nothing admitted, transient or streaming is left.
  bool Drained() const;
  // The one place health changes: the main port's grpc.health.v1 and the
  // health-only port's together, for the server as a whole ("") and for
  // gemm.v1.GemmService.
  void SetServing(bool serving);

  ServerOptions options_;
  std::unique_ptr<ServiceMetrics> metrics_;
  std::unique_ptr<CallLog> call_log_;
  std::unique_ptr<Executor> executor_;
  // After executor_: resident matrices are freed before their executor.
  std::unique_ptr<ResidentStore> residents_;
  std::unique_ptr<SharedMemoryStore> shared_memory_;
  std::unique_ptr<RequestQueue> queue_;
  std::unique_ptr<GemmServiceImpl> service_;
  std::unique_ptr<TransferService> transfer_;
  std::unique_ptr<Batcher> batcher_;
  // batcher_ once it exists (it starts after the port, while requests may
  // already arrive): what the service calls after queueing a request.
  std::atomic<Batcher*> dispatcher_{nullptr};
  // Frees idle transient matrices (ResidentStore::ExpireIdle) until stopped.
  absl::Notification stop_reaper_;
  absl::Notification no_device_left_;
  std::thread reaper_;
  std::unique_ptr<grpc::Server> server_;
  // Closed after server_ (Shutdown), so that probes see NOT_SERVING through
  // the drain rather than a closed port.
  std::unique_ptr<HealthListener> health_listener_;
  int port_ = 0;
  std::string instance_id_;
  bool shut_down_ = false;
};

// The CUDA devices the server uses: options.cuda_devices, or every visible one.
std::vector<int> CudaDevices(const ServerOptions& options);

// Creates the executor for `options.backend`.
absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(const ServerOptions& options);

}  // namespace gemm

#endif  // GEMM_SERVICE_SERVER_H_
