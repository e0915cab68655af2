#include "bench/fp8_bench_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace gemm_bench {

namespace {

cudaDataType_t LtType(gemm_kernels::DataType t) {
  switch (t) {
    case gemm_kernels::DataType::kFp8E4m3:
      return CUDA_R_8F_E4M3;
    case gemm_kernels::DataType::kFp8E5m2:
      return CUDA_R_8F_E5M2;
    case gemm_kernels::DataType::kBf16:
      return CUDA_R_16BF;
    case gemm_kernels::DataType::kFp16:
      return CUDA_R_16F;
    case gemm_kernels::DataType::kFp32:
      break;
  }
  return CUDA_R_32F;
}

constexpr size_t kWorkspaceBytes = 64u << 20;

}  // namespace

struct CublasLtFp8::State {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo;
  void* workspace = nullptr;
};

CublasLtFp8::CublasLtFp8(int64_t m, int64_t n, int64_t k, gemm_kernels::DataType a,
                         gemm_kernels::DataType b, gemm_kernels::DataType out, bool block,
                         bool fast_accum)
    : s_(new State) {
  auto fail = [this](const char* what, int status) {
    error_ = std::string(what) + " failed with status " + std::to_string(status);
  };
  cublasStatus_t st = cublasLtCreate(&s_->handle);
  if (st != CUBLAS_STATUS_SUCCESS) { fail("cublasLtCreate", st); return; }
  st = cublasLtMatmulDescCreate(&s_->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) { fail("cublasLtMatmulDescCreate", st); return; }
  // cuBLASLt's A is our B (k x n column-major, transposed), its B our A
  // (row-major m x k read as column-major k x m).
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  const int8_t fast = fast_accum ? 1 : 0;
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
  if (block) {
    const int32_t weights = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t acts = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    st = cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weights,
                                        sizeof(weights));
    if (st != CUBLAS_STATUS_SUCCESS) { fail("A_SCALE_MODE BLK128x128_32F", st); return; }
    st = cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &acts,
                                        sizeof(acts));
    if (st != CUBLAS_STATUS_SUCCESS) { fail("B_SCALE_MODE VEC128_32F", st); return; }
    // Room for any padding of the scale tensors' layouts (values all 1).
    a_scales_ = (m + 3) / 4 * 4 * ((k + 127) / 128 + 3);
    b_scales_ = ((n + 127) / 128 + 3) * ((k + 127) / 128 + 3);
  }
  cublasLtMatrixLayoutCreate(&s_->la, LtType(b), k, n, k);
  cublasLtMatrixLayoutCreate(&s_->lb, LtType(a), k, m, k);
  cublasLtMatrixLayoutCreate(&s_->lc, LtType(out), n, m, n);
  cublasLtMatrixLayoutCreate(&s_->ld, LtType(out), n, m, n);
  if (cudaMalloc(&s_->workspace, kWorkspaceBytes) != cudaSuccess) {
    error_ = "workspace allocation failed";
    return;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  // Scale pointers must be set before the heuristic query for scaled modes;
  // any non-null device address serves (Run sets the real ones).
  const void* any = s_->workspace;
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof(any));
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof(any));
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(s_->handle, s_->op, s_->la, s_->lb, s_->lc, s_->ld, pref, 1,
                                      &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) { fail("cublasLtMatmulAlgoGetHeuristic", st); return; }
  if (found == 0) {
    error_ = "cublasLtMatmulAlgoGetHeuristic found no algorithm";
    return;
  }
  s_->algo = result.algo;
}

CublasLtFp8::~CublasLtFp8() {
  if (s_->la) cublasLtMatrixLayoutDestroy(s_->la);
  if (s_->lb) cublasLtMatrixLayoutDestroy(s_->lb);
  if (s_->lc) cublasLtMatrixLayoutDestroy(s_->lc);
  if (s_->ld) cublasLtMatrixLayoutDestroy(s_->ld);
  if (s_->op) cublasLtMatmulDescDestroy(s_->op);
  if (s_->handle) cublasLtDestroy(s_->handle);
  if (s_->workspace) cudaFree(s_->workspace);
  delete s_;
}

std::string CublasLtFp8::Run(const void* a, const void* b, void* d, const float* sa,
                             const float* sb, void* stream) const {
  if (!error_.empty()) return error_;
  // Lt's A is our B: its scale is sb; Lt's B is our A.
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof(sb));
  cublasLtMatmulDescSetAttribute(s_->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof(sa));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(s_->handle, s_->op, &alpha, b, s_->la, a, s_->lb, &beta, d, s_->lc, d, s_->ld,
                     &s_->algo, s_->workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream));
  return st == CUBLAS_STATUS_SUCCESS ? std::string()
                                     : "cublasLtMatmul failed with status " + std::to_string(st);
}

}  // namespace gemm_bench
