#include "kernels/copy/kmajor_copy.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace gemm_kernels {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // blockDim.y: each thread moves 4 elements

// A 32 x 32 tile through shared memory: reads run along the source's
// contiguous rows index, writes along k, both coalesced. The padding column
// keeps the transposed reads free of bank conflicts. Grid-stride loops over
// k-tiles and batch members cover extents beyond the grid's y and z limits.
__global__ void KMajorCopyF32Kernel(const float* __restrict__ src, int64_t ld,
                                    int64_t batch_stride, int64_t rows, int64_t k,
                                    int64_t members, float* __restrict__ dst, int64_t ld_copy) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_tiles = (k + kTile - 1) / kTile;
  for (int64_t b = blockIdx.z; b < members; b += gridDim.z) {
    const float* s = src + b * batch_stride;
    float* d = dst + b * rows * ld_copy;
    for (int64_t kt = blockIdx.y; kt < k_tiles; kt += gridDim.y) {
      const int64_t k0 = kt * kTile;
      for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
        const int64_t r = r0 + threadIdx.x, kk = k0 + j;
        if (r < rows && kk < k) tile[j][threadIdx.x] = s[kk * ld + r];
      }
      __syncthreads();
      for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
        const int64_t r = r0 + j, kk = k0 + threadIdx.x;
        if (r < rows && kk < k) d[r * ld_copy + kk] = tile[threadIdx.x][j];
      }
      __syncthreads();
    }
  }
}

}  // namespace

std::string LaunchKMajorCopyF32(const float* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                int64_t k, int64_t members, float* dst, int64_t ld_copy,
                                void* stream) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t k_tiles = (k + kTile - 1) / kTile;
  if (row_tiles > 0x7fffffff) return "K-major copy: too many rows";
  const dim3 grid(static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>(std::min<int64_t>(k_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(members, 65535)));
  KMajorCopyF32Kernel<<<grid, dim3(kTile, kRowsPerPass), 0, static_cast<cudaStream_t>(stream)>>>(
      src, ld, batch_stride, rows, k, members, dst, ld_copy);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

}  // namespace gemm_kernels
