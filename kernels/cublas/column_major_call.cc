#include "kernels/cublas/column_major_call.h"

#include "absl/strings/str_cat.h"
#include "kernels/problem.h"

namespace gemm_kernels {
namespace cublas {

ColumnMajorCall ToColumnMajor(const GemmArguments& args) {
  const NormalizedProblem p = Normalize(args);
  ColumnMajorCall call;
  call.m = p.n;
  call.n = p.m;
  call.k = p.k;
  call.batch = p.batch;
  // Our B (k x n). K-major (column-major): stored column-major k x n, op T
  // gives the n x k cuBLAS needs. Otherwise (row-major) it is already the
  // column-major n x k B^T.
  call.a.ptr = p.b.ptr;
  call.a.ld = p.b.ld;
  call.a.batch_stride = p.b.batch_stride;
  call.a.transpose = p.b.k_major;
  call.a.rows = p.b.k_major ? p.k : p.n;
  call.a.cols = p.b.k_major ? p.n : p.k;
  // Our A (m x k). K-major (row-major): the column-major k x m A^T as it is.
  // Otherwise (column-major m x k): op T.
  call.b.ptr = p.a.ptr;
  call.b.ld = p.a.ld;
  call.b.batch_stride = p.a.batch_stride;
  call.b.transpose = !p.a.k_major;
  call.b.rows = p.a.k_major ? p.k : p.m;
  call.b.cols = p.a.k_major ? p.m : p.k;
  call.d = p.d;
  call.ldd = p.ldd;
  call.batch_stride_d = p.batch_stride_d;
  if (p.beta != 0.0f) {
    call.c = p.c;
    call.ldc = p.ldc;
    call.batch_stride_c = p.batch_stride_c;
    // Gemm::CanImplement lets C alias D only exactly (same ld and stride).
    call.copy_c_to_d = p.c != p.d;
  }
  call.alpha = p.alpha;
  call.beta = p.beta;
  call.in_dtype = p.in_dtype;
  call.out_dtype = p.out_dtype;
  call.tf32 = p.in_dtype == DataType::kFp32 && p.allow_tf32;
  call.a_dtype = p.swapped ? args.a.dtype : args.b.dtype;
  call.b_dtype = p.swapped ? args.b.dtype : args.a.dtype;
  call.a_scale = p.swapped ? args.a_scale : args.b_scale;
  call.b_scale = p.swapped ? args.b_scale : args.a_scale;
  return call;
}

absl::Status CheckCublasTypes(DataType in, DataType out, bool grouped) {
  const bool ok = grouped ? out == in : (out == in || out == DataType::kFp32);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "d.dtype: cuBLAS ", grouped ? "grouped GEMM " : "", "does not write ", DataTypeName(out),
      " from ", DataTypeName(in), " inputs (", grouped ? "the inputs' type only" : "the inputs' type or fp32",
      ")"));
}

}  // namespace cublas
}  // namespace gemm_kernels
