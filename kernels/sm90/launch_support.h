// What the host sides of the Hopper kernels (sm90_gemm.cu, sm90_fp8_gemm.cu)
// share: tensor maps through the driver's cuTensorMapEncodeTiled (found
// through the runtime's entry-point query, so nothing links -lcuda), the
// dynamic shared memory a kernel opts into, and launches with programmatic
// stream serialization and clusters. Host code, compiled by nvcc with them.
#ifndef GEMM_KERNELS_SM90_LAUNCH_SUPPORT_H_
#define GEMM_KERNELS_SM90_LAUNCH_SUPPORT_H_

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "kernels/device_info.h"
#include "kernels/sm90/tma_params.h"

namespace gemm_kernels {
namespace sm90_launch {

// The driver's cuTensorMapEncodeTiled, or null where the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &query) != cudaSuccess ||
        query != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// A 3-D tensor map of `tp` over `base`, 128-byte swizzled, with L2
// `promotion`; false with *error set when the driver refuses it.
// NOTES: L2 promotion. With 256 B each 128-byte box row's miss also brings
// the next 128 bytes of the row (the next k-block) into the L2. A/B in one
// binary (H200, four alternations each), 128 B against 256 B:
// grouped lists +1-4% (64 problems 107.2-108.5 -> 111.9-113.5 TFLOP/s),
// 128 x 128 x 65536 split-K 128 +4% (113-114 -> 116-118), skinny split-K
// with the reduction kernel unchanged, 256 x 4096 x 16384 (in-kernel
// split-K 2) -1%, the compute-bound shapes within that call's noise. So
// grouped launches and split-K with stored partials take 128 B, the rest
// keeps 256 B.
inline bool EncodeTensorMap(const TmaOperandParams& tp, const void* base,
                            CUtensorMapDataType dtype, CUtensorMap* out, std::string* error,
                            CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  auto encode = TensorMapEncoder();
  if (!encode) {
    *error = "cuTensorMapEncodeTiled unavailable from the driver";
    return false;
  }
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(out, dtype, 3, const_cast<void*>(base), tp.dims, tp.strides_bytes,
                            tp.box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, promotion,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *error = "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r));
    return false;
  }
  return true;
}

// Lets `func` use `smem_bytes` of dynamic shared memory on the current
// device; false with *error naming both figures when the device allows less.
inline bool OptIntoSharedMemory(const void* func, size_t smem_bytes, std::string* error) {
  DeviceInfo dev;
  if (!CurrentDeviceInfo(&dev, error)) return false;
  if (static_cast<size_t>(dev.smem_optin_bytes) < smem_bytes) {
    *error = "device allows " + std::to_string(dev.smem_optin_bytes) +
             " bytes of shared memory per block, kernel needs " + std::to_string(smem_bytes);
    return false;
  }
  const cudaError_t e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem_bytes));
  if (e != cudaSuccess) {
    *error = std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

// The launch configuration of a kernel, with programmatic stream
// serialization when `pdl` (its setup may overlap the previous kernel's
// tail; it waits for it with griddepcontrol) and, when `cluster` > 1,
// clusters of that many CTAs.
struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr[2];
  LaunchConfig(int grid, int block, size_t smem, void* stream, int cluster, bool pdl = true) {
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = smem;
    config.stream = static_cast<cudaStream_t>(stream);
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = cluster;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = cluster > 1 ? 2 : 1;
  }
};

// Launches `func` with its one parameter block `param`.
inline cudaError_t LaunchKernel(const void* func, void* param, int grid, int block, size_t smem,
                                void* stream, int cluster = 1, bool pdl = true) {
  void* args[] = {param};
  LaunchConfig lc(grid, block, smem, stream, cluster, pdl);
  return cudaLaunchKernelExC(&lc.config, func, args);
}

}  // namespace sm90_launch
}  // namespace gemm_kernels

#endif  // GEMM_KERNELS_SM90_LAUNCH_SUPPORT_H_
