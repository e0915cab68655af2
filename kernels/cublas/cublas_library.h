// cuBLAS and cuBLASLt opened at run time (dlopen), so that a process loads
// them only when a portfolio member is used: libcublasLt alone maps some
// 540 MB and takes over a second to load, which a server on the CPU backend,
// `--version` or a table without cuBLAS members must not pay.
//
// For the .cu side only (the declarations need cublas_v2.h and cublasLt.h).
// Every entry point kernels/cublas calls is one pointer of CublasApi, of the
// type the headers declare; the names are the exported symbols, so the
// headers' aliases (cublasCreate -> cublasCreate_v2, ...) expand to them:
// `api.cublasCreate(&h)` calls the loaded cublasCreate_v2.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "absl/status/statusor.h"

namespace gemm_kernels {
namespace cublas {

#define GEMM_CUBLAS_FUNCTIONS(X)              \
  X(cublasCreate_v2)                          \
  X(cublasDestroy_v2)                         \
  X(cublasSetStream_v2)                       \
  X(cublasSetWorkspace_v2)                    \
  X(cublasGetVersion_v2)                      \
  X(cublasGetStatusString)                    \
  X(cublasGemmEx_64)                          \
  X(cublasGemmStridedBatchedEx_64)            \
  X(cublasGemmGroupedBatchedEx_64)            \
  X(cublasLtCreate)                           \
  X(cublasLtDestroy)                          \
  X(cublasLtMatmul)                           \
  X(cublasLtMatmulDescCreate)                 \
  X(cublasLtMatmulDescDestroy)                \
  X(cublasLtMatmulDescSetAttribute)           \
  X(cublasLtMatrixLayoutCreate)               \
  X(cublasLtMatrixLayoutDestroy)              \
  X(cublasLtMatrixLayoutSetAttribute)         \
  X(cublasLtMatmulPreferenceCreate)           \
  X(cublasLtMatmulPreferenceDestroy)          \
  X(cublasLtMatmulPreferenceSetAttribute)     \
  X(cublasLtMatmulAlgoGetHeuristic)           \
  X(cublasLtMatmulAlgoInit)                   \
  X(cublasLtMatmulAlgoCheck)                  \
  X(cublasLtMatmulAlgoConfigGetAttribute)     \
  X(cublasLtMatmulAlgoConfigSetAttribute)

struct CublasApi {
#define GEMM_CUBLAS_POINTER(symbol) decltype(&::symbol) symbol = nullptr;
  GEMM_CUBLAS_FUNCTIONS(GEMM_CUBLAS_POINTER)
#undef GEMM_CUBLAS_POINTER
  // The file name it was opened by.
  std::string library;
};

// Opens `library` (a file name the dynamic loader resolves, or a path) and
// resolves every entry point; cuBLASLt's come through libcublas's own
// dependency on libcublasLt. The first successful load is the process's for
// good; a later call with another name is FailedPrecondition naming both.
// FailedPrecondition names the library and the loader's message when it
// cannot be opened, or the first entry point it lacks.
absl::StatusOr<const CublasApi*> OpenCublasApi(const std::string& library);

// The loaded entry points. Only valid after OpenCublasApi succeeded, which
// CublasContext::Create ensures before any handle exists.
const CublasApi& Api();

}  // namespace cublas
}  // namespace gemm_kernels
