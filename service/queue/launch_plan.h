// How a batch of requests becomes launches. Pure functions, shared by every
// executor, so that batch formation is decided (and tested) in one place:
//   - problems identical in everything but their data form one strided-batched
//     launch;
//   - other problems of one (input, output, tf32) type class form one grouped
//     launch (FP8 problems run alone: the grouped kernel reads no FP8);
//   - problems at or above the "large" threshold get a launch of their own, so
//     the kernel's own heuristic (data-parallel or stream-K) sees them alone;
//   - problems of deterministic requests (WorkItem::deterministic) share
//     launches only with each other, each launch flagged deterministic, so the
//     kernels run every member with its deterministic plan
//     (kernels/config/deterministic_plan.h): a grouped launch holds only
//     16-bit-input members whose plans share one tile; fp32 ones run as
//     strided batches or alone (the grouped kernel has no tf32, and its
//     fallback copies no operands into K-major order).
#ifndef GEMM_SERVICE_QUEUE_LAUNCH_PLAN_H_
#define GEMM_SERVICE_QUEUE_LAUNCH_PLAN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/gemm_problem.h"
#include "service/queue/work_item.h"

namespace gemm {

struct LaunchGroup {
  enum class Kind { kSingle, kStridedBatched, kGrouped };
  Kind kind = Kind::kSingle;
  // Problems of the launch, pointing into the batch's items, in queue order.
  std::vector<const GemmProblemRef*> problems;
  // Every problem is of a deterministic request (none is otherwise).
  bool deterministic = false;
};

const char* LaunchKindName(LaunchGroup::Kind kind);

// One unit of work for an executor: admitted requests and their launches.
struct Batch {
  std::vector<std::shared_ptr<WorkItem>> items;
  std::vector<LaunchGroup> launches;
  // Called once, after every item of the batch has been completed; the
  // batcher uses it to know the executor has room again. May be empty.
  std::function<void()> on_done;
};

struct LaunchPlanOptions {
  // Problems with at least this many FLOPs (2MNK) run as their own launch.
  double large_problem_flops = 2.0 * 2048 * 2048 * 2048;
  // Fewer identical problems than this run as single launches (a batched
  // launch of one is no better than a plain one).
  size_t min_strided_batch = 2;
  // Whether the executor can run grouped launches; when false, problems that
  // would be grouped run as single launches.
  bool grouped_supported = true;
};

// Splits the problems of `items` into launches. Every problem appears in
// exactly one launch.
std::vector<LaunchGroup> PlanLaunches(const std::vector<std::shared_ptr<WorkItem>>& items,
                                      const LaunchPlanOptions& options);

// True when two problems can share one strided-batched launch.
bool SameBatchShape(const GemmProblemRef& x, const GemmProblemRef& y);

// Builds a batch whose launches are one single launch per problem; for
// executors fed without a batcher (tests, tools).
Batch SingleLaunchBatch(std::vector<std::shared_ptr<WorkItem>> items);

}  // namespace gemm

#endif  // GEMM_SERVICE_QUEUE_LAUNCH_PLAN_H_
