// Internal entry points of the Hopper (sm_90a) TMA + wgmma kernel family.
#pragma once

#include <memory>
#include <string>

#include "kernels/config/heuristic.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"

namespace gemm_kernels {

// True when the Hopper kernel can run `p` (dtype and layout combination, TMA
// alignment of every operand); otherwise `why` says what rules it out.
bool Sm90Supports(const NormalizedProblem& p, std::string* why);

// Builds the tensor maps and launch configuration. `num_sms` is the device's
// multiprocessor count. Returns nullptr with `error` set on failure.
std::unique_ptr<KernelPlan> MakeSm90Plan(const NormalizedProblem& p, Sm90Tile tile, int num_sms,
                                         std::string* error);

}  // namespace gemm_kernels
