// GemmStream: many requests on one call.
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
        *context_, caller_, p->request, &p->response, DeadlineOf(*context_), received,
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

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartGemmStream(
    GemmServiceImpl* service, grpc::CallbackServerContext* context) {
  return new StreamCall(service, context);
}

}  // namespace gemm::rpc
