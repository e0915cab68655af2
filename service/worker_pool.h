// Threads that move admitted requests from the queue to the executor.
// Each worker takes the next request in queue order and hands it to the
// executor as a batch; the dynamic batcher replaces this one-request policy
// with batch formation.
#ifndef GEMM_SERVICE_WORKER_POOL_H_
#define GEMM_SERVICE_WORKER_POOL_H_

#include <atomic>
#include <thread>
#include <vector>

#include "service/executor.h"
#include "service/metrics.h"
#include "service/request_queue.h"

namespace gemm {

class WorkerPool {
 public:
  // Starts `workers` threads. The pointers must outlive the pool.
  WorkerPool(RequestQueue* queue, Executor* executor, ServiceMetrics* metrics, int workers);
  // Stops and joins (see Stop).
  ~WorkerPool();

  // Lets the workers finish what they are running and exit; whatever is
  // still queued stays there (close and drain or abandon the queue first).
  void Stop();

 private:
  void Run();

  RequestQueue* const queue_;
  Executor* const executor_;
  ServiceMetrics* const metrics_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_WORKER_POOL_H_
