// The gemm.v1 GemmService on gRPC's callback API. Handlers never block on
// compute: they validate, admit into the queue and return; the executor's
// completion finishes the call.
#ifndef GEMM_SERVICE_RPC_GEMM_SERVICE_H_
#define GEMM_SERVICE_RPC_GEMM_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gemm/v1/gemm.grpc.pb.h"
#include "service/base/clock.h"
#include "service/base/limits.h"
#include "service/exec/executor.h"
#include "service/observe/call_log.h"
#include "service/observe/metrics.h"
#include "service/queue/request_queue.h"
#include "service/rpc/admission.h"
#include "service/rpc/request_validation.h"
#include "service/store/resident_store.h"
#include "service/store/shared_memory_store.h"
#include "service/store/upload_wait.h"

namespace gemm {

// Gemm and GemmStream are raw methods: their messages arrive as bytes and
// are parsed here, so that one that does not parse gets INVALID_ARGUMENT
// saying so (the generated typed handlers answer it with an UNIMPLEMENTED
// that has no message). The other methods are typed.
using GemmServiceBase = v1::GemmService::WithRawCallbackMethod_Gemm<
    v1::GemmService::WithRawCallbackMethod_GemmStream<v1::GemmService::WithCallbackMethod_GetServerInfo<
        v1::GemmService::WithCallbackMethod_RegisterMatrix<v1::GemmService::WithCallbackMethod_ReleaseMatrix<
            v1::GemmService::WithCallbackMethod_BeginUpload<
                v1::GemmService::WithCallbackMethod_RegisterSharedMemory<
                    v1::GemmService::WithCallbackMethod_UnregisterSharedMemory<
                        v1::GemmService::Service>>>>>>>>;

class GemmServiceImpl final : public GemmServiceBase {
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
  void StartDrain() { admission_.StartDrain(); }
  // Whether a request that leaves GemmRequest.deterministic unset runs
  // deterministic (the server's --deterministic_by_default). Set before
  // serving.
  void set_deterministic_by_default(bool on) { admission_.set_deterministic_by_default(on); }
  // Where refused and failed calls are logged (may be null: not logged).
  // Set before the service serves; `log` must outlive it.
  void set_call_log(CallLog* log) { call_log_ = log; }
  // Where same-host clients' shared memory is kept (may be null: the
  // shared-memory calls are UNIMPLEMENTED and Matrix.shared is refused).
  // Set before serving; `store` must outlive the service.
  void set_shared_memory(SharedMemoryStore* store) { admission_.set_shared_memory(store); }
  // Called on the receiving thread right after each request is queued (the
  // server's Batcher::DispatchIfIdle); it may run and answer the request
  // before it returns. Unset: nothing is called. Set before serving.
  void set_on_queued(std::function<void()> on_queued) {
    admission_.set_on_queued(std::move(on_queued));
  }

  // Counts since start, for the drain summary.
  struct CallCounts {
    uint64_t admitted = 0;          // Gemm requests (unary or streamed) queued
    uint64_t finished = 0;          // of those, answered
    uint64_t refused_draining = 0;  // calls refused UNAVAILABLE by the drain
  };
  CallCounts counts() const;
  bool draining() const { return admission_.draining(); }
  // Unary Gemm calls not yet done (their answers not yet sent). Streams are
  // not counted: an open stream may idle for as long as its client likes.
  int active_calls() const { return active_calls_.load(); }
  std::atomic<int> active_calls_{0};

  // `request` is a serialized v1::GemmRequest; `response` gets the
  // serialized v1::GemmResponse.
  grpc::ServerUnaryReactor* Gemm(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;

  // Reads serialized v1::GemmRequests, writes serialized v1::GemmResponses.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GemmStream(
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
  // Same-host shared memory (shared_memory_store.h): the peer must be on
  // loopback or a Unix socket.
  grpc::ServerUnaryReactor* RegisterSharedMemory(
      grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
      v1::RegisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterSharedMemory(
      grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
      v1::UnregisterSharedMemoryResponse* response) override;

  // Reserves an upload's matrix; its bytes arrive through Transfer.Upload
  // (transfer_service.h).
  grpc::ServerUnaryReactor* BeginUpload(grpc::CallbackServerContext* context,
                                        const v1::BeginUploadRequest* request,
                                        v1::RegisterMatrixResponse* response) override;

  // Implementation details follow.
  // Admission::Admit (admission.h) of `request` from `caller`, the caller
  // identity of `context` (the reactor's, looked up once per call). Called
  // from a reaction of `context`'s call, or from the end of its wait for
  // uploads.
  absl::Status Admit(const grpc::CallbackServerContext& context, absl::string_view caller,
                     const v1::GemmRequest& request, v1::GemmResponse* response,
                     absl::Time deadline, absl::Time received,
                     std::function<void(const absl::Status&)> on_done,
                     std::shared_ptr<WorkItem>* item, absl::Duration* pushback,
                     const std::function<void(const std::shared_ptr<WorkItem>&)>& on_item =
                         nullptr);

  // The operands of `request` of `caller` that name unfinished uploads, for
  // a Gemm (unary or streamed) to wait for (none when waiting is off: no
  // resident store, or max_waiting_requests 0).
  std::vector<UploadWait::Operand> UnfinishedUploads(absl::string_view caller,
                                                     const v1::GemmRequest& request) const;
  // A wait of `caller`'s request for `unfinished`, counted among the
  // requests held until it ends; RESOURCE_EXHAUSTED naming
  // max_waiting_requests (with a pushback) when that many wait already.
  // `done` runs once when the wait ends, the count already given back. The
  // wait is not begun: the caller publishes it where a cancellation finds
  // it, then Begin()s (or Cancel()s) it.
  absl::StatusOr<std::shared_ptr<UploadWait>> NewWait(absl::string_view caller,
                                                      std::vector<UploadWait::Operand> unfinished,
                                                      UploadWait::Done done,
                                                      absl::Duration* pushback);
  // Requests held waiting for uploads now.
  int waiting_requests() const { return waiting_.load(); }
  // Releases the operands of `request` marked release_after_use (those
  // already gone are skipped): for a request that ends without reaching
  // its work item's completion, which releases them otherwise.
  void ReleaseAfterUse(absl::string_view caller, const v1::GemmRequest& request);
  ResidentStore* residents() const { return residents_; }

  // One answered call (or streamed request) of `method`: its metrics, and
  // its log line when it failed.
  void Answered(absl::string_view method, absl::string_view caller, const absl::Status& status,
                absl::Time received);

  const ServiceLimits& limits() const { return admission_.parts().limits; }
  RequestQueue* queue() const { return queue_; }
  const Clock* clock() const { return clock_; }
  ServiceMetrics* metrics() const { return metrics_; }

 private:
  // The limits, shared memory and backend features live in the admission.
  SharedMemoryStore* shared_memory() const { return admission_.parts().shared_memory; }
  // What validation needs to know of the executor, fixed for its life.
  const BackendFeatures& features() const { return admission_.parts().features; }

  RequestQueue* const queue_;
  const Executor* const executor_;
  ServiceMetrics* const metrics_;
  const Clock* const clock_;
  ResidentStore* const residents_;
  const std::string instance_id_;
  CallLog* call_log_ = nullptr;
  std::atomic<int> waiting_{0};
  Admission admission_;

  // DrainingError, counted.
  absl::Status RefuseDraining(absl::string_view what);
  // Answers a typed unary call of `method` with `status`, through Answered.
  // RESOURCE_EXHAUSTED is told not to retry: the typed calls' budgets
  // (resident bytes, regions) are not freed by waiting.
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                        absl::string_view method, const absl::Status& status,
                                        absl::Time received);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_RPC_GEMM_SERVICE_H_
