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
template <typename T>
__global__ void KMajorCopyKernel(const T* __restrict__ src, int64_t ld, int64_t batch_stride,
                                 int64_t rows, int64_t k, int64_t members, T* __restrict__ dst,
                                 int64_t ld_copy) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_tiles = (k + kTile - 1) / kTile;
  for (int64_t b = blockIdx.z; b < members; b += gridDim.z) {
    const T* s = src + b * batch_stride;
    T* d = dst + b * rows * ld_copy;
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

// Row by row: consecutive threads move consecutive elements of a row, so
// both sides are coalesced. Grid-stride over rows (and members) past the
// grid's limits.
template <typename T>
__global__ void RepitchCopyKernel(const T* __restrict__ src, int64_t ld, int64_t batch_stride,
                                  int64_t rows, int64_t k, int64_t members, T* __restrict__ dst,
                                  int64_t ld_copy) {
  for (int64_t b = blockIdx.z; b < members; b += gridDim.z) {
    const T* s = src + b * batch_stride;
    T* d = dst + b * rows * ld_copy;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
      for (int64_t kk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; kk < k;
           kk += static_cast<int64_t>(gridDim.x) * blockDim.x)
        d[r * ld_copy + kk] = s[r * ld + kk];
    }
  }
}

std::string LaunchError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

template <typename T>
std::string LaunchKMajorCopy(const T* src, int64_t ld, int64_t batch_stride, int64_t rows,
                             int64_t k, int64_t members, T* dst, int64_t ld_copy, void* stream) {
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t k_tiles = (k + kTile - 1) / kTile;
  if (row_tiles > 0x7fffffff) return "K-major copy: too many rows";
  const dim3 grid(static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>(std::min<int64_t>(k_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(members, 65535)));
  KMajorCopyKernel<T><<<grid, dim3(kTile, kRowsPerPass), 0, static_cast<cudaStream_t>(stream)>>>(
      src, ld, batch_stride, rows, k, members, dst, ld_copy);
  return LaunchError();
}

template <typename T>
std::string LaunchRepitchCopy(const T* src, int64_t ld, int64_t batch_stride, int64_t rows,
                              int64_t k, int64_t members, T* dst, int64_t ld_copy, void* stream) {
  constexpr int kThreads = 256;
  const int64_t k_blocks = std::min<int64_t>((k + kThreads - 1) / kThreads, 1024);
  const dim3 grid(static_cast<unsigned>(k_blocks),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(members, 65535)));
  RepitchCopyKernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      src, ld, batch_stride, rows, k, members, dst, ld_copy);
  return LaunchError();
}

}  // namespace

std::string LaunchKMajorCopyF32(const float* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                int64_t k, int64_t members, float* dst, int64_t ld_copy,
                                void* stream) {
  return LaunchKMajorCopy(src, ld, batch_stride, rows, k, members, dst, ld_copy, stream);
}

std::string LaunchRepitchCopyF32(const float* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                 int64_t k, int64_t members, float* dst, int64_t ld_copy,
                                 void* stream) {
  return LaunchRepitchCopy(src, ld, batch_stride, rows, k, members, dst, ld_copy, stream);
}

std::string LaunchKMajorCopyU8(const uint8_t* src, int64_t ld, int64_t batch_stride, int64_t rows,
                               int64_t k, int64_t members, uint8_t* dst, int64_t ld_copy,
                               void* stream) {
  return LaunchKMajorCopy(src, ld, batch_stride, rows, k, members, dst, ld_copy, stream);
}

std::string LaunchRepitchCopyU8(const uint8_t* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                int64_t k, int64_t members, uint8_t* dst, int64_t ld_copy,
                                void* stream) {
  return LaunchRepitchCopy(src, ld, batch_stride, rows, k, members, dst, ld_copy, stream);
}

std::string LaunchKMajorCopyU16(const uint16_t* src, int64_t ld, int64_t batch_stride,
                                int64_t rows, int64_t k, int64_t members, uint16_t* dst,
                                int64_t ld_copy, void* stream) {
  return LaunchKMajorCopy(src, ld, batch_stride, rows, k, members, dst, ld_copy, stream);
}

std::string LaunchRepitchCopyU16(const uint16_t* src, int64_t ld, int64_t batch_stride,
                                 int64_t rows, int64_t k, int64_t members, uint16_t* dst,
                                 int64_t ld_copy, void* stream) {
  return LaunchRepitchCopy(src, ld, batch_stride, rows, k, members, dst, ld_copy, stream);
}

}  // namespace gemm_kernels
