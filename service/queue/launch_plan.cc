#include "service/queue/launch_plan.h"

#include <map>
#include <tuple>

#include "kernels/config/deterministic_plan.h"
#include "kernels/problem.h"

namespace gemm {
namespace {

// Everything but the data: two problems with equal keys can be one
// strided-batched launch (one alpha, one beta, one shape for all members).
// Resident operands are part of the key: members share one resident matrix
// (a broadcast operand, batch stride 0) or none, never a mix. FP8 problems
// key on both formats, both scale modes and what the server quantizes: one
// launch reads one pair of formats and one scale layout per operand.
auto BatchKey(const GemmProblemRef& p) {
  const GemmShape& s = p.shape;
  return std::make_tuple(s.m, s.n, s.k, s.transpose_a, s.transpose_b,
                         static_cast<int>(s.input_dtype), static_cast<int>(s.b_dtype()),
                         static_cast<int>(p.a.scales.mode), static_cast<int>(p.b.scales.mode),
                         static_cast<int>(p.quantize), static_cast<int>(p.quantize_mode),
                         static_cast<int>(s.output_dtype),
                         static_cast<int>(s.layout_a), static_cast<int>(s.layout_b),
                         static_cast<int>(s.layout_c), static_cast<int>(s.layout_d), s.allow_tf32,
                         p.alpha, p.beta, p.c.present(), p.a.resident, p.b.resident,
                         p.c.resident);
}

// A deterministic problem's plan tile (-1 for the others), which its grouped
// launch must share.
int DeterministicTile(const GemmProblemRef& p, bool deterministic) {
  if (!deterministic) return -1;
  const GemmShape& s = p.shape;
  return static_cast<int>(gemm_kernels::DeterministicSm90Recipe(
                              s.input_dtype, static_cast<int64_t>(s.m),
                              static_cast<int64_t>(s.n), static_cast<int64_t>(s.k),
                              s.layout_d == Layout::kColMajor)
                              .tile);
}

// Problems of one class can share a grouped launch: one kernel instantiation
// serves one (input, output, tf32) combination; deterministic problems only
// with each other, on one plan tile.
auto GroupKey(const GemmProblemRef& p, bool deterministic) {
  return std::make_tuple(static_cast<int>(p.shape.input_dtype),
                         static_cast<int>(p.shape.output_dtype), p.shape.allow_tf32,
                         deterministic, DeterministicTile(p, deterministic));
}

// Whether the Hopper kernel reads an operand of this problem only after the
// kernels copy it aligned and K-major (gemm_kernels::OperandNeedsCopy): a
// 16-bit operand whose rows start off TMA's 16-byte grid, or a TF32 operand
// that is not K-major or off that grid. Alone, such a problem has those operands copied and
// runs on the Hopper kernel; in a grouped launch it could not: the grouped
// kernel cannot read them, and its loop of single launches makes no copies,
// so it would run the SIMT kernel, slower and, for a deterministic problem,
// with other bits than alone. Staged operands start on the grid and grouped
// members are single problems, so each operand's rows decide.
bool NeedsOperandCopies(const GemmProblemRef& p) {
  const GemmShape& s = p.shape;
  if (!gemm_kernels::OperandCopiesApply(s.input_dtype, s.allow_tf32,
                                        /*copy_unaligned_operands=*/true))
    return false;
  const uint64_t elem = SizeOf(s.input_dtype);
  const bool a_k_major = (s.layout_a == Layout::kRowMajor) != s.transpose_a;
  const bool b_k_major = (s.layout_b == Layout::kColMajor) != s.transpose_b;
  return gemm_kernels::OperandNeedsCopy(s.input_dtype, a_k_major, (p.a.ld() * elem) % 16 == 0) ||
         gemm_kernels::OperandNeedsCopy(s.input_dtype, b_k_major, (p.b.ld() * elem) % 16 == 0);
}

// Whether a problem may join a grouped launch at all: the grouped kernel
// reads no FP8, so FP8 problems that do not form a strided batch run alone;
// nor do problems whose operands the kernels copy (NeedsOperandCopies).
bool Groupable(const GemmProblemRef& p, bool deterministic, const LaunchPlanOptions& options) {
  return options.grouped_supported && !p.shape.fp8() && !NeedsOperandCopies(p) &&
         !(deterministic && p.shape.input_dtype == DType::kFp32);
}

}  // namespace

const char* LaunchKindName(LaunchGroup::Kind kind) {
  switch (kind) {
    case LaunchGroup::Kind::kSingle:
      return "single";
    case LaunchGroup::Kind::kStridedBatched:
      return "strided_batched";
    case LaunchGroup::Kind::kGrouped:
      return "grouped";
  }
  return "unknown";
}

bool SameBatchShape(const GemmProblemRef& x, const GemmProblemRef& y) {
  return BatchKey(x) == BatchKey(y);
}

std::vector<LaunchGroup> PlanLaunches(const std::vector<std::shared_ptr<WorkItem>>& items,
                                      const LaunchPlanOptions& options) {
  std::vector<LaunchGroup> launches;
  // Identical shapes first, in order of first appearance; deterministic and
  // other problems apart.
  struct SameShape {
    bool deterministic = false;
    std::vector<const GemmProblemRef*> problems;
  };
  std::vector<SameShape> same_shape;
  std::map<std::pair<bool, decltype(BatchKey(GemmProblemRef()))>, size_t> index;
  for (const auto& item : items) {
    const bool det = item->deterministic;
    for (const GemmProblemRef& p : item->problems) {
      if (p.shape.flops() >= options.large_problem_flops) {
        launches.push_back({LaunchGroup::Kind::kSingle, {&p}, det});
        continue;
      }
      auto [it, inserted] = index.emplace(std::make_pair(det, BatchKey(p)), same_shape.size());
      if (inserted) same_shape.push_back({det, {}});
      same_shape[it->second].problems.push_back(&p);
    }
  }
  // What is left over after the strided batches is grouped by type class.
  std::vector<SameShape> grouped;
  std::map<decltype(GroupKey(GemmProblemRef(), false)), size_t> group_index;
  for (SameShape& shape : same_shape) {
    const bool det = shape.deterministic;
    if (shape.problems.size() >= options.min_strided_batch) {
      launches.push_back({LaunchGroup::Kind::kStridedBatched, std::move(shape.problems), det});
      continue;
    }
    for (const GemmProblemRef* p : shape.problems) {
      if (!Groupable(*p, det, options)) {
        launches.push_back({LaunchGroup::Kind::kSingle, {p}, det});
        continue;
      }
      auto [it, inserted] = group_index.emplace(GroupKey(*p, det), grouped.size());
      if (inserted) grouped.push_back({det, {}});
      grouped[it->second].problems.push_back(p);
    }
  }
  for (SameShape& group : grouped) {
    const LaunchGroup::Kind kind =
        group.problems.size() == 1 ? LaunchGroup::Kind::kSingle : LaunchGroup::Kind::kGrouped;
    launches.push_back({kind, std::move(group.problems), group.deterministic});
  }
  return launches;
}

Batch SingleLaunchBatch(std::vector<std::shared_ptr<WorkItem>> items) {
  Batch batch;
  batch.items = std::move(items);
  for (const auto& item : batch.items)
    for (const GemmProblemRef& p : item->problems)
      batch.launches.push_back({LaunchGroup::Kind::kSingle, {&p}, item->deterministic});
  return batch;
}

}  // namespace gemm
