#include "service/rpc/admission.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"
#include "service/version.h"

namespace gemm {
namespace {

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

// The work an item did, for the metrics: launches, tenant work, transfers.
void RecordExecution(ServiceMetrics* metrics, const WorkItem& item, const ExecutionReport& report,
                     bool ok) {
  RecordStages(metrics, item, report);
  metrics->RecordQueueWait(report.queue_wait);
  for (const LaunchRecord& launch : report.launches)
    metrics->RecordLaunch(report.backend, launch, report.device);
  metrics->RecordTenantWork(item.tenant, ok ? item.flops() : 0, report.device_share,
                            report.queue_wait);
  if (report.h2d_bytes) metrics->AddTransferBytes("h2d", report.h2d_bytes, report.device);
  if (report.d2h_bytes) metrics->AddTransferBytes("d2h", report.d2h_bytes, report.device);
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

}  // namespace

absl::Status DrainingError(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      what, ": the server is shutting down (draining); retry on another replica"));
}

std::vector<std::string> HandlesToRelease(const v1::GemmRequest& request) {
  std::vector<std::string> out;
  for (const v1::GemmProblem& p : request.problems())
    for (const v1::Matrix* m : {&p.a(), &p.b(), &p.c()})
      if (m->release_after_use() && m->source_case() == v1::Matrix::kHandle)
        out.push_back(m->handle());
  return out;
}

void ReleaseHandles(ResidentStore* store, absl::string_view caller,
                    const std::vector<std::string>& handles) {
  if (store == nullptr) return;
  for (const std::string& h : handles) store->Release(caller, h).IgnoreError();
}

Admission::Admission(Parts parts) : parts_(std::move(parts)) {}

absl::Status Admission::RefuseDraining(absl::string_view what) {
  refused_draining_.fetch_add(1);
  return DrainingError(what);
}

absl::Status Admission::Admit(const Call& call, const v1::GemmRequest& request,
                              v1::GemmResponse* response,
                              std::function<void(const absl::Status&)> on_done,
                              std::shared_ptr<WorkItem>* item_out, absl::Duration* pushback,
                              const std::function<void(const std::shared_ptr<WorkItem>&)>&
                                  on_item) {
  const std::string& caller = call.caller;
  ResidentOperands residents;
  if (ResidentStore* store = parts_.residents; store != nullptr) {
    residents.resolve = [store, &caller](absl::string_view handle) {
      return store->Lookup(caller, handle);
    };
  }
  if (SharedMemoryStore* shared = parts_.shared_memory; shared != nullptr) {
    residents.resolve_shared = [shared, &caller](absl::string_view region) {
      return shared->Lookup(caller, region);
    };
  }
  auto problems = ValidateProblems(request, parts_.limits, &residents, parts_.features);
  if (!problems.ok()) {
    // A request over a size limit fails the same way every time: tell
    // clients not to retry it (a negative pushback).
    *pushback = absl::Milliseconds(-1);
    return problems.status();
  }
  // While draining, only requests on matrices held here (the Gemm of a
  // chunked request whose operands were uploaded before the drain) run.
  if (draining() && residents.held.empty()) return RefuseDraining("Gemm");
  const bool keep_results = request.keep_results();
  if (keep_results) {
    if (parts_.residents == nullptr)
      return absl::FailedPreconditionError(
          "keep_results: this server keeps no resident matrices");
    uint64_t result_bytes = 0;
    for (const GemmProblemRef& p : *problems) result_bytes += p.d_bytes();
    // The server's and the caller's tenant's limits, before the work runs.
    if (absl::Status room = parts_.residents->CheckRoom(caller, result_bytes); !room.ok()) {
      *pushback = parts_.queue->RetryHint();
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
  item->client = caller.empty() ? call.peer : caller;
  item->deadline = call.deadline;
  item->received = call.received;
  item->deterministic =
      request.has_deterministic() ? request.deterministic() : deterministic_by_default_;
  WorkItem* raw = item.get();
  item->done = [this, response, raw, caller, received = call.received,
                keep = keep_results ? parts_.residents : nullptr,
                release = HandlesToRelease(request), on_done = std::move(on_done)](
                   const absl::Status& status, const ExecutionReport& report) {
    finished_.fetch_add(1);
    ServiceMetrics* metrics = parts_.metrics;
    absl::Status s = status;
    if (s.ok() && keep != nullptr) s = KeepResults(keep, caller, response);
    // Before the answer: a client that has it may count the handles gone.
    ReleaseHandles(parts_.residents, caller, release);
    const bool executed = !report.backend.empty();
    if (executed) RecordExecution(metrics, *raw, report, s.ok());
    if (s.ok()) {
      for (const GemmProblemRef& p : raw->problems) metrics->RecordProblem(p, report.backend);
      FillTiming(report, parts_.clock->Now() - received, response);
      if (raw->deterministic) {
        metrics->RecordDeterministicRequest(report.backend);
        FillReproducibility(report, response);
      }
    }
    if (executed) metrics->RecordRequestStage("complete", absl::Now() - raw->stamps.executed);
    on_done(s);
  };
  // Refuse what the queue would refuse before sizing the result buffers:
  // for results of hundreds of MiB that alone outlasts a short deadline.
  if (absl::Status st = parts_.queue->Precheck(*item, pushback); !st.ok()) return st;
  AttachResults(request, &item->problems, response);
  *item_out = item;
  if (on_item) on_item(item);
  // Counted before the push: once queued it may run and finish (and be
  // counted finished) before Push returns, and the drain summary must never
  // see more finished than admitted.
  admitted_.fetch_add(1);
  // The queue says when a refused request may retry (negative: never, e.g.
  // one predicted to outlast its deadline even on an idle server).
  absl::Status st = parts_.queue->Push(item, pushback);
  if (!st.ok()) {
    admitted_.fetch_sub(1);
    item_out->reset();
    return st;
  }
  if (on_queued_) on_queued_();
  return st;
}

}  // namespace gemm
