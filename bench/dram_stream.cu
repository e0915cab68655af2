// A pure streaming kernel for bench/schedule_sweep: reads `read_bytes` and
// writes `write_bytes` with 16-byte accesses over a grid-stride loop, so a
// GEMM's DRAM traffic can be timed without any arithmetic (its floor).
#include <cuda_runtime.h>

#include <algorithm>

#include "bench/dram_stream.h"

namespace gemm_bench {
namespace {

__global__ void StreamKernel(const uint4* __restrict__ in, size_t n_in, uint4* __restrict__ out,
                             size_t n_out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (size_t i = tid; i < n_in; i += stride) {
    const uint4 v = in[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  // Writes carry the reads' checksum so neither loop can be optimized away.
  for (size_t i = tid; i < n_out; i += stride) out[i] = make_uint4(acc, acc + 1, acc + 2, acc + 3);
}

// Reads and writes at once, as a GEMM's epilogue overlaps the next tiles'
// loads: each step reads two 16-byte vectors and writes one (A + B in, D
// out), four steps in flight per thread. Expects n_in == 2 * n_out.
__global__ void MixedKernel(const uint4* __restrict__ in, uint4* __restrict__ out, size_t n_out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n_out; i += 4 * stride) {
    uint4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      a[u] = in[2 * (i + u * stride)];
      b[u] = in[2 * (i + u * stride) + 1];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      out[i + u * stride] =
          make_uint4(a[u].x ^ b[u].x, a[u].y ^ b[u].y, a[u].z ^ b[u].z, a[u].w ^ b[u].w);
  }
  for (; i < n_out; i += stride) {
    const uint4 a = in[2 * i], b = in[2 * i + 1];
    out[i] = make_uint4(a.x ^ b.x, a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
  }
}

}  // namespace

std::string LaunchMixedStream(const void* in, void* out, size_t write_bytes, int blocks,
                              void* stream) {
  MixedKernel<<<blocks, 512, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(in), static_cast<uint4*>(out), write_bytes / 16);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : cudaGetErrorString(e);
}

std::string LaunchStream(const void* in, size_t read_bytes, void* out, size_t write_bytes,
                         int blocks, void* stream) {
  StreamKernel<<<blocks, 512, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(in), read_bytes / 16, static_cast<uint4*>(out), write_bytes / 16);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : cudaGetErrorString(e);
}

}  // namespace gemm_bench
