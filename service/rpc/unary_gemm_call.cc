// The unary Gemm call.
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "service/rpc/gemm_calls.h"
#include "service/rpc/gemm_service.h"
#include "service/security/caller_identity.h"
#include "service/store/upload_wait.h"

namespace gemm::rpc {
namespace {

// One unary Gemm call. Owns the parsed request and the response (the work
// item points into both); lives until OnDone.
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(GemmServiceImpl* service, grpc::CallbackServerContext* context,
            const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : service_(service),
        context_(context),
        response_bytes_(response),
        caller_(CallerIdentity(*context)) {
    service->active_calls_.fetch_add(1);
    const absl::Time received = service->clock()->Now();
    arrived_ = absl::Now();
    absl::Duration pushback;
    absl::Status st;
    if (request->Valid()) {
      st = ParseRequest(request, &request_);  // an empty message is a valid, empty buffer
    } else {
      // No message at all: the call ended (cancelled, or its deadline passed)
      // before its request arrived. Not a malformed message of the client.
      constexpr char kNoRequest[] = "the call ended before its request arrived";
      st = absl::Now() > DeadlineOf(*context) ? absl::DeadlineExceededError(kNoRequest)
                                              : absl::CancelledError(kNoRequest);
    }
    if (st.ok()) {
      std::vector<UploadWait::Operand> unfinished = service->UnfinishedUploads(caller_, request_);
      if (!unfinished.empty()) {
        st = Hold(std::move(unfinished), received, &pushback);
        if (st.ok()) return;  // the wait's end admits or answers it
      } else {
        st = AdmitNow(received, arrived_, &pushback);
      }
    }
    if (!st.ok()) {
      if (st.code() == absl::StatusCode::kResourceExhausted && pushback != absl::ZeroDuration())
        SetRetryPushback(context_, pushback);
      Done(st, received);
    }
  }

  void OnCancel() override {
    std::shared_ptr<WorkItem> item;
    std::shared_ptr<UploadWait> wait;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      item = item_;
      wait = wait_;
    }
    if (wait != nullptr) {
      // gRPC cancels a call whose deadline passes, too.
      const bool late = absl::Now() >= DeadlineOf(*context_);
      wait->Cancel(late ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kCancelled,
                   late ? "the request's deadline passed" : "the call was cancelled");
    }
    if (item == nullptr) return;
    item->cancelled.store(true);
    service_->queue()->Cancel(item.get());
  }

  void OnDone() override {
    GemmServiceImpl* service = service_;
    if (ran_) {
      const absl::Time now = absl::Now();
      service->metrics()->RecordRequestStage("respond", now - answering_);
      service->metrics()->RecordRequestStage("total", now - arrived_);
    }
    delete this;
    service->active_calls_.fetch_sub(1);
  }

 private:
  // Validates and queues the request (GemmServiceImpl::Admit); the status
  // to answer with at once when it is refused. The "admit" stage runs from
  // `since`: the call's start, or the end of its wait for uploads.
  absl::Status AdmitNow(absl::Time received, absl::Time since, absl::Duration* pushback) {
    std::shared_ptr<WorkItem> item;
    // Published before the queue has it: once queued, the item may complete
    // and end this call at any moment, so nothing here runs after Admit.
    absl::Status st = service_->Admit(
        *context_, caller_, request_, &response_, DeadlineOf(*context_), received,
        [this, received](const absl::Status& s) { Done(s, received); }, &item, pushback,
        [this, since](const std::shared_ptr<WorkItem>& queued) {
          service_->metrics()->RecordRequestStage("admit", absl::Now() - since);
          absl::MutexLock lock(&mu_);
          item_ = queued;
          // OnCancel ran before the item existed: the queue drops it.
          if (cancelled_) queued->cancelled.store(true);
        });
    if (!st.ok()) {
      absl::MutexLock lock(&mu_);
      item_.reset();
    }
    return st;
  }

  // Holds the request until `unfinished` are complete, then admits it. From
  // here on the request is taken: its release_after_use operands go however
  // it ends.
  absl::Status Hold(std::vector<UploadWait::Operand> unfinished, absl::Time received,
                    absl::Duration* pushback) {
    absl::StatusOr<std::shared_ptr<UploadWait>> made = service_->NewWait(
        caller_, std::move(unfinished),
        [this, received](const absl::Status& s) { Resume(s, received); }, pushback);
    if (!made.ok()) return made.status();
    std::shared_ptr<UploadWait> wait = *std::move(made);
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      wait_ = wait;
      cancelled = cancelled_;
    }
    // Either may end the wait (and so this call) before returning: nothing
    // of this call is touched after it.
    if (cancelled) {
      wait->Cancel(absl::StatusCode::kCancelled, "the call was cancelled");
    } else {
      wait->Begin();
    }
    return absl::OkStatus();
  }

  // The wait ended: admit the request, or answer it with the wait's failure.
  void Resume(const absl::Status& waited, absl::Time received) {
    absl::Status st = waited;
    absl::Duration pushback;
    if (st.ok()) st = AdmitNow(received, absl::Now(), &pushback);
    if (st.ok()) return;  // the item's completion answers it (and releases)
    service_->ReleaseAfterUse(caller_, request_);
    if (st.code() == absl::StatusCode::kResourceExhausted && pushback != absl::ZeroDuration())
      SetRetryPushback(context_, pushback);
    Done(st, received);
  }

  void Done(const absl::Status& status, absl::Time received) {
    // Requests that reached an executor: their responses' time on the way out.
    {
      absl::MutexLock lock(&mu_);
      ran_ = item_ != nullptr && item_->completed();
    }
    answering_ = absl::Now();
    service_->Answered("Gemm", caller_, status, received);
    const grpc::Status answer =
        status.ok() ? SerializeResponse(response_, response_bytes_) : ToGrpcStatus(status);
    if (ran_) service_->metrics()->RecordRequestStage("serialize", absl::Now() - answering_);
    Finish(answer);
  }

  GemmServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_bytes_;
  const std::string caller_;
  v1::GemmRequest request_;
  v1::GemmResponse response_;
  // Real-time stamps for gemm_request_stage_seconds: the call's start, and
  // when its answer began (Done); OnDone follows Done.
  absl::Time arrived_, answering_;
  bool ran_ = false;

  absl::Mutex mu_;
  std::shared_ptr<WorkItem> item_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<UploadWait> wait_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* StartUnaryGemm(GemmServiceImpl* service,
                                         grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) {
  return new UnaryCall(service, context, request, response);
}

}  // namespace gemm::rpc
