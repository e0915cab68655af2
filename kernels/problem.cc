#include "kernels/problem.h"

#include <algorithm>
#include <cstdint>

namespace gemm_kernels {

size_t DataTypeSize(DataType t) { return ::gemm::SizeOf(t); }

NormalizedProblem Normalize(const GemmArguments& args) {
  NormalizedProblem p;
  const bool swap = args.d.layout == Layout::kColMajor;
  p.swapped = swap;
  p.batch = args.batch_count;
  p.in_dtype = args.a.dtype;
  p.out_dtype = args.d.dtype;
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.allow_tf32 = args.allow_tf32;
  p.copy_unaligned_operands = args.copy_unaligned_operands;
  // Row-major A is k-major; column-major B is k-major. Under the swap the new
  // A is the old B^T: old B column-major (k-major) stays k-major as new A.
  const MatrixDesc& na = swap ? args.b : args.a;
  const MatrixDesc& nb = swap ? args.a : args.b;
  p.m = swap ? args.n : args.m;
  p.n = swap ? args.m : args.n;
  p.k = args.k;
  p.a = {na.ptr, na.ld, na.batch_stride,
         swap ? na.layout == Layout::kColMajor : na.layout == Layout::kRowMajor};
  p.b = {nb.ptr, nb.ld, nb.batch_stride,
         swap ? nb.layout == Layout::kRowMajor : nb.layout == Layout::kColMajor};
  p.c = args.beta != 0.0f ? args.c.ptr : nullptr;
  p.ldc = args.c.ld;
  p.batch_stride_c = args.c.batch_stride;
  p.d = const_cast<void*>(args.d.ptr);
  p.ldd = args.d.ld;
  p.batch_stride_d = args.d.batch_stride;
  return p;
}

bool OperandCopiesApply(DataType in, bool allow_tf32, bool copy_unaligned_operands) {
  if (::gemm::IsFp8(in)) return true;
  if (in == DataType::kFp32) return allow_tf32;
  return (in == DataType::kBf16 || in == DataType::kFp16) && copy_unaligned_operands;
}

bool OperandNeedsCopy(DataType in, bool k_major, bool on_grid) {
  // A 16-bit operand on the grid runs as it is in either layout; TF32 and
  // FP8 ones must be K-major as well.
  if (in == DataType::kBf16 || in == DataType::kFp16) return !on_grid;
  return !k_major || !on_grid;
}

KMajorCopyPlan PlanKMajorCopies(const NormalizedProblem& p) {
  KMajorCopyPlan plan;
  if (!OperandCopiesApply(p.in_dtype, p.allow_tf32, p.copy_unaligned_operands)) return plan;
  const bool fp8 = ::gemm::IsFp8(p.in_dtype);
  const bool half = p.in_dtype == DataType::kBf16 || p.in_dtype == DataType::kFp16;
  const int64_t es = fp8 ? 1 : half ? 2 : 4;
  const int64_t per_16_bytes = 16 / es;
  auto off_grid = [&](const NormalizedOperand& op) {
    return op.ld % per_16_bytes != 0 || (p.batch > 1 && op.batch_stride % per_16_bytes != 0) ||
           reinterpret_cast<uintptr_t>(op.ptr) % 16 != 0;
  };
  auto place = [&](const NormalizedOperand& op, int64_t rows, KMajorCopy* copy) {
    if (!OperandNeedsCopy(p.in_dtype, op.k_major, !off_grid(op))) return;
    copy->needed = true;
    copy->repitch = op.k_major;
    copy->element_bytes = es;
    copy->rows = rows;
    copy->ld_copy = (p.k + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
    copy->members = (p.batch > 1 && op.batch_stride == 0) ? 1 : p.batch;
    copy->offset = plan.total_bytes;
    copy->bytes = static_cast<size_t>(copy->members) * rows * copy->ld_copy * es;
    plan.total_bytes += (copy->bytes + 255) / 256 * 256;
  };
  place(p.a, p.m, &plan.a);
  place(p.b, p.n, &plan.b);
  return plan;
}

namespace {

// Bytes one planned copy moves through device memory: its source's rows x
// k elements per member read, its padded copy written.
double CopyTrafficBytes(const KMajorCopy& copy, int64_t k) {
  if (!copy.needed) return 0;
  const double read = double(copy.members) * copy.rows * k * copy.element_bytes;
  return read + double(copy.bytes);
}

}  // namespace

bool OperandCopiesPayOff(const NormalizedProblem& p, const KMajorCopyPlan& copies,
                         const CopyPricing& pricing) {
  if (!pricing.measured()) return true;
  const double flops = 2.0 * p.m * double(p.n) * p.k * p.batch;
  const int copy_launches = int{copies.a.needed} + int{copies.b.needed};
  const double copy_bytes = CopyTrafficBytes(copies.a, p.k) + CopyTrafficBytes(copies.b, p.k);
  const double copied_sm90 = copy_launches * pricing.launch_seconds +
                             copy_bytes / pricing.device_copy_bytes_per_s +
                             flops / pricing.tensor_flops_per_s + pricing.launch_seconds;
  // The SIMT kernel takes at least one tile's K loop, however few its tiles.
  const double simt = std::max(flops / pricing.simt_flops_per_s,
                               double(p.k) * pricing.simt_tile_seconds_per_k) +
                      pricing.launch_seconds;
  return copied_sm90 < simt;
}

NormalizedProblem WithKMajorCopies(const NormalizedProblem& p, const KMajorCopyPlan& plan,
                                   void* workspace) {
  NormalizedProblem q = p;
  auto redirect = [workspace](const KMajorCopy& copy, NormalizedOperand* op) {
    if (!copy.needed) return;
    op->ptr = static_cast<const unsigned char*>(workspace) + copy.offset;
    op->ld = copy.ld_copy;
    op->batch_stride = copy.members == 1 ? 0 : copy.rows * copy.ld_copy;
    op->k_major = true;
  };
  redirect(plan.a, &q.a);
  redirect(plan.b, &q.b);
  return q;
}

}  // namespace gemm_kernels
