#include "kernels/device_info.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

namespace gemm_kernels {

bool CurrentDeviceInfo(DeviceInfo* out, std::string* error) {
  static std::mutex mu;
  static std::vector<DeviceInfo> cache;  // by device; num_sms 0: not asked yet
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) {
    *error = std::string("cudaGetDevice: ") + cudaGetErrorString(e);
    return false;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(cache.size()) <= device) cache.resize(device + 1);
  DeviceInfo& info = cache[device];
  if (info.num_sms == 0) {
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
      *error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
      return false;
    }
    info.device = device;
    info.major = prop.major;
    info.minor = prop.minor;
    info.smem_optin_bytes = static_cast<int>(prop.sharedMemPerBlockOptin);
    info.num_sms = prop.multiProcessorCount;
  }
  *out = info;
  return true;
}

}  // namespace gemm_kernels
