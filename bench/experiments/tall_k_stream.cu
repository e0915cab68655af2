// Microbenchmark for the K-heavy split-K shapes (session 22): how fast can
// P CTAs read the operands of 128 x 128 x 65536 bf16 (A and B each 128 rows
// of 65536 K-major elements, 16 MB apiece) when CTA c reads only its own
// contiguous k-range of all 256 rows, as a split-K launch does? Our GEMM
// grid streams them at ~2 TB/s (ncu, round 13 call 7: 44% of DRAM peak)
// whatever the split count from 32 to 132 (round 5), which this separates
// from the MMAs, the epilogue and the reduction:
//   linear   one contiguous 32 MB read (the ceiling for reads)
//   ldg      the split-K byte set read by plain 16-byte loads, each warp a
//            contiguous run of a row, 8 loads in flight per thread
//   tma      the split-K byte set through a TMA ring as Sm90GemmKernel
//            loads it (one producer thread, consumer warps free stages,
//            no MMAs): boxes of W k-elements x R rows, S stages of one A
//            box and one B box, the tensor maps' L2 promotion as given
// Method (bench/ and METHOD.md): random data, six rotating input sets
// (192 MB, over 3x the L2), three warm-up launches per variant, 15
// samples of six back-to-back launches timed with events, the median.
// Build: nvcc -std=c++17 -O2 -I. -gencode=arch=compute_90a,code=sm_90a \
//          -o tall_k_stream bench/experiments/tall_k_stream.cu
// usage: tall_k_stream
// Outcome (round 14 call 2, H200): every reader with enough loads in
// flight takes 11.3-12.9 us per launch (2.6-3.0 TB/s), the GEMM's TMA ring
// from 32 CTAs up included (plain loads from 128 CTAs of 512 threads up),
// like one linear read of 32 MB (12.0 us): the pattern is not what holds
// the GEMM at ~18.7 us (bench/RESULTS.md, KERNEL_NOTES v15).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/sm90/ptx.cuh"

namespace {

namespace ptx = gemm_kernels::sm90::ptx;

constexpr int kRows = 128;            // rows of A and of B
constexpr int64_t kK = 65536;         // elements per row
constexpr int kSets = 6;
constexpr int kRingBytes = 192 * 1024;
constexpr int kConsumerWarps = 4;

#define CHECK(expr)                                                                       \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr,                   \
                   cudaGetErrorString(e_));                                               \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void FillRandom(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    // Two bf16 values in [-1, 1): sign, exponent 126 or 127, random mantissa.
    p[i] = (x & 0x807f807fu) | 0x3f003f00u;
  }
}

// One contiguous read of n 16-byte vectors; the XOR of what a thread read
// goes to `sink` so the loads stay.
__global__ void LinearRead(const uint4* __restrict__ in, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = in[i + u * stride];
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= in[i].x;
  if (acc == 0x12345678u) sink[0] = acc;
}

// First element of CTA c's k-range: whole 64-element k-blocks, as a split-K
// launch cuts them.
__device__ __forceinline__ int64_t KBegin(int c) { return c * (kK / 64) / gridDim.x * 64; }

// The split-K byte set by plain loads: CTA c reads elements
// [c * kK / P, (c + 1) * kK / P) of every row of A and B.
__global__ void SplitKLdg(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b,
                          uint32_t* sink) {
  const int64_t k0 = KBegin(blockIdx.x), k1 = KBegin(blockIdx.x + 1);
  const int vec_per_row = int((k1 - k0) / 8);  // 16-byte vectors
  const int total = 2 * kRows * vec_per_row;
  uint32_t acc = 0;
  int i = threadIdx.x;
  auto load = [&](int idx) {
    const int row = idx / vec_per_row, v = idx - row * vec_per_row;
    const uint16_t* base = row < kRows ? a + int64_t(row) * kK : b + int64_t(row - kRows) * kK;
    return *reinterpret_cast<const uint4*>(base + k0 + 8 * v);
  };
  for (; i + 7 * int(blockDim.x) < total; i += 8 * blockDim.x) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = load(i + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < total; i += blockDim.x) acc ^= load(i).x;
  if (acc == 0x12345678u) sink[0] = acc;
}

struct TmaArgs {
  CUtensorMap a, b;
  int w, r, stages;
};

__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                          int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(ptx::SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(ptx::SmemAddr(bar))
      : "memory");
}

// The split-K byte set through a TMA ring: warp 0's lane 0 loads, warps
// 1..kConsumerWarps wait for each stage and hand it back.
__global__ void __launch_bounds__(32 * (1 + kConsumerWarps), 1)
    SplitKTma(const __grid_constant__ TmaArgs p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + kRingBytes);
  uint64_t* empty = full + p.stages;
  const int box_bytes = p.w * p.r * 2;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      ptx::MbarInit(&full[s], 1);
      ptx::MbarInit(&empty[s], kConsumerWarps);
    }
    ptx::FenceBarrierInit();
  }
  __syncthreads();
  const int64_t k0 = KBegin(blockIdx.x), k1 = KBegin(blockIdx.x + 1);
  const int chunks = int((k1 - k0 + p.w - 1) / p.w);
  const int groups = kRows / p.r;
  const int steps = chunks * groups;
  int stage = 0;
  uint32_t phase = 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < steps; ++s) {
      ptx::MbarWait(&empty[stage], phase ^ 1);
      ptx::MbarArriveExpectTx(&full[stage], 2 * box_bytes);
      const int kc = int(k0) + (s / groups) * p.w, row = (s % groups) * p.r;
      uint8_t* dst = ring + stage * 2 * box_bytes;
      TmaLoad2d(dst, &p.a, &full[stage], kc, row);
      TmaLoad2d(dst + box_bytes, &p.b, &full[stage], kc, row);
      if (++stage == p.stages) stage = 0, phase ^= 1;
    }
  } else if (threadIdx.x >= 32) {
    for (int s = 0; s < steps; ++s) {
      ptx::MbarWait(&full[stage], phase);
      if (threadIdx.x % 32 == 0) ptx::MbarArrive(&empty[stage]);
      if (++stage == p.stages) stage = 0, phase ^= 1;
    }
  }
}

using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeFn Encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q));
  return reinterpret_cast<EncodeFn>(fn);
}

CUtensorMap Map(void* base, int w, int r, CUtensorMapL2promotion promo) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(kK), cuuint64_t(kRows)};
  const cuuint64_t strides[1] = {cuuint64_t(kK * 2)};
  const cuuint32_t box[2] = {cuuint32_t(w), cuuint32_t(r)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult res = Encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box,
                                 elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 w * 2 == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                 promo, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d (w %d r %d)\n", int(res), w, r);
    std::exit(1);
  }
  return m;
}

// Median microseconds per launch of `launch(set)` over rotating sets.
template <class F>
double TimeUs(F launch) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch(i % kSets);
  CHECK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int s = 0; s < 15; ++s) {
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < kSets; ++i) launch(i);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e3 / kSets);
  }
  CHECK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  const size_t operand = size_t(kRows) * kK * 2;  // 16 MB
  const double bytes = 2.0 * operand;
  std::vector<uint16_t*> a(kSets), b(kSets);
  for (int s = 0; s < kSets; ++s) {
    CHECK(cudaMalloc(&a[s], operand));
    CHECK(cudaMalloc(&b[s], operand));
    FillRandom<<<1024, 256>>>(reinterpret_cast<uint32_t*>(a[s]), operand / 4, 17 + 2 * s);
    FillRandom<<<1024, 256>>>(reinterpret_cast<uint32_t*>(b[s]), operand / 4, 18 + 2 * s);
  }
  uint32_t* sink;
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaDeviceSynchronize());
  std::printf("\n| variant | us | TB/s |\n|---|---|---|\n");
  auto report = [&](const std::string& name, double us) {
    std::printf("| %s | %.2f | %.2f |\n", name.c_str(), us, bytes / (us * 1e-6) / 1e12);
    std::fflush(stdout);
  };
  // The ceiling: one contiguous 32 MB allocation per set, read linearly.
  {
    std::vector<uint4*> lin(kSets);
    for (int s = 0; s < kSets; ++s) {
      CHECK(cudaMalloc(&lin[s], 2 * operand));
      FillRandom<<<1024, 256>>>(reinterpret_cast<uint32_t*>(lin[s]), 2 * operand / 4, 99 + s);
    }
    for (int blocks : {prop.multiProcessorCount, 2 * prop.multiProcessorCount,
                       4 * prop.multiProcessorCount}) {
      report("linear, " + std::to_string(blocks) + " x 512 threads", TimeUs([&](int s) {
               LinearRead<<<blocks, 512>>>(lin[s], 2 * operand / 16, sink);
             }));
    }
    for (uint4* p : lin) cudaFree(p);
  }
  for (int grid : {32, 64, 128, 132, 256}) {
    for (int threads : {256, 512}) {
      report("ldg split " + std::to_string(grid) + ", " + std::to_string(threads) + " threads",
             TimeUs([&](int s) { SplitKLdg<<<grid, threads>>>(a[s], b[s], sink); }));
    }
  }
  const size_t smem = kRingBytes + 1024 + 1024;
  CHECK(cudaFuncSetAttribute(SplitKTma, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  struct Tma {
    int grid, w, r, stages;
    CUtensorMapL2promotion promo;
    const char* promo_name;
  };
  const CUtensorMapL2promotion p256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const std::vector<Tma> tma = {
      // As Sm90GemmKernel's 128x128 split-K launch (5 stages of 32 KB
      // beside the staging buffer; 6 here), L2 promotion 256 B.
      {32, 64, 128, 6, p256, "256B"},
      {64, 64, 128, 6, p256, "256B"},
      {128, 64, 128, 6, p256, "256B"},
      {132, 64, 128, 6, p256, "256B"},
      {128, 64, 128, 5, p256, "256B"},
      {128, 64, 128, 3, p256, "256B"},
      {128, 64, 128, 2, p256, "256B"},
      // L2 promotion.
      {128, 64, 128, 6, CU_TENSOR_MAP_L2_PROMOTION_NONE, "none"},
      {128, 64, 128, 6, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "128B"},
      {32, 64, 128, 6, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "128B"},
      // The same stage bytes as boxes of longer row runs (no swizzle).
      {128, 128, 64, 6, p256, "256B"},
      {128, 256, 32, 6, p256, "256B"},
      {32, 256, 32, 6, p256, "256B"},
      // Shorter boxes, more stages.
      {128, 64, 64, 12, p256, "256B"},
  };
  for (const Tma& t : tma) {
    std::vector<TmaArgs> args(kSets);
    for (int s = 0; s < kSets; ++s) {
      args[s].a = Map(a[s], t.w, t.r, t.promo);
      args[s].b = Map(b[s], t.w, t.r, t.promo);
      args[s].w = t.w;
      args[s].r = t.r;
      args[s].stages = t.stages;
    }
    if (2 * t.w * t.r * 2 * t.stages > kRingBytes) {
      std::fprintf(stderr, "ring too small\n");
      return 1;
    }
    report("tma split " + std::to_string(t.grid) + ", box " + std::to_string(t.w) + " x " +
               std::to_string(t.r) + ", " + std::to_string(t.stages) + " stages of " +
               std::to_string(4 * t.w * t.r / 1024) + " KB, promotion " + t.promo_name,
           TimeUs([&](int s) {
             SplitKTma<<<t.grid, 32 * (1 + kConsumerWarps), smem>>>(args[s]);
           }));
  }
  return 0;
}
