// Where the CUDA executor's stream-K / split-K launches run. Those reducing
// launches spin on each other's partial tiles, so two at once could deadlock
// the device: they all run on this one stream, one after another, with one
// workspace (grown as needed, from the stream-ordered pool). A blocking
// stream: the kernel library zeroes the workspace's flags on the legacy
// default stream, which is then ordered between consecutive launches.
#ifndef GEMM_SERVICE_CUDA_REDUCING_STREAM_H_
#define GEMM_SERVICE_CUDA_REDUCING_STREAM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/gemm.h"
#include "service/cuda/resources.h"

namespace gemm {
namespace gpu {

// One reducing launch, as a lane hands it over.
struct ReducingLaunch {
  gemm_kernels::Gemm* gemm = nullptr;
  const gemm_kernels::Gemm::Plan* plan = nullptr;
  void* operand_copies = nullptr;  // for Gemm::Initialize; may be null
  size_t workspace_bytes = 0;
  cudaEvent_t inputs_ready = nullptr;  // recorded on the lane after its H2D copy
  cudaEvent_t start = nullptr;         // recorded here around the launch
  cudaEvent_t end = nullptr;
  cudaStream_t lane = nullptr;  // made to wait for `end`
};

class ReducingStream {
 public:
  // On the current device.
  static absl::StatusOr<std::unique_ptr<ReducingStream>> Create();
  // Frees the workspace in stream order and waits for the stream.
  ~ReducingStream();

  // Sets up and enqueues `launch` here, in turn with the other lanes'.
  // `*ran` tells whether it did: without a workspace (the pool is out of
  // memory) nothing is enqueued and the caller runs the launch data-parallel.
  absl::Status Enqueue(const ReducingLaunch& launch, bool* ran);

 private:
  explicit ReducingStream(Stream stream) : stream_(std::move(stream)) {}
  // Makes the workspace at least `bytes`; it stays empty if that fails.
  void GrowWorkspace(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Stream stream_;
  absl::Mutex mu_;
  PoolMemory workspace_ ABSL_GUARDED_BY(mu_);  // allocated on stream_
};

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_REDUCING_STREAM_H_
