#include "kernels/portable/simt_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

namespace gemm_kernels {
namespace {

struct SimtParams {
  int64_t m, n, k, batch;
  const void* a;
  const void* b;
  const void* c;
  void* d;
  int64_t a_si, a_sk, a_sb;  // element strides of A along m, k, batch
  int64_t b_sk, b_sj, b_sb;
  int64_t ldc, c_sb, ldd, d_sb;
  float alpha, beta;
};

template <typename T>
__device__ __forceinline__ float ToF(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float ToF<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToF<__half>(__half v) {
  return __half2float(v);
}
template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromF<__half>(float v) {
  return __float2half_rn(v);
}

constexpr int kBM = 64, kBN = 64, kBK = 16, kThreads = 256;

// 64x64 output tile per block, 4x4 per thread. The load order follows each
// operand's contiguous dimension so global reads coalesce in either layout.
template <typename In, typename Out>
__global__ void __launch_bounds__(kThreads) SimtGemmKernel(const SimtParams p) {
  __shared__ float as[kBK][kBM + 4];
  __shared__ float bs[kBK][kBN + 4];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  const bool a_k_contig = p.a_sk == 1, b_k_contig = p.b_sk == 1;
  for (int64_t batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const In* a = static_cast<const In*>(p.a) + batch * p.a_sb;
    const In* b = static_cast<const In*>(p.b) + batch * p.b_sb;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += kBK) {
#pragma unroll
      for (int i = 0; i < kBM * kBK / kThreads; ++i) {
        const int idx = threadIdx.x + kThreads * i;
        const int r = a_k_contig ? idx / kBK : idx % kBM;
        const int kk = a_k_contig ? idx % kBK : idx / kBM;
        const int64_t gm = m0 + r, gk = k0 + kk;
        as[kk][r] = (gm < p.m && gk < p.k) ? ToF(a[gm * p.a_si + gk * p.a_sk]) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kBN * kBK / kThreads; ++i) {
        const int idx = threadIdx.x + kThreads * i;
        const int c = b_k_contig ? idx / kBK : idx % kBN;
        const int kk = b_k_contig ? idx % kBK : idx / kBN;
        const int64_t gn = n0 + c, gk = k0 + kk;
        bs[kk][c] = (gn < p.n && gk < p.k) ? ToF(b[gk * p.b_sk + gn * p.b_sj]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kBK; ++kk) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
    Out* d = static_cast<Out*>(p.d) + batch * p.d_sb;
    const Out* c = p.c ? static_cast<const Out*>(p.c) + batch * p.c_sb : nullptr;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = m0 + ty * 4 + i;
      if (row >= p.m) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n0 + tx * 4 + j;
        if (col >= p.n) continue;
        float v = p.alpha * acc[i][j];
        if (c) v += p.beta * ToF(c[row * p.ldc + col]);
        d[row * p.ldd + col] = FromF<Out>(v);
      }
    }
  }
}

template <typename In>
const void* KernelFor(DataType out) {
  switch (out) {
    case DataType::kBf16:
      return reinterpret_cast<const void*>(&SimtGemmKernel<In, __nv_bfloat16>);
    case DataType::kFp16:
      return reinterpret_cast<const void*>(&SimtGemmKernel<In, __half>);
    case DataType::kFp32:
      return reinterpret_cast<const void*>(&SimtGemmKernel<In, float>);
    case DataType::kFp8E4m3:
    case DataType::kFp8E5m2:
      break;  // an input type only
  }
  return nullptr;
}

const char* Name(DataType t) {
  return t == DataType::kBf16 ? "bf16" : t == DataType::kFp16 ? "f16" : "f32";
}

class PortablePlan final : public KernelPlan {
 public:
  std::string Launch(void* stream) const override {
    void* args[] = {const_cast<SimtParams*>(&params_)};
    const cudaError_t e =
        cudaLaunchKernel(func_, grid_, dim3(kThreads), args, 0, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
  }
  const std::string& name() const override { return name_; }

  SimtParams params_{};
  const void* func_ = nullptr;
  dim3 grid_;
  std::string name_;
};

}  // namespace

std::unique_ptr<KernelPlan> MakePortablePlan(const NormalizedProblem& p) {
  auto plan = std::make_unique<PortablePlan>();
  SimtParams& s = plan->params_;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.batch = p.batch;
  s.a = p.a.ptr;
  s.b = p.b.ptr;
  s.c = p.c;
  s.d = p.d;
  s.a_si = p.a.k_major ? p.a.ld : 1;
  s.a_sk = p.a.k_major ? 1 : p.a.ld;
  s.a_sb = p.a.batch_stride;
  s.b_sk = p.b.k_major ? 1 : p.b.ld;
  s.b_sj = p.b.k_major ? p.b.ld : 1;
  s.b_sb = p.b.batch_stride;
  s.ldc = p.ldc;
  s.c_sb = p.batch_stride_c;
  s.ldd = p.ldd;
  s.d_sb = p.batch_stride_d;
  s.alpha = p.alpha;
  s.beta = p.beta;
  switch (p.in_dtype) {
    case DataType::kBf16:
      plan->func_ = KernelFor<__nv_bfloat16>(p.out_dtype);
      break;
    case DataType::kFp16:
      plan->func_ = KernelFor<__half>(p.out_dtype);
      break;
    case DataType::kFp32:
      plan->func_ = KernelFor<float>(p.out_dtype);
      break;
    case DataType::kFp8E4m3:
    case DataType::kFp8E5m2:
      break;  // FP8 runs on the Hopper FP8 kernel only; the launch API refuses it elsewhere
  }
  plan->grid_ = dim3(static_cast<unsigned>((p.n + kBN - 1) / kBN),
                     static_cast<unsigned>((p.m + kBM - 1) / kBM),
                     static_cast<unsigned>(std::min<int64_t>(p.batch, 65535)));
  plan->name_ = std::string("portable_simt_") + Name(p.in_dtype) + "_" + Name(p.out_dtype) +
                "_64x64x16";
  return plan;
}

}  // namespace gemm_kernels
