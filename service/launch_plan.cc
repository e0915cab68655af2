#include "service/launch_plan.h"

#include <map>
#include <tuple>

namespace gemm {
namespace {

// Everything but the data: two problems with equal keys can be one
// strided-batched launch (one alpha, one beta, one shape for all members).
// Resident operands are part of the key: members share one resident matrix
// (a broadcast operand, batch stride 0) or none, never a mix.
auto BatchKey(const GemmProblemRef& p) {
  const GemmShape& s = p.shape;
  return std::make_tuple(s.m, s.n, s.k, s.transpose_a, s.transpose_b,
                         static_cast<int>(s.input_dtype), static_cast<int>(s.output_dtype),
                         static_cast<int>(s.layout_a), static_cast<int>(s.layout_b),
                         static_cast<int>(s.layout_c), static_cast<int>(s.layout_d), s.allow_tf32,
                         p.alpha, p.beta, p.c.present(), p.a.resident, p.b.resident,
                         p.c.resident);
}

// Problems of one class can share a grouped launch: one kernel instantiation
// serves one (input, output, tf32) combination.
auto GroupKey(const GemmProblemRef& p) {
  return std::make_tuple(static_cast<int>(p.shape.input_dtype),
                         static_cast<int>(p.shape.output_dtype), p.shape.allow_tf32);
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
  // Identical shapes first, in order of first appearance.
  std::vector<std::vector<const GemmProblemRef*>> same_shape;
  std::map<decltype(BatchKey(GemmProblemRef())), size_t> index;
  for (const auto& item : items) {
    for (const GemmProblemRef& p : item->problems) {
      if (p.shape.flops() >= options.large_problem_flops) {
        launches.push_back({LaunchGroup::Kind::kSingle, {&p}});
        continue;
      }
      auto [it, inserted] = index.emplace(BatchKey(p), same_shape.size());
      if (inserted) same_shape.emplace_back();
      same_shape[it->second].push_back(&p);
    }
  }
  // What is left over after the strided batches is grouped by type class.
  std::vector<std::vector<const GemmProblemRef*>> grouped;
  std::map<decltype(GroupKey(GemmProblemRef())), size_t> group_index;
  for (auto& problems : same_shape) {
    if (problems.size() >= options.min_strided_batch) {
      launches.push_back({LaunchGroup::Kind::kStridedBatched, std::move(problems)});
      continue;
    }
    for (const GemmProblemRef* p : problems) {
      if (!options.grouped_supported) {
        launches.push_back({LaunchGroup::Kind::kSingle, {p}});
        continue;
      }
      auto [it, inserted] = group_index.emplace(GroupKey(*p), grouped.size());
      if (inserted) grouped.emplace_back();
      grouped[it->second].push_back(p);
    }
  }
  for (auto& problems : grouped) {
    const LaunchGroup::Kind kind =
        problems.size() == 1 ? LaunchGroup::Kind::kSingle : LaunchGroup::Kind::kGrouped;
    launches.push_back({kind, std::move(problems)});
  }
  return launches;
}

Batch SingleLaunchBatch(std::vector<std::shared_ptr<WorkItem>> items) {
  Batch batch;
  batch.items = std::move(items);
  for (const auto& item : batch.items)
    for (const GemmProblemRef& p : item->problems)
      batch.launches.push_back({LaunchGroup::Kind::kSingle, {&p}});
  return batch;
}

}  // namespace gemm
