// The shape list the portfolio tuner (tune_portfolio) measures: one problem
// per line, each standing for its shape class (kernels/tuning/shape_class.h).
// Plain C++, tested on the CPU.
//
//   # comment
//   NAME single DTYPE M N K [BATCH] [LAYOUT]
//   NAME grouped DTYPE COUNT M_LO M_HI N K SEED
//
// DTYPE: bf16, fp16 (outputs of the input type), tf32 (fp32 inputs and
// output, allow_tf32), fp32 (strict), or FP8 as A_FORMATxB_FORMAT/SCALES
// with bf16 outputs: e4m3xe4m3, e4m3xe5m2 or e5m2xe4m3, then tensor or
// channel (both operands scaled so), e.g. e4m3xe4m3/tensor; FP8 is single
// launches only, in the RCR layout (K-major operands). LAYOUT: three letters R or C for A,
// B and D (default RCR: row-major A, column-major B, row-major D, what the
// serving benchmarks send). A grouped list has COUNT members of M drawn
// uniformly from [M_LO, M_HI] with SEED (bench/bf16_data GroupedRows), each
// N x K, in the RCR layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm.h"

namespace gemm_bench {

struct TuningShape {
  std::string name;
  bool grouped = false;
  gemm_kernels::DataType dtype = gemm_kernels::DataType::kBf16;  // A's
  gemm_kernels::DataType b_dtype = gemm_kernels::DataType::kBf16;
  gemm_kernels::DataType out_dtype = gemm_kernels::DataType::kBf16;
  gemm_kernels::ScaleMode scales = gemm_kernels::ScaleMode::kNone;  // FP8: both operands'
  bool allow_tf32 = false;
  gemm_kernels::Layout a = gemm_kernels::Layout::kRowMajor;
  gemm_kernels::Layout b = gemm_kernels::Layout::kColMajor;
  gemm_kernels::Layout d = gemm_kernels::Layout::kRowMajor;
  int64_t m = 0, n = 0, k = 0, batch = 1;  // single
  int count = 0, m_lo = 0, m_hi = 0;       // grouped (with n, k)
  uint64_t seed = 0;
};

// Parses the list; InvalidArgument naming the line and field at fault (and
// a name used twice).
absl::StatusOr<std::vector<TuningShape>> ParseTuningShapes(const std::string& text);

// The list tune_portfolio measures without --shapes: one shape per class of
// the dense, stream-K, skinny, strided-batched and grouped sets of
// kernel_bench and schedule_bench, and FP8 (tensor and channel scales) as
// fp8_bench and the FP8 requests of the service run them: at --sustained_s=2 --repeats=2, up to
// four finalists x two rounds x 2 s plus bursts and checks, about 25 s each.
const char* DefaultTuningShapes();

}  // namespace gemm_bench
