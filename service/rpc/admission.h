// Admission of Gemm requests: whether the server takes new work now (the
// drain of a shutdown), and the work item a valid request becomes, queued
// with the completion that answers it. The unary and streamed Gemm calls
// both come through here (GemmServiceImpl::Admit); nothing here knows of
// gRPC, so it is tested with a fake executor and clock alone.
#ifndef GEMM_SERVICE_RPC_ADMISSION_H_
#define GEMM_SERVICE_RPC_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "service/base/clock.h"
#include "service/base/limits.h"
#include "service/observe/metrics.h"
#include "service/queue/request_queue.h"
#include "service/queue/work_item.h"
#include "service/rpc/request_validation.h"
#include "service/store/resident_store.h"
#include "service/store/shared_memory_store.h"

namespace gemm {

class Admission {
 public:
  // What admission works with. None is owned; each must outlive the
  // Admission. `residents` and `shared_memory` may be null (handles, kept
  // results and shared regions are then refused).
  struct Parts {
    ServiceLimits limits;
    RequestQueue* queue = nullptr;
    ServiceMetrics* metrics = nullptr;
    const Clock* clock = nullptr;
    ResidentStore* residents = nullptr;
    SharedMemoryStore* shared_memory = nullptr;
    // What validation needs to know of the executor.
    BackendFeatures features;
  };
  explicit Admission(Parts parts);
  const Parts& parts() const { return parts_; }

  // Set before requests arrive.
  void set_shared_memory(SharedMemoryStore* store) { parts_.shared_memory = store; }
  // Whether a request that leaves GemmRequest.deterministic unset runs
  // deterministic.
  void set_deterministic_by_default(bool on) { deterministic_by_default_ = on; }
  // Called on the admitting thread right after each request is queued; it
  // may run and answer the request before it returns.
  void set_on_queued(std::function<void()> on_queued) { on_queued_ = std::move(on_queued); }

  // Who sent a request, and when.
  struct Call {
    std::string caller;  // the caller identity; "" for an anonymous caller
    std::string peer;    // the client's address, its name when anonymous
    absl::Time deadline = absl::InfiniteFuture();
    absl::Time received;
  };
  // Validates `request` (handles and regions resolved for `call.caller`) and
  // queues a work item whose completion fills `response` and calls
  // `on_done`. On failure returns the status to answer with, and a retry
  // pushback in *pushback (negative: do not retry) where waiting may or may
  // never help. `on_item`, when given, gets the item just before the queue
  // does (after that the item may complete at any time). Once admitted, the
  // operands marked release_after_use are released when the item
  // completes, before `on_done`.
  absl::Status Admit(const Call& call, const v1::GemmRequest& request,
                     v1::GemmResponse* response, std::function<void(const absl::Status&)> on_done,
                     std::shared_ptr<WorkItem>* item, absl::Duration* pushback,
                     const std::function<void(const std::shared_ptr<WorkItem>&)>& on_item =
                         nullptr);

  // The drain of a shutdown: from now on only requests on matrices already
  // held here are admitted.
  void StartDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // UNAVAILABLE for `what` refused by the drain, counted.
  absl::Status RefuseDraining(absl::string_view what);

  // Counts since start, for the drain summary.
  uint64_t admitted() const { return admitted_.load(); }
  uint64_t finished() const { return finished_.load(); }
  uint64_t refused_draining() const { return refused_draining_.load(); }

 private:
  Parts parts_;
  bool deterministic_by_default_ = false;
  std::function<void()> on_queued_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> finished_{0};
  std::atomic<uint64_t> refused_draining_{0};
};

// The status of a call refused because the server is draining.
absl::Status DrainingError(absl::string_view what);

// The handles of `request` marked release_after_use.
std::vector<std::string> HandlesToRelease(const v1::GemmRequest& request);
// Releases `handles` of `caller` from `store` (may be null: nothing to
// release); one named twice, or released already (by the client, or an
// abandoned upload), is skipped.
void ReleaseHandles(ResidentStore* store, absl::string_view caller,
                    const std::vector<std::string>& handles);

}  // namespace gemm

#endif  // GEMM_SERVICE_RPC_ADMISSION_H_
