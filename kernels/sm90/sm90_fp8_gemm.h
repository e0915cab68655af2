// Internal entry points of the Hopper (sm_90a) FP8 GEMM kernel
// (fp8_gemm_kernel.cuh). Plain C++.
#pragma once

#include <memory>
#include <string>

#include "kernels/config/heuristic.h"
#include "kernels/gemm.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"

namespace gemm_kernels {

// What an FP8 problem adds to its NormalizedProblem: the formats and scales
// of the normalized A and B (exchanged with the caller's under a column-major
// D's swap; NormalizedProblem::in_dtype is the caller's A's format).
struct Fp8Operands {
  DataType a_dtype = DataType::kFp8E4m3;
  DataType b_dtype = DataType::kFp8E4m3;
  ScaleDesc a_scale;
  ScaleDesc b_scale;
};

// The normalized FP8 operands of arguments that passed Gemm::CanImplement.
Fp8Operands NormalizeFp8(const GemmArguments& args);

// True when the FP8 kernel can run `p` (both operands K-major, TMA
// alignment: rows and batch strides in multiples of 16 bytes); otherwise
// `why` names the operand and the reason.
bool Sm90Fp8Supports(const NormalizedProblem& p, std::string* why);

// The FP8 kernel for `tile` (k128x256: plain fp32 accumulation; k128x128:
// a temporary accumulator promoted into the fp32 one every `promote_every`
// k-blocks, which block scales need at 1) and a data-parallel `choice`
// (MakeSm90Launch with a k-block of 128). Returns nullptr with `error` set
// when the combination has no kernel.
std::unique_ptr<KernelPlan> MakeSm90Fp8Plan(const NormalizedProblem& p, const Fp8Operands& f,
                                            const Sm90LaunchChoice& choice, int promote_every,
                                            std::string* error);

}  // namespace gemm_kernels
