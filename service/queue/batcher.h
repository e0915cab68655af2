// The dynamic batcher: takes admitted requests from the queue, forms batches
// and hands them to the executor, keeping at most the executor's
// max_concurrent_batches() in flight.
//
// When the executor is idle the batcher dispatches at once whatever is queued
// (no request waits for company that may never come). While the executor is
// busy, requests accumulate; when a slot frees up, the batcher takes
// everything queued within the batch budget, lingering up to max_queue_delay
// (counted from the oldest queued request) for the batch to fill. So batches
// grow exactly when the load makes them worth it, and the delay bound holds.
//
// An idle executor need not wait for the batching thread at all: the thread
// that queued a request dispatches it itself (DispatchIfIdle), and a batch
// predicted to be short runs right there (Executor::ExecuteHere), so a lone
// small request is answered from the thread that received it, with no
// hand-off between threads on its way.
#ifndef GEMM_SERVICE_QUEUE_BATCHER_H_
#define GEMM_SERVICE_QUEUE_BATCHER_H_

#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/exec/executor.h"
#include "service/observe/metrics.h"
#include "service/queue/launch_plan.h"
#include "service/queue/request_queue.h"

namespace gemm {

struct BatcherOptions {
  // Longest a request waits for its batch to fill while the executor is busy.
  absl::Duration max_queue_delay = absl::Microseconds(200);
  // Dispatch at once when no batch is in flight (see above). Off, every batch
  // lingers up to max_queue_delay.
  bool dispatch_when_idle = true;
  // DispatchIfIdle dispatches on the calling thread where the executor runs
  // batches there (Executor::runs_batches_here; off, or on other executors:
  // it does nothing and the batching thread dispatches everything).
  bool dispatch_on_arrival = true;
  // A batch DispatchIfIdle forms whose items the executor predicts to take
  // at most this long runs on the calling thread (ExecuteHere); one with an
  // item it cannot predict (nothing measured) never does. Zero: never.
  absl::Duration run_on_arrival_max = absl::Milliseconds(1);
  // What one batch may hold.
  BatchBudget budget;
  // How batches become launches.
  LaunchPlanOptions plan;

  // InvalidArgument naming the bad field, or OK.
  absl::Status Validate() const;
};

class Batcher {
 public:
  // Starts the batching thread. The pointers must outlive the batcher.
  Batcher(const BatcherOptions& options, RequestQueue* queue, Executor* executor,
          ServiceMetrics* metrics);
  // Stops (see Stop).
  ~Batcher();

  // Stops forming batches and waits until the batches in flight are done.
  // Whatever is still queued stays there. The batcher notices within its
  // wait for work (50 ms on the queue's clock): on a FakeClock that never
  // moves, close the queue first so that the wait ends.
  void Stop();

  int in_flight() const;

  // Called right after a request is queued, on the thread that queued it:
  // when no batch is in flight, takes what is queued (within the batch
  // budget, without lingering) and dispatches it from this thread, running
  // it here when it is predicted to be short (run_on_arrival_max). The
  // request may then be answered before this returns. Otherwise (a batch in
  // flight, or stopping) leaves the request to the batching thread.
  void DispatchIfIdle();

 private:
  void Run();
  void OnBatchDone();
  // Plans `items` into a batch and hands it to the executor, which runs it
  // on this thread when `here`. Its slot (in_flight_) is already taken.
  void Dispatch(std::vector<std::shared_ptr<WorkItem>> items, bool here);

  const BatcherOptions options_;
  RequestQueue* const queue_;
  Executor* const executor_;
  ServiceMetrics* const metrics_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_QUEUE_BATCHER_H_
