#include "kernels/grouped_gemm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/config/deterministic_plan.h"
#include "kernels/config/heuristic.h"
#include "kernels/deterministic_hints.h"
#include "kernels/device_info.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_gemm.h"

namespace gemm_kernels {
namespace {

GemmArguments AsGemm(const GroupedProblemArguments& p, bool allow_tf32) {
  GemmArguments g;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.batch_count = 1;
  g.a = p.a;
  g.b = p.b;
  g.c = p.c;
  g.d = p.d;
  g.a.batch_stride = g.b.batch_stride = g.c.batch_stride = g.d.batch_stride = 0;
  g.alpha = p.alpha;
  g.beta = p.beta;
  g.allow_tf32 = allow_tf32;
  return g;
}

GemmArguments AsGemm(const GroupedGemmArguments& args, size_t i) {
  return AsGemm(args.problems[i], args.allow_tf32);
}

bool OnHopper(int* num_sms) {
  DeviceInfo dev;
  std::string error;
  if (!CurrentDeviceInfo(&dev, &error)) return false;
  *num_sms = dev.num_sms;
  return dev.sm90();
}

// The normalized problems when one grouped kernel can run them all.
bool GroupedKernelFits(const GroupedGemmArguments& args, std::vector<NormalizedProblem>* out) {
  out->clear();
  for (const GroupedProblemArguments& gp : args.problems) {
    NormalizedProblem p = Normalize(AsGemm(gp, args.allow_tf32));
    std::string why;
    if (p.in_dtype == DataType::kFp32 || !Sm90Supports(p, &why)) return false;
    if (!out->empty()) {
      const NormalizedProblem& f = out->front();
      if (p.in_dtype != f.in_dtype || p.out_dtype != f.out_dtype || p.a.k_major != f.a.k_major ||
          p.b.k_major != f.b.k_major) {
        return false;
      }
    }
    out->push_back(p);
  }
  return true;
}

std::vector<GroupedMemberShape> ShapesOf(const std::vector<NormalizedProblem>& ps) {
  std::vector<GroupedMemberShape> shapes;
  shapes.reserve(ps.size());
  for (const NormalizedProblem& p : ps) shapes.push_back({p.m, p.n, p.k});
  return shapes;
}

// The grouped tile choice (kernels/config/heuristic.h) for these problems;
// for deterministic ones their common plan tile, or none where they differ.
std::optional<Sm90Tile> ChooseGroupTile(const std::vector<NormalizedProblem>& ps, int num_sms,
                                        bool deterministic) {
  if (deterministic) return DeterministicGroupedTile(ShapesOf(ps));
  return ChooseSm90GroupedTile(ShapesOf(ps), num_sms);
}

}  // namespace

GroupedProblemArguments GroupedMemberOf(const GemmArguments& g) {
  GroupedProblemArguments p;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.a = g.a;
  p.b = g.b;
  p.c = g.c;
  p.d = g.d;
  p.alpha = g.alpha;
  p.beta = g.beta;
  return p;
}

struct GroupedGemm::Impl {
  std::unique_ptr<KernelPlan> plan;  // the grouped kernel, or
  std::vector<Gemm> loop;            // one Gemm per problem
};

GroupedGemm::GroupedGemm() : impl_(new Impl) {}
GroupedGemm::~GroupedGemm() = default;

absl::Status GroupedGemm::CanImplement(const GroupedGemmArguments& args) {
  if (args.problems.empty()) return absl::InvalidArgumentError("problems is empty");
  if (args.problems.size() > (size_t{1} << 24)) {
    return absl::InvalidArgumentError("more than 2^24 problems");
  }
  for (size_t i = 0; i < args.problems.size(); ++i) {
    // Grouped problems carry no scales, and no grouped kernel reads FP8.
    const GroupedProblemArguments& gp = args.problems[i];
    if (::gemm::IsFp8(gp.a.dtype) || ::gemm::IsFp8(gp.b.dtype)) {
      return absl::UnimplementedError(absl::StrCat(
          "problems[", i, "].a.dtype / b.dtype: grouped launches of FP8 operands are not built"));
    }
    const absl::Status s = Gemm::CanImplement(AsGemm(args, i));
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("problems[", i, "]: ", s.message()));
    }
  }
  return absl::OkStatus();
}

size_t GroupedGemm::WorkspaceSize(const GroupedGemmArguments& args) {
  return WorkspaceSize(args.problems.size());
}

size_t GroupedGemm::WorkspaceSize(size_t num_problems) {
  int num_sms = 0;
  if (num_problems == 0 || !OnHopper(&num_sms)) return 0;
  return Sm90GroupedWorkspaceSize(num_problems);
}

absl::Status GroupedGemm::Initialize(const GroupedGemmArguments& args, void* workspace,
                                     TileHint hint) {
  return Init(args, workspace, nullptr, hint);
}

absl::Status GroupedGemm::InitializeDeferred(const GroupedGemmArguments& args, void* workspace,
                                             void* host_image, TileHint hint) {
  if (host_image == nullptr) return absl::InvalidArgumentError("host_image is null");
  return Init(args, workspace, host_image, hint);
}

bool GroupedGemm::uses_workspace() const { return impl_->plan != nullptr; }

absl::Status GroupedGemm::Init(const GroupedGemmArguments& args, void* workspace,
                               void* host_image, TileHint hint) {
  impl_->plan.reset();
  impl_->loop.clear();
  kind_ = KernelKind::kNone;
  kernel_name_.clear();
  absl::Status s = CanImplement(args);
  if (!s.ok()) return s;
  int num_sms = 0;
  std::vector<NormalizedProblem> ps;
  // A hint for a tile the grouped kernel lacks runs the loop of single
  // launches on that tile.
  const std::optional<Sm90Tile> forced =
      args.deterministic ? std::nullopt : Sm90TileOf(hint);
  const bool fits = workspace != nullptr && OnHopper(&num_sms) &&
                    (!forced || Sm90GroupedHasTile(*forced)) && GroupedKernelFits(args, &ps);
  const std::optional<Sm90Tile> chosen =
      !fits ? std::nullopt : forced ? forced : ChooseGroupTile(ps, num_sms, args.deterministic);
  if (chosen) {
    const Sm90Tile tile = *chosen;
    std::string error;
    impl_->plan = host_image != nullptr
                      ? MakeSm90GroupedPlanDeferred(ps, tile, num_sms, workspace, host_image, &error)
                      : MakeSm90GroupedPlan(ps, tile, num_sms, workspace, &error);
    if (!impl_->plan) return absl::InternalError(absl::StrCat("grouped kernel setup: ", error));
    kind_ = KernelKind::kSm90TmaWgmma;
    kernel_name_ = impl_->plan->name();
    return absl::OkStatus();
  }
  impl_->loop = std::vector<Gemm>(args.problems.size());
  for (size_t i = 0; i < args.problems.size(); ++i) {
    const GemmArguments member = AsGemm(args, i);
    if (args.deterministic) {
      // The member's own deterministic launch, as it runs alone.
      const DeterministicHints h = DeterministicHintsFor(member);
      s = impl_->loop[i].Initialize(member, nullptr, h.tile, h.schedule);
    } else {
      s = impl_->loop[i].Initialize(member, nullptr, hint);
    }
    if (!s.ok()) {
      impl_->loop.clear();
      return absl::Status(s.code(), absl::StrCat("problems[", i, "]: ", s.message()));
    }
  }
  kind_ = impl_->loop.front().kernel_kind();
  kernel_name_ = absl::StrCat("loop_of_", args.problems.size(), "_gemms");
  return absl::OkStatus();
}

absl::Status GroupedGemm::Run(void* stream) const {
  if (impl_->plan) {
    const std::string error = impl_->plan->Launch(stream);
    if (!error.empty()) return absl::InternalError(absl::StrCat(kernel_name_, " launch failed: ", error));
    return absl::OkStatus();
  }
  if (impl_->loop.empty()) {
    return absl::FailedPreconditionError("GroupedGemm::Run before a successful Initialize");
  }
  for (const Gemm& g : impl_->loop) {
    const absl::Status s = g.Run(stream);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gemm_kernels
