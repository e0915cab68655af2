#include "client/gemm_client.h"

#include <deque>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"

namespace gemm {
namespace {

// Spreads calls over every resolved address; with a single address it
// behaves like the default pick_first.
constexpr char kServiceConfig[] = R"({"loadBalancingConfig":[{"round_robin":{}}]})";

absl::Status ValidateOptions(const ClientOptions& o, bool need_target) {
  if (need_target && o.target.empty()) return absl::InvalidArgumentError("target is empty");
  if (o.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("default_timeout must be positive");
  }
  if (o.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be positive, got ", o.max_message_bytes));
  }
  if (o.tls_cert_chain_pem.empty() != o.tls_private_key_pem.empty()) {
    return absl::InvalidArgumentError("tls_cert_chain_pem and tls_private_key_pem go together");
  }
  if (!o.tls && (!o.tls_root_certs_pem.empty() || !o.tls_cert_chain_pem.empty())) {
    return absl::InvalidArgumentError("TLS certificates are set but tls is false");
  }
  if (o.chunk_bytes == 0 || o.chunk_bytes + 4096 > static_cast<uint64_t>(o.max_message_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be in [1, max_message_bytes - 4096], got ", o.chunk_bytes));
  }
  if (o.transfer_channels < 1 || o.transfer_channels > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_channels must be in [1, 64], got ", o.transfer_channels));
  }
  if (absl::Status s = o.http2.Validate(); !s.ok()) return s;
  for (char c : o.bearer_token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError("bearer_token must be printable ASCII without spaces");
    }
  }
  return ValidateRetryPolicy(o.retry);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ClientOptions& o) {
  if (o.credentials) return o.credentials;
  if (!o.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = o.tls_root_certs_pem;
  ssl.pem_cert_chain = o.tls_cert_chain_pem;
  ssl.pem_private_key = o.tls_private_key_pem;
  return grpc::SslCredentials(ssl);
}

}  // namespace

// Runs closures at given times on one thread. Used for the delays between
// asynchronous retries, so that no thread blocks per waiting call.
class Client::RetryTimer {
 public:
  RetryTimer() : thread_([this] { Loop(); }) {}

  // Runs whatever is still scheduled, at once, then joins the thread.
  ~RetryTimer() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    thread_.join();
  }

  void Schedule(absl::Time when, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    tasks_.push(Task{when, next_seq_++, std::move(fn)});
    cv_.Signal();
  }

  // From now on every task runs as soon as it is scheduled.
  void Flush() {
    absl::MutexLock lock(&mu_);
    flush_ = true;
    cv_.Signal();
  }

 private:
  struct Task {
    absl::Time when;
    uint64_t seq;
    std::function<void()> fn;
    // Earliest first, then in scheduling order.
    bool operator<(const Task& o) const {
      return when != o.when ? when > o.when : seq > o.seq;
    }
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (tasks_.empty()) {
        if (stop_) return;
        cv_.Wait(&mu_);
        continue;
      }
      const absl::Time when = tasks_.top().when;
      if (!flush_ && !stop_ && absl::Now() < when) {
        cv_.WaitWithDeadline(&mu_, when);
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Task&>(tasks_.top()).fn);
      tasks_.pop();
      mu_.Unlock();
      fn();
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::priority_queue<Task> tasks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool flush_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One asynchronous unary Gemm across its attempts.
class Client::AsyncCall {
 public:
  AsyncCall(std::shared_ptr<const v1::GemmRequest> request, const CallOptions& options,
            absl::Time deadline, GemmCallback done)
      : request(std::move(request)), options(options), deadline(deadline), done(std::move(done)) {}

  // Cancels the running attempt, or the next one before it starts.
  void Cancel() {
    absl::MutexLock lock(&mu);
    cancelled = true;
    if (ctx != nullptr) ctx->TryCancel();
  }

  const std::shared_ptr<const v1::GemmRequest> request;
  const CallOptions options;
  const absl::Time deadline;
  const GemmCallback done;
  // Touched by one attempt at a time; attempts never overlap.
  int attempts = 0;
  v1::GemmResponse response;

  absl::Mutex mu;
  std::unique_ptr<grpc::ClientContext> ctx ABSL_GUARDED_BY(mu);
  bool cancelled ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (absl::Status s = ValidateOptions(options, /*need_target=*/true); !s.ok()) return s;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetServiceConfigJSON(kServiceConfig);
  if (!options.bearer_token.empty()) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (const auto& [name, value] : options.http2.ChannelArgs()) args.SetInt(name, value);
  std::shared_ptr<grpc::ChannelCredentials> creds = ChannelCredentialsFor(options);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.target, creds, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to ", options.target));
  }
  // Transfer channels: each its own connection (distinct arguments and a
  // local subchannel pool keep gRPC from sharing one between them).
  auto make_transfer_channel = [target = options.target, creds, args](int i) mutable {
    grpc::ChannelArguments mine = args;
    mine.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    mine.SetInt("gemm.transfer_channel", i);
    return grpc::CreateCustomChannel(target, creds, mine);
  };
  return std::unique_ptr<Client>(new Client(std::move(channel), options, make_transfer_channel));
}

absl::StatusOr<std::unique_ptr<Client>> Client::CreateWithChannel(
    std::shared_ptr<grpc::Channel> channel, const ClientOptions& options) {
  if (channel == nullptr) return absl::InvalidArgumentError("channel is null");
  if (absl::Status s = ValidateOptions(options, /*need_target=*/false); !s.ok()) return s;
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options,
               std::function<std::shared_ptr<grpc::Channel>(int)> make_transfer_channel)
    : options_(options),
      channel_(std::move(channel)),
      make_transfer_channel_(std::move(make_transfer_channel)),
      stub_(v1::GemmService::NewStub(channel_)),
      timer_(std::make_unique<RetryTimer>()) {}

Client::~Client() {
  std::vector<std::shared_ptr<AsyncCall>> live;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [ptr, weak] : calls_) {
      if (std::shared_ptr<AsyncCall> call = weak.lock()) live.push_back(std::move(call));
    }
  }
  // Cancel first: a pending retry that the flush starts must find its call
  // cancelled, or it would run a fresh attempt.
  for (const auto& call : live) call->Cancel();
  timer_->Flush();
  live.clear();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](absl::flat_hash_map<AsyncCall*, std::weak_ptr<AsyncCall>>* calls) {
          return calls->empty();
        },
        &calls_));
  }
  timer_.reset();
}

absl::Time Client::DeadlineFor(const CallOptions& options) const {
  if (options.deadline.has_value()) return *options.deadline;
  return absl::Now() + options.timeout.value_or(options_.default_timeout);
}

void Client::PrepareContext(grpc::ClientContext* ctx, const CallOptions& options,
                            absl::Time deadline) const {
  if (deadline != absl::InfiniteFuture()) ctx->set_deadline(absl::ToChronoTime(deadline));
  ctx->set_wait_for_ready(options.wait_for_ready);
  if (!options_.bearer_token.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
}

std::optional<absl::Duration> Client::RetryDelay(const CallOptions& options, int attempts_made,
                                                 const absl::Status& status,
                                                 const grpc::ClientContext& ctx,
                                                 absl::Time deadline) {
  if (!options.retry) return std::nullopt;
  const Pushback pushback = PushbackFromTrailers(ctx.GetServerTrailingMetadata());
  double uniform;
  {
    absl::MutexLock lock(&mu_);
    uniform = absl::Uniform(bitgen_, 0.0, 1.0);
  }
  return NextRetryDelay(options_.retry, attempts_made, status, pushback, absl::Now(), deadline,
                        uniform);
}

absl::Status Client::CallWithRetry(
    const CallOptions& options,
    const std::function<grpc::Status(grpc::ClientContext*)>& attempt) {
  const absl::Time deadline = DeadlineFor(options);
  for (int attempts = 1;; ++attempts) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options, deadline);
    const absl::Status status = FromGrpcStatus(attempt(&ctx));
    if (status.ok()) return status;
    const std::optional<absl::Duration> delay =
        RetryDelay(options, attempts, status, ctx, deadline);
    if (!delay.has_value()) return status;
    absl::SleepFor(*delay);
  }
}

GemmResult Client::Gemm(const v1::GemmRequest& request, const CallOptions& options) {
  if (NeedsChunks(request)) return GemmChunked(request, options);
  v1::GemmResponse response;
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub_->Gemm(ctx, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo(const CallOptions& options) {
  v1::ServerInfo info;
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub_->GetServerInfo(ctx, v1::GetServerInfoRequest(), &info);
  });
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<ResidentHandle> Client::RegisterMatrix(const MatrixView& matrix,
                                                      absl::string_view label,
                                                      const CallOptions& options) {
  if (absl::Status s = matrix.Validate("matrix"); !s.ok()) return s;
  const uint64_t bytes = matrix.ref().bytes();
  if ((options_.chunked_threshold_bytes != 0 && bytes >= options_.chunked_threshold_bytes) ||
      bytes + 4096 > static_cast<uint64_t>(options_.max_message_bytes))
    return UploadMatrix(matrix, /*transient=*/false, label, options);
  v1::RegisterMatrixRequest request;
  request.set_dtype(ToProto(matrix.dtype()));
  request.set_rows(matrix.rows());
  request.set_cols(matrix.cols());
  request.set_layout(ToProto(matrix.layout()));
  request.mutable_data()->assign(static_cast<const char*>(matrix.data()), matrix.ref().bytes());
  if (!label.empty()) request.set_label(std::string(label));
  v1::RegisterMatrixResponse response;
  absl::Status status = CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub_->RegisterMatrix(ctx, request, &response);
  });
  if (!status.ok()) return status;
  return ResidentHandle{response.handle(), matrix.rows(), matrix.cols(), matrix.layout(),
                        matrix.dtype(), response.bytes()};
}

absl::Status Client::ReleaseMatrix(const ResidentHandle& matrix, const CallOptions& options) {
  return ReleaseMatrix(matrix.handle, options);
}

absl::Status Client::ReleaseMatrix(const std::string& handle, const CallOptions& options) {
  v1::ReleaseMatrixRequest request;
  request.set_handle(handle);
  v1::ReleaseMatrixResponse response;
  return CallWithRetry(options, [&](grpc::ClientContext* ctx) {
    return stub_->ReleaseMatrix(ctx, request, &response);
  });
}

void Client::GemmAsync(std::shared_ptr<const v1::GemmRequest> request,
                       const CallOptions& options, GemmCallback done) {
  auto call = std::make_shared<AsyncCall>(std::move(request), options, DeadlineFor(options),
                                          std::move(done));
  Register(call);
  StartAttempt(call);
}

void Client::GemmAsync(v1::GemmRequest request, const CallOptions& options, GemmCallback done) {
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
  grpc::ClientContext* ctx;
  {
    absl::MutexLock lock(&call->mu);
    if (call->cancelled) {
      ctx = nullptr;
    } else {
      call->ctx = std::make_unique<grpc::ClientContext>();
      PrepareContext(call->ctx.get(), call->options, call->deadline);
      ctx = call->ctx.get();
    }
  }
  if (ctx == nullptr) {
    call->done(absl::CancelledError("client is shutting down"));
    Unregister(call.get());
    return;
  }
  ++call->attempts;
  call->response.Clear();
  stub_->async()->Gemm(ctx, call->request.get(), &call->response,
                       [this, call](grpc::Status status) { OnAttemptDone(call, status); });
}

void Client::OnAttemptDone(const std::shared_ptr<AsyncCall>& call, const grpc::Status& status) {
  absl::Status result = FromGrpcStatus(status);
  if (!result.ok()) {
    std::optional<absl::Duration> delay;
    {
      absl::MutexLock lock(&call->mu);
      delay = RetryDelay(call->options, call->attempts, result, *call->ctx, call->deadline);
    }
    if (delay.has_value()) {
      // Always through the timer, even for a zero delay, so the next attempt
      // (which replaces this attempt's context) starts outside this callback.
      timer_->Schedule(absl::Now() + *delay, [this, call] { StartAttempt(call); });
      return;
    }
    call->done(std::move(result));
  } else {
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
  auto ctx = std::make_unique<grpc::ClientContext>();
  PrepareContext(ctx.get(), options, DeadlineFor(options));
  return std::unique_ptr<GemmStreamSession>(new GemmStreamSession(stub_.get(), std::move(ctx)));
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
