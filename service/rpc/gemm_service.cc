#include "service/rpc/gemm_service.h"

// GemmServiceImpl: admission of Gemm requests and what every RPC shares.
// Each RPC family is in service/rpc/.
#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"
#include "service/security/caller_identity.h"
#include "service/rpc/request_validation.h"
#include "service/rpc/gemm_calls.h"
#include "service/store/upload_wait.h"
#include "service/version.h"

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
  return rpc::StartUnaryGemm(this, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GemmServiceImpl::GemmStream(
    grpc::CallbackServerContext* context) {
  return rpc::StartGemmStream(this, context);
}
}  // namespace gemm
