// CUDA runtime errors as absl::Status, for the CUDA executor's files.
#ifndef GEMM_SERVICE_CUDA_CUDA_STATUS_H_
#define GEMM_SERVICE_CUDA_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace gemm {
namespace gpu {

// OK for cudaSuccess, else INTERNAL naming `what` and the CUDA error.
absl::Status CudaStatus(cudaError_t e, const char* what);

// Whether `e` is sticky: the device's context is corrupt (an illegal address,
// a kernel that trapped, an uncorrectable ECC error) and every later CUDA
// call on it fails, so the device must go out of service. Recoverable errors
// such as cudaErrorMemoryAllocation are not.
bool IsStickyError(cudaError_t e);

}  // namespace gpu
}  // namespace gemm

// Returns the INTERNAL status of a failing CUDA runtime call, which it names.
#define CUDA_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                               \
    if (absl::Status st_ = ::gemm::gpu::CudaStatus((expr), #expr); !st_.ok()) return st_; \
  } while (0)

#endif  // GEMM_SERVICE_CUDA_CUDA_STATUS_H_
