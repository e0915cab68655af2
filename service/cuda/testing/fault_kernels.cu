#include "service/cuda/testing/fault_kernels.h"

#include <cuda_runtime.h>

namespace gemm {
namespace gpu_testing {
namespace {

// An address far above any allocation the driver hands out on a 64-bit
// virtual address space, and aligned, so the store faults rather than
// misaligns.
__global__ void StoreToUnmappedAddress() {
  volatile int* p = reinterpret_cast<volatile int*>(0x7ff000000000ull);
  *p = 1;
}

__device__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinFor(long long nanoseconds) {
  const unsigned long long start = GlobalTimerNs();
  while (GlobalTimerNs() - start < static_cast<unsigned long long>(nanoseconds)) {
  }
}

std::string LaunchError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

}  // namespace

std::string EnqueueIllegalAddress(void* stream) {
  StoreToUnmappedAddress<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>();
  return LaunchError();
}

std::string EnqueueSpin(void* stream, int64_t nanoseconds) {
  SpinFor<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(nanoseconds);
  return LaunchError();
}

}  // namespace gpu_testing
}  // namespace gemm
