#include "service/queue/batcher.h"

namespace gemm {

absl::Status BatcherOptions::Validate() const {
  if (max_queue_delay < absl::ZeroDuration())
    return absl::InvalidArgumentError("max_queue_delay must not be negative");
  if (budget.max_requests == 0)
    return absl::InvalidArgumentError("budget.max_requests must be positive");
  if (!(budget.max_flops > 0)) return absl::InvalidArgumentError("budget.max_flops must be positive");
  if (budget.max_bytes == 0) return absl::InvalidArgumentError("budget.max_bytes must be positive");
  if (!(plan.large_problem_flops > 0))
    return absl::InvalidArgumentError("plan.large_problem_flops must be positive");
  if (plan.min_strided_batch < 2)
    return absl::InvalidArgumentError("plan.min_strided_batch must be at least 2");
  if (run_on_arrival_max < absl::ZeroDuration())
    return absl::InvalidArgumentError("run_on_arrival_max must not be negative");
  return absl::OkStatus();
}

Batcher::Batcher(const BatcherOptions& options, RequestQueue* queue, Executor* executor,
                 ServiceMetrics* metrics)
    : options_(options), queue_(queue), executor_(executor), metrics_(metrics) {
  thread_ = std::thread([this] { Run(); });
}

Batcher::~Batcher() { Stop(); }

void Batcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  while (in_flight_ > 0) changed_.Wait(&mu_);
}

int Batcher::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

void Batcher::OnBatchDone() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  changed_.SignalAll();
}

void Batcher::Run() {
  const int slots = std::max(1, executor_->max_concurrent_batches());
  // Idleness is judged when a request is there to dispatch, not when the
  // batcher starts waiting for one: a batch that finishes in between makes the
  // backend idle, and its client's next request should not wait for company.
  auto linger = [this]() -> absl::Duration {
    absl::MutexLock lock(&mu_);
    return in_flight_ == 0 && options_.dispatch_when_idle ? absl::ZeroDuration()
                                                          : options_.max_queue_delay;
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && in_flight_ >= slots) changed_.Wait(&mu_);
      if (stopping_) return;
    }
    // DispatchIfIdle may take the last slot while this thread waits for
    // work: then the work stays queued (asked under the queue's lock, just
    // before items are taken).
    auto slot_free = [this, slots] {
      absl::MutexLock lock(&mu_);
      return in_flight_ < slots;
    };
    // A short wait so that Stop() is noticed promptly.
    std::vector<std::shared_ptr<WorkItem>> items =
        queue_->PopBatch(options_.budget, absl::Milliseconds(50), linger, slot_free);
    if (items.empty()) continue;
    {
      // A DispatchIfIdle that took the slot between slot_free and here
      // dispatches what it found first; these items wait for its slot.
      // When stopping they go at once (Stop waits for them).
      absl::MutexLock lock(&mu_);
      while (!stopping_ && in_flight_ >= slots) changed_.Wait(&mu_);
      ++in_flight_;
    }
    Dispatch(std::move(items), /*here=*/false);
  }
}

void Batcher::DispatchIfIdle() {
  if (!options_.dispatch_on_arrival || !executor_->runs_batches_here()) return;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || in_flight_ != 0) return;
    ++in_flight_;
  }
  // The batching thread may have taken the request meanwhile: then there is
  // nothing here to dispatch.
  std::vector<std::shared_ptr<WorkItem>> items =
      queue_->PopBatch(options_.budget, absl::ZeroDuration(), absl::ZeroDuration());
  if (items.empty()) {
    OnBatchDone();
    return;
  }
  // Zero is no prediction (nothing measured): such batches are not run here,
  // where a long one would hold a thread of the RPC layer.
  absl::Duration predicted;
  bool predicted_all = true;
  for (const auto& item : items) {
    const absl::Duration d = executor_->PredictRunTime(*item);
    predicted_all = predicted_all && d > absl::ZeroDuration();
    predicted += d;
  }
  const bool here = predicted_all && predicted <= options_.run_on_arrival_max;
  Dispatch(std::move(items), here);
}

void Batcher::Dispatch(std::vector<std::shared_ptr<WorkItem>> items, bool here) {
  Batch batch;
  batch.launches = PlanLaunches(items, options_.plan);
  batch.items = std::move(items);
  batch.on_done = [this] { OnBatchDone(); };
  size_t problems = 0;
  for (const auto& item : batch.items) problems += item->problems.size();
  metrics_->RecordBatch(batch.items.size(), problems);
  const absl::Time executing = absl::Now();
  for (const auto& item : batch.items) item->stamps.executing = executing;
  if (here) {
    executor_->ExecuteHere(std::move(batch));
  } else {
    executor_->Execute(std::move(batch));
  }
}

}  // namespace gemm
