// Internal: the portable GEMM path. A shared-memory tiled SIMT kernel with
// fp32 FMA accumulation. It runs on any sm_80+ GPU, takes any alignment and
// layout, and is the strict-fp32 path (no TF32) on every GPU including Hopper.
#pragma once

#include <memory>

#include "kernels/kernel_plan.h"
#include "kernels/problem.h"

namespace gemm_kernels {

std::unique_ptr<KernelPlan> MakePortablePlan(const NormalizedProblem& p);

}  // namespace gemm_kernels
