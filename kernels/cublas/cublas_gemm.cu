#include "kernels/cublas/cublas_gemm.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cublas/column_major_call.h"
#include "kernels/cublas/cublas_library.h"

namespace gemm_kernels {
namespace cublas {
namespace {

using tuning::LtAlgoConfig;

cudaDataType_t CudaType(DataType t) {
  switch (t) {
    case DataType::kBf16:
      return CUDA_R_16BF;
    case DataType::kFp16:
      return CUDA_R_16F;
    case DataType::kFp32:
      return CUDA_R_32F;
    case DataType::kFp8E4m3:
      return CUDA_R_8F_E4M3;
    case DataType::kFp8E5m2:
      return CUDA_R_8F_E5M2;
  }
  return CUDA_R_32F;
}

cublasComputeType_t ComputeType(const ColumnMajorCall& call) {
  return call.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasOperation_t Op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

absl::Status CublasError(const char* what, cublasStatus_t st) {
  return absl::InternalError(absl::StrCat(what, ": ", Api().cublasGetStatusString(st)));
}

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// The in-place APIs compute D = alpha op(A) op(B) + beta D: C goes into D
// first, member by member (a broadcast C, batch stride 0, into each).
absl::Status CopyCToD(const ColumnMajorCall& call, cudaStream_t stream) {
  if (!call.copy_c_to_d) return absl::OkStatus();
  const size_t es = DataTypeSize(call.out_dtype);
  for (int64_t b = 0; b < call.batch; ++b) {
    const char* src = static_cast<const char*>(call.c) + b * call.batch_stride_c * es;
    char* dst = static_cast<char*>(call.d) + b * call.batch_stride_d * es;
    const cudaError_t e =
        cudaMemcpy2DAsync(dst, call.ldd * es, src, call.ldc * es, call.m * es, call.n,
                          cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return CudaError("copying C into D", e);
  }
  return absl::OkStatus();
}

// cuBLASLt descriptors of one problem, freed together.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  ~LtDescriptors() {
    if (a) Api().cublasLtMatrixLayoutDestroy(a);
    if (b) Api().cublasLtMatrixLayoutDestroy(b);
    if (c) Api().cublasLtMatrixLayoutDestroy(c);
    if (d) Api().cublasLtMatrixLayoutDestroy(d);
    if (op) Api().cublasLtMatmulDescDestroy(op);
  }
};

cublasStatus_t MakeLayout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                          int64_t batch, int64_t stride, cublasLtMatrixLayout_t* out) {
  cublasStatus_t st = Api().cublasLtMatrixLayoutCreate(out, type, rows, cols, ld);
  if (st != CUBLAS_STATUS_SUCCESS || batch == 1) return st;
  const int32_t count = static_cast<int32_t>(batch);
  st = Api().cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                        sizeof(count));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  return Api().cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                          &stride, sizeof(stride));
}

// FP8: cuBLASLt's D = alpha * (scale_A * scale_B) * op(A) op(B) + beta * C
// with fp32 accumulation (promoted, not fast-accumulated), which is our
// contract. Tensor scales are one device fp32 each; channel scales one per
// row of op(A) and per column of op(B) (cuBLASLt's outer vectors), which
// after the exchange of ToColumnMajor are our B's columns and A's rows.
absl::Status SetFp8Scales(const ColumnMajorCall& call, cublasLtMatmulDesc_t op) {
  const void* a_scale = call.a_scale.ptr;
  const void* b_scale = call.b_scale.ptr;
  cublasStatus_t st = Api().cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale));
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = Api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                              sizeof(b_scale));
  }
  if (st == CUBLAS_STATUS_SUCCESS && call.a_scale.mode == ScaleMode::kChannel) {
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    st = Api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer,
                                              sizeof(outer));
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = Api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer,
                                                sizeof(outer));
    }
  }
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cuBLASLt FP8 scales", st);
  return absl::OkStatus();
}

absl::Status MakeLtDescriptors(const ColumnMajorCall& call, LtDescriptors* lt) {
  cublasStatus_t st = Api().cublasLtMatmulDescCreate(&lt->op, ComputeType(call), CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulDescCreate", st);
  const cublasOperation_t op_a = Op(call.a.transpose), op_b = Op(call.b.transpose);
  st = Api().cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = Api().cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
  }
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulDescSetAttribute", st);
  if (::gemm::IsFp8(call.a_dtype)) {
    if (absl::Status e = SetFp8Scales(call, lt->op); !e.ok()) return e;
  }
  const cudaDataType_t a_type = CudaType(call.a_dtype), b_type = CudaType(call.b_dtype);
  const cudaDataType_t out = CudaType(call.out_dtype);
  st = MakeLayout(a_type, call.a.rows, call.a.cols, call.a.ld, call.batch, call.a.batch_stride,
                  &lt->a);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = MakeLayout(b_type, call.b.rows, call.b.cols, call.b.ld, call.batch, call.b.batch_stride,
                    &lt->b);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = MakeLayout(out, call.m, call.n, call.ldd, call.batch, call.batch_stride_d, &lt->d);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    // beta == 0 never reads C; cuBLASLt still takes a layout, D's.
    st = call.c ? MakeLayout(out, call.m, call.n, call.ldc, call.batch, call.batch_stride_c, &lt->c)
                : MakeLayout(out, call.m, call.n, call.ldd, call.batch, call.batch_stride_d, &lt->c);
  }
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatrixLayoutCreate", st);
  return absl::OkStatus();
}

template <typename T>
cublasStatus_t GetConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                         T* out) {
  size_t written = 0;
  return Api().cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, out, sizeof(T), &written);
}

template <typename T>
cublasStatus_t SetConfig(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                         T value) {
  return Api().cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &value, sizeof(T));
}

absl::StatusOr<LtAlgoConfig> ConfigOf(const cublasLtMatmulAlgo_t& algo) {
  LtAlgoConfig c;
  uint16_t inner = 0, cluster = 0;
  cublasStatus_t st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_ID, &c.algo_id);
  if (st == CUBLAS_STATUS_SUCCESS) st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile);
  if (st == CUBLAS_STATUS_SUCCESS) st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages);
  if (st == CUBLAS_STATUS_SUCCESS) st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.split_k);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.reduction);
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swizzle);
  if (st == CUBLAS_STATUS_SUCCESS) st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom);
  if (st == CUBLAS_STATUS_SUCCESS) st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &inner);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = GetConfig(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster);
  }
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulAlgoConfigGetAttribute", st);
  c.inner_shape = inner;
  c.cluster_shape = cluster;
  return c;
}

std::string LtName(const LtAlgoConfig& c) {
  tuning::CandidateId id;
  id.family = tuning::CandidateFamily::kCublasLt;
  id.lt = c;
  return tuning::CandidateToString(id);
}

absl::Status BuildAlgo(cublasLtHandle_t lt, const ColumnMajorCall& call, const LtAlgoConfig& c,
                       cublasLtMatmulAlgo_t* algo) {
  const cudaDataType_t out = CudaType(call.out_dtype);
  cublasStatus_t st =
      Api().cublasLtMatmulAlgoInit(lt, ComputeType(call), CUDA_R_32F, CudaType(call.a_dtype),
                                   CudaType(call.b_dtype), out, out, c.algo_id, algo);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLASLt has no algorithm ", c.algo_id, " for these types: ",
                     Api().cublasGetStatusString(st)));
  }
  st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, c.tile);
  if (st == CUBLAS_STATUS_SUCCESS) st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, c.stages);
  if (st == CUBLAS_STATUS_SUCCESS) st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c.split_k);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c.reduction);
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c.swizzle);
  if (st == CUBLAS_STATUS_SUCCESS) st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c.custom);
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, static_cast<uint16_t>(c.inner_shape));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = SetConfig(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                   static_cast<uint16_t>(c.cluster_shape));
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat("cuBLASLt refuses the configuration of ", LtName(c),
        ": ", Api().cublasGetStatusString(st)));
  }
  return absl::OkStatus();
}

absl::Status NoGpu(const char* what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": no usable CUDA device"));
}

}  // namespace

// ---------------------------------------------------------------------------
// CublasContext

absl::StatusOr<std::unique_ptr<CublasContext>> CublasContext::Create(
    void* stream, const CublasContextOptions& options) {
  if (options.workspace_bytes == 0) {
    return absl::InvalidArgumentError("workspace_bytes: must be positive");
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return NoGpu("cuBLAS context");
  const std::string library =
      options.library.empty() ? DefaultCublasLibrary() : options.library;
  if (absl::Status s = LoadCublas(library); !s.ok()) return s;
  std::unique_ptr<CublasContext> ctx(new CublasContext());
  ctx->stream_ = stream;
  cublasHandle_t h = nullptr;
  cublasStatus_t st = Api().cublasCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cublasCreate: ", Api().cublasGetStatusString(st)));
  }
  ctx->handle_ = h;
  cublasLtHandle_t lt = nullptr;
  st = Api().cublasLtCreate(&lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cublasLtCreate: ", Api().cublasGetStatusString(st)));
  }
  ctx->lt_handle_ = lt;
  const cudaError_t e = cudaMalloc(&ctx->workspace_, options.workspace_bytes);
  if (e != cudaSuccess) {
    ctx->workspace_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuBLAS workspace of ", options.workspace_bytes, " bytes: ", cudaGetErrorString(e)));
  }
  ctx->workspace_bytes_ = options.workspace_bytes;
  st = Api().cublasSetStream(h, static_cast<cudaStream_t>(stream));
  if (st == CUBLAS_STATUS_SUCCESS) st = Api().cublasSetWorkspace(h, ctx->workspace_, ctx->workspace_bytes_);
  if (st == CUBLAS_STATUS_SUCCESS) st = Api().cublasGetVersion(h, &ctx->version_);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("binding the cuBLAS handle to its stream: ", Api().cublasGetStatusString(st)));
  }
  return ctx;
}

CublasContext::~CublasContext() {
  // The handles' and workspace's last users may still be queued on the stream.
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (workspace_) cudaFree(workspace_);
  if (lt_handle_) Api().cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_handle_));
  if (handle_) Api().cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

// ---------------------------------------------------------------------------
// CublasGemm

struct CublasGemm::Impl {
  CublasContext* ctx = nullptr;
  CublasMethod method = CublasMethod::kGemmEx;
  ColumnMajorCall call;
  LtDescriptors lt;
  cublasLtMatmulAlgo_t algo{};
};

CublasGemm::CublasGemm() = default;
CublasGemm::~CublasGemm() = default;

namespace {

// What cuBLASLt's FP8 matmul takes on Hopper, beyond Gemm::CanImplement.
absl::Status CheckFp8(CublasMethod method, const GemmArguments& args) {
  if (method != CublasMethod::kLt) {
    return absl::InvalidArgumentError("a.dtype: FP8 runs through cuBLASLt only");
  }
  if (args.batch_count != 1) {
    return absl::InvalidArgumentError(
        "batch_count: cuBLASLt applies one set of FP8 scales to a whole batch; batches of FP8 "
        "problems, each with its own scales, run our kernel");
  }
  // cuBLASLt's FP8 matmul refuses operands and outputs whose rows or
  // columns do not start on 16 bytes (seen on the H200 for an fp16 D of
  // 77 columns and a column-major fp32 D of 190 rows).
  const bool with_c = args.beta != 0.0f;
  for (const auto& [name, m] : {std::pair<const char*, const MatrixDesc*>{"a", &args.a},
                                {"b", &args.b}, {"d", &args.d}, {"c", &args.c}}) {
    if (m == &args.c && !with_c) continue;
    const int64_t ld_bytes = m->ld * static_cast<int64_t>(DataTypeSize(m->dtype));
    if (ld_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(m->ptr) % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".ld: cuBLASLt's FP8 matmul needs each row or column to start on 16 bytes (",
          m->ld, " elements of ", DataTypeSize(m->dtype), " bytes)"));
    }
  }
  const ColumnMajorCall call = ToColumnMajor(args);
  if (!call.a.transpose || call.b.transpose) {
    return absl::InvalidArgumentError(
        "a.layout: cuBLASLt runs FP8 only with K-major operands (row-major A, column-major B "
        "for a row-major D)");
  }
  if (args.a.dtype == DataType::kFp8E5m2 && args.b.dtype == DataType::kFp8E5m2) {
    return absl::InvalidArgumentError("b.dtype: cuBLASLt has no e5m2 x e5m2 FP8 matmul");
  }
  const ScaleMode a = args.a_scale.mode, b = args.b_scale.mode;
  if (a != b || (a != ScaleMode::kTensor && a != ScaleMode::kChannel)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a_scale.mode: cuBLASLt members take tensor or channel scales on both operands, not ",
        ScaleModeName(a), " with ", ScaleModeName(b), "; block scales run our kernel"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CublasGemm::CanImplement(CublasMethod method, const GemmArguments& args) {
  absl::Status s = Gemm::CanImplement(args);
  if (!s.ok()) return s;
  if (::gemm::IsFp8(args.a.dtype) || ::gemm::IsFp8(args.b.dtype)) return CheckFp8(method, args);
  if (absl::Status e = CheckCublasTypes(args.a.dtype, args.d.dtype, /*grouped=*/false); !e.ok()) return e;
  if (method == CublasMethod::kGemmEx && args.batch_count != 1) {
    return absl::InvalidArgumentError(
        "batch_count: cublasGemmEx runs one product; use the strided-batched form");
  }
  if (method == CublasMethod::kLt && args.batch_count > INT32_MAX) {
    return absl::InvalidArgumentError("batch_count: cuBLASLt takes at most 2^31 - 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LtAlgoConfig>> CublasGemm::LtAlgorithms(CublasContext& ctx,
                                                                    const GemmArguments& args,
                                                                    int max_algorithms) {
  absl::Status s = CanImplement(CublasMethod::kLt, args);
  if (!s.ok()) return s;
  if (max_algorithms < 1) return absl::InvalidArgumentError("max_algorithms: must be positive");
  const ColumnMajorCall call = ToColumnMajor(args);
  LtDescriptors lt;
  if (absl::Status e = MakeLtDescriptors(call, &lt); !e.ok()) return e;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = Api().cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulPreferenceCreate", st);
  const uint64_t bytes = ctx.workspace_bytes();
  st = Api().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                            sizeof(bytes));
  std::vector<cublasLtMatmulHeuristicResult_t> results(max_algorithms);
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = Api().cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(ctx.lt_handle()), lt.op,
                                        lt.a, lt.b, lt.c, lt.d, pref, max_algorithms,
                                        results.data(), &returned);
  }
  Api().cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulAlgoGetHeuristic", st);
  std::vector<LtAlgoConfig> out;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    absl::StatusOr<LtAlgoConfig> c = ConfigOf(results[i].algo);
    if (!c.ok()) return c.status();
    out.push_back(*c);
  }
  return out;
}

absl::Status CublasGemm::Initialize(CublasContext* ctx, CublasMethod method,
                                    const GemmArguments& args, const LtAlgoConfig* algo) {
  if (ctx == nullptr) return absl::InvalidArgumentError("ctx: null");
  absl::Status s = CanImplement(method, args);
  if (!s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->ctx = ctx;
  impl->method = method;
  impl->call = ToColumnMajor(args);
  switch (method) {
    case CublasMethod::kGemmEx:
      kernel_name_ = "cublas_gemm_ex";
      break;
    case CublasMethod::kStridedBatched:
      kernel_name_ = "cublas_strided_batched";
      break;
    case CublasMethod::kLt: {
      if (absl::Status e = MakeLtDescriptors(impl->call, &impl->lt); !e.ok()) return e;
      LtAlgoConfig config;
      if (algo != nullptr) {
        config = *algo;
      } else {
        absl::StatusOr<std::vector<LtAlgoConfig>> first = LtAlgorithms(*ctx, args, 1);
        if (!first.ok()) return first.status();
        if (first->empty()) {
          return absl::FailedPreconditionError("cuBLASLt's heuristic has no algorithm for this problem");
        }
        config = first->front();
      }
      cublasLtHandle_t lt = static_cast<cublasLtHandle_t>(ctx->lt_handle());
      if (absl::Status e = BuildAlgo(lt, impl->call, config, &impl->algo); !e.ok()) return e;
      cublasLtMatmulHeuristicResult_t check{};
      const cublasStatus_t st = Api().cublasLtMatmulAlgoCheck(lt, impl->lt.op, impl->lt.a, impl->lt.b,
                                                        impl->lt.c, impl->lt.d, &impl->algo, &check);
      if (st != CUBLAS_STATUS_SUCCESS) {
        return absl::FailedPreconditionError(absl::StrCat(
            LtName(config), " cannot run this problem: ", Api().cublasGetStatusString(st)));
      }
      if (check.workspaceSize > ctx->workspace_bytes()) {
        return absl::FailedPreconditionError(
            absl::StrCat(LtName(config), " needs ", check.workspaceSize,
                         " bytes of workspace; the context has ", ctx->workspace_bytes()));
      }
      kernel_name_ = LtName(config);
      break;
    }
  }
  impl_ = std::move(impl);
  return absl::OkStatus();
}

absl::Status CublasGemm::Run() const {
  if (!impl_) return absl::FailedPreconditionError("CublasGemm::Run before Initialize");
  const ColumnMajorCall& c = impl_->call;
  const cudaStream_t stream = static_cast<cudaStream_t>(impl_->ctx->stream());
  const cudaDataType_t in = CudaType(c.in_dtype), out = CudaType(c.out_dtype);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (impl_->method == CublasMethod::kLt) {
    const void* c_ptr = c.c ? c.c : c.d;
    st = Api().cublasLtMatmul(static_cast<cublasLtHandle_t>(impl_->ctx->lt_handle()), impl_->lt.op,
                        &c.alpha, c.a.ptr, impl_->lt.a, c.b.ptr, impl_->lt.b, &c.beta, c_ptr,
                        impl_->lt.c, c.d, impl_->lt.d, &impl_->algo, impl_->ctx->workspace(),
                        impl_->ctx->workspace_bytes(), stream);
    return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : CublasError("cublasLtMatmul", st);
  }
  absl::Status s = CopyCToD(c, stream);
  if (!s.ok()) return s;
  cublasHandle_t h = static_cast<cublasHandle_t>(impl_->ctx->handle());
  if (impl_->method == CublasMethod::kGemmEx) {
    st = Api().cublasGemmEx_64(h, Op(c.a.transpose), Op(c.b.transpose), c.m, c.n, c.k, &c.alpha, c.a.ptr,
                         in, c.a.ld, c.b.ptr, in, c.b.ld, &c.beta, c.d, out, c.ldd, ComputeType(c),
                         CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : CublasError("cublasGemmEx", st);
  }
  st = Api().cublasGemmStridedBatchedEx_64(h, Op(c.a.transpose), Op(c.b.transpose), c.m, c.n, c.k,
                                     &c.alpha, c.a.ptr, in, c.a.ld, c.a.batch_stride, c.b.ptr, in,
                                     c.b.ld, c.b.batch_stride, &c.beta, c.d, out, c.ldd,
                                     c.batch_stride_d, c.batch, ComputeType(c),
                                     CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus()
                                     : CublasError("cublasGemmStridedBatchedEx", st);
}

// ---------------------------------------------------------------------------
// CublasGroupedGemm

struct CublasGroupedGemm::Impl {
  CublasContext* ctx = nullptr;
  std::vector<ColumnMajorCall> calls;
  std::vector<cublasOperation_t> op_a, op_b;
  std::vector<int64_t> m, n, k, lda, ldb, ldd, sizes;
  std::vector<float> alpha, beta;
  const void* const* dev_a = nullptr;
  const void* const* dev_b = nullptr;
  void* const* dev_d = nullptr;
  cudaDataType_t in = CUDA_R_16BF, out = CUDA_R_16BF;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  // Kept until the asynchronous copy into the workspace has read it
  // (cudaMemcpyAsync from pageable memory returns once it has).
  std::vector<const void*> host_ptrs;
};

CublasGroupedGemm::CublasGroupedGemm() = default;
CublasGroupedGemm::~CublasGroupedGemm() = default;

absl::Status CublasGroupedGemm::CanImplement(const GroupedGemmArguments& args) {
  absl::Status s = GroupedGemm::CanImplement(args);
  if (!s.ok()) return s;
  const DataType in = args.problems[0].a.dtype;
  const DataType out = args.problems[0].d.dtype;
  if (absl::Status e = CheckCublasTypes(in, out, /*grouped=*/true); !e.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("problems[0].", e.message()));
  }
  for (size_t i = 0; i < args.problems.size(); ++i) {
    const GroupedProblemArguments& p = args.problems[i];
    if (p.a.dtype != in) {
      return absl::InvalidArgumentError(
          absl::StrCat("problems[", i, "].a.dtype: the group's inputs must share one type"));
    }
    if (p.d.dtype != out) {
      return absl::InvalidArgumentError(
          absl::StrCat("problems[", i, "].d.dtype: the group's outputs must share one type"));
    }
  }
  return absl::OkStatus();
}

size_t CublasGroupedGemm::WorkspaceSize(size_t num_problems) {
  return 3 * num_problems * sizeof(void*);
}

absl::Status CublasGroupedGemm::Initialize(CublasContext* ctx, const GroupedGemmArguments& args,
                                           void* workspace) {
  if (ctx == nullptr) return absl::InvalidArgumentError("ctx: null");
  if (workspace == nullptr) return absl::InvalidArgumentError("workspace: null");
  absl::Status s = CanImplement(args);
  if (!s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->ctx = ctx;
  const size_t count = args.problems.size();
  impl->host_ptrs.resize(3 * count);
  for (size_t i = 0; i < count; ++i) {
    const GroupedProblemArguments& p = args.problems[i];
    GemmArguments g;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.a = p.a;
    g.b = p.b;
    g.c = p.c;
    g.d = p.d;
    g.alpha = p.alpha;
    g.beta = p.beta;
    g.allow_tf32 = args.allow_tf32;
    const ColumnMajorCall c = ToColumnMajor(g);
    impl->op_a.push_back(Op(c.a.transpose));
    impl->op_b.push_back(Op(c.b.transpose));
    impl->m.push_back(c.m);
    impl->n.push_back(c.n);
    impl->k.push_back(c.k);
    impl->lda.push_back(c.a.ld);
    impl->ldb.push_back(c.b.ld);
    impl->ldd.push_back(c.ldd);
    impl->sizes.push_back(1);
    impl->alpha.push_back(c.alpha);
    impl->beta.push_back(c.beta);
    impl->host_ptrs[i] = c.a.ptr;
    impl->host_ptrs[count + i] = c.b.ptr;
    impl->host_ptrs[2 * count + i] = c.d;
    impl->calls.push_back(c);
  }
  impl->in = CudaType(args.problems[0].a.dtype);
  impl->out = CudaType(args.problems[0].d.dtype);
  impl->compute = ComputeType(impl->calls[0]);
  void** dev = static_cast<void**>(workspace);
  impl->dev_a = dev;
  impl->dev_b = dev + count;
  impl->dev_d = dev + 2 * count;
  const cudaError_t e = cudaMemcpyAsync(workspace, impl->host_ptrs.data(), WorkspaceSize(count),
                                        cudaMemcpyHostToDevice,
                                        static_cast<cudaStream_t>(ctx->stream()));
  if (e != cudaSuccess) return CudaError("copying the grouped pointer arrays", e);
  kernel_name_ = "cublas_grouped";
  impl_ = std::move(impl);
  return absl::OkStatus();
}

absl::Status CublasGroupedGemm::Run() const {
  if (!impl_) return absl::FailedPreconditionError("CublasGroupedGemm::Run before Initialize");
  const cudaStream_t stream = static_cast<cudaStream_t>(impl_->ctx->stream());
  for (const ColumnMajorCall& c : impl_->calls) {
    absl::Status s = CopyCToD(c, stream);
    if (!s.ok()) return s;
  }
  const Impl& i = *impl_;
  const cublasStatus_t st = Api().cublasGemmGroupedBatchedEx_64(
      static_cast<cublasHandle_t>(i.ctx->handle()), i.op_a.data(), i.op_b.data(), i.m.data(),
      i.n.data(), i.k.data(), i.alpha.data(), i.dev_a, i.in, i.lda.data(), i.dev_b, i.in,
      i.ldb.data(), i.beta.data(), i.dev_d, i.out, i.ldd.data(),
      static_cast<int64_t>(i.calls.size()), i.sizes.data(), i.compute);
  return st == CUBLAS_STATUS_SUCCESS ? absl::OkStatus()
                                     : CublasError("cublasGemmGroupedBatchedEx", st);
}

}  // namespace cublas
}  // namespace gemm_kernels
