#include "kernels/gemm.h"

#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp8_rule.h"
#include "kernels/config/heuristic.h"
#include "kernels/copy/kmajor_copy.h"
#include "kernels/device_info.h"
#include "kernels/kernel_plan.h"
#include "kernels/portable/simt_gemm.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_fp8_gemm.h"
#include "kernels/sm90/sm90_gemm.h"

namespace gemm_kernels {

namespace {

constexpr int64_t kMaxExtent = (int64_t{1} << 31) - 1;

// Elements from the first to one past the last element of a rows x cols matrix.
int64_t Span(Layout layout, int64_t rows, int64_t cols, int64_t ld) {
  return layout == Layout::kRowMajor ? (rows - 1) * ld + cols : (cols - 1) * ld + rows;
}

absl::Status CheckMatrix(const char* name, const MatrixDesc& md, int64_t rows, int64_t cols,
                         int64_t batch, bool may_broadcast) {
  if (md.ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ".ptr is null"));
  const int64_t min_ld = md.layout == Layout::kRowMajor ? cols : rows;
  if (md.ld < min_ld) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".ld = ", md.ld, " is below the minimum ", min_ld));
  }
  if (md.batch_stride < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".batch_stride is negative"));
  }
  if (batch > 1) {
    if (md.batch_stride == 0 && !may_broadcast) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".batch_stride is 0: batch members would overwrite each other"));
    }
    if (md.batch_stride != 0 && md.batch_stride < Span(md.layout, rows, cols, md.ld) &&
        !may_broadcast) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".batch_stride = ", md.batch_stride, " overlaps batch members"));
    }
  }
  return absl::OkStatus();
}

// The FP8 rules of CanImplement: both operands FP8, each with a scale mode
// and scales, and the layouts the Hopper FP8 kernel reads.
absl::Status CheckFp8(const GemmArguments& args) {
  if (!::gemm::IsFp8(args.a.dtype) || !::gemm::IsFp8(args.b.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a.dtype (", DataTypeName(args.a.dtype), ") and b.dtype (", DataTypeName(args.b.dtype),
        "): FP8 operands pair only with FP8 (e4m3 or e5m2) operands"));
  }
  bool block = false;
  for (const auto& [name, scale] : {std::pair<const char*, const ScaleDesc&>{"a", args.a_scale},
                                    {"b", args.b_scale}}) {
    if (scale.mode == ScaleMode::kNone) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "_scale.mode is none: an FP8 operand needs tensor, channel or block scales"));
    }
    if (scale.ptr == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(name, "_scale.ptr is null"));
    }
    if (reinterpret_cast<uintptr_t>(scale.ptr) % alignof(float) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, "_scale.ptr is not 4-byte aligned"));
    }
    if (scale.mode == ScaleMode::kBlock) block = true;
  }
  // A column-major D is computed as D^T = B^T A^T, which would turn A's
  // 1 x 128 blocks into B-side blocks of another shape.
  if (block && args.d.layout != Layout::kRowMajor) {
    return absl::UnimplementedError(
        "d.layout column-major: block scales run with a row-major D only");
  }
  return absl::OkStatus();
}

// The current device, as a Status.
absl::Status CurrentDevice(DeviceInfo* out) {
  std::string error;
  if (!CurrentDeviceInfo(out, &error)) return absl::FailedPreconditionError(error);
  return absl::OkStatus();
}

}  // namespace

struct Gemm::Impl {
  std::unique_ptr<KernelPlan> plan;
  // Operands copied into K-major order before the GEMM (TF32 with an operand
  // that is not K-major): the originals, the plan and where the copies go.
  NormalizedProblem original;
  KMajorCopyPlan copies;
  void* copy_workspace = nullptr;
};

Gemm::Gemm() : impl_(new Impl) {}
Gemm::~Gemm() { delete impl_; }

absl::Status Gemm::CanImplement(const GemmArguments& args) {
  if (args.m < 1 || args.n < 1 || args.k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("m, n, k must be >= 1 (got ", args.m, ", ", args.n, ", ", args.k, ")"));
  }
  if (args.m > kMaxExtent || args.n > kMaxExtent || args.k > kMaxExtent) {
    return absl::InvalidArgumentError("m, n and k must each be below 2^31");
  }
  if (args.batch_count < 1 || args.batch_count > kMaxExtent) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_count must be in [1, 2^31), got ", args.batch_count));
  }
  const bool fp8 = ::gemm::IsFp8(args.a.dtype) || ::gemm::IsFp8(args.b.dtype);
  for (const auto& [name, desc] :
       {std::pair<const char*, const MatrixDesc&>{"c", args.c}, {"d", args.d}}) {
    if (::gemm::IsFp8(desc.dtype) && (name[0] == 'd' || args.beta != 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".dtype ", DataTypeName(desc.dtype), ": FP8 is an input type; ", name,
          " is bf16, f16 or f32"));
    }
  }
  if (fp8) {
    absl::Status s = CheckFp8(args);
    if (!s.ok()) return s;
  } else {
    if (args.a.dtype != args.b.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("a.dtype (", DataTypeName(args.a.dtype),
                                                     ") and b.dtype (", DataTypeName(args.b.dtype),
                                                     ") must match"));
    }
    for (const auto& [name, scale] : {std::pair<const char*, const ScaleDesc&>{"a", args.a_scale},
                                      {"b", args.b_scale}}) {
      if (scale.mode != ScaleMode::kNone) {
        return absl::InvalidArgumentError(absl::StrCat(name, "_scale.mode is ",
                                                       ScaleModeName(scale.mode),
                                                       ": scales apply to FP8 operands only"));
      }
    }
  }
  absl::Status s = CheckMatrix("a", args.a, args.m, args.k, args.batch_count, true);
  if (!s.ok()) return s;
  s = CheckMatrix("b", args.b, args.k, args.n, args.batch_count, true);
  if (!s.ok()) return s;
  s = CheckMatrix("d", args.d, args.m, args.n, args.batch_count, false);
  if (!s.ok()) return s;
  if (args.beta != 0.0f) {
    if (args.c.dtype != args.d.dtype || args.c.layout != args.d.layout) {
      return absl::InvalidArgumentError("c must have d's dtype and layout when beta != 0");
    }
    s = CheckMatrix("c", args.c, args.m, args.n, args.batch_count, true);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

static_assert(kFp8ScaleBlock == static_cast<int64_t>(::gemm::kFp8BlockK),
              "the kernels' block scales follow common/fp8_rule.h's layout");

int64_t Gemm::ScaleCount(const GemmArguments& args, const ScaleDesc& scale, bool is_a) {
  // The layout rule's count for op(X) as the kernel reads it: A is M x K,
  // B is K x N (the layout does not change the count).
  ::gemm::Fp8Operand g;
  g.operand = is_a ? ::gemm::OperandRole::kA : ::gemm::OperandRole::kB;
  g.rows = static_cast<uint64_t>(is_a ? args.m : args.k);
  g.cols = static_cast<uint64_t>(is_a ? args.k : args.n);
  g.mode = scale.mode;
  return static_cast<int64_t>(::gemm::ScaleCount(g));
}

namespace {

// Whether an operand's TMA box rows (128 bytes of one row, K-major, or of
// one k, MN-major) start off the 32-byte sector grid (Sm90RowAlignment).
bool RowsOffSector(const NormalizedOperand& op, int64_t batch, size_t elem_bytes) {
  const int64_t es = static_cast<int64_t>(elem_bytes);
  return Sm90RowsOffSector(op.ld * es, op.batch_stride * es, batch,
                           reinterpret_cast<uintptr_t>(op.ptr));
}

Sm90RowAlignment RowAlignmentOf(const NormalizedProblem& p) {
  const size_t es = DataTypeSize(p.in_dtype);
  Sm90RowAlignment rows;
  rows.a_off_sector = RowsOffSector(p.a, p.batch, es);
  rows.b_off_sector = RowsOffSector(p.b, p.batch, es);
  rows.a_k_major = p.a.k_major;
  return rows;
}

// The heuristic's launch (ChooseSm90Launch) for `p` on `dev`; `allow_reduction`
// false (no workspace) leaves data-parallel and paired split-K, which needs
// no workspace.
Sm90LaunchChoice HeuristicLaunch(const NormalizedProblem& p, const DeviceInfo& dev,
                                 bool allow_reduction) {
  const int bk = p.in_dtype == DataType::kFp32 ? 32 : 64;
  const int max_pairs = dev.sm90() ? Sm90MaxPairClusters() : 0;
  return ChooseSm90Launch(p.m, p.n, p.k, p.batch, bk, dev.num_sms, allow_reduction, max_pairs,
                          RowAlignmentOf(p));
}

// The Hopper launch (tile, schedule, grid) for these hints, from the
// heuristic's launch `c` for the same `allow_reduction`.
Sm90LaunchChoice WithHints(const Sm90LaunchChoice& c, const NormalizedProblem& p,
                           const DeviceInfo& dev, TileHint hint, ScheduleHint schedule,
                           bool allow_reduction) {
  const int bk = p.in_dtype == DataType::kFp32 ? 32 : 64;
  const Sm90Tile tile = Sm90TileOf(hint).value_or(c.tile);
  Sm90Schedule sched = c.schedule;
  // Without a workspace: data-parallel, or the heuristic's paired split-K as
  // it chose it (on another tile it would be a split-K that needs one).
  if (schedule == ScheduleHint::kDataParallel ||
      (!allow_reduction && !(c.cluster_pairs && tile == c.tile))) {
    sched = Sm90Schedule::kDataParallel;
  }
  if (schedule == ScheduleHint::kStreamK) sched = Sm90Schedule::kStreamK;
  if (schedule == ScheduleHint::kSplitK) sched = Sm90Schedule::kSplitK;
  // Forced split-K always takes the reduction kernel (MakeSm90Launch), even
  // where the heuristic's own split-K reduces in the kernel; forced
  // data-parallel is the plain launch, without the heuristic's multicast.
  if (tile == c.tile && sched == c.schedule && schedule != ScheduleHint::kSplitK &&
      !(c.multicast_a && schedule == ScheduleHint::kDataParallel)) {
    return c;
  }
  return MakeSm90Launch(tile, sched, p.m, p.n, p.k, p.batch, bk, dev.num_sms);
}

// The K-major copies that make `p` runnable on the Hopper kernel, or an empty
// plan when it runs as it is or copies would not make it runnable.
KMajorCopyPlan CopiesThatEnableSm90(const NormalizedProblem& p) {
  std::string why;
  if (Sm90Supports(p, &why)) return {};
  const KMajorCopyPlan plan = PlanKMajorCopies(p);
  if (plan.total_bytes == 0) return {};
  // Any 256-byte-aligned address stands in for the workspace here.
  if (!Sm90Supports(WithKMajorCopies(p, plan, reinterpret_cast<void*>(uintptr_t{256})), &why))
    return {};
  return plan;
}

// CopiesThatEnableSm90 where the copies pay off: bf16/fp16 copies only where
// they and the Hopper kernel are predicted faster than the SIMT kernel at the
// measured rates (OperandCopiesPayOff); TF32 copies always, the strict-fp32
// kernel being ~20x slower than TF32 on the tensor cores.
KMajorCopyPlan CopiesWorthMaking(const NormalizedProblem& p, const CopyPricing& pricing) {
  KMajorCopyPlan copies = CopiesThatEnableSm90(p);
  const bool half = p.in_dtype == DataType::kBf16 || p.in_dtype == DataType::kFp16;
  if (half && copies.total_bytes > 0 && !OperandCopiesPayOff(p, copies, pricing)) return {};
  return copies;
}

// Whether operand copies can move a non-FP8 problem onto the Hopper kernel
// (FP8 has its own plan, PlanFp8).
bool CopiesMayEnableSm90(const GemmArguments& args) {
  return !::gemm::IsFp8(args.a.dtype) &&
         OperandCopiesApply(args.a.dtype, args.allow_tf32, args.copy_unaligned_operands);
}

// "+kmajor_copy_a" etc. for the copies a launch makes before the GEMM
// ("+repitch_copy_a" where only the row pitch changes).
void AppendCopyNames(const KMajorCopyPlan& copies, std::string* name) {
  for (const auto& [copy, operand] : {std::pair{&copies.a, "a"}, {&copies.b, "b"}}) {
    if (copy->needed) absl::StrAppend(name, copy->repitch ? "+repitch_copy_" : "+kmajor_copy_",
                                      operand);
  }
}

}  // namespace

// Everything a launch needs decided before its buffers exist.
struct Gemm::Plan::Data {
  absl::Status status;
  DeviceInfo dev;
  TileHint hint = TileHint::kAuto;
  ScheduleHint schedule = ScheduleHint::kAuto;
  NormalizedProblem problem;
  // The Hopper kernel runs the problem as it is.
  bool sm90 = false;
  // Otherwise, on Hopper: the K-major copies that would let it run there
  // (empty: none would, or bf16/fp16 copies would not pay off). FP8: the
  // copies its kernel reads instead of operands that are not K-major or not
  // on the 16-byte grid.
  KMajorCopyPlan copies;
  // sm90: the heuristic's launch with a workspace allowed, and with the
  // hints applied (what WorkspaceSize sizes).
  Sm90LaunchChoice heuristic;
  Sm90LaunchChoice with_workspace;
  size_t workspace_bytes = 0;
  // FP8 operands: the Hopper FP8 kernel's launch (data-parallel, no
  // workspace), planned by PlanFp8.
  bool fp8 = false;
  Fp8Operands fp8_operands;
  Sm90Fp8Launch fp8_launch;
};

namespace {

// The FP8 part of MakePlan: only the Hopper FP8 kernel runs FP8, so every
// reason it cannot is the plan's status.
absl::Status PlanFp8(const GemmArguments& args, TileHint hint, ScheduleHint schedule,
                     Gemm::Plan::Data* d) {
  d->fp8 = true;
  d->fp8_operands = NormalizeFp8(args);
  if (!d->dev.sm90()) {
    return absl::FailedPreconditionError(
        absl::StrCat("FP8 operands need a Hopper (sm_90) GPU; this one is compute capability ",
                     d->dev.major, ".", d->dev.minor));
  }
  std::string why;
  if (!Sm90Fp8Supports(d->problem, &why)) {
    // Operands that are not K-major, or off TMA's 16-byte grid, run from
    // K-major copies (Initialize's operand_copies).
    const KMajorCopyPlan copies = PlanKMajorCopies(d->problem);
    std::string why_copied;
    if (copies.total_bytes > 0 &&
        Sm90Fp8Supports(
            WithKMajorCopies(d->problem, copies, reinterpret_cast<void*>(uintptr_t{256})),
            &why_copied)) {
      d->copies = copies;
    } else {
      // The kernel names its normalized operands; the caller's are exchanged
      // under a column-major D.
      std::string field = why.substr(0, 1) == "A" ? "a" : why.substr(0, 1) == "B" ? "b" : "";
      if (d->problem.swapped && !field.empty()) field = field == "a" ? "b" : "a";
      return absl::UnimplementedError(absl::StrCat(field.empty() ? "" : field + ": ",
                                                   "FP8 kernel: ", why));
    }
  }
  if (schedule == ScheduleHint::kStreamK || schedule == ScheduleHint::kSplitK) {
    return absl::UnimplementedError(
        "schedule: FP8 launches are data-parallel only (stream-K and split-K are not built)");
  }
  const bool block = d->fp8_operands.a_scale.mode == ScaleMode::kBlock ||
                     d->fp8_operands.b_scale.mode == ScaleMode::kBlock;
  const std::optional<Sm90Tile> forced = Sm90TileOf(hint);
  if (forced && *forced != Sm90Tile::k128x256 && *forced != Sm90Tile::k128x128) {
    return absl::UnimplementedError("hint: FP8 kernels exist for the 128x256 and 128x128 tiles");
  }
  if (forced && block && *forced != Sm90Tile::k128x128) {
    return absl::UnimplementedError("hint: block scales run on the 128x128 FP8 tile only");
  }
  const NormalizedProblem& p = d->problem;
  d->fp8_launch = ChooseSm90Fp8Launch(p.m, p.n, p.k, p.batch, d->dev.num_sms, block,
                                      forced ? &*forced : nullptr);
  return absl::OkStatus();
}

}  // namespace

Gemm::Plan::Plan() = default;

const absl::Status& Gemm::Plan::status() const {
  static const absl::Status* const kNoPlan =
      new absl::Status(absl::FailedPreconditionError("Gemm::Plan not made by Gemm::MakePlan"));
  return data_ ? data_->status : *kNoPlan;
}

size_t Gemm::Plan::workspace_bytes() const { return data_ ? data_->workspace_bytes : 0; }

size_t Gemm::Plan::operand_copy_bytes() const { return data_ ? data_->copies.total_bytes : 0; }

Gemm::Plan Gemm::MakePlan(const GemmArguments& args, TileHint hint, ScheduleHint schedule) {
  auto d = std::make_shared<Plan::Data>();
  d->hint = hint;
  d->schedule = schedule;
  d->status = CanImplement(args);
  if (d->status.ok()) d->status = CurrentDevice(&d->dev);
  if (d->status.ok()) {
    d->problem = Normalize(args);
    std::string why;
    d->sm90 = !::gemm::IsFp8(args.a.dtype) && d->dev.sm90() && Sm90Supports(d->problem, &why);
    if (::gemm::IsFp8(args.a.dtype)) {
      d->status = PlanFp8(args, hint, schedule, d.get());
    } else if (d->sm90) {
      d->heuristic = HeuristicLaunch(d->problem, d->dev, true);
      d->with_workspace = WithHints(d->heuristic, d->problem, d->dev, hint, schedule, true);
      d->workspace_bytes = ScheduleWorkspaceBytes(d->with_workspace);
    } else if (d->dev.sm90() && CopiesMayEnableSm90(args)) {
      d->copies = CopiesWorthMaking(d->problem, args.copy_pricing);
    }
  }
  Plan plan;
  plan.data_ = std::move(d);
  return plan;
}

size_t Gemm::WorkspaceSize(const GemmArguments& args, TileHint hint, ScheduleHint schedule) {
  return MakePlan(args, hint, schedule).workspace_bytes();
}

size_t Gemm::OperandCopyBytes(const GemmArguments& args) {
  // The executor reads its plan's operand_copy_bytes() instead; this serves
  // benchmarks and tests. FP8 operands are copied whenever they are not
  // K-major, which the plan decides.
  if (::gemm::IsFp8(args.a.dtype)) return MakePlan(args).operand_copy_bytes();
  if (!CopiesMayEnableSm90(args)) return 0;
  if (!CanImplement(args).ok()) return 0;
  DeviceInfo dev;
  if (!CurrentDevice(&dev).ok() || !dev.sm90()) return 0;
  return CopiesWorthMaking(Normalize(args), args.copy_pricing).total_bytes;
}

absl::Status Gemm::Initialize(const GemmArguments& args, void* workspace, TileHint hint,
                              ScheduleHint schedule, void* operand_copies) {
  return Initialize(MakePlan(args, hint, schedule), workspace, operand_copies);
}

absl::Status Gemm::Initialize(const Plan& plan, void* workspace, void* operand_copies) {
  impl_->plan.reset();
  impl_->copies = {};
  impl_->copy_workspace = nullptr;
  kind_ = KernelKind::kNone;
  kernel_name_.clear();
  if (!plan.status().ok()) return plan.status();
  const Plan::Data& d = *plan.data_;
  const DeviceInfo& dev = d.dev;

  NormalizedProblem p = d.problem;
  if (d.fp8) {
    if (d.copies.total_bytes > 0) {
      // FP8 has no kernel that reads the operands where they are.
      const char* operand = d.copies.a.needed != p.swapped ? "a" : "b";
      if (operand_copies == nullptr)
        return absl::UnimplementedError(absl::StrCat(
            operand, ": the FP8 kernel reads K-major operands with 16-byte rows only; this one "
                     "needs a K-major copy, and no operand_copies memory was given (",
            d.copies.total_bytes, " bytes, Gemm::OperandCopyBytes)"));
      if (reinterpret_cast<uintptr_t>(operand_copies) % 256 != 0)
        return absl::InvalidArgumentError("operand_copies must be 256-byte aligned");
      impl_->original = p;
      impl_->copies = d.copies;
      impl_->copy_workspace = operand_copies;
      p = WithKMajorCopies(p, d.copies, operand_copies);
    }
    std::string error;
    impl_->plan = MakeSm90Fp8Plan(p, d.fp8_operands, d.fp8_launch.launch,
                                  d.fp8_launch.promote_every, &error);
    if (!impl_->plan) return absl::InternalError(absl::StrCat("sm90 FP8 kernel setup: ", error));
    kind_ = KernelKind::kSm90TmaWgmma;
    kernel_name_ = impl_->plan->name();
    AppendCopyNames(impl_->copies, &kernel_name_);
    return absl::OkStatus();
  }
  bool sm90 = d.sm90;
  // The heuristic's launch for the problem as it runs (none yet where the
  // operands are copied first).
  std::optional<Sm90LaunchChoice> heuristic;
  if (sm90) heuristic = d.heuristic;
  if (dev.sm90() && operand_copies != nullptr) {
    if (reinterpret_cast<uintptr_t>(operand_copies) % 256 != 0)
      return absl::InvalidArgumentError("operand_copies must be 256-byte aligned");
    if (d.copies.total_bytes > 0) {
      impl_->original = p;
      impl_->copies = d.copies;
      impl_->copy_workspace = operand_copies;
      p = WithKMajorCopies(p, d.copies, operand_copies);
      std::string why;
      sm90 = Sm90Supports(p, &why);
    }
  }
  if (sm90) {
    const bool allow_reduction = workspace != nullptr;
    Sm90LaunchChoice choice;
    if (heuristic && allow_reduction) {
      choice = d.with_workspace;
    } else {
      // A heuristic launch that needs no reduction is also the heuristic's
      // launch without a workspace: the paired split-K that it adds then
      // costs more than the in-kernel split-K 2 that lost to it.
      if (!heuristic || (!allow_reduction && heuristic->schedule != Sm90Schedule::kDataParallel))
        heuristic = HeuristicLaunch(p, dev, allow_reduction);
      choice = WithHints(*heuristic, p, dev, d.hint, d.schedule, allow_reduction);
    }
    std::string error;
    impl_->plan = MakeSm90Plan(p, choice, workspace, &error);
    if (!impl_->plan) return absl::InternalError(absl::StrCat("sm90 kernel setup: ", error));
    kind_ = KernelKind::kSm90TmaWgmma;
  } else {
    if (dev.major < 8) {
      return absl::FailedPreconditionError(
          absl::StrCat("compute capability ", dev.major, ".", dev.minor,
                       " is below the sm_80 minimum of the portable kernel"));
    }
    if ((p.m + 63) / 64 > 65535) {
      return absl::InvalidArgumentError("portable kernel: m too large for its grid");
    }
    impl_->plan = MakePortablePlan(p);
    kind_ = KernelKind::kPortableSimt;
  }
  kernel_name_ = impl_->plan->name();
  AppendCopyNames(impl_->copies, &kernel_name_);
  return absl::OkStatus();
}

bool Gemm::copies_operands() const { return impl_->copies.total_bytes > 0; }

absl::Status Gemm::Run(void* stream) const {
  if (!impl_->plan) return absl::FailedPreconditionError("Gemm::Run before a successful Initialize");
  // The copies first, on the same stream. The Hopper kernel is launched with
  // programmatic serialization, but waits (griddepcontrol.wait) for the
  // kernels before it to finish before it reads an operand.
  const NormalizedProblem& o = impl_->original;
  for (const auto& [copy, from] : {std::pair{&impl_->copies.a, &o.a}, {&impl_->copies.b, &o.b}}) {
    if (!copy->needed) continue;
    unsigned char* to = static_cast<unsigned char*>(impl_->copy_workspace) + copy->offset;
    std::string error;
    if (copy->element_bytes == 1) {
      const auto* src = static_cast<const uint8_t*>(from->ptr);
      auto* dst = reinterpret_cast<uint8_t*>(to);
      error = copy->repitch ? LaunchRepitchCopyU8(src, from->ld, from->batch_stride, copy->rows,
                                                  o.k, copy->members, dst, copy->ld_copy, stream)
                            : LaunchKMajorCopyU8(src, from->ld, from->batch_stride, copy->rows,
                                                 o.k, copy->members, dst, copy->ld_copy, stream);
    } else if (copy->element_bytes == 2) {
      const auto* src = static_cast<const uint16_t*>(from->ptr);
      auto* dst = reinterpret_cast<uint16_t*>(to);
      error = copy->repitch ? LaunchRepitchCopyU16(src, from->ld, from->batch_stride, copy->rows,
                                                   o.k, copy->members, dst, copy->ld_copy, stream)
                            : LaunchKMajorCopyU16(src, from->ld, from->batch_stride, copy->rows,
                                                  o.k, copy->members, dst, copy->ld_copy, stream);
    } else {
      const auto* src = static_cast<const float*>(from->ptr);
      auto* dst = reinterpret_cast<float*>(to);
      error = copy->repitch ? LaunchRepitchCopyF32(src, from->ld, from->batch_stride, copy->rows,
                                                   o.k, copy->members, dst, copy->ld_copy, stream)
                            : LaunchKMajorCopyF32(src, from->ld, from->batch_stride, copy->rows,
                                                  o.k, copy->members, dst, copy->ld_copy, stream);
    }
    if (!error.empty()) return absl::InternalError(absl::StrCat("K-major copy: ", error));
  }
  const std::string error = impl_->plan->Launch(stream);
  if (!error.empty()) {
    return absl::InternalError(absl::StrCat(kernel_name_, " launch failed: ", error));
  }
  return absl::OkStatus();
}

}  // namespace gemm_kernels
