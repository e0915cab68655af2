#include "service/gemm_service.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/proto_enums.h"
#include "service/caller_identity.h"
#include "common/grpc_status.h"
#include "service/request_validation.h"
#include "service/transfer_service.h"
#include "service/upload_wait.h"
#include "service/version.h"

namespace gemm {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto d = context.deadline();
  if (d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365))
    return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// The raw methods (gemm_service.h says why) parse and serialize here, the
// same way gRPC's generated handlers would. gRPC owns the request's bytes
// until the call ends; Deserialize clears them once parsed, as the generated
// handler does, so a large request is held once, not twice.
absl::Status ParseRequest(const grpc::ByteBuffer* bytes, v1::GemmRequest* request) {
  grpc::ByteBuffer* ours = const_cast<grpc::ByteBuffer*>(bytes);
  if (!grpc::SerializationTraits<v1::GemmRequest>::Deserialize(ours, request).ok())
    return absl::InvalidArgumentError(
        "the message did not parse as a gemm.v1.GemmRequest (corrupt or not that message)");
  return absl::OkStatus();
}

grpc::Status SerializeResponse(const v1::GemmResponse& response, grpc::ByteBuffer* bytes) {
  bool own_buffer;
  return grpc::SerializationTraits<v1::GemmResponse>::Serialize(response, bytes, &own_buffer);
}

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

uint64_t Nanos(absl::Duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
}

// Moves each result of `response` into `store` as a transient resident
// matrix of `caller` (no copy) and leaves its handle in the result. On
// failure nothing stays registered.
absl::Status KeepResults(ResidentStore* store, const std::string& caller,
                         v1::GemmResponse* response) {
  std::vector<std::string> kept;
  for (v1::GemmResult& r : *response->mutable_results()) {
    auto dtype = FromProto(r.dtype());
    auto layout = FromProto(r.layout());
    MatrixRef shape{nullptr, r.rows(), r.cols(), layout.ok() ? *layout : Layout::kRowMajor,
                    dtype.ok() ? *dtype : DType::kFp32};
    auto registered =
        store->Adopt(caller, AdoptHostResident(shape, std::move(*r.mutable_data())), true);
    r.clear_data();
    if (!registered.ok()) {
      for (const std::string& h : kept) store->Release(caller, h).IgnoreError();
      for (v1::GemmResult& undo : *response->mutable_results()) undo.clear_handle();
      return absl::Status(registered.status().code(),
                          absl::StrCat("keep_results: ", registered.status().message()));
    }
    r.set_handle(registered->handle);
    kept.push_back(registered->handle);
  }
  return absl::OkStatus();
}

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
        *context_, request_, &response_, DeadlineOf(*context_), received,
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

// One GemmStream: reads requests, admits each, and writes responses in
// completion order. Reading pauses while max_stream_inflight requests are
// unanswered, so a slow reader holds back only its own stream.
//
// A message that does not parse ends the stream: what follows it cannot be
// trusted to be the client's next request. Reading stops, the requests
// already admitted are answered, and the stream then ends INVALID_ARGUMENT.
class StreamCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamCall(GemmServiceImpl* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context), caller_(CallerIdentity(*context)) {
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    const absl::Time arrived = absl::Now();
    auto pending = std::make_unique<Pending>();
    absl::Status parsed =
        ok ? ParseRequest(&incoming_, &pending->request) : absl::OkStatus();
    if (!ok || !parsed.ok()) {
      if (!parsed.ok()) service_->Answered("GemmStream", caller_, parsed, service_->clock()->Now());
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        unparsable_ = parsed;
      }
      Advance();
      return;
    }
    Pending* p = pending.get();
    const uint64_t id = next_id_++;
    bool duplicate = false;
    {
      absl::MutexLock lock(&mu_);
      pending_[id] = std::move(pending);
      const std::string& request_id = p->request.request_id();
      if (!request_id.empty()) {
        // Answers are matched to requests by id alone, so two in flight
        // under one id could not be told apart: the second is refused.
        duplicate = !ids_in_flight_.insert(request_id).second;
        if (!duplicate) p->id_in_flight = request_id;
      }
    }
    absl::Status st;
    const absl::Time received = service_->clock()->Now();
    if (p->request.request_id().empty()) {
      st = absl::InvalidArgumentError("request_id: required on GemmStream");
    } else if (duplicate) {
      st = absl::InvalidArgumentError(
          "request_id: already in flight on this stream (an id can be used again once its "
          "answer has been sent)");
    } else {
      std::vector<UploadWait::Operand> unfinished =
          service_->UnfinishedUploads(caller_, p->request);
      st = unfinished.empty() ? AdmitNow(id, p, received, arrived)
                              : Hold(id, p, std::move(unfinished), received);
    }
    if (!st.ok()) OnRequestDone(id, p, st, received);
    {
      absl::MutexLock lock(&mu_);
      read_wanted_ = true;
    }
    Advance();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) broken_ = true;  // the client is gone: nothing more can be sent
      if (!ready_.empty()) ready_.pop_front();
    }
    Advance();
  }

  void OnCancel() override {
    std::vector<std::shared_ptr<WorkItem>> items;
    std::vector<std::shared_ptr<UploadWait>> waits;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      for (auto& [id, p] : pending_) {
        if (p->item) items.push_back(p->item);
        if (p->wait) waits.push_back(p->wait);
      }
    }
    for (auto& item : items) {
      item->cancelled.store(true);
      service_->queue()->Cancel(item.get());
    }
    // gRPC cancels a stream whose deadline passes, too.
    const bool late = absl::Now() >= DeadlineOf(*context_);
    for (auto& wait : waits)
      wait->Cancel(late ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kCancelled,
                   late ? "the stream's deadline passed" : "the stream was cancelled");
    Advance();
  }

  void OnDone() override { delete this; }

 private:
  struct Pending {
    v1::GemmRequest request;
    v1::GemmResponse response;
    std::shared_ptr<WorkItem> item;
    // Set while the request waits for uploads it names (Hold).
    std::shared_ptr<UploadWait> wait;
    // The request_id this request holds in ids_in_flight_ (empty if none).
    std::string id_in_flight;
  };

  // Validates and queues request `id` (GemmServiceImpl::Admit); the status
  // to answer it with at once when it is refused. Its item is published
  // under the lock (OnCancel reads it), before the queue may run it.
  absl::Status AdmitNow(uint64_t id, Pending* p, absl::Time received, absl::Time since) {
    absl::Duration pushback;  // a stream has no per-request trailers to carry it
    std::shared_ptr<WorkItem> item;
    absl::Status st = service_->Admit(
        *context_, p->request, &p->response, DeadlineOf(*context_), received,
        [this, id, p, received](const absl::Status& s) { OnRequestDone(id, p, s, received); },
        &item, &pushback, [this, p, since](const std::shared_ptr<WorkItem>& queued) {
          service_->metrics()->RecordRequestStage("admit", absl::Now() - since);
          absl::MutexLock lock(&mu_);
          p->item = queued;
          if (broken_) queued->cancelled.store(true);
        });
    return st;
  }

  // Holds request `id` until the uploads it names complete, as the unary
  // Gemm does (UnaryCall::Hold): the stream keeps reading and answering
  // other requests meanwhile, and the held one counts against
  // max_stream_inflight and max_waiting_requests. From here on it is taken:
  // its release_after_use operands go however it ends.
  absl::Status Hold(uint64_t id, Pending* p, std::vector<UploadWait::Operand> unfinished,
                    absl::Time received) {
    absl::Duration pushback;  // a stream has no per-request trailers to carry it
    absl::StatusOr<std::shared_ptr<UploadWait>> made = service_->NewWait(
        caller_, std::move(unfinished),
        [this, id, p, received](const absl::Status& s) { Resume(id, p, s, received); },
        &pushback);
    if (!made.ok()) return made.status();
    std::shared_ptr<UploadWait> wait = *std::move(made);
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      p->wait = wait;
      cancelled = broken_;
    }
    if (cancelled) {
      wait->Cancel(absl::StatusCode::kCancelled, "the stream was cancelled");
    } else {
      wait->Begin();
    }
    return absl::OkStatus();
  }

  // The wait of request `id` ended: admit it, or answer it with the wait's
  // failure. Nothing of the stream is touched after the answer.
  void Resume(uint64_t id, Pending* p, const absl::Status& waited, absl::Time received) {
    absl::Status st = waited;
    if (st.ok()) st = AdmitNow(id, p, received, absl::Now());
    if (st.ok()) return;  // the item's completion answers it (and releases)
    service_->ReleaseAfterUse(caller_, p->request);
    OnRequestDone(id, p, st, received);
  }

  // `p` is pending_[id]: it stays there until RecordDoneLocked(id), which
  // only this call makes, so it may be read without the lock until then.
  void OnRequestDone(uint64_t id, Pending* p, const absl::Status& status, absl::Time received) {
    service_->Answered("GemmStream", caller_, status, received);
    // Serialized before the lock is taken: for a large result it is a long
    // copy, and the stream's other completions need the lock meanwhile.
    auto bytes = std::make_unique<grpc::ByteBuffer>();
    grpc::Status serialized = grpc::Status::OK;
    if (status.ok()) serialized = SerializeResponse(p->response, bytes.get());
    if (!status.ok() || !serialized.ok()) {
      v1::GemmResponse failed;
      failed.set_request_id(p->request.request_id());
      failed.set_status_code(status.ok() ? static_cast<int>(absl::StatusCode::kInternal)
                                         : static_cast<int>(status.code()));
      failed.set_status_message(status.ok()
                                    ? absl::StrCat("the response could not be serialized: ",
                                                   serialized.error_message())
                                    : std::string(status.message()));
      bytes = std::make_unique<grpc::ByteBuffer>();
      SerializeResponse(failed, bytes.get()).IgnoreError();
    }
    Next next;
    {
      absl::MutexLock lock(&mu_);
      RecordDoneLocked(id, std::move(bytes));
      // Decided in the same critical section: once the lock is released
      // another thread may finish the stream, and gRPC then deletes it. No
      // read is started from here (outside a reaction nothing keeps the
      // stream alive until StartRead); the write this starts, or the one in
      // flight, re-decides reads when it is done.
      next = DecideLocked(/*may_read=*/false);
    }
    // With nothing to start, `this` may already be gone (the stream finished
    // on another thread): touch nothing. With something to start it cannot
    // be: a write in flight or an unfinished stream keeps it alive.
    if (next.write != nullptr || next.read || next.finish) Apply(next);
  }

  void RecordDoneLocked(uint64_t id, std::unique_ptr<grpc::ByteBuffer> response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    std::unique_ptr<Pending> p = std::move(it->second);
    pending_.erase(it);
    if (!p->id_in_flight.empty()) ids_in_flight_.erase(p->id_in_flight);
    if (broken_) return;
    ready_.push_back(std::move(response));
  }

  // The gRPC operations to start once the lock is released.
  struct Next {
    const grpc::ByteBuffer* write = nullptr;
    bool read = false;
    bool finish = false;
    grpc::Status finish_status;
  };

  // Decides the next gRPC operations under the lock and starts them outside.
  void Advance() {
    Next next;
    {
      absl::MutexLock lock(&mu_);
      next = DecideLocked();
    }
    Apply(next);
  }

  Next DecideLocked(bool may_read = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Next next;
    // A broken stream sends nothing more, but the response a write in flight
    // was given stays until OnWriteDone: gRPC reads it in StartWrite, which
    // runs outside the lock (ThreadSanitizer caught OnCancel freeing it there).
    if (broken_) ready_.resize(writing_ && !ready_.empty() ? 1 : 0);
    if (!writing_ && !ready_.empty() && !broken_) {
      writing_ = true;
      next.write = ready_.front().get();
    }
    const size_t held = pending_.size() + ready_.size();
    if (may_read && !reads_done_ && !broken_ && read_wanted_ &&
        held < service_->limits().max_stream_inflight) {
      read_wanted_ = false;
      next.read = true;
    }
    const bool drained = pending_.empty() && ready_.empty() && !writing_;
    if (drained && !finished_ && (reads_done_ || broken_)) {
      finished_ = true;
      next.finish = true;
      next.finish_status = broken_ ? grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled")
                                   : ToGrpcStatus(unparsable_);
    }
    return next;
  }

  void Apply(const Next& next) {
    if (next.write != nullptr) StartWrite(next.write);
    if (next.read) StartRead(&incoming_);
    if (next.finish) Finish(next.finish_status);
  }

  GemmServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const std::string caller_;
  grpc::ByteBuffer incoming_;  // the read in progress; touched only by reads
  uint64_t next_id_ = 0;      // touched only in OnReadDone (reads are serial)

  absl::Mutex mu_;
  std::map<uint64_t, std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  // Serialized responses waiting to be written, the first one possibly being
  // written now.
  std::deque<std::unique_ptr<grpc::ByteBuffer>> ready_ ABSL_GUARDED_BY(mu_);
  // The request_ids of the requests admitted and not yet answered.
  std::set<std::string> ids_in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // True when no read is outstanding and the next one should start as soon
  // as the stream has room.
  bool read_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Not OK once a message did not parse: the stream's final status.
  absl::Status unparsable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

// A request that reached an executor: its stages from queued to executed,
// and the executor's parts of "execute" (a GPU's copies each way, or the CPU
// backend's staging, and the kernels).
void RecordStages(ServiceMetrics* metrics, const WorkItem& item, const ExecutionReport& report) {
  const WorkItem::Stamps& t = item.stamps;
  if (t.queued == absl::Time() || t.executing == absl::Time()) return;  // never queued
  metrics->RecordRequestStage("queue", t.dispatched - t.queued);
  metrics->RecordRequestStage("batch", t.executing - t.dispatched);
  metrics->RecordRequestStage("execute", t.executed - t.executing);
  if (report.h2d > absl::ZeroDuration() || report.d2h > absl::ZeroDuration()) {
    metrics->RecordRequestStage("h2d", report.h2d);
    metrics->RecordRequestStage("d2h", report.d2h);
  } else {
    metrics->RecordRequestStage("staging", report.transfer);
  }
  metrics->RecordRequestStage("kernel", report.compute);
}

void FillTiming(const ExecutionReport& report, absl::Duration total, v1::GemmResponse* response) {
  v1::Timing* t = response->mutable_timing();
  t->set_queue_ns(Nanos(report.queue_wait));
  t->set_transfer_ns(Nanos(report.transfer));
  t->set_compute_ns(Nanos(report.compute));
  t->set_total_ns(Nanos(total));
  response->set_backend(report.backend);
  response->set_kernel(report.kernel);
}

void FillReproducibility(const ExecutionReport& report, v1::GemmResponse* response) {
  v1::Reproducibility* r = response->mutable_reproducibility();
  r->set_backend(report.backend);
  r->set_device_model(report.device_model);
  r->set_build(kVersion);
  for (const ProblemReproducibility& p : report.reproducibility) {
    v1::ProblemReproducibility* out = r->add_problems();
    out->set_kernel_family(p.kernel_family);
    out->set_kernel(p.kernel);
    out->set_tile(p.tile);
    out->set_splits(static_cast<uint32_t>(p.splits));
    out->set_reduction_order(p.reduction_order);
  }
}

GemmServiceImpl::GemmServiceImpl(const ServiceLimits& limits, RequestQueue* queue,
                                 const Executor* executor, ServiceMetrics* metrics,
                                 const Clock* clock, ResidentStore* residents,
                                 std::string instance_id)
    : limits_(limits),
      queue_(queue),
      executor_(executor),
      metrics_(metrics),
      clock_(clock),
      residents_(residents),
      features_(FeaturesOf(*executor)),
      instance_id_(std::move(instance_id)) {}

absl::Status DrainingError(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      what, ": the server is shutting down (draining); retry on another replica"));
}

absl::Status GemmServiceImpl::RefuseDraining(absl::string_view what) {
  refused_draining_.fetch_add(1);
  return DrainingError(what);
}

GemmServiceImpl::CallCounts GemmServiceImpl::counts() const {
  CallCounts c;
  c.admitted = admitted_.load();
  c.finished = finished_.load();
  c.refused_draining = refused_draining_.load();
  return c;
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
  if (residents_ == nullptr || limits_.max_waiting_requests == 0) return {};
  return UploadWait::Unfinished(*residents_, caller, request);
}

absl::StatusOr<std::shared_ptr<UploadWait>> GemmServiceImpl::NewWait(
    absl::string_view caller, std::vector<UploadWait::Operand> unfinished,
    UploadWait::Done done, absl::Duration* pushback) {
  const int limit = static_cast<int>(limits_.max_waiting_requests);
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

namespace {

// The handles of `request` marked release_after_use.
std::vector<std::string> HandlesToRelease(const v1::GemmRequest& request) {
  std::vector<std::string> out;
  for (const v1::GemmProblem& p : request.problems())
    for (const v1::Matrix* m : {&p.a(), &p.b(), &p.c()})
      if (m->release_after_use() && m->source_case() == v1::Matrix::kHandle)
        out.push_back(m->handle());
  return out;
}

// Releases `handles` of `caller`; one named twice, or released already (by
// the client, or an abandoned upload), is skipped.
void ReleaseHandles(ResidentStore* store, absl::string_view caller,
                    const std::vector<std::string>& handles) {
  if (store == nullptr) return;
  for (const std::string& h : handles) store->Release(caller, h).IgnoreError();
}

}  // namespace

void GemmServiceImpl::ReleaseAfterUse(absl::string_view caller, const v1::GemmRequest& request) {
  ReleaseHandles(residents_, caller, HandlesToRelease(request));
}

absl::Status GemmServiceImpl::Admit(const grpc::CallbackServerContext& context,
                                    const v1::GemmRequest& request, v1::GemmResponse* response,
                                    absl::Time deadline, absl::Time received,
                                    std::function<void(const absl::Status&)> on_done,
                                    std::shared_ptr<WorkItem>* item_out,
                                    absl::Duration* pushback,
                                    const std::function<void(const std::shared_ptr<WorkItem>&)>&
                                        on_item) {
  ResidentOperands residents;
  if (residents_ != nullptr) {
    // The caller is looked up only for requests that name a handle.
    residents.resolve = [this, &context, caller = std::optional<std::string>()](
                            absl::string_view handle) mutable {
      if (!caller.has_value()) caller = CallerIdentity(context);
      return residents_->Lookup(*caller, handle);
    };
  }
  if (shared_memory_ != nullptr) {
    residents.resolve_shared = [this, &context, caller = std::optional<std::string>()](
                                   absl::string_view region) mutable {
      if (!caller.has_value()) caller = CallerIdentity(context);
      return shared_memory_->Lookup(*caller, region);
    };
  }
  auto problems = ValidateProblems(request, limits_, &residents, features_);
  if (!problems.ok()) {
    // A request over a size limit fails the same way every time: tell
    // clients not to retry it (a negative pushback).
    *pushback = absl::Milliseconds(-1);
    return problems.status();
  }
  // While draining, only requests on matrices held here (the Gemm of a
  // chunked request whose operands were uploaded before the drain) run.
  if (draining() && residents.held.empty()) return RefuseDraining("Gemm");
  const std::string caller = CallerIdentity(context);
  const bool keep_results = request.keep_results();
  if (keep_results) {
    if (residents_ == nullptr)
      return absl::FailedPreconditionError(
          "keep_results: this server keeps no resident matrices");
    uint64_t result_bytes = 0;
    for (const GemmProblemRef& p : *problems) result_bytes += p.d_bytes();
    // The server's and the caller's tenant's limits, before the work runs.
    if (absl::Status room = residents_->CheckRoom(caller, result_bytes); !room.ok()) {
      *pushback = queue_->RetryHint();
      absl::Status refused(room.code(), absl::StrCat("keep_results: the results need ",
                                                     result_bytes, " bytes: ", room.message()));
      room.ForEachPayload(
          [&](absl::string_view url, const absl::Cord& payload) { refused.SetPayload(url, payload); });
      return refused;
    }
  }
  auto item = std::make_shared<WorkItem>();
  item->problems = std::move(*problems);
  item->residents = std::move(residents.held);
  item->shared_regions = std::move(residents.held_shared);
  item->bytes = InflightBytes(item->problems);
  item->priority = request.priority();
  item->client = caller.empty() ? context.peer() : caller;
  item->deadline = deadline;
  item->received = received;
  item->deterministic =
      request.has_deterministic() ? request.deterministic() : deterministic_by_default_;
  const bool deterministic = item->deterministic;
  const Clock* clock = clock_;
  ServiceMetrics* metrics = metrics_;
  WorkItem* raw = item.get();
  ResidentStore* store = keep_results ? residents_ : nullptr;
  ResidentStore* residents_store = residents_;
  std::atomic<uint64_t>* finished = &finished_;
  item->done = [response, received, clock, metrics, raw, store, caller, deterministic, finished,
                residents_store, release = HandlesToRelease(request),
                on_done = std::move(on_done)](
                   const absl::Status& status, const ExecutionReport& report) {
    finished->fetch_add(1);
    absl::Status s = status;
    if (s.ok() && store != nullptr) s = KeepResults(store, caller, response);
    // Before the answer: a client that has it may count the handles gone.
    ReleaseHandles(residents_store, caller, release);
    if (!report.backend.empty()) {  // it reached an executor
      RecordStages(metrics, *raw, report);
      metrics->RecordQueueWait(report.queue_wait);
      for (const auto& [kind, seconds] : report.launches)
        metrics->RecordLaunch(report.backend, kind, seconds, report.device);
      metrics->RecordTenantWork(raw->tenant, s.ok() ? raw->flops() : 0, report.device_share,
                                report.queue_wait);
      if (report.h2d_bytes) metrics->AddTransferBytes("h2d", report.h2d_bytes, report.device);
      if (report.d2h_bytes) metrics->AddTransferBytes("d2h", report.d2h_bytes, report.device);
    }
    if (s.ok()) {
      for (const GemmProblemRef& p : raw->problems) metrics->RecordProblem(p, report.backend);
      FillTiming(report, clock->Now() - received, response);
      if (deterministic) {
        metrics->RecordDeterministicRequest(report.backend);
        FillReproducibility(report, response);
      }
    }
    if (!report.backend.empty())
      metrics->RecordRequestStage("complete", absl::Now() - raw->stamps.executed);
    on_done(s);
  };
  // Refuse what the queue would refuse before sizing the result buffers:
  // for results of hundreds of MiB that alone outlasts a short deadline.
  if (absl::Status st = queue_->Precheck(*item, pushback); !st.ok()) return st;
  AttachResults(request, &item->problems, response);
  *item_out = item;
  if (on_item) on_item(item);
  // Counted before the push: once queued it may run and finish (and be
  // counted finished) before Push returns, and the drain summary must never
  // see more finished than admitted.
  admitted_.fetch_add(1);
  // The queue says when a refused request may retry (negative: never, e.g.
  // one predicted to outlast its deadline even on an idle server).
  absl::Status st = queue_->Push(item, pushback);
  if (!st.ok()) {
    admitted_.fetch_sub(1);
    item_out->reset();
    return st;
  }
  if (on_queued_) on_queued_();
  return st;
}

grpc::ServerUnaryReactor* GemmServiceImpl::Gemm(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return new UnaryCall(this, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GemmServiceImpl::GemmStream(
    grpc::CallbackServerContext* context) {
  return new StreamCall(this, context);
}

grpc::ServerUnaryReactor* GemmServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetServerInfoRequest*,
                                                         v1::ServerInfo* out) {
  const absl::Time received = clock_->Now();
  const BackendInfo& info = executor_->info();
  out->set_version(kVersion);
  out->set_backend(info.backend);
  out->set_instance_id(instance_id_);
  for (const DeviceDescription& d : info.devices) {
    v1::DeviceInfo* di = out->add_devices();
    di->set_name(d.name);
    di->set_compute_capability(d.compute_capability);
    di->set_multiprocessors(d.multiprocessors);
    di->set_memory_bytes(d.memory_bytes);
    di->set_threads(d.threads);
  }
  for (const PeakRate& r : executor_->peak_rates()) {
    v1::PeakRate* pr = out->add_peak_rates();
    pr->set_kind(r.kind);
    pr->set_per_second(r.per_second);
    pr->set_method(r.method);
  }
  v1::Limits* l = out->mutable_limits();
  l->set_max_message_bytes(limits_.max_message_bytes);
  l->set_max_dimension(limits_.max_dimension);
  l->set_max_problem_bytes(limits_.max_matrix_bytes);
  l->set_max_problems_per_request(limits_.max_problems_per_request);
  l->set_max_queued_requests(limits_.max_queued_requests);
  l->set_max_queued_bytes(limits_.max_inflight_bytes);
  l->set_max_resident_bytes(residents_ != nullptr ? limits_.max_resident_bytes : 0);
  l->set_max_chunk_bytes(MaxChunkBytes(limits_));
  l->set_max_waiting_requests(residents_ != nullptr ? limits_.max_waiting_requests : 0);
  l->set_max_shared_memory_regions(shared_memory_ != nullptr ? limits_.max_shared_memory_regions
                                                             : 0);
  l->set_max_shared_memory_bytes(shared_memory_ != nullptr ? limits_.max_shared_memory_bytes : 0);
  for (const std::string& k : info.kernels) out->add_kernels(k);
  for (auto t : {v1::DATA_TYPE_FP32, v1::DATA_TYPE_FP16, v1::DATA_TYPE_BF16})
    out->add_input_dtypes(t);
  if (features_.fp8)
    for (auto t : {v1::DATA_TYPE_FP8_E4M3, v1::DATA_TYPE_FP8_E5M2}) out->add_input_dtypes(t);
  // The time it took, like every other RPC (it was recorded as zero).
  metrics_->RecordRequest("GetServerInfo", 0, clock_->Now() - received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::RegisterMatrix(
    grpc::CallbackServerContext* context, const v1::RegisterMatrixRequest* request,
    v1::RegisterMatrixResponse* response) {
  const absl::Time received = clock_->Now();
  absl::Status st;
  if (residents_ == nullptr) {
    st = absl::UnimplementedError("this server keeps no resident matrices");
  } else if (draining()) {
    st = RefuseDraining("RegisterMatrix");
  } else if (auto source = ValidateRegisterMatrix(*request, limits_); !source.ok()) {
    st = source.status();
  } else if (auto quantize = ValidateQuantization(request->has_quantize(), request->quantize(),
                                                  *source, features_);
             !quantize.ok()) {
    st = quantize.status();
  } else {
    const std::string caller = CallerIdentity(*context);
    // A quantized matrix is made by the executor (on the GPU where there is
    // one) and held at its FP8 size plus scales.
    auto registered = quantize->has_value()
                          ? residents_->RegisterQuantized(caller, *source, **quantize)
                          : residents_->Register(caller, *source);
    if (registered.ok()) {
      response->set_handle(registered->handle);
      response->set_bytes(registered->bytes);
      spdlog::debug("registered a resident {} x {} matrix ({} bytes, label \"{}\") for \"{}\"",
                    source->rows, source->cols, registered->bytes, request->label(), caller);
    }
    st = registered.status();
  }
  // Over the budget, waiting does not help: tell the client not to retry.
  if (st.code() == absl::StatusCode::kResourceExhausted)
    SetRetryPushback(context, absl::Milliseconds(-1));  // negative: do not retry
  Answered("RegisterMatrix", st.ok() ? "" : CallerIdentity(*context), st, received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::BeginUpload(grpc::CallbackServerContext* context,
                                                       const v1::BeginUploadRequest* request,
                                                       v1::RegisterMatrixResponse* response) {
  const absl::Time received = clock_->Now();
  absl::Status st;
  if (residents_ == nullptr) {
    st = absl::UnimplementedError("this server keeps no resident matrices");
  } else if (draining()) {
    st = RefuseDraining("BeginUpload");
  } else if (auto shape = ValidateBeginUpload(*request, limits_); !shape.ok()) {
    st = shape.status();
  } else if (auto quantize = ValidateQuantization(request->has_quantize(), request->quantize(),
                                                  *shape, features_);
             !quantize.ok()) {
    st = quantize.status();
  } else {
    auto registered = residents_->BeginUpload(CallerIdentity(*context), *shape,
                                              request->transient(), *quantize);
    if (registered.ok()) {
      response->set_handle(registered->handle);
      response->set_bytes(registered->bytes);
    }
    st = registered.status();
  }
  if (st.code() == absl::StatusCode::kResourceExhausted)
    SetRetryPushback(context, absl::Milliseconds(-1));  // negative: do not retry
  Answered("BeginUpload", st.ok() ? "" : CallerIdentity(*context), st, received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::ReleaseMatrix(grpc::CallbackServerContext* context,
                                                         const v1::ReleaseMatrixRequest* request,
                                                         v1::ReleaseMatrixResponse*) {
  const absl::Time received = clock_->Now();
  absl::Status st = absl::UnimplementedError("this server keeps no resident matrices");
  if (residents_ != nullptr) {
    st = residents_->Release(CallerIdentity(*context), request->handle());
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("handle: ", st.message()));
  }
  Answered("ReleaseMatrix", st.ok() ? "" : CallerIdentity(*context), st, received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::RegisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::RegisterSharedMemoryRequest* request,
    v1::RegisterSharedMemoryResponse* response) {
  const absl::Time received = clock_->Now();
  absl::Status st;
  if (shared_memory_ == nullptr) {
    st = absl::UnimplementedError("this server keeps no shared memory");
  } else if (draining()) {
    st = RefuseDraining("RegisterSharedMemory");
  } else if (!IsSameHostPeer(context->peer())) {
    st = absl::PermissionDeniedError(absl::StrCat(
        "shared memory is for clients on the server's host, over loopback or a Unix socket; "
        "this call came from ", context->peer()));
  } else if (request->has_label() && request->label().size() > 256) {
    st = absl::InvalidArgumentError("label: longer than 256 bytes");
  } else {
    const std::string caller = CallerIdentity(*context);
    auto registered = shared_memory_->Register(caller, request->pid(), request->fd(),
                                               request->bytes(), request->token());
    if (registered.ok()) {
      response->set_region(registered->region);
      response->set_bytes(registered->bytes);
      spdlog::debug("mapped {} bytes of shared memory of process {} (label \"{}\") for \"{}\"",
                    registered->bytes, request->pid(), request->label(), caller);
    }
    st = registered.status();
  }
  if (st.code() == absl::StatusCode::kResourceExhausted)
    SetRetryPushback(context, absl::Milliseconds(-1));  // negative: do not retry
  Answered("RegisterSharedMemory", st.ok() ? "" : CallerIdentity(*context), st, received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::UnregisterSharedMemory(
    grpc::CallbackServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryResponse*) {
  const absl::Time received = clock_->Now();
  absl::Status st = absl::UnimplementedError("this server keeps no shared memory");
  if (shared_memory_ != nullptr) {
    st = shared_memory_->Unregister(CallerIdentity(*context), request->region());
    if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("region: ", st.message()));
  }
  Answered("UnregisterSharedMemory", st.ok() ? "" : CallerIdentity(*context), st, received);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(st));
  return reactor;
}

}  // namespace gemm
