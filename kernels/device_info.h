// The current CUDA device's properties that the kernels' host code needs,
// asked once per device (cudaGetDeviceProperties is slow: a server would ask
// for every launch) and shared by the launch API, the grouped launch and the
// Hopper plan builder. Plain C++.
#pragma once

#include <string>

namespace gemm_kernels {

struct DeviceInfo {
  int device = -1;
  int major = 0;
  int minor = 0;
  int num_sms = 0;
  int smem_optin_bytes = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  // sm_90a machine code runs on compute capability 9.0 only.
  bool sm90() const { return major == 9 && minor == 0; }
};

// The properties of the current device (cudaGetDevice). On failure returns
// false and sets `error` to the CUDA call and its error text.
bool CurrentDeviceInfo(DeviceInfo* out, std::string* error);

}  // namespace gemm_kernels
