#include "service/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace gemm {
namespace gpu {

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace gpu
}  // namespace gemm
