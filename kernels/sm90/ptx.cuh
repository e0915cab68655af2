// Thin wrappers over the sm_90 PTX the Hopper kernel needs: mbarriers, TMA
// loads, wgmma fences, setmaxnreg. Device code only.
#pragma once

#include <cstdint>

namespace gemm_kernels::sm90::ptx {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count));
}

// Makes barrier initialization visible to the async (TMA) proxy.
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}

// Spins until the phase with parity `parity` of `bar` has completed.
// kClusterAcquire: acquire at cluster scope, so that what a remote arriver
// released (MbarArriveRemote) is visible after it returns.
template <bool kClusterAcquire = false>
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = SmemAddr(bar);
  uint32_t done = 0;
  do {
    if constexpr (kClusterAcquire) {
      asm volatile(
          "{\n.reg .pred p;\n"
          "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(addr), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n.reg .pred p;\n"
          "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(addr), "r"(parity)
          : "memory");
    }
  } while (!done);
}

__device__ __forceinline__ void PrefetchTensorMap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// 3-D tiled TMA load into shared memory, completing on `bar` (complete_tx).
// Out-of-bounds elements of the box are zero-filled and still count as bytes.
__device__ __forceinline__ void TmaLoad3d(void* dst, const void* tmap, uint64_t* bar, int c0,
                                          int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(SmemAddr(bar))
      : "memory");
}

// TmaLoad3d into the same shared-memory offset of every CTA of the cluster
// in `cta_mask`; each destination CTA's mbarrier at `bar`'s offset receives
// the transaction bytes.
__device__ __forceinline__ void TmaLoad3dMulticast(void* dst, const void* tmap, uint64_t* bar,
                                                   int c0, int c1, int c2, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(SmemAddr(bar)),
      "h"(cta_mask)
      : "memory");
}

// 3-D tiled TMA store of a shared-memory box to global memory, tracked by
// this thread's bulk async-groups. Box elements outside the tensor are not
// written, so ragged tiles need no predicates.
__device__ __forceinline__ void TmaStore3d(const void* tmap, const void* src, int c0, int c1,
                                           int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(SmemAddr(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// 16-byte asynchronous copy from global to shared memory, tracked by this
// thread's cp.async groups; CpAsyncWaitAll waits for all of them.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(smem)),
               "l"(reinterpret_cast<uint64_t>(gmem))
               : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ void BulkCommitGroup() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's committed bulk groups still read
// their shared-memory source (their global writes may still be in flight).
template <int N>
__device__ __forceinline__ void BulkWaitGroupRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Orders this thread's ordinary shared-memory writes before later async-proxy
// (TMA) reads of them.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Programmatic dependent launch: wait until the previous grid in the stream
// has completed and its memory is visible; let the next grid start launching.
__device__ __forceinline__ void GridDependencyWait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void LaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

template <int kRegs>
__device__ __forceinline__ void SetMaxNRegDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void SetMaxNRegInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// Makes a tensor map written to global memory through the generic proxy
// (here: copied from the host before the launch) visible to the TMA unit.
__device__ __forceinline__ void FenceTensorMapAcquire(const void* tmap) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(
                   reinterpret_cast<uint64_t>(tmap))
               : "memory");
}

// Barrier over `threads` threads (a multiple of 32) with id 1..15 (0 is
// __syncthreads).
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Stream-K flags. The signal follows a barrier over the writers of the
// partial; the fence makes their stores visible at GPU scope before the flag.
__device__ __forceinline__ void SignalFlag(int* flag) {
  __threadfence();
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(flag), "r"(1) : "memory");
}

// Spins until *counter == target (acquire). NOTES: equality, not >=: a
// stream-K flag region may hold another plan's partials from an earlier
// launch on the same workspace (the signal overwrites them with 1), and
// such bits read as a large count ended the wait early before the test was
// an equality. A schedule bug would otherwise hang the GPU; after ~10 s of
// spinning the kernel traps, so the launch fails with an error instead.
__device__ __forceinline__ void WaitCounter(const int* counter, int target) {
  const long long start = clock64();
  while (true) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    if (v == target) return;
    __nanosleep(64);
    if (clock64() - start > (1ll << 34)) asm volatile("trap;");
  }
}

// Spins until *flag == 1.
__device__ __forceinline__ void WaitFlag(const int* flag) { WaitCounter(flag, 1); }

// Split-K summed in the grid: counts this CTA in, after a barrier over the
// threads whose stores the count publishes (the fence is cumulative).
__device__ __forceinline__ void ArriveCounter(int* counter) {
  __threadfence();
  atomicAdd(counter, 1);
}

// ---- 2-CTA clusters (paired split-K): distributed shared memory.

// Every thread of every CTA of the cluster; orders the barrier
// initializations before any remote arrive.
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The shared::cluster address of `p` (a shared::cta variable) in CTA `rank`.
__device__ __forceinline__ uint32_t MapToRank(const void* p, uint32_t rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(SmemAddr(p)), "r"(rank));
  return out;
}

// Arrives on an mbarrier of another CTA of the cluster, releasing this
// thread's earlier memory operations (and those ordered before it by a CTA
// barrier) at cluster scope.
__device__ __forceinline__ void MbarArriveRemote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr)
               : "memory");
}

// The same at CTA scope: orders nothing beyond this thread's own accesses
// to shared memory. NOTES: handing a ring stage back to a cluster peer needs
// no more (the stage's wgmma reads are complete); the cluster-scope release
// above also waits for the thread's outstanding global stores, and per
// stage it cost the grouped A-multicast experiment 30%.
__device__ __forceinline__ void MbarArriveRemoteCta(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}

__device__ __forceinline__ float4 LdSharedCluster(uint32_t cluster_addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(cluster_addr)
               : "memory");
  return v;
}

// wgmma shared-memory matrix descriptor for a 128-byte-swizzled tile.
// K-major: 8-row groups of 128-byte rows, `sbo` bytes apart (lbo unused).
// MN-major: 64-element MN chunks `lbo` bytes apart, 8-k groups `sbo` apart.
__device__ __forceinline__ uint64_t MakeSmemDesc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = 0;
  desc |= uint64_t((smem_addr & 0x3FFFF) >> 4);
  desc |= uint64_t((lbo >> 4) & 0x3FFF) << 16;
  desc |= uint64_t((sbo >> 4) & 0x3FFF) << 32;
  desc |= uint64_t(1) << 62;  // 128-byte swizzle
  return desc;
}

}  // namespace gemm_kernels::sm90::ptx
