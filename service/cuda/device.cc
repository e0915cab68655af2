#include "service/cuda/device.h"

#include <cuda_runtime.h>
#include <stdlib.h>

#include "service/cuda/cuda_status.h"

namespace gemm {
namespace gpu {

int VisibleDeviceCount() {
  // Before the driver starts, which reads it once. With lazy loading (CUDA's
  // default) the first launch of each kernel loads its module, and loading
  // waits for the device: behind a kernel that hangs, every lane (and every
  // executor of the process) would stop at its next new kernel, even after
  // the watchdog took the hung GPU out of service. Eager loading takes the
  // modules at start instead. A CUDA_MODULE_LOADING set by the operator wins.
  setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error a missing driver leaves behind
    return 0;
  }
  return n;
}

absl::StatusOr<DeviceProperties> QueryDevice(int device) {
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  DeviceProperties out;
  out.name = prop.name;
  out.major = prop.major;
  out.minor = prop.minor;
  out.multiprocessors = static_cast<uint32_t>(prop.multiProcessorCount);
  out.total_memory = prop.totalGlobalMem;
  return out;
}

bool RunsSm90aKernels(const DeviceProperties& props) {
  return props.major == 9 && props.minor == 0;
}

absl::StatusOr<uint64_t> DeviceBytesInUse(int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free_bytes = 0, total = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
  return total - free_bytes;
}

absl::Status KeepFreedPoolMemory(int device) {
  cudaMemPool_t pool;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  return absl::OkStatus();
}

absl::Status TrimPool(int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  cudaMemPool_t pool;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
  CUDA_RETURN_IF_ERROR(cudaMemPoolTrimTo(pool, 0));
  return absl::OkStatus();
}

}  // namespace gpu
}  // namespace gemm
