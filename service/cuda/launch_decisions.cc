#include "service/cuda/launch_decisions.h"

#include "absl/strings/str_cat.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/tuning/shape_class.h"
#include "service/cuda/kernel_arguments.h"

namespace gemm {
namespace gpu {

namespace gk = gemm_kernels;
namespace gb = gemm_kernels::cublas;
namespace gt = gemm_kernels::tuning;

gk::GemmArguments GemmLaunchArguments(const LaunchGroup& group, const BatchLayout& layout,
                                      size_t li, unsigned char* dev, const LaunchRules& rules) {
  const ProblemLayout& first = layout.problem(li, 0);
  const bool strided = group.kind == LaunchGroup::Kind::kStridedBatched;
  const int64_t count = strided ? static_cast<int64_t>(group.problems.size()) : 1;
  const Placement& second = count > 1 ? layout.problem(li, 1).placement : first.placement;
  gk::GemmArguments args = KernelArguments(*first.problem, first.placement, second, count, dev,
                                           dev + layout.input_bytes);
  args.copy_unaligned_operands = rules.copy_unaligned_operands;
  if (rules.copy_unaligned_operands && !group.deterministic && rules.copy_pricing)
    args.copy_pricing = rules.copy_pricing(args.a.dtype);
  return args;
}

std::vector<gk::GemmArguments> GroupedMemberArguments(const BatchLayout& layout, size_t li,
                                                      unsigned char* dev) {
  std::vector<gk::GemmArguments> members;
  for (size_t i = 0; i < layout.launches[li].count; ++i) {
    const ProblemLayout& q = layout.problem(li, i);
    members.push_back(
        KernelArguments(*q.problem, q.placement, q.placement, 1, dev, dev + layout.input_bytes));
  }
  return members;
}

gt::CandidateId ChooseSingleMember(const LaunchPolicy* policy, const gk::GemmArguments& args,
                                   bool deterministic) {
  if (deterministic || policy == nullptr || !policy->consults_classes() ||
      !gk::Gemm::CanImplement(args).ok())
    return gt::CandidateId::Heuristic();
  if (IsFp8(args.a.dtype)) {
    if (!gb::CublasGemm::CanImplement(gb::CublasMethod::kLt, args).ok())
      return gt::CandidateId::Heuristic();
    if (policy->policy() == KernelPolicy::kCublas) return gt::CandidateId::CublasLtHeuristic();
    const gt::CandidateId chosen =
        policy->Choose(gt::ClassOf(args, policy->buckets_per_octave()), false);
    return chosen.family == gt::CandidateFamily::kCublasLt ? chosen : gt::CandidateId::Heuristic();
  }
  return policy->Choose(gt::ClassOf(args, policy->buckets_per_octave()), false);
}

gt::CandidateId ChooseGroupedMember(const LaunchPolicy* policy,
                                    const std::vector<gk::GemmArguments>& members,
                                    bool deterministic) {
  if (deterministic || policy == nullptr || !policy->consults_classes())
    return gt::CandidateId::OursGroupedHeuristic();
  for (const gk::GemmArguments& m : members)
    if (!gk::Gemm::CanImplement(m).ok()) return gt::CandidateId::OursGroupedHeuristic();
  absl::StatusOr<gt::ShapeClass> shape = gt::GroupedClassOf(members, policy->buckets_per_octave());
  if (!shape.ok()) return gt::CandidateId::OursGroupedHeuristic();
  return policy->Choose(*shape, false);
}

ReducingChoice ChooseReducing(const LaunchGroup& group, const GemmProblemRef& first,
                              size_t plan_workspace_bytes, const LaunchRules& rules) {
  ReducingChoice c;
  if (group.kind != LaunchGroup::Kind::kSingle || group.deterministic ||
      !rules.reducing_schedules || first.shape.flops() < rules.reducing_min_flops)
    return c;
  c.workspace = plan_workspace_bytes;
  c.reducing = c.workspace > 0 && c.workspace <= rules.max_reducing_workspace_bytes;
  return c;
}

std::string OursLaunchLabel(LaunchGroup::Kind kind, gk::KernelKind kernel, bool grouped, DType a,
                            bool copies_operands) {
  const bool fp8 = !grouped && IsFp8(a);
  const bool padded = !grouped && !fp8 && a != DType::kFp32 && copies_operands;
  return absl::StrCat(LaunchKindName(kind), "/", KernelFamily(kernel), fp8 ? "_fp8" : "",
                      padded ? "_padded" : "");
}

std::string CublasLaunchLabel(LaunchGroup::Kind kind, gt::CandidateFamily family, bool fp8) {
  return absl::StrCat(LaunchKindName(kind), "/", CublasFamilyLabel(family), fp8 ? "_fp8" : "");
}

}  // namespace gpu
}  // namespace gemm
