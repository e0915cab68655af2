// The GPU backend: batches run on CUDA streams through our own kernels
// (kernels/gemm.h).
//
// Each of `streams` lanes owns a CUDA stream, a pinned host staging buffer
// (grown geometrically, then reused: no cudaMallocHost on the hot path) and
// takes device memory from the device's stream-ordered pool (cudaMallocAsync
// with the release threshold raised, so steady state allocates nothing new).
// A batch takes one lane: operands are copied once from the request into
// staging, go to the device in one H2D copy, each planned launch runs (a
// strided-batched launch for identical problems), results come back in one
// D2H copy, and a host callback hands the lane to the completion thread, which
// copies results once into the responses and completes the requests. Batches
// on different lanes overlap their copies with each other's kernels.
#ifndef GEMM_SERVICE_CUDA_EXECUTOR_H_
#define GEMM_SERVICE_CUDA_EXECUTOR_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/executor.h"

namespace gemm {

class CudaExecutor : public Executor {
 public:
  struct Options {
    // CUDA device ordinal (after CUDA_VISIBLE_DEVICES).
    int device = 0;
    // Lanes: batches in flight at once, each on its own stream. Two overlap
    // one batch's copies with another's kernels; more help when batches are
    // small and many.
    int streams = 4;
    // Measure the GEMM rates and memory bandwidth at start-up (about 0.1 s).
    bool calibrate = true;
  };

  // The number of CUDA devices visible, 0 when there is no driver or GPU.
  static int DeviceCount();

  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(const Options& options);

  // Device memory in use on `device` (total minus free, all processes).
  static absl::StatusOr<uint64_t> DeviceBytesInUse(int device);

  // Returns the pool's cached device memory to the driver (the pool keeps
  // freed memory for reuse otherwise). Call when idle.
  absl::Status ReleaseCachedMemory();
  // Waits for the batches in flight, then frees streams and buffers.
  ~CudaExecutor() override;

  const BackendInfo& info() const override { return info_; }
  int max_concurrent_batches() const override { return options_.streams; }
  void Execute(Batch batch) override;
  // Device memory holding a copy of `source` (no host copy is kept); launches
  // read it in place. RESOURCE_EXHAUSTED when the device is out of memory.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> CreateResident(
      const MatrixRef& source) const override;

  // Implementation details follow.
  struct Lane;
  // Called by the CUDA host callback when a lane's work is done (on a CUDA
  // thread: it only hands the lane to the completion thread).
  void OnLaneDone(Lane* lane);

 private:
  explicit CudaExecutor(const Options& options);
  absl::Status Init();
  void Calibrate();
  // Stages, launches and enqueues the copies of `batch` on `lane`; on error
  // the batch's items are completed with it.
  absl::Status Enqueue(Lane& lane);
  void CompletionLoop();
  // Copies results out and fills reports; returns each request's outcome.
  std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>> Finish(Lane& lane);
  // Returns the lane to the free list and tells the batcher.
  void ReleaseLane(Lane* lane);

  const Options options_;
  BackendInfo info_;
  std::vector<std::unique_ptr<Lane>> lanes_;

  absl::Mutex mu_;
  absl::CondVar lane_free_;
  std::deque<Lane*> free_lanes_ ABSL_GUARDED_BY(mu_);
  std::deque<Lane*> finished_lanes_ ABSL_GUARDED_BY(mu_);
  int busy_lanes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread completion_thread_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_EXECUTOR_H_
