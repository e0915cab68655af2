// What a lane decides for each launch of a batch before anything reaches the
// device: the kernel arguments, the portfolio member that runs it, whether
// it reduces partials on the reducing stream, and the label its launches
// count under. Plain C++ (no CUDA call), so that these decisions are tested
// on the CPU (launch_decisions_test); lane.cc carries them out.
#ifndef GEMM_SERVICE_CUDA_LAUNCH_DECISIONS_H_
#define GEMM_SERVICE_CUDA_LAUNCH_DECISIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/gemm.h"
#include "kernels/tuning/candidate.h"
#include "service/cuda/batch_layout.h"
#include "service/cuda/portfolio_policy.h"
#include "service/queue/launch_plan.h"

namespace gemm {
namespace gpu {

// The executor's settings the decisions follow (CudaExecutor::Options).
struct LaunchRules {
  // Stream-K / split-K for single launches of at least reducing_min_flops
  // (2MNK), when the kernel's heuristic prefers them; a workspace over
  // max_reducing_workspace_bytes runs data-parallel instead.
  bool reducing_schedules = true;
  double reducing_min_flops = 0;
  uint64_t max_reducing_workspace_bytes = 0;
  // CudaExecutor::Options::copy_unaligned_operands, for single and
  // strided-batched launches.
  bool copy_unaligned_operands = false;
  // The measured rates a launch of these input types prices those copies at
  // (gemm_kernels::GemmArguments::copy_pricing); asked per launch, as a
  // calibration may measure them again. Empty: copies wherever they apply.
  std::function<gemm_kernels::CopyPricing(DType in)> copy_pricing;
};

// The arguments of single or strided-batched launch `li` of `layout` over a
// lane's device buffer `dev` (inputs first, outputs at layout.input_bytes).
// A deterministic launch never prices operand copies: its kernel is a
// function of the problem and the server's flags alone, never of rates
// measured at start-up.
gemm_kernels::GemmArguments GemmLaunchArguments(const LaunchGroup& group,
                                                const BatchLayout& layout, size_t li,
                                                unsigned char* dev, const LaunchRules& rules);

// The arguments of each member of grouped launch `li` of `layout`.
std::vector<gemm_kernels::GemmArguments> GroupedMemberArguments(const BatchLayout& layout,
                                                                size_t li, unsigned char* dev);

// The portfolio member that runs a single or strided-batched launch under
// `policy` (null: no portfolio). The heuristic where the launch is
// deterministic, the policy needs no class, or our kernels cannot take it.
// FP8 runs on cuBLAS only through cuBLASLt (the cublas policy takes its own
// heuristic's algorithm, a table the one tuned for the class), and only
// where cuBLASLt takes the problem.
gemm_kernels::tuning::CandidateId ChooseSingleMember(const LaunchPolicy* policy,
                                                     const gemm_kernels::GemmArguments& args,
                                                     bool deterministic);

// The same for a grouped launch of `members`: our grouped heuristic where
// deterministic, without a class, or where a member cannot run.
gemm_kernels::tuning::CandidateId ChooseGroupedMember(
    const LaunchPolicy* policy, const std::vector<gemm_kernels::GemmArguments>& members,
    bool deterministic);

// Whether a launch of our kernel runs as a reducing launch (stream-K or
// split-K with a workspace of its own, on the reducing stream), and that
// workspace. Only single, non-deterministic launches of at least
// reducing_min_flops whose plan asks for a workspace within
// max_reducing_workspace_bytes; paired split-K needs none and runs on the
// lanes beside other kernels like data-parallel.
struct ReducingChoice {
  bool reducing = false;
  size_t workspace = 0;  // the plan's workspace, whether or not it reduces
};
ReducingChoice ChooseReducing(const LaunchGroup& group, const GemmProblemRef& first,
                              size_t plan_workspace_bytes, const LaunchRules& rules);

// The kernel_kind label of a launch of our kernels: "<launch kind>/<family>",
// with "_fp8" for FP8 inputs and "_padded" for bf16/fp16 launches whose
// unaligned operands were copied first, so that operators see how much work
// each path takes. `grouped`: a grouped launch (neither suffix applies).
std::string OursLaunchLabel(LaunchGroup::Kind kind, gemm_kernels::KernelKind kernel, bool grouped,
                            DType a, bool copies_operands);
// The label of a launch cuBLAS ran: "<launch kind>/<cuBLAS family>", "_fp8"
// for FP8 inputs.
std::string CublasLaunchLabel(LaunchGroup::Kind kind,
                              gemm_kernels::tuning::CandidateFamily family, bool fp8);

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_LAUNCH_DECISIONS_H_
