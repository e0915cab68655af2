#include "service/rpc/gemm_service.h"

// GemmServiceImpl: what every RPC shares. Each RPC family is in its own
// file of service/rpc/, admission in admission.cc.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "service/rpc/gemm_calls.h"
#include "service/rpc/request_validation.h"
#include "service/security/caller_identity.h"
#include "service/store/upload_wait.h"

namespace gemm {
namespace {

// What validation needs to know of the executor.
BackendFeatures FeaturesOf(const Executor& executor) {
  BackendFeatures f;
  f.backend = executor.info().backend;
  const Fp8Support fp8 = executor.fp8_support();
  f.fp8 = fp8.runs;
  f.fp8_quantize_matrices = fp8.quantizes_matrices;
  f.fp8_quantize_partner = fp8.quantizes_partner;
  f.fp8_block_scales_column_major_output = fp8.block_scales_column_major_output;
  return f;
}

}  // namespace

GemmServiceImpl::GemmServiceImpl(const ServiceLimits& limits, RequestQueue* queue,
                                 const Executor* executor, ServiceMetrics* metrics,
                                 const Clock* clock, ResidentStore* residents,
                                 std::string instance_id)
    : queue_(queue),
      executor_(executor),
      metrics_(metrics),
      clock_(clock),
      residents_(residents),
      instance_id_(std::move(instance_id)),
      admission_(Admission::Parts{limits, queue, metrics, clock, residents, nullptr,
                                  FeaturesOf(*executor)}) {}

absl::Status GemmServiceImpl::RefuseDraining(absl::string_view what) {
  return admission_.RefuseDraining(what);
}

GemmServiceImpl::CallCounts GemmServiceImpl::counts() const {
  CallCounts c;
  c.admitted = admission_.admitted();
  c.finished = admission_.finished();
  c.refused_draining = admission_.refused_draining();
  return c;
}

grpc::ServerUnaryReactor* GemmServiceImpl::FinishUnary(grpc::CallbackServerContext* context,
                                                       absl::string_view method,
                                                       const absl::Status& status,
                                                       absl::Time received) {
  // Over a budget, waiting does not help: tell the client not to retry.
  if (status.code() == absl::StatusCode::kResourceExhausted)
    SetRetryPushback(context, absl::Milliseconds(-1));  // negative: do not retry
  Answered(method, status.ok() ? "" : CallerIdentity(*context), status, received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

void GemmServiceImpl::Answered(absl::string_view method, absl::string_view caller,
                               const absl::Status& status, absl::Time received) {
  metrics_->RecordRequest(std::string(method), static_cast<int>(status.code()),
                          clock_->Now() - received);
  const bool gemm = method == "Gemm" || method == "GemmStream";
  if (gemm || status.code() == absl::StatusCode::kResourceExhausted) {
    // "" without tenants: nothing is recorded per tenant then.
    const std::string tenant = queue_->TenantOf(caller);
    if (gemm) metrics_->RecordTenantRequest(tenant, static_cast<int>(status.code()));
    if (status.code() == absl::StatusCode::kResourceExhausted) {
      const auto limit = status.GetPayload(kLimitPayloadUrl);
      metrics_->RecordTenantRejection(tenant, limit.has_value() ? std::string(*limit) : "");
    }
  }
  if (!status.ok() && call_log_ != nullptr) call_log_->Failed(method, caller, status);
}

std::vector<UploadWait::Operand> GemmServiceImpl::UnfinishedUploads(
    absl::string_view caller, const v1::GemmRequest& request) const {
  if (residents_ == nullptr || limits().max_waiting_requests == 0) return {};
  return UploadWait::Unfinished(*residents_, caller, request);
}

absl::StatusOr<std::shared_ptr<UploadWait>> GemmServiceImpl::NewWait(
    absl::string_view caller, std::vector<UploadWait::Operand> unfinished,
    UploadWait::Done done, absl::Duration* pushback) {
  const int limit = static_cast<int>(limits().max_waiting_requests);
  int now = waiting_.load();
  do {
    if (now >= limit) {
      *pushback = queue_->RetryHint();
      return WithLimit(
          absl::ResourceExhaustedError(absl::StrCat(
              "max_waiting_requests: ", now, " requests already wait for their uploads (the "
              "limit is ", limit, "); send this one once its uploads are complete")),
          "max_waiting_requests");
    }
  } while (!waiting_.compare_exchange_weak(now, now + 1));
  return std::make_shared<UploadWait>(
      residents_, std::string(caller), std::move(unfinished),
      [this, done = std::move(done)](const absl::Status& s) {
        waiting_.fetch_sub(1);
        done(s);
      });
}

void GemmServiceImpl::ReleaseAfterUse(absl::string_view caller, const v1::GemmRequest& request) {
  ReleaseHandles(residents_, caller, HandlesToRelease(request));
}

absl::Status GemmServiceImpl::Admit(const grpc::CallbackServerContext& context,
                                    absl::string_view caller, const v1::GemmRequest& request, v1::GemmResponse* response,
                                    absl::Time deadline, absl::Time received,
                                    std::function<void(const absl::Status&)> on_done,
                                    std::shared_ptr<WorkItem>* item, absl::Duration* pushback,
                                    const std::function<void(const std::shared_ptr<WorkItem>&)>&
                                        on_item) {
  Admission::Call call;
  call.caller = std::string(caller);
  if (call.caller.empty()) call.peer = context.peer();
  call.deadline = deadline;
  call.received = received;
  return admission_.Admit(call, request, response, std::move(on_done), item, pushback, on_item);
}

grpc::ServerUnaryReactor* GemmServiceImpl::Gemm(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return rpc::StartUnaryGemm(this, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GemmServiceImpl::GemmStream(
    grpc::CallbackServerContext* context) {
  return rpc::StartGemmStream(this, context);
}
}  // namespace gemm
