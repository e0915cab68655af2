#include "bench/cublas_baseline.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

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
                                 int64_t k, const void* a, const void* b, void* d,
                                 bool b_row_major, bool a_col_major) const {
  const cudaDataType_t t =
      dtype == DataType::kBf16 ? CUDA_R_16BF : dtype == DataType::kFp16 ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  auto h = static_cast<cublasHandle_t>(handle_);
  // Column-major view: D^T (n x m, ld n) = B^T * A^T. A column-major B
  // buffer (k x n, ld k) is B^T under op T; a row-major one (ld n) is B^T as
  // it is.
  const cublasOperation_t op_b = b_row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int ld_b = b_row_major ? int(n) : int(k);
  // A row-major A buffer (ld k) is A^T as it is; a column-major one (m x k,
  // ld m) is A, so A^T under op T.
  const cublasOperation_t op_a = a_col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_a = a_col_major ? int(m) : int(k);
  cublasStatus_t st;
  if (batch == 1) {
    st = cublasGemmEx(h, op_b, op_a, int(n), int(m), int(k), &alpha, b, t, ld_b, a, t, ld_a,
                      &beta, d, t, int(n), compute, CUBLAS_GEMM_DEFAULT);
  } else {
    st = cublasGemmStridedBatchedEx(h, op_b, op_a, int(n), int(m), int(k), &alpha, b, t, ld_b,
                                    k * n, a, t, ld_a, m * k, &beta, d, t, int(n), m * n,
                                    int(batch), compute, CUBLAS_GEMM_DEFAULT);
  }
  return st == CUBLAS_STATUS_SUCCESS ? "" : "cublas status " + std::to_string(int(st));
}

CublasGrouped::CublasGrouped(const CublasBaseline& base, DataType dtype,
                             const std::vector<GroupedMember>& members)
    : handle_(base.handle()),
      dtype_(dtype == DataType::kBf16 ? CUDA_R_16BF : CUDA_R_16F),
      count_(static_cast<int>(members.size())) {
  std::vector<const void*> ptrs(3 * members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const GroupedMember& g = members[i];
    // Column-major view as in Gemm(): D^T (n x m) = B^T * A^T.
    m_.push_back(g.n);
    n_.push_back(g.m);
    k_.push_back(g.k);
    ld_a_.push_back(g.k);
    ld_b_.push_back(g.k);
    ld_d_.push_back(g.n);
    sizes_.push_back(1);
    trans_a_.push_back(CUBLAS_OP_T);
    trans_b_.push_back(CUBLAS_OP_N);
    alpha_.push_back(1.0f);
    beta_.push_back(0.0f);
    ptrs[i] = g.b;
    ptrs[members.size() + i] = g.a;
    ptrs[2 * members.size() + i] = g.d;
  }
  if (cudaMalloc(reinterpret_cast<void**>(&dev_ptrs_), ptrs.size() * sizeof(void*)) == cudaSuccess) {
    cudaMemcpy(dev_ptrs_, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice);
  }
}

CublasGrouped::~CublasGrouped() { cudaFree(dev_ptrs_); }

std::string CublasGrouped::Run() const {
  auto t = static_cast<cudaDataType_t>(dtype_);
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      static_cast<cublasHandle_t>(handle_),
      reinterpret_cast<const cublasOperation_t*>(trans_a_.data()),
      reinterpret_cast<const cublasOperation_t*>(trans_b_.data()), m_.data(), n_.data(), k_.data(),
      alpha_.data(), const_cast<const void* const*>(dev_ptrs_), t, ld_a_.data(),
      const_cast<const void* const*>(dev_ptrs_ + count_), t, ld_b_.data(), beta_.data(),
      dev_ptrs_ + 2 * count_, t, ld_d_.data(), count_, sizes_.data(), CUBLAS_COMPUTE_32F);
  return st == CUBLAS_STATUS_SUCCESS ? "" : "cublasGemmGroupedBatchedEx status " + std::to_string(int(st));
}

}  // namespace gemm_bench
