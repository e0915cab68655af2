#include "kernels/quantize/fp8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace gemm_kernels {
namespace {

using gemm::DType;
using gemm::Fp8Operand;

constexpr int kThreads = 256;
// Elements one warp walks in the amax pass: a contiguous run of storage, 32
// at a time (coalesced), so that a lane stays in one group for many steps
// (a whole tensor, a channel along a contiguous row, a 1 x 128 block).
constexpr uint64_t kWarpRun = 32 * 64;

__device__ __forceinline__ float Load(const void* values, DType type, uint64_t e) {
  switch (type) {
    case DType::kBf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(values)[e]);
    case DType::kFp16:
      return __half2float(static_cast<const __half*>(values)[e]);
    default:
      return static_cast<const float*>(values)[e];
  }
}

// The scale group of storage index e.
__device__ __forceinline__ uint64_t GroupOf(const Fp8Operand& g, uint64_t e) {
  if (g.mode == gemm::ScaleMode::kTensor) return 0;
  const bool row_major = g.layout == gemm::Layout::kRowMajor;
  const uint64_t r = row_major ? e / g.cols : e % g.rows;
  const uint64_t c = row_major ? e % g.cols : e / g.rows;
  return gemm::ScaleIndex(g, r, c);
}

__device__ __forceinline__ void Flush(unsigned* amax_bits, uint64_t group, unsigned bits) {
  if (bits != 0) atomicMax(amax_bits + group, bits);
}

// amax per group, as the bits of a non-negative float (which order as
// unsigned integers do), and the first non-finite storage index. A lane
// keeps a running maximum while its group stays the same; where a whole
// warp ends in one group it reduces before the one atomic.
__global__ void AmaxKernel(const void* __restrict__ values, DType type, Fp8Operand g,
                           unsigned* __restrict__ amax_bits,
                           unsigned long long* __restrict__ first_bad) {
  const uint64_t n = g.rows * g.cols;
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  const uint64_t begin = warp * kWarpRun;
  const uint64_t end = begin + kWarpRun < n ? begin + kWarpRun : n;
  uint64_t group = ~uint64_t{0};
  unsigned bits = 0;
  for (uint64_t e = begin + lane; e < end; e += 32) {
    const float v = Load(values, type, e);
    if (!isfinite(v)) {
      atomicMin(first_bad, static_cast<unsigned long long>(e));
      continue;
    }
    const uint64_t here = GroupOf(g, e);
    if (here != group) {
      if (group != ~uint64_t{0}) Flush(amax_bits, group, bits);
      group = here;
      bits = 0;
    }
    bits = max(bits, __float_as_uint(fabsf(v)));
  }
  const uint64_t first = __shfl_sync(0xffffffffu, group, 0);
  const bool uniform =
      __all_sync(0xffffffffu, group == first || group == ~uint64_t{0}) && first != ~uint64_t{0};
  if (uniform) {
    const unsigned warp_max = __reduce_max_sync(0xffffffffu, bits);
    if (lane == 0) Flush(amax_bits, first, warp_max);
  } else if (group != ~uint64_t{0}) {
    Flush(amax_bits, group, bits);
  }
}

__global__ void ScalesKernel(const unsigned* __restrict__ amax_bits, uint64_t count,
                             DType format, float* __restrict__ scales) {
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    scales[i] = gemm::ScaleForAmax(__uint_as_float(amax_bits[i]), format);
}

__global__ void CodesKernel(const void* __restrict__ values, DType type, Fp8Operand g,
                            DType format, const float* __restrict__ scales,
                            const unsigned long long* __restrict__ first_bad,
                            uint8_t* __restrict__ codes) {
  if (*first_bad != gemm::kQuantizeOk) return;  // refused: nothing is defined
  const uint64_t n = g.rows * g.cols;
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    codes[e] = gemm::QuantizeElement(Load(values, type, e), scales[GroupOf(g, e)], format);
}

std::string LaunchError(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(what) + ": " + cudaGetErrorString(e);
}

}  // namespace

uint64_t Fp8QuantizeWorkspaceBytes(const Fp8Operand& g) {
  return gemm::ScaleCount(g) * sizeof(unsigned);
}

std::string LaunchFp8Quantize(const Fp8QuantizeArgs& a, void* stream) {
  const Fp8Operand& g = a.geometry;
  const uint64_t n = g.rows * g.cols;
  const uint64_t count = gemm::ScaleCount(g);
  if (n == 0) return "fp8 quantize: empty matrix";
  if (count == 0) return "fp8 quantize: scale mode none has no scales to compute";
  if (!gemm::IsFp8(a.format)) return "fp8 quantize: the format must be e4m3 or e5m2";
  if (a.values_type != DType::kFp32 && a.values_type != DType::kBf16 &&
      a.values_type != DType::kFp16)
    return "fp8 quantize: values must be fp32, bf16 or fp16";
  auto s = static_cast<cudaStream_t>(stream);
  auto* amax = static_cast<unsigned*>(a.workspace);
  auto* bad = reinterpret_cast<unsigned long long*>(a.first_non_finite);
  if (cudaMemsetAsync(amax, 0, count * sizeof(unsigned), s) != cudaSuccess ||
      cudaMemsetAsync(bad, 0xff, sizeof(unsigned long long), s) != cudaSuccess)
    return LaunchError("fp8 quantize: clearing the workspace");
  const uint64_t warps = (n + kWarpRun - 1) / kWarpRun;
  const uint64_t amax_blocks = (warps * 32 + kThreads - 1) / kThreads;
  AmaxKernel<<<static_cast<unsigned>(amax_blocks), kThreads, 0, s>>>(a.values, a.values_type, g,
                                                                      amax, bad);
  if (std::string e = LaunchError("fp8 quantize: amax"); !e.empty()) return e;
  const uint64_t scale_blocks = std::min<uint64_t>((count + kThreads - 1) / kThreads, 65535);
  ScalesKernel<<<static_cast<unsigned>(scale_blocks), kThreads, 0, s>>>(amax, count, a.format,
                                                                        a.scales);
  if (std::string e = LaunchError("fp8 quantize: scales"); !e.empty()) return e;
  const uint64_t code_blocks = std::min<uint64_t>((n + kThreads - 1) / kThreads, 1u << 16);
  CodesKernel<<<static_cast<unsigned>(code_blocks), kThreads, 0, s>>>(
      a.values, a.values_type, g, a.format, a.scales, bad, a.codes);
  return LaunchError("fp8 quantize: codes");
}

}  // namespace gemm_kernels
