// Microtest for the dense A-multicast hang (session 12): the empty-barrier
// protocol of Sm90GemmKernel with A multicast, without TMA or MMAs.
// 2-CTA clusters, 384 threads (producer warpgroup + 2 consumer warpgroups),
// a ring of kStages stages over kBlocks k-blocks: the producer waits on its
// empty[s] (count 16: 8 local consumer warps + 8 of the peer), arrives on
// its own full[s]; each consumer warp waits on full[s], and its leader
// arrives on its own empty[s] and remotely on the peer's.
// Build: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o multicast_arrive_probe multicast_arrive_probe.cu
// usage: multicast_arrive_probe MODE   (bits: 1 setmaxnreg, 2 exit cluster barrier,
//                         4 remote arrive .release.cluster, 8 remote arrives off,
//                         16 remote arrive .relaxed.cluster,
//                         32 with 1: the producer at 48, not 40: 48 + 2 x 232 = 512)
// Progress goes to mapped host memory, so a hang still reports.
// Outcome (round 13 call 1, H200): every mode finishes except 33 and 35
// (48 + 2 x 232 registers, 8 more per thread slot than the CTA's 504), which
// hang with a consumer warpgroup that never ran (bench/RESULTS.md).
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>
#include <unistd.h>
constexpr int kStages = 5, kBlocks = 16, kGrid = 8;
__device__ __forceinline__ uint32_t Smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t Rank() { uint32_t r; asm volatile("mov.u32 %0, %cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ uint32_t Mapa(uint32_t a, uint32_t rank) { uint32_t o; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(o) : "r"(a), "r"(rank)); return o; }
__device__ __forceinline__ void Wait(uint64_t* b, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(Smem(b)), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void Arrive(uint64_t* b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(Smem(b)) : "memory"); }
__global__ void __launch_bounds__(384, 1) K(volatile int* out, int mode) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + 0x30000);
  uint64_t* empty = full + kStages;
  const int b = blockIdx.x;
  const int peer = (b % 2) ^ 1;
  volatile int* o = out + b * 16;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(Smem(&full[s])), "r"(1));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(Smem(&empty[s])), "r"((mode & 8) ? 8 : 16));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    o[0] = Rank(); o[1] = Smem(&empty[0]); o[2] = Mapa(Smem(&empty[0]), peer);
  }
  __syncthreads();
  ClusterSync();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    if ((mode & 1) && (mode & 32)) asm volatile("setmaxnreg.dec.sync.aligned.u32 48;");
    else if (mode & 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int stage = 0; uint32_t phase = 0;
      for (int kb = 0; kb < kBlocks; ++kb) {
        Wait(&empty[stage], phase ^ 1);
        Arrive(&full[stage]);
        o[3] = kb + 1;  // producer: k-blocks issued
        if (++stage == kStages) { stage = 0; phase ^= 1; }
      }
    }
  } else {
    if (mode & 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    int stage = 0; uint32_t phase = 0;
    for (int kb = 0; kb < kBlocks; ++kb) {
      Wait(&full[stage], phase);
      if (threadIdx.x % 32 == 0) {
        Arrive(&empty[stage]);
        if (!(mode & 8)) {
          const uint32_t remote = Mapa(Smem(&empty[stage]), peer);
          if (mode & 4) asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
          else if (mode & 16) asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
          else asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
        }
      }
      if (threadIdx.x == 128) o[4] = kb + 1;  // consumer 0: k-blocks consumed
      if (++stage == kStages) { stage = 0; phase ^= 1; }
    }
  }
  if (threadIdx.x == 0) o[5] = 1;
  if (mode & 2) { __syncwarp(); ClusterSync(); }
  if (threadIdx.x == 0) o[6] = 1;
}
int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0;
  int* host; cudaHostAlloc(&host, 4096 * 4, cudaHostAllocMapped);
  int* dev; cudaHostGetDevicePointer(&dev, host, 0);
  for (int i = 0; i < 4096; ++i) host[i] = 0;
  cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  cudaLaunchConfig_t c = {}; cudaLaunchAttribute a[2];
  c.gridDim = dim3(kGrid); c.blockDim = dim3(384); c.dynamicSmemBytes = 200 * 1024; c.stream = 0;
  a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[0].val.programmaticStreamSerializationAllowed = 1;
  a[1].id = cudaLaunchAttributeClusterDimension; a[1].val.clusterDim.x = 2; a[1].val.clusterDim.y = 1; a[1].val.clusterDim.z = 1;
  c.attrs = a; c.numAttrs = 2;
  cudaError_t e = cudaLaunchKernelEx(&c, K, (volatile int*)dev, mode);
  usleep(2000000);
  cudaError_t q = cudaStreamQuery(0);
  printf("mode %d (setmaxnreg %s, exit barrier %d, cluster-scope remote %d, remote off %d, relaxed remote %d): launch %s, after 2 s %s\n",
         mode, (mode & 1) ? ((mode & 32) ? "48/232" : "40/232") : "off", (mode >> 1) & 1, (mode >> 2) & 1,
         (mode >> 3) & 1, (mode >> 4) & 1, cudaGetErrorString(e), q == cudaSuccess ? "DONE" : cudaGetErrorString(q));
  for (int b = 0; b < 4; ++b) {
    volatile int* o = host + b * 16;
    printf("  block %d rank %d empty 0x%x mapa(peer) 0x%x producer %d/%d consumer %d/%d end %d past-exit %d\n", b, o[0], o[1], o[2], o[3], kBlocks, o[4], kBlocks, o[5], o[6]);
  }
  fflush(stdout);
  _exit(q == cudaSuccess ? 0 : 3);
}
