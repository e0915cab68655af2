// How many clusters of 2, 4, 8 and 16 CTAs of the Hopper GEMM kernel's size
// (384 threads, all 65536 registers, ~200 KB of shared memory: one CTA per
// SM) an H200 holds at once (cudaOccupancyMaxActiveClusters). Session 22's
// question for a cluster-wide split-K pre-reduction through distributed
// shared memory: K-range clusters of C CTAs would cut the partials stored
// to L2 C-fold, if enough clusters fit.
// Build: nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a \
//          -o cluster_capacity bench/experiments/cluster_capacity.cu
// Outcome (round 14 call 8, H200): 132 single CTAs, 66 clusters of 2, 30
// of 4, 15 of 8, 7 of 16.
#include <cuda_runtime.h>

#include <cstdio>

__global__ void __launch_bounds__(384, 1) GemmSized(int* out) {
  extern __shared__ int smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out != nullptr) out[blockIdx.x] = smem[(threadIdx.x + 1) % 384];
}

int main() {
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(GemmSized, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(GemmSized, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int c : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    config.gridDim = dim3(c * 16);
    config.blockDim = dim3(384);
    config.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = c;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    int clusters = -1;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, GemmSized, &config);
    std::printf("cluster of %2d CTAs: %3d clusters at once (%3d CTAs) %s\n", c, clusters,
                clusters * c, cudaGetErrorString(e));
    cudaGetLastError();
  }
  return 0;
}
