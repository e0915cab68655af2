#include "service/worker_pool.h"

namespace gemm {

WorkerPool::WorkerPool(RequestQueue* queue, Executor* executor, ServiceMetrics* metrics,
                       int workers)
    : queue_(queue), executor_(executor), metrics_(metrics) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Stop() {
  stopping_.store(true);
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void WorkerPool::Run() {
  while (!stopping_.load()) {
    // A short wait so that Stop() is noticed promptly.
    std::vector<std::shared_ptr<WorkItem>> batch = queue_->Pop(1, absl::Milliseconds(50));
    if (batch.empty()) continue;
    size_t problems = 0;
    for (const auto& item : batch) problems += item->problems.size();
    metrics_->RecordBatch(batch.size(), problems);
    executor_->Execute(std::move(batch));
  }
}

}  // namespace gemm
