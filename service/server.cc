#include "service/server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <spdlog/spdlog.h>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "service/base/clock.h"
#include "service/exec/multi_device_executor.h"
#include "service/observe/call_log.h"
#include "service/observe/health_listener.h"
#include "service/observe/metrics.h"
#include "service/observe/startup_summary.h"
#include "service/queue/request_queue.h"
#include "service/rpc/gemm_service.h"
#include "service/rpc/transfer_service.h"
#include "service/security/caller_identity.h"
#include "service/store/resident_store.h"
#include "service/store/shared_memory_store.h"
#include "service/version.h"

namespace gemm {

namespace {

// Fails with a message naming the port when `listen_address` ("host:port",
// "[v6]:port") cannot be bound because something already listens there.
// gRPC's own bind would say only that it could not listen, and only after
// the executor has started; port 0 and non-TCP addresses pass.
absl::Status CheckPortFree(const std::string& listen_address) {
  const size_t colon = listen_address.rfind(':');
  if (colon == std::string::npos || listen_address.rfind("unix:", 0) == 0)
    return absl::OkStatus();
  std::string host = listen_address.substr(0, colon);
  const std::string port = listen_address.substr(colon + 1);
  int port_number;
  if (!absl::SimpleAtoi(port, &port_number) || port_number == 0) return absl::OkStatus();
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0)
    return absl::OkStatus();  // gRPC reports an unusable address itself
  absl::Status status;
  for (addrinfo* a = found; a != nullptr && status.ok(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // As gRPC binds (SO_REUSEADDR, no SO_REUSEPORT): a listener on the port
    // makes bind fail, a closed connection in TIME_WAIT does not.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE)
      status = absl::AlreadyExistsError(absl::StrCat(
          "port ", port, " is already in use (", listen_address,
          "): another gemm_server or program listens there; one server per port"));
    close(fd);
  }
  freeaddrinfo(found);
  return status;
}

}  // namespace

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
  // Port 0 twice is two free ports, not one.
  if (!health_listen.empty() && health_listen == listen_address &&
      !absl::EndsWith(listen_address, ":0"))
    return absl::InvalidArgumentError(
        absl::StrCat("health_listen must differ from listen_address (both ", listen_address, ")"));
  if (absl::Status st = log_rate.Validate(); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat("log_rate.", st.message()));
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
  // Before the executor starts (which may take a while): a taken port fails
  // at once.
  GEMM_RETURN_IF_ERROR(CheckPortFree(options.listen_address));
  if (!options.health_listen.empty()) GEMM_RETURN_IF_ERROR(CheckPortFree(options.health_listen));
  GEMM_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, CreateExecutor(options));
  return Start(options, std::move(executor));
}

namespace {

// gemm_device_healthy per GPU, and health NOT_SERVING once no GPU is left:
// the executor answers UNAVAILABLE from then on, balancers move traffic away
// and the orchestrator's health probe restarts the process.
void WatchDeviceHealth(Executor* executor, ServiceMetrics* metrics,
                       std::function<void(bool)> set_serving,
                       absl::Notification* no_device_left) {
  const std::string backend = executor->info().backend;
  if (backend != "cuda") return;
  for (size_t d = 0; d < executor->info().devices.size(); ++d)
    metrics->SetDeviceHealthy(static_cast<int>(d), true);
  executor->SetHealthListener([executor, metrics, set_serving = std::move(set_serving),
                               no_device_left](
                                  int d, const absl::Status& why) {
    metrics->SetDeviceHealthy(d, false);
    if (executor->healthy()) {
      spdlog::error("GPU {} out of service ({}); the other GPUs go on serving", d,
                    std::string(why.message()));
      return;
    }
    spdlog::critical("GPU {} out of service ({}) and no GPU is left: health NOT_SERVING, "
                     "every request answered UNAVAILABLE; restart the process",
                     d, std::string(why.message()));
    set_serving(false);
    if (!no_device_left->HasBeenNotified()) no_device_left->Notify();
  });
}

// What the drain did with the Gemm requests (unary and streamed), from the
// counts at its start, at its end (the deadline or nothing left) and once
// the port had closed.
void LogDrainSummary(const GemmServiceImpl::CallCounts& start,
                     const GemmServiceImpl::CallCounts& end,
                     const GemmServiceImpl::CallCounts& closed) {
  const uint64_t running = start.admitted - start.finished;
  const uint64_t admitted = end.admitted - start.admitted;
  const uint64_t finished = end.finished - start.finished;
  const uint64_t refused = end.refused_draining - start.refused_draining;
  const uint64_t left = end.admitted - end.finished;
  LogWithFields(left == 0 ? spdlog::level::info : spdlog::level::warn,
                absl::StrCat("drain summary: ", running, " requests under way at its start, ",
                             admitted, " admitted during it, ", finished, " finished, ", refused,
                             " calls refused UNAVAILABLE, ", left,
                             " cut off at its deadline"),
                {{"under_way_at_start", std::to_string(running)},
                 {"admitted", std::to_string(admitted)},
                 {"finished", std::to_string(finished)},
                 {"refused", std::to_string(refused)},
                 {"cut_off", std::to_string(left)},
                 {"answered_after_close", std::to_string(closed.finished - end.finished)}});
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::Start(
    const ServerOptions& options, std::unique_ptr<Executor> executor) {
  GEMM_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<GemmServer> s(new GemmServer);
  s->options_ = options;
  s->executor_ = std::move(executor);
  {
    absl::BitGen bitgen;
    s->instance_id_ = absl::StrFormat("%016x", absl::Uniform<uint64_t>(bitgen));
  }
  s->metrics_ = std::make_unique<ServiceMetrics>();
  s->call_log_ = std::make_unique<CallLog>(options.log_rate, Clock::Real());
  RequestQueue::Options queue_options;
  queue_options.max_queued_requests = options.limits.max_queued_requests;
  queue_options.max_inflight_bytes = options.limits.max_inflight_bytes;
  queue_options.admission = options.admission;
  queue_options.predict_run_time = [ex = s->executor_.get()](const WorkItem& item) {
    return ex->PredictRunTime(item);
  };
  queue_options.parallel_units = s->executor_->parallel_units();
  queue_options.tenants = options.tenants;
  s->queue_ = std::make_unique<RequestQueue>(queue_options, Clock::Real());
  RequestQueue* queue = s->queue_.get();
  s->metrics_->SetBuildInfo(kVersion, s->executor_->info().backend);
  s->metrics_->SetPeakRates(s->executor_->peak_rates());
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
  store_options.instance_id = s->instance_id_;
  s->residents_ = std::make_unique<ResidentStore>(
      store_options,
      [ex = s->executor_.get()](const MatrixRef& m) { return ex->CreateResident(m); },
      [ex = s->executor_.get()](const MatrixRef& m) { return ex->AllocateResident(m); },
      Clock::Real(),
      [ex = s->executor_.get()](const MatrixRef& m, const Fp8Quantization& q) {
        return ex->QuantizeResident(m, q);
      });
  ResidentStore* residents = s->residents_.get();
  residents->SetTenants(options.tenants);
  s->metrics_->SetTenants(options.tenants.get());
  SharedMemoryStore::Options shared_options;
  shared_options.max_regions = options.limits.max_shared_memory_regions;
  shared_options.max_bytes = options.limits.max_shared_memory_bytes;
  shared_options.instance_id = s->instance_id_;
  shared_options.pin = [ex = s->executor_.get()](void* base, uint64_t bytes) {
    return ex->PinHostMemory(base, bytes);
  };
  s->shared_memory_ = std::make_unique<SharedMemoryStore>(shared_options);
  SharedMemoryStore* shared = s->shared_memory_.get();
  // Also unmaps the shared memory of clients that have ended and writes the
  // summaries of rate-limited log lines, about once a second.
  s->reaper_ = std::thread([server = s.get(), residents, shared] {
    const absl::Duration period =
        std::min(absl::Seconds(1), server->options_.transient_idle_timeout / 4);
    while (!server->stop_reaper_.WaitForNotificationWithTimeout(period)) {
      if (size_t n = residents->ExpireIdle(); n > 0)
        spdlog::info("freed {} idle transient matrices or abandoned uploads", n);
      if (int n = shared->ReapEnded(); n > 0)
        spdlog::info("unmapped {} shared-memory region(s) whose client process ended", n);
      server->call_log_->FlushSuppressed();
    }
  });
  s->metrics_->AddProbe("gemm_shared_memory_regions",
                        "Same-host clients' shared-memory regions mapped.", {},
                        [shared] { return static_cast<double>(shared->regions()); });
  s->metrics_->AddProbe("gemm_shared_memory_bytes", "Bytes of the shared-memory regions mapped.",
                        {}, [shared] { return static_cast<double>(shared->bytes()); });
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
                                                  Clock::Real(), s->residents_.get(),
                                                  s->instance_id_);
  s->service_->set_deterministic_by_default(options.deterministic_by_default);
  s->service_->set_call_log(s->call_log_.get());
  s->service_->set_shared_memory(shared);
  s->service_->set_on_queued([server = s.get()] {
    if (Batcher* batcher = server->dispatcher_.load(std::memory_order_acquire))
      batcher->DispatchIfIdle();
  });
  s->metrics_->AddProbe(
      "gemm_waiting_requests",
      "Gemm and GemmStream requests held waiting for uploads they name (max_waiting_requests).",
      {},
      [service = s->service_.get()] { return static_cast<double>(service->waiting_requests()); });

  // Before the main port, whose start must not fail after it (a server_
  // without a batcher cannot be shut down): NOT_SERVING until SetServing.
  if (!options.health_listen.empty()) {
    HealthListenerOptions health;
    health.listen_address = options.health_listen;
    GEMM_ASSIGN_OR_RETURN(
        s->health_listener_,
        HealthListener::Start(health, {"", v1::GemmService::service_full_name()}));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  GEMM_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                        MakeServerCredentials(options.security,
                                              [metrics = s->metrics_.get(),
                                               log = s->call_log_.get()](const AuthFailure& f) {
                                                metrics->RecordAuthFailure(f.reason);
                                                log->AuthFailed(AuthFailureReasonName(f.reason),
                                                                f.method,
                                                                CallerIdentity(f.connection),
                                                                f.message);
                                              }));
  builder.AddListeningPort(options.listen_address, credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  s->transfer_ = std::make_unique<TransferService>(options.limits, s->residents_.get(),
                                                   s->metrics_.get(), Clock::Real());
  s->transfer_->set_call_log(s->call_log_.get());
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
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the
  // port of a running one and take a share of its connections: one server
  // per port instead (a taken port fails the start).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0)
    return absl::UnavailableError(absl::StrCat(
        "could not listen on ", options.listen_address,
        " (is the port already in use by another server?)"));
  s->SetServing(true);

  WatchDeviceHealth(s->executor_.get(), s->metrics_.get(),
                    [server = s.get()](bool serving) { server->SetServing(serving); },
                    &s->no_device_left_);

  BatcherOptions batcher = options.batcher;
  batcher.plan.grouped_supported = s->executor_->supports_grouped();
  s->batcher_ = std::make_unique<Batcher>(batcher, s->queue_.get(), s->executor_.get(),
                                          s->metrics_.get());
  s->dispatcher_.store(s->batcher_.get(), std::memory_order_release);
  LogFields started =
      StartupFields(options, s->executor_->info(), s->executor_->max_concurrent_batches(),
                    s->port_, s->metrics_->exposer_port());
  started.push_back({"instance", s->instance_id_});
  started.push_back({"deterministic_by_default", options.deterministic_by_default ? "on" : "off"});
  if (s->health_listener_ != nullptr)
    started.push_back({"health_listen", absl::StrCat(options.health_listen, " (port ",
                                                     s->health_listener_->port(),
                                                     "; grpc.health.v1 only, plaintext)")});
  LogWithFields(spdlog::level::info,
                absl::StrCat("serving gemm.v1 on ", options.listen_address, " (port ", s->port_,
                             "), backend ", s->executor_->info().backend),
                started);
  return s;
}

const BackendInfo& GemmServer::backend() const { return executor_->info(); }

void GemmServer::SetTenants(std::shared_ptr<const TenantsConfig> tenants) {
  // The metrics first: a request admitted under the new configuration is
  // then labelled by it.
  metrics_->SetTenants(tenants.get());
  residents_->SetTenants(tenants);
  queue_->SetTenants(std::move(tenants));
}

absl::Status GemmServer::ReloadTenants(const std::string& path) {
  absl::StatusOr<TenantsConfig> tenants = TenantsConfig::Load(path);
  if (!tenants.ok()) {
    spdlog::error("tenants file refused, the configuration in force is kept: {}",
                  std::string(tenants.status().message()));
    return tenants.status();
  }
  spdlog::info("tenants from {} applied: {}", path, tenants->Summary());
  SetTenants(std::make_shared<const TenantsConfig>(*std::move(tenants)));
  return absl::OkStatus();
}

absl::Status GemmServer::RemeasurePeaks() {
  spdlog::info("re-measuring the peak rates; batches wait until it is done");
  const absl::Time start = absl::Now();
  if (absl::Status st = executor_->RemeasurePeaks(); !st.ok()) {
    spdlog::error("re-measuring the peak rates failed: {}", st.ToString());
    return st;
  }
  const std::vector<PeakRate> rates = executor_->peak_rates();
  metrics_->SetPeakRates(rates);
  std::vector<std::string> figures;
  for (const PeakRate& r : rates) {
    figures.push_back(r.kind == "memory"
                          ? absl::StrFormat("memory=%.1fGB/s(%s)", r.per_second / 1e9, r.method)
                          : absl::StrFormat("%s=%.2fTFLOP/s(%s)", r.kind, r.per_second / 1e12,
                                            r.method));
  }
  spdlog::info("peak rates re-measured in {}: {}", absl::FormatDuration(absl::Now() - start),
               absl::StrJoin(figures, " "));
  return absl::OkStatus();
}

int GemmServer::health_port() const {
  return health_listener_ != nullptr ? health_listener_->port() : 0;
}

void GemmServer::SetServing(bool serving) {
  // The server-wide status ("") and the service's own name, for clients that
  // check either.
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(serving);
  health->SetServingStatus(v1::GemmService::service_full_name(), serving);
  if (health_listener_ != nullptr) health_listener_->SetServing(serving);
}

bool GemmServer::Drained() const {
  // Unanswered Gemm calls first: a kept result is registered only after its
  // work item has left the queue's accounting, before the answer goes out.
  return service_->active_calls() == 0 && queue_->queued() == 0 &&
         queue_->inflight_bytes() == 0 && residents_->transient_count() == 0 &&
         transfer_->active_streams() == 0;
}

void GemmServer::Shutdown(absl::Duration drain) {
  if (shut_down_) return;
  shut_down_ = true;
  const absl::Time deadline = absl::Now() + drain;
  // Balancers and health-checking clients move new traffic first.
  SetServing(false);
  // No fault report after this reaches the server as it goes away.
  executor_->SetHealthListener(nullptr);
  // Then the drain proper: the port stays open and new work gets UNAVAILABLE
  // (retryable elsewhere), while requests already under way here run to
  // their end, the downloads and releases of what they left on the server
  // included: until nothing transient is left or the deadline.
  const GemmServiceImpl::CallCounts before = service_->counts();
  service_->StartDrain();
  // Logged once new work is refused: a reader of the log (an operator, a
  // test) that sees it knows the next call gets UNAVAILABLE.
  spdlog::info("shutting down: draining for up to {}", absl::FormatDuration(drain));
  while (!Drained() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  const GemmServiceImpl::CallCounts after = service_->counts();
  if (!Drained())
    spdlog::warn("drain deadline reached with work left: {} Gemm calls, {} queued, {} bytes "
                 "in flight, {} transient matrices or uploads, {} transfer streams; cancelling it",
                 service_->active_calls(), queue_->queued(), queue_->inflight_bytes(),
                 residents_->transient_count(), transfer_->active_streams());
  // New calls are refused from here on; calls still running get what is
  // left of the deadline (a final ReleaseMatrix answer, say).
  queue_->Close();
  server_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Milliseconds(100))));
  // gRPC cancelled whatever outlived the drain; anything still queued gets
  // UNAVAILABLE so that no call is left without an answer.
  queue_->Abandon(absl::UnavailableError("the server shut down before the request ran"));
  batcher_->Stop();
  server_->Wait();
  if (health_listener_ != nullptr) health_listener_->Shutdown();
  stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
  call_log_->FlushSuppressed();
  LogDrainSummary(before, after, service_->counts());
  spdlog::info("shutdown complete");
}

GemmServer::~GemmServer() {
  if (!shut_down_ && server_ != nullptr) Shutdown(absl::ZeroDuration());
  if (!stop_reaper_.HasBeenNotified()) stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
}

}  // namespace gemm
