// cuBLAS and cuBLASLt as members of the kernel portfolio, behind the same
// argument structs as our launch API (kernels/gemm.h, grouped_gemm.h).
//
// Plain C++: no CUDA or cuBLAS type appears here (cublas_v2.h needs headers
// that host-compiled code here cannot see; the .cu side includes it).
// Streams are opaque `void*` cudaStream_t, pointers are device pointers.
//
// Usage:
//   auto ctx = CublasContext::Create(stream, {});          // once per stream
//   RETURN_IF_ERROR(CublasGemm::CanImplement(CublasMethod::kGemmEx, args));
//   CublasGemm g;
//   RETURN_IF_ERROR(g.Initialize(ctx->get(), CublasMethod::kGemmEx, args));
//   RETURN_IF_ERROR(g.Run());                              // on ctx's stream
//
// Layouts: cuBLAS is column-major; a row-major D is computed as the
// column-major D^T = B^T A^T (the problem normalized as in problem.h), so
// every combination of row- and column-major A, B and D runs without copies.
// cublasGemmEx and its batched and grouped forms update C in place: where
// beta != 0 and C is not D, Run first copies C into D on the stream (one
// cudaMemcpy2DAsync per batch member). cuBLASLt reads C and writes D apart.
//
// Types (fp32 accumulation throughout): bf16 -> bf16 or fp32, fp16 -> fp16
// or fp32, fp32 -> fp32 (strict fp32, or TF32 tensor cores with allow_tf32).
// The grouped form needs D's type to equal the inputs'.
// FP8 (e4m3 and e5m2 in any pairing) runs through cuBLASLt (kLt) only, one
// problem per call (cuBLASLt takes one set of scales for a whole batch),
// with K-major operands and tensor or channel scales on both: D = alpha *
// sum (qa * sa)(qb * sb) + beta * C accumulated in fp32, bf16, fp16 or fp32
// out. Block scales run our kernel.
//
// cuBLAS is opened at run time (cublas_library.h): linking this library maps
// neither libcublas nor libcublasLt; the first CublasContext (or LoadCublas)
// does.
//
// Implementation details follow the public declarations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/tuning/candidate.h"

namespace gemm_kernels {
namespace cublas {

// "libcublas.so.<major>" of the cuBLAS these members were built against
// (libcublasLt comes with it as its dependency).
std::string DefaultCublasLibrary();

// Opens `library` (a name the dynamic loader resolves, or a path) and
// resolves every cuBLAS and cuBLASLt entry point the members call. Needs no
// GPU. The first successful load is the process's: loading the same name
// again is OK, another name FailedPrecondition. FailedPrecondition names the
// library and why (not found, or the entry point it lacks).
absl::Status LoadCublas(const std::string& library);

// Whether a LoadCublas (or a context) has loaded cuBLAS in this process.
bool CublasLoaded();

struct CublasContextOptions {
  // The cuBLAS library to open; empty: DefaultCublasLibrary().
  std::string library;

  // Device workspace shared by cublasGemmEx (cublasSetWorkspace) and the
  // cuBLASLt algorithms run through this context. NVIDIA's guidance for
  // Hopper is 32 MiB; cuBLASLt algorithms that need more are refused.
  size_t workspace_bytes = size_t{32} << 20;
};

// The cuBLAS state of one stream: a cublasHandle_t and a cublasLtHandle_t
// bound to `stream`, and their workspace. Every member initialized with a
// context runs on its stream, so runs through one context are ordered and
// may share the workspace. A context is used by one host thread at a time
// (cuBLAS handles are not safe for concurrent calls); use one per stream.
class CublasContext {
 public:
  // Creates the handles and allocates the workspace on the current device.
  // FailedPrecondition when no GPU is usable or cuBLAS cannot start;
  // InvalidArgument for a zero workspace.
  static absl::StatusOr<std::unique_ptr<CublasContext>> Create(void* stream,
                                                               const CublasContextOptions& options);
  ~CublasContext();
  CublasContext(const CublasContext&) = delete;
  CublasContext& operator=(const CublasContext&) = delete;

  void* stream() const { return stream_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // cublasGetVersion, e.g. 130100.
  int version() const { return version_; }

  // For the .cu side: cublasHandle_t, cublasLtHandle_t, the workspace.
  void* handle() const { return handle_; }
  void* lt_handle() const { return lt_handle_; }
  void* workspace() const { return workspace_; }

 private:
  CublasContext() = default;
  void* stream_ = nullptr;
  void* handle_ = nullptr;
  void* lt_handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int version_ = 0;
};

enum class CublasMethod {
  kGemmEx,          // cublasGemmEx_64: batch_count 1
  kStridedBatched,  // cublasGemmStridedBatchedEx_64: any batch_count
  kLt,              // cublasLtMatmul with a chosen algorithm: any batch_count
};

class CublasGemm {
 public:
  // Gemm::CanImplement's checks plus the type pairs above; kGemmEx needs
  // batch_count 1. Needs no GPU. InvalidArgument names the field.
  static absl::Status CanImplement(CublasMethod method, const GemmArguments& args);

  // cuBLASLt's own heuristic's algorithms for `args` within the context's
  // workspace, best first, at most `max_algorithms`, as configurations a
  // table can name (tuning::LtAlgoConfig).
  static absl::StatusOr<std::vector<tuning::LtAlgoConfig>> LtAlgorithms(
      CublasContext& ctx, const GemmArguments& args, int max_algorithms);

  // Prepares the call on `ctx`'s stream (descriptors; for kLt the algorithm
  // `algo` rebuilt from its configuration and checked with
  // cublasLtMatmulAlgoCheck, or cuBLASLt's first heuristic choice when
  // `algo` is null). FailedPrecondition when cuBLASLt refuses the algorithm
  // for these arguments or it needs more workspace than the context has.
  // `ctx` must outlive this object.
  absl::Status Initialize(CublasContext* ctx, CublasMethod method, const GemmArguments& args,
                          const tuning::LtAlgoConfig* algo = nullptr);

  // Enqueues the product (and the copy of C into D, where needed).
  absl::Status Run() const;

  // "cublas_gemm_ex", "cublas_strided_batched" or the cuBLASLt algorithm's
  // text form (tuning::CandidateToString).
  const std::string& kernel_name() const { return kernel_name_; }

  CublasGemm();
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string kernel_name_;
};

// cublasGemmGroupedBatchedEx_64 with one group per problem (every member's
// shape, layouts, alpha and beta its own).
class CublasGroupedGemm {
 public:
  // GroupedGemm::CanImplement's checks, one input type, one output type
  // equal to it across the group. InvalidArgument names the problem index
  // and field.
  static absl::Status CanImplement(const GroupedGemmArguments& args);

  // Device bytes for the pointer arrays (A, B and D of every member).
  static size_t WorkspaceSize(size_t num_problems);

  // Writes the pointer arrays to `workspace` (WorkspaceSize bytes of device
  // memory, untouched while this object runs) with an asynchronous copy on
  // the context's stream.
  absl::Status Initialize(CublasContext* ctx, const GroupedGemmArguments& args, void* workspace);

  absl::Status Run() const;
  const std::string& kernel_name() const { return kernel_name_; }

  CublasGroupedGemm();
  ~CublasGroupedGemm();
  CublasGroupedGemm(const CublasGroupedGemm&) = delete;
  CublasGroupedGemm& operator=(const CublasGroupedGemm&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string kernel_name_;
};

}  // namespace cublas
}  // namespace gemm_kernels
