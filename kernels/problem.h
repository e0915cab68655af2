// Host-side normalization of a GemmArguments into the one shape the kernels
// implement: a row-major D. A column-major D is the row-major D^T = B^T A^T, so
// the operands swap and every layout flips. Plain C++, tested on the CPU.
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace gemm_kernels {

// An operand as the kernel sees it: "k-major" means the reduction dimension is
// contiguous (row-major A, column-major B).
struct NormalizedOperand {
  const void* ptr = nullptr;
  int64_t ld = 0;
  int64_t batch_stride = 0;
  bool k_major = true;
};

struct NormalizedProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  DataType in_dtype = DataType::kBf16;
  DataType out_dtype = DataType::kBf16;
  NormalizedOperand a;  // m x k
  NormalizedOperand b;  // k x n
  const void* c = nullptr;  // row-major m x n, out_dtype; nullptr when beta == 0
  int64_t ldc = 0, batch_stride_c = 0;
  void* d = nullptr;  // row-major m x n, out_dtype
  int64_t ldd = 0, batch_stride_d = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool allow_tf32 = false;
  bool copy_unaligned_operands = false;  // GemmArguments::copy_unaligned_operands
  bool swapped = false;  // true when D was column-major and A/B were exchanged
};

// Requires Gemm::CanImplement(args) to have succeeded.
NormalizedProblem Normalize(const GemmArguments& args);

// TF32 and FP8 wgmma read only K-major operands. An fp32 operand that is M-
// or N-major is copied into K-major order first (one transposing pass, a few
// percent of a large GEMM's time) instead of falling back to the strict-fp32
// SIMT kernel, which is ~20x slower; a TF32 or FP8 operand is copied both
// when it is not K-major and when its rows or batch members start off TMA's
// 16-byte grid (K not a multiple of 4 or 16 elements: a repitch). A
// bf16/fp16 operand off that grid (copy_unaligned_operands) is copied the
// same way, K-major whatever its layout was, instead of running the SIMT
// kernel. One operand's copy: the source holds, per batch member, `rows` x k elements,
// with the rows contiguous (element (r, kk) at kk * ld + r), or K-major
// already under `repitch` (at r * ld + kk); the copy holds element (r, kk)
// at r * ld_copy + kk, ld_copy being k rounded up to 16 bytes.
struct KMajorCopy {
  bool needed = false;
  bool repitch = false;       // the source is K-major; only its pitch changes
  int64_t element_bytes = 4;  // 4 (fp32), 2 (bf16/fp16) or 1 (FP8)
  int64_t rows = 0;     // m for A, n for B
  int64_t ld_copy = 0;  // elements
  int64_t members = 0;  // 1 for a broadcast operand (batch stride 0), else batch
  size_t offset = 0;    // bytes into the copy workspace (256-byte aligned)
  size_t bytes = 0;
};

struct KMajorCopyPlan {
  KMajorCopy a, b;
  size_t total_bytes = 0;  // 0 when nothing needs copying
};

// Whether operands of input type `in` are ever copied: FP8; fp32 with
// allow_tf32; bf16/fp16 with copy_unaligned_operands.
bool OperandCopiesApply(DataType in, bool allow_tf32, bool copy_unaligned_operands);

// Where copies apply (OperandCopiesApply): whether one operand of input type
// `in` is copied, given whether K is its contiguous dimension and whether
// its rows (and batch members, and its pointer) are on TMA's 16-byte grid.
// PlanKMajorCopies's rule for each operand; the service's launch plan keeps
// such problems out of grouped launches, whose loop makes no copies.
bool OperandNeedsCopy(DataType in, bool k_major, bool on_grid);

// The copies `p` needs: fp32 inputs with allow_tf32 and an operand that is
// not K-major; FP8 inputs and an operand that is not K-major or not on the
// 16-byte grid; bf16/fp16 inputs with copy_unaligned_operands and an operand
// not on the 16-byte grid. Pure arithmetic, tested on the CPU.
KMajorCopyPlan PlanKMajorCopies(const NormalizedProblem& p);

// Whether `copies` (planned for bf16/fp16 operands off the 16-byte grid)
// followed by the Hopper kernel are predicted to finish before the portable
// SIMT kernel would run `p` as it is, at `pricing`'s measured rates:
//   copies.launches * launch + copy bytes / device copy rate
//     + flops / tensor rate + launch  <  flops / SIMT rate + launch,
// with flops = 2 m n k batch and copy bytes those the copies read (each
// source's rows x k elements per member) and write (the padded copies).
// Tiny problems stay on the SIMT kernel: there the copies' launches cost
// more than its whole run. True while pricing is not measured (any rate 0),
// so that without a calibration copies are made wherever they apply.
// Pure arithmetic, tested on the CPU.
bool OperandCopiesPayOff(const NormalizedProblem& p, const KMajorCopyPlan& copies,
                         const CopyPricing& pricing);

// `p` reading the planned copies in `workspace` instead of the originals.
NormalizedProblem WithKMajorCopies(const NormalizedProblem& p, const KMajorCopyPlan& plan,
                                   void* workspace);

}  // namespace gemm_kernels
