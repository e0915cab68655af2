// The gemm.v1 GemmService on gRPC's callback API. Handlers never block on
// compute: they validate, admit into the queue and return; the executor's
// completion finishes the call.
#ifndef GEMM_SERVICE_GEMM_SERVICE_H_
#define GEMM_SERVICE_GEMM_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "gemm/v1/gemm.grpc.pb.h"
#include "service/clock.h"
#include "service/executor.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "service/request_queue.h"
#include "service/resident_store.h"

namespace gemm {

class GemmServiceImpl final : public v1::GemmService::CallbackService {
 public:
  // `queue`, `executor`, `metrics` and `residents` must outlive the service.
  // Without `residents`, RegisterMatrix is UNIMPLEMENTED and handles are
  // refused.
  GemmServiceImpl(const ServiceLimits& limits, RequestQueue* queue, const Executor* executor,
                  ServiceMetrics* metrics, const Clock* clock,
                  ResidentStore* residents = nullptr, std::string instance_id = "");

  // The drain of a shutdown: from now on calls that would start new work
  // (a Gemm naming no resident matrix of this server, RegisterMatrix,
  // BeginUpload) get UNAVAILABLE, so that clients retry them on another
  // replica, while the calls of requests already under way here (Gemm on
  // their uploaded operands, Transfer, ReleaseMatrix) are still served.
  void StartDrain() { draining_.store(true); }
  // Whether a request that leaves GemmRequest.deterministic unset runs
  // deterministic (the server's --deterministic_by_default). Set before
  // serving.
  void set_deterministic_by_default(bool on) { deterministic_by_default_ = on; }
  bool draining() const { return draining_.load(); }
  // Unary Gemm calls not yet done (their answers not yet sent). Streams are
  // not counted: an open stream may idle for as long as its client likes.
  int active_calls() const { return active_calls_.load(); }
  std::atomic<int> active_calls_{0};

  grpc::ServerUnaryReactor* Gemm(grpc::CallbackServerContext* context,
                                 const v1::GemmRequest* request,
                                 v1::GemmResponse* response) override;

  grpc::ServerBidiReactor<v1::GemmRequest, v1::GemmResponse>* GemmStream(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* info) override;

  // Registration allocates and copies (into device memory on the CUDA
  // backend) before answering: quick for the sizes allowed, and not on the
  // hot path.
  grpc::ServerUnaryReactor* RegisterMatrix(grpc::CallbackServerContext* context,
                                           const v1::RegisterMatrixRequest* request,
                                           v1::RegisterMatrixResponse* response) override;

  grpc::ServerUnaryReactor* ReleaseMatrix(grpc::CallbackServerContext* context,
                                          const v1::ReleaseMatrixRequest* request,
                                          v1::ReleaseMatrixResponse* response) override;

  // Reserves an upload's matrix; its bytes arrive through Transfer.Upload
  // (transfer_service.h).
  grpc::ServerUnaryReactor* BeginUpload(grpc::CallbackServerContext* context,
                                        const v1::BeginUploadRequest* request,
                                        v1::RegisterMatrixResponse* response) override;

  // Implementation details follow.
  struct Admission;
  // Validates `request` (handles resolved for the caller of `context`) and
  // admits a work item whose completion calls `on_done`; on failure returns
  // the status to answer with (and a retry pushback for RESOURCE_EXHAUSTED in
  // *pushback). Called from a reaction of `context`'s call.
  absl::Status Admit(const grpc::CallbackServerContext& context,
                     const v1::GemmRequest& request, v1::GemmResponse* response,
                     absl::Time deadline, absl::Time received,
                     std::function<void(const absl::Status&)> on_done,
                     std::shared_ptr<WorkItem>* item, absl::Duration* pushback);

  const ServiceLimits& limits() const { return limits_; }
  RequestQueue* queue() const { return queue_; }
  const Clock* clock() const { return clock_; }
  ServiceMetrics* metrics() const { return metrics_; }

 private:
  const ServiceLimits limits_;
  RequestQueue* const queue_;
  const Executor* const executor_;
  ServiceMetrics* const metrics_;
  const Clock* const clock_;
  ResidentStore* const residents_;
  const std::string instance_id_;
  std::atomic<bool> draining_{false};
  bool deterministic_by_default_ = false;
};

// The status of a call refused because the server is draining.
absl::Status DrainingError(absl::string_view what);

// Fills a response's timing and backend fields from an executor's report.
void FillTiming(const ExecutionReport& report, absl::Duration total, v1::GemmResponse* response);
// GemmResponse.reproducibility of a deterministic request from its report.
void FillReproducibility(const ExecutionReport& report, v1::GemmResponse* response);

}  // namespace gemm

#endif  // GEMM_SERVICE_GEMM_SERVICE_H_
