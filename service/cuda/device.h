// What the CUDA executor asks the runtime about its devices, in one place,
// and the set-up of a device's stream-ordered memory pool.
#ifndef GEMM_SERVICE_CUDA_DEVICE_H_
#define GEMM_SERVICE_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemm {
namespace gpu {

// The number of CUDA devices visible, 0 when there is no driver or GPU. The
// first CUDA call of the executor: it turns on eager module loading
// (CUDA_MODULE_LOADING=EAGER unless set) before the driver starts.
int VisibleDeviceCount();

struct DeviceProperties {
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  uint32_t multiprocessors = 0;
  uint64_t total_memory = 0;  // bytes
};

absl::StatusOr<DeviceProperties> QueryDevice(int device);

// Whether the sm_90a kernels (grouped, FP8) run on `props`: they are
// machine code for compute capability 9.0 only.
bool RunsSm90aKernels(const DeviceProperties& props);

// Device memory in use on `device` (total minus free, all processes). Makes
// `device` current.
absl::StatusOr<uint64_t> DeviceBytesInUse(int device);

// Keeps freed memory in `device`'s default pool instead of returning it to
// the driver, so that steady-state batches allocate nothing new.
absl::Status KeepFreedPoolMemory(int device);

// Waits for all work on `device` (made current), then returns its pool's
// cached memory to the driver.
absl::Status TrimPool(int device);

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_DEVICE_H_
