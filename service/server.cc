#include "service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "service/clock.h"
#include "service/gemm_service.h"
#include "service/metrics.h"
#include "service/multi_device_executor.h"
#include "service/request_queue.h"
#include "service/resident_store.h"
#include "service/transfer_service.h"
#include "service/version.h"

namespace gemm {

absl::Status ServerOptions::Validate() const {
  if (listen_address.empty()) return absl::InvalidArgumentError("listen_address is empty");
  if (backend != "auto" && backend != "cpu" && backend != "cuda")
    return absl::InvalidArgumentError(
        absl::StrCat("backend must be \"auto\", \"cuda\" or \"cpu\", got \"", backend, "\""));
  GEMM_RETURN_IF_ERROR(batcher.Validate());
  GEMM_RETURN_IF_ERROR(admission.Validate());
  GEMM_RETURN_IF_ERROR(security.Validate());
  if (transient_idle_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError("transient_idle_timeout must be positive");
  GEMM_RETURN_IF_ERROR(http2.Validate());
  return limits.Validate();
}

std::vector<int> CudaDevices(const ServerOptions& options) {
  if (!options.cuda_devices.empty()) return options.cuda_devices;
  std::vector<int> all;
  for (int d = 0; d < CudaExecutor::DeviceCount(); ++d) all.push_back(d);
  if (all.empty()) all.push_back(0);  // lets Create report the missing device
  return all;
}

absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(const ServerOptions& options) {
  const bool gpu = CudaExecutor::DeviceCount() > 0;
  if (options.backend == "cuda" || (options.backend == "auto" && gpu)) {
    std::vector<std::unique_ptr<Executor>> per_device;
    for (int d : CudaDevices(options)) {
      CudaExecutor::Options o = options.cuda;
      o.device = d;
      GEMM_ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutor> cuda, CudaExecutor::Create(o));
      per_device.push_back(std::move(cuda));
    }
    if (per_device.size() == 1) return std::move(per_device.front());
    spdlog::info("serving on {} GPUs", per_device.size());
    GEMM_ASSIGN_OR_RETURN(std::unique_ptr<MultiDeviceExecutor> multi,
                          MultiDeviceExecutor::Create(std::move(per_device)));
    return std::unique_ptr<Executor>(std::move(multi));
  }
  if (options.backend == "auto") spdlog::info("no CUDA device visible: using the CPU backend");
  GEMM_ASSIGN_OR_RETURN(std::unique_ptr<CpuExecutor> cpu, CpuExecutor::Create(options.cpu));
  return std::unique_ptr<Executor>(std::move(cpu));
}

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::Start(const ServerOptions& options) {
  GEMM_RETURN_IF_ERROR(options.Validate());
  GEMM_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, CreateExecutor(options));
  return Start(options, std::move(executor));
}

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::Start(
    const ServerOptions& options, std::unique_ptr<Executor> executor) {
  GEMM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<GemmServer> s(new GemmServer);
  s->options_ = options;
  s->executor_ = std::move(executor);
  s->metrics_ = std::make_unique<ServiceMetrics>();
  RequestQueue::Options queue_options;
  queue_options.max_queued_requests = options.limits.max_queued_requests;
  queue_options.max_inflight_bytes = options.limits.max_inflight_bytes;
  queue_options.admission = options.admission;
  queue_options.predict_run_time = [ex = s->executor_.get()](const WorkItem& item) {
    return ex->PredictRunTime(item);
  };
  queue_options.parallel_units = s->executor_->parallel_units();
  s->queue_ = std::make_unique<RequestQueue>(queue_options, Clock::Real());
  RequestQueue* queue = s->queue_.get();
  s->metrics_->SetBuildInfo(kVersion, s->executor_->info().backend);
  s->metrics_->SetPeakRates(s->executor_->info().peak_rates);
  s->metrics_->SetQueueProbe([queue] { return static_cast<double>(queue->queued()); },
                             [queue] { return static_cast<double>(queue->inflight_bytes()); });
  s->metrics_->SetLimits(options.limits.max_queued_requests, options.limits.max_inflight_bytes);
  s->metrics_->AddProbe(
      "gemm_inflight_bytes_high_water",
      "The most operand and result bytes admitted requests held at once since start.", {},
      [queue] { return static_cast<double>(queue->inflight_bytes_high_water()); });
  if (s->executor_->info().backend == "cuda") {
    const std::vector<int> devices = CudaDevices(options);
    for (size_t i = 0; i < devices.size(); ++i) {
      const int device = devices[i];
      s->metrics_->AddProbe("gemm_device_memory_used_bytes",
                            "Device memory in use on the GPU (all processes).",
                            {{"gpu", std::to_string(i)}}, [device] {
                              auto used = CudaExecutor::DeviceBytesInUse(device);
                              return used.ok() ? static_cast<double>(*used) : 0.0;
                            });
    }
  }
  ResidentStore::Options store_options;
  store_options.max_bytes = options.limits.max_resident_bytes;
  store_options.idle_timeout = options.transient_idle_timeout;
  s->residents_ = std::make_unique<ResidentStore>(
      store_options,
      [ex = s->executor_.get()](const MatrixRef& m) { return ex->CreateResident(m); },
      [ex = s->executor_.get()](const MatrixRef& m) { return ex->AllocateResident(m); });
  ResidentStore* residents = s->residents_.get();
  s->reaper_ = std::thread([server = s.get(), residents] {
    const absl::Duration period =
        std::min(absl::Seconds(1), server->options_.transient_idle_timeout / 4);
    while (!server->stop_reaper_.WaitForNotificationWithTimeout(period)) {
      if (size_t n = residents->ExpireIdle(); n > 0)
        spdlog::info("freed {} idle transient matrices or abandoned uploads", n);
    }
  });
  s->metrics_->AddProbe("gemm_resident_bytes",
                        "Bytes of matrices stored with RegisterMatrix (device memory on a GPU).",
                        {}, [residents] { return static_cast<double>(residents->bytes()); });
  s->metrics_->AddProbe("gemm_resident_matrices", "Matrices stored with RegisterMatrix.", {},
                        [residents] { return static_cast<double>(residents->count()); });
  s->metrics_->AddProbe("gemm_resident_limit_bytes", "The max_resident_bytes limit.", {},
                        [max = options.limits.max_resident_bytes] {
                          return static_cast<double>(max);
                        });
  if (!options.metrics_listen.empty()) {
    GEMM_RETURN_IF_ERROR(s->metrics_->StartExposer(options.metrics_listen));
  }
  s->service_ = std::make_unique<GemmServiceImpl>(options.limits, s->queue_.get(),
                                                  s->executor_.get(), s->metrics_.get(),
                                                  Clock::Real(), s->residents_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  GEMM_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                        MakeServerCredentials(options.security));
  builder.AddListeningPort(options.listen_address, credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  s->transfer_ = std::make_unique<TransferService>(options.limits, s->residents_.get(),
                                                   s->metrics_.get(), Clock::Real());
  builder.RegisterCallbackGenericService(s->transfer_.get());
  const int max_message = static_cast<int>(options.limits.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  // gRPC checks max_message only once a message has fully arrived; a quota
  // is what can stop it reading an oversized one (limits.h says how well).
  if (options.limits.max_receive_buffer_bytes != 0) {
    grpc::ResourceQuota receive_quota("gemm_server_receive_buffers");
    receive_quota.Resize(options.limits.max_receive_buffer_bytes);
    builder.SetResourceQuota(receive_quota);
  }
  for (const auto& [name, value] : options.http2.ChannelArgs())
    builder.AddChannelArgument(name, value);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0)
    return absl::UnavailableError(
        absl::StrCat("could not listen on ", options.listen_address));
  // The server-wide status ("") and the service's own name, for clients that
  // check either.
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->server_->GetHealthCheckService()->SetServingStatus(v1::GemmService::service_full_name(),
                                                        true);

  BatcherOptions batcher = options.batcher;
  batcher.plan.grouped_supported = s->executor_->supports_grouped();
  s->batcher_ = std::make_unique<Batcher>(batcher, s->queue_.get(), s->executor_.get(),
                                          s->metrics_.get());
  spdlog::info("serving gemm.v1 on {} (port {}), backend {}, {} batches in flight",
               options.listen_address, s->port_, s->executor_->info().backend,
               s->executor_->max_concurrent_batches());
  if (s->metrics_->exposer_port() != 0)
    spdlog::info("metrics on {} (port {})", options.metrics_listen, s->metrics_->exposer_port());
  return s;
}

const BackendInfo& GemmServer::backend() const { return executor_->info(); }

void GemmServer::Shutdown(absl::Duration drain) {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("shutting down: draining for up to {}", absl::FormatDuration(drain));
  server_->GetHealthCheckService()->SetServingStatus(false);
  // New calls are refused from here on; admitted ones keep running.
  queue_->Close();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + drain));
  // gRPC cancelled whatever outlived the drain; anything still queued gets
  // UNAVAILABLE so that no call is left without an answer.
  queue_->Abandon(absl::UnavailableError("the server shut down before the request ran"));
  batcher_->Stop();
  server_->Wait();
  stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
  spdlog::info("shutdown complete");
}

GemmServer::~GemmServer() {
  if (!shut_down_ && server_ != nullptr) Shutdown(absl::ZeroDuration());
  if (!stop_reaper_.HasBeenNotified()) stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
}

}  // namespace gemm
