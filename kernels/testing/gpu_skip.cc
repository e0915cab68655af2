#include "kernels/testing/gpu_skip.h"

#include <cuda_runtime.h>

namespace gemm_kernels {
namespace testing {

std::string NoGpuReason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  }
  if (count == 0) return "no CUDA device on this machine";
  return "";
}

std::string NoHopperReason(const std::string& needs) {
  if (std::string why = NoGpuReason(); !why.empty()) return why;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cudaGetDeviceProperties failed";
  if (prop.major != 9 || prop.minor != 0) return needs + " needs a Hopper (sm_90) GPU";
  return "";
}

}  // namespace testing
}  // namespace gemm_kernels
