#include "bench/cublas_baseline.h"

#include <cublas_v2.h>

namespace gemm_bench {

using gemm_kernels::DataType;

CublasBaseline::CublasBaseline() {
  cublasHandle_t h;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) handle_ = h;
}

CublasBaseline::~CublasBaseline() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

int CublasBaseline::version() const {
  int v = 0;
  if (handle_) cublasGetVersion(static_cast<cublasHandle_t>(handle_), &v);
  return v;
}

std::string CublasBaseline::Gemm(DataType dtype, bool tf32, int64_t batch, int64_t m, int64_t n,
                                 int64_t k, const void* a, const void* b, void* d) const {
  const cudaDataType_t t =
      dtype == DataType::kBF16 ? CUDA_R_16BF : dtype == DataType::kF16 ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  auto h = static_cast<cublasHandle_t>(handle_);
  // Column-major view: D^T (n x m, ld n) = B^T (op T of the k x n buffer) * A^T.
  cublasStatus_t st;
  if (batch == 1) {
    st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b, t, int(k), a,
                      t, int(k), &beta, d, t, int(n), compute, CUBLAS_GEMM_DEFAULT);
  } else {
    st = cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b,
                                    t, int(k), k * n, a, t, int(k), m * k, &beta, d, t, int(n),
                                    m * n, int(batch), compute, CUBLAS_GEMM_DEFAULT);
  }
  return st == CUBLAS_STATUS_SUCCESS ? "" : "cublas status " + std::to_string(int(st));
}

}  // namespace gemm_bench
