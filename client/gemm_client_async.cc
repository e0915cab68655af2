// Client's asynchronous unary calls (GemmAsync, GemmFuture and their
// retried attempts) and GemmStreamSession.
#include "client/gemm_client.h"
#include "client/gemm_client_internal.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <deque>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"


namespace gemm {

using client_internal::FailsOver;
using client_internal::HandlesOf;

void Client::GemmAsync(std::shared_ptr<const v1::GemmRequest> request,
                       const CallOptions& options, GemmCallback done) {
  if (options_.deterministic && !request->has_deterministic()) {
    auto with = std::make_shared<v1::GemmRequest>(*request);
    with->set_deterministic(*options_.deterministic);
    request = std::move(with);
  }
  auto call = std::make_shared<AsyncCall>(std::move(request), options, DeadlineFor(options),
                                          std::move(done));
  call->handles = HandlesOf(*call->request);
  Register(call);
  StartAttempt(call);
}

void Client::GemmAsync(v1::GemmRequest request, const CallOptions& options, GemmCallback done) {
  if (options_.deterministic && !request.has_deterministic())
    request.set_deterministic(*options_.deterministic);
  GemmAsync(std::make_shared<const v1::GemmRequest>(std::move(request)), options,
            std::move(done));
}

std::future<GemmResult> Client::GemmFuture(std::shared_ptr<const v1::GemmRequest> request,
                                           const CallOptions& options) {
  auto promise = std::make_shared<std::promise<GemmResult>>();
  std::future<GemmResult> future = promise->get_future();
  GemmAsync(std::move(request), options,
            [promise](GemmResult result) { promise->set_value(std::move(result)); });
  return future;
}

std::future<GemmResult> Client::GemmFuture(v1::GemmRequest request, const CallOptions& options) {
  return GemmFuture(std::make_shared<const v1::GemmRequest>(std::move(request)), options);
}

void Client::Register(const std::shared_ptr<AsyncCall>& call) {
  absl::MutexLock lock(&mu_);
  calls_.emplace(call.get(), call);
}

void Client::Unregister(AsyncCall* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

void Client::StartAttempt(const std::shared_ptr<AsyncCall>& call) {
  // Each attempt picks its replica: the handles' owner, else by policy,
  // away from the replica that just failed.
  Route route;
  absl::Status routed;
  if (call->handles.empty()) {
    absl::StatusOr<std::shared_ptr<Replica>> r = PickReplica(call->route.replica.get());
    routed = r.status();
    if (r.ok()) {
      route.replica = *r;
      route.key = options_.affinity_header ? NewAffinityKey() : "";
    }
  } else {
    CallOptions within = call->options;
    within.deadline = call->deadline;
    absl::StatusOr<Route> r = RouteForHandle(call->handles[0], within);
    routed = r.status();
    if (r.ok()) route = *std::move(r);
  }
  grpc::ClientContext* ctx = nullptr;
  bool cancelled;
  {
    absl::MutexLock lock(&call->mu);
    cancelled = call->cancelled;
    if (!cancelled && routed.ok()) {
      call->ctx = std::make_unique<grpc::ClientContext>();
      PrepareContext(call->ctx.get(), call->options, call->deadline, route.key);
      ctx = call->ctx.get();
    }
  }
  if (cancelled || !routed.ok()) {
    call->done(cancelled ? absl::CancelledError("client is shutting down") : routed);
    Unregister(call.get());
    return;
  }
  call->route = route;
  ++call->attempts;
  call->response.Clear();
  route.replica->requests.fetch_add(1);
  route.replica->outstanding.fetch_add(1);
  route.replica->stub->async()->Gemm(
      ctx, call->request.get(), &call->response,
      [this, call](grpc::Status status) { OnAttemptDone(call, status); });
}

void Client::OnAttemptDone(const std::shared_ptr<AsyncCall>& call, const grpc::Status& status) {
  Replica& replica = *call->route.replica;
  replica.outstanding.fetch_sub(1);
  absl::Status result = FromGrpcStatus(status);
  if (!result.ok()) {
    if (FailsOver(result)) {
      replica.MarkDown(absl::Now() + options_.replica_backoff);
      if (call->handles.empty()) replica.failed_over.fetch_add(1);
    }
    std::optional<absl::Duration> delay;
    {
      absl::MutexLock lock(&call->mu);
      // gRPC's bare CANCELLED from a stopping server: retryable on another
      // replica (the call never reached a handler).
      const bool elsewhere =
          FailsOver(result) && call->handles.empty() && ActiveReplicas() >= 2;
      delay = RetryDelay(call->options, call->attempts,
                         elsewhere ? absl::UnavailableError(result.message()) : result,
                         *call->ctx, call->deadline);
    }
    if (delay.has_value()) {
      // Another replica is up: go there at once.
      if (FailsOver(result) && call->handles.empty() && UsableReplicas(&replica) > 0)
        delay = absl::ZeroDuration();
      // Always through the timer, even for a zero delay, so the next attempt
      // (which replaces this attempt's context) starts outside this callback.
      timer_->Schedule(absl::Now() + *delay, [this, call] { StartAttempt(call); });
      return;
    }
    call->done(std::move(result));
  } else {
    if (call->request->keep_results())
      for (const v1::GemmResult& r : call->response.results())
        if (!r.handle().empty()) NoteHandle(call->route, r.handle());
    call->done(std::move(call->response));
  }
  Unregister(call.get());
}

// ---------------------------------------------------------------------------
// GemmStreamSession

// Writes go out one at a time from a queue; a hold keeps the stream from
// finishing while Send() may still start writes from outside the reactions,
// and is released once no more writes will start (WritesDone sent, or the
// stream broke). The reactor keeps itself alive until OnDone has returned,
// so its last owner may be OnDone's thread; destroyed() tells the session
// when that destruction, the ClientContext's included, is over.
class GemmStreamSession::Reactor
    : public grpc::ClientBidiReactor<v1::GemmRequest, v1::GemmResponse> {
 public:
  explicit Reactor(std::unique_ptr<grpc::ClientContext> ctx) : ctx_(std::move(ctx)) {}

  std::shared_ptr<absl::Notification> destroyed() const { return destroyed_.notification; }

  void Start(const std::shared_ptr<Reactor>& self, v1::GemmService::Stub* stub) {
    self_ = self;
    stub->async()->GemmStream(ctx_.get(), this);
    AddHold();
    StartRead(&incoming_);
    StartCall();
  }

  absl::Status Send(v1::GemmRequest request, GemmCallback done) {
    bool start_write = false;
    {
      absl::MutexLock lock(&mu_);
      if (send_closed_) return absl::FailedPreconditionError("the stream is closed for sending");
      if (request.request_id().empty()) {
        do {
          request.set_request_id(absl::StrCat("stream-", next_id_++));
        } while (pending_.contains(request.request_id()));
      } else if (pending_.contains(request.request_id())) {
        return absl::InvalidArgumentError(
            absl::StrCat("request_id \"", request.request_id(), "\" is already pending"));
      }
      pending_.emplace(request.request_id(), std::move(done));
      queue_.push_back(std::move(request));
      if (!writing_) start_write = NextWriteLocked();
    }
    if (start_write) StartWrite(&outgoing_);
    return absl::OkStatus();
  }

  void CloseSend() {
    bool writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      send_closed_ = true;
      if (!writing_) writes_done = NextWritesDoneLocked();
    }
    if (writes_done) StartWritesDone();
  }

  void Cancel() {
    {
      absl::MutexLock lock(&mu_);
      send_closed_ = true;
    }
    ctx_->TryCancel();
  }

  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return final_status_;
  }

  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

  size_t pending() {
    absl::MutexLock lock(&mu_);
    return pending_.size();
  }

  void OnWriteDone(bool ok) override { AfterWrite(ok); }
  void OnWritesDoneDone(bool ok) override { AfterWrite(ok); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool release;
      {
        absl::MutexLock lock(&mu_);
        broken_ = true;
        send_closed_ = true;
        queue_.clear();
        release = MaybeReleaseHoldLocked();
      }
      if (release) RemoveHold();
      return;
    }
    v1::GemmResponse response = std::move(incoming_);
    incoming_.Clear();
    StartRead(&incoming_);
    GemmCallback done;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(response.request_id());
      if (it == pending_.end()) return;  // Not ours to answer; nothing waits for it.
      done = std::move(it->second);
      pending_.erase(it);
    }
    if (response.status_code() != 0) {
      done(StatusFromCode(response.status_code(), response.status_message()));
    } else {
      done(std::move(response));
    }
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<Reactor> self = std::move(self_);
    const absl::Status final_status = FromGrpcStatus(status);
    absl::flat_hash_map<std::string, GemmCallback> unanswered;
    {
      absl::MutexLock lock(&mu_);
      unanswered.swap(pending_);
    }
    for (auto& [id, done] : unanswered) {
      done(final_status.ok() ? absl::UnknownError(absl::StrCat(
                                   "the stream ended without answering request ", id))
                             : final_status);
    }
    absl::MutexLock lock(&mu_);
    final_status_ = final_status;
    done_ = true;
  }

 private:
  void AfterWrite(bool ok) {
    bool start_write = false, writes_done = false, release = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        broken_ = true;
        send_closed_ = true;
        queue_.clear();
      }
      start_write = NextWriteLocked();
      if (!start_write) writes_done = NextWritesDoneLocked();
      release = MaybeReleaseHoldLocked();
    }
    if (start_write) StartWrite(&outgoing_);
    if (writes_done) StartWritesDone();
    if (release) RemoveHold();
  }

  // Moves the next queued request to outgoing_ if one waits and the stream
  // is whole; the caller then starts the write.
  bool NextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || broken_ || queue_.empty()) return false;
    outgoing_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    return true;
  }

  bool NextWritesDoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || broken_ || !send_closed_ || writes_done_started_ || !queue_.empty()) {
      return false;
    }
    writes_done_started_ = true;
    writing_ = true;
    return true;
  }

  // True once, when nothing more will be written from outside a reaction.
  bool MaybeReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (hold_released_ || writing_ || !(broken_ || writes_done_started_)) return false;
    hold_released_ = true;
    return true;
  }

  // Declared first, so destroyed last: it notifies after ctx_ is gone.
  struct NotifyOnDestruction {
    std::shared_ptr<absl::Notification> notification = std::make_shared<absl::Notification>();
    ~NotifyOnDestruction() { notification->Notify(); }
  };
  NotifyOnDestruction destroyed_;
  const std::unique_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<Reactor> self_;
  v1::GemmResponse incoming_;  // Owned by the single outstanding read.
  v1::GemmRequest outgoing_;   // Owned by the single outstanding write.

  absl::Mutex mu_;
  std::deque<v1::GemmRequest> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, GemmCallback> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool send_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_started_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<GemmStreamSession> Client::OpenStream(const CallOptions& options) {
  // A stream is one request's worth of affinity: every request on it goes
  // to the replica picked here. With none (a "dns:" name that resolved to
  // nothing), the first replica ever known, or a channel to the target.
  absl::StatusOr<std::shared_ptr<Replica>> replica = PickReplica(nullptr);
  v1::GemmService::Stub* stub = nullptr;
  if (replica.ok()) {
    stub = (*replica)->stub.get();
  } else {
    absl::MutexLock lock(&mu_);
    if (fallback_stub_ == nullptr) fallback_stub_ = v1::GemmService::NewStub(channel_);
    stub = fallback_stub_.get();
  }
  auto ctx = std::make_unique<grpc::ClientContext>();
  PrepareContext(ctx.get(), options, DeadlineFor(options),
                 options_.affinity_header ? NewAffinityKey() : "");
  return std::unique_ptr<GemmStreamSession>(new GemmStreamSession(stub, std::move(ctx)));
}

GemmStreamSession::GemmStreamSession(v1::GemmService::Stub* stub,
                                     std::unique_ptr<grpc::ClientContext> ctx)
    : reactor_(std::make_shared<Reactor>(std::move(ctx))) {
  reactor_->Start(reactor_, stub);
}

GemmStreamSession::~GemmStreamSession() {
  if (!reactor_->done()) reactor_->Cancel();
  reactor_->Wait().IgnoreError();
  // OnDone may still be returning on gRPC's thread, holding the last
  // reference: wait until the reactor and its ClientContext are destroyed,
  // so that nothing of this call outlives the session (the Client, its stub
  // and channel may go right after). NOTES: without this wait, a TSan run
  // of DroppingAnOpenStreamCancelsIt aborted once on an absl::Cord refcount
  // inside gRPC's teardown (2026-12-02).
  const std::shared_ptr<absl::Notification> destroyed = reactor_->destroyed();
  reactor_.reset();
  destroyed->WaitForNotification();
}

absl::Status GemmStreamSession::Send(v1::GemmRequest request, GemmCallback done) {
  return reactor_->Send(std::move(request), std::move(done));
}

absl::StatusOr<std::future<GemmResult>> GemmStreamSession::Send(v1::GemmRequest request) {
  auto promise = std::make_shared<std::promise<GemmResult>>();
  std::future<GemmResult> future = promise->get_future();
  absl::Status status = reactor_->Send(
      std::move(request), [promise](GemmResult result) { promise->set_value(std::move(result)); });
  if (!status.ok()) return status;
  return future;
}

void GemmStreamSession::CloseSend() { reactor_->CloseSend(); }
void GemmStreamSession::Cancel() { reactor_->Cancel(); }
absl::Status GemmStreamSession::Finish() { return reactor_->Wait(); }
size_t GemmStreamSession::pending() const { return reactor_->pending(); }

}  // namespace gemm
