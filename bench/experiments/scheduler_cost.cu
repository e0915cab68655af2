// Microbenchmark (session 22): what the producer thread of Sm90GemmKernel
// spends between the grid dependency wait and its first TMA load. The
// per-CTA stamps put ~1.0-1.25 us there for 128 x 128 x 65536 split-K
// (schedule_sweep "clock 128x128x65536"); the candidates are the stream-K
// scheduler's construction and first Next() (64-bit divisions) and
// setmaxnreg. Each is timed with clock64 in one thread per CTA, alone.
// Build: nvcc -std=c++17 -O2 -I. -gencode=arch=compute_90a,code=sm_90a \
//          -o scheduler_cost bench/experiments/scheduler_cost.cu
// Outcome (round 14 call 4, H200): split-K construction 569 cycles, first
// Next() 407; data-parallel both 41: about half of the 1 us. Not the 64-bit
// divisions: with the schedulers dividing in 32 bits where the operands fit
// (round 15 call 4, reverted) the same run took 573-715 and 424 cycles.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "kernels/scheduler/stream_k_scheduler.h"

namespace {

using gemm_kernels::StreamKScheduler;
using gemm_kernels::WorkUnit;

// out[block * 4 + i]: cycles of (0) the scheduler's construction, (1) its
// first Next(), (2) both again for a data-parallel launch, (3) a checksum.
__global__ void __launch_bounds__(384, 1) SchedulerCost(long long* out, int tiles_m, int tiles_n,
                                                         int k_blocks, long long sk_tiles) {
  if (threadIdx.x != 0) return;
  long long t0 = clock64();
  StreamKScheduler s(tiles_m, tiles_n, 1, 8, k_blocks, sk_tiles, gridDim.x, blockIdx.x, true);
  // The compiler may not sink the construction past the stamp: its fields
  // feed the asm below.
  asm volatile("" ::"l"(s.iter), "l"(s.iter_end));
  long long t1 = clock64();
  WorkUnit w;
  const bool ok = s.Next(&w);
  asm volatile("" ::"r"(w.k_begin), "r"(w.k_end), "r"(w.tile.m_block), "r"(w.tile.n_block));
  long long t2 = clock64();
  StreamKScheduler d(tiles_m, tiles_n, 1, 8, k_blocks, 0, gridDim.x, blockIdx.x, false);
  WorkUnit v;
  const bool ok2 = d.Next(&v);
  asm volatile("" ::"r"(v.k_begin), "r"(v.k_end), "r"(v.tile.m_block), "r"(v.tile.n_block));
  long long t3 = clock64();
  out[blockIdx.x * 4 + 0] = t1 - t0;
  out[blockIdx.x * 4 + 1] = t2 - t1;
  out[blockIdx.x * 4 + 2] = t3 - t2;
  out[blockIdx.x * 4 + 3] = w.k_begin + w.k_end + v.tile.m_block + ok + ok2;
}

}  // namespace

int main() {
  long long* out;
  const int grid = 128;
  cudaMalloc(&out, grid * 4 * sizeof(long long));
  // 128 x 128 x 65536 split-K 128 (one tile, 1024 k-blocks), then 1000^3
  // data-parallel on 128x128 (8 x 8 tiles).
  for (int rep = 0; rep < 3; ++rep) {
    SchedulerCost<<<grid, 384>>>(out, 1, 1, 1024, 1);
    cudaDeviceSynchronize();
  }
  std::vector<long long> h(grid * 4);
  cudaMemcpy(h.data(), out, h.size() * sizeof(long long), cudaMemcpyDeviceToHost);
  long long sum[3] = {0, 0, 0};
  for (int b = 0; b < grid; ++b)
    for (int i = 0; i < 3; ++i) sum[i] += h[b * 4 + i];
  std::printf("cycles (mean over %d CTAs): split-K ctor %lld, first Next %lld; "
              "data-parallel ctor + Next %lld (%s)\n",
              grid, sum[0] / grid, sum[1] / grid, sum[2] / grid,
              cudaGetErrorString(cudaGetLastError()));
  return 0;
}
