// Internal entry points of the Hopper (sm_90a) TMA + wgmma kernel family.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/config/heuristic.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"

namespace gemm_kernels {

// True when the Hopper kernel can run `p` (dtype and layout combination, TMA
// alignment of every operand); otherwise `why` says what rules it out.
bool Sm90Supports(const NormalizedProblem& p, std::string* why);

// Builds the tensor maps and launch configuration for the tile, schedule and
// grid in `choice` (ChooseSm90Launch / MakeSm90Launch). A stream-K or split-K
// choice needs `workspace` of ScheduleWorkspaceBytes(choice) device bytes;
// its flag words, if it has any, are zeroed here (cudaMemsetAsync on the
// legacy default stream), and each launch leaves them zero. Split-K with a
// separate reduction has no flags: Launch enqueues the GEMM and then the
// reduction kernel. Launches sharing one workspace must not overlap. Returns
// nullptr with `error` set on failure.
std::unique_ptr<KernelPlan> MakeSm90Plan(const NormalizedProblem& p,
                                         const Sm90LaunchChoice& choice, void* workspace,
                                         std::string* error);

// 2-CTA clusters of the 128x128 kernels that the current device holds at
// once (cudaOccupancyMaxActiveClusters; 0 where clusters are unavailable):
// the bound for paired split-K (Sm90LaunchChoice::cluster_pairs), whose
// pairs wait on each other. Asked once per device.
int Sm90MaxPairClusters();

// Whether the kernels were built with per-CTA timing stamps
// (--define=gemm_kernel_stamps=1). Without them a plan that asks for stamps
// (Sm90LaunchChoice::cta_clock, or `cta_clock` below) is refused.
bool Sm90KernelStamps();

// The tile a hint forces; none for TileHint::kAuto (the heuristic chooses).
std::optional<Sm90Tile> Sm90TileOf(TileHint hint);

// Whether the grouped kernel below is built for `tile` (the 128x256 and
// 128x128 cooperative tiles); MakeSm90GroupedPlan refuses the others.
bool Sm90GroupedHasTile(Sm90Tile tile);

// Grouped launch: every problem's tiles in one persistent kernel. All
// problems share input and output dtype (16-bit inputs) and operand layouts,
// batch 1 each, and must pass Sm90Supports. Tensor maps and epilogue
// descriptors are built here and copied (synchronously) into `workspace` of
// Sm90GroupedWorkspaceSize(problems.size()) device bytes, which must stay
// untouched while the plan is used. `cta_clock`: experiments only
// (Sm90LaunchChoice::cta_clock), device memory of grid x kCtaClockWords words.
size_t Sm90GroupedWorkspaceSize(size_t num_problems);
std::unique_ptr<KernelPlan> MakeSm90GroupedPlan(const std::vector<NormalizedProblem>& problems,
                                                Sm90Tile tile, int num_sms, void* workspace,
                                                std::string* error,
                                                unsigned long long* cta_clock = nullptr);
// The same without the copy: the workspace's contents are written to
// `host_image` (Sm90GroupedWorkspaceSize bytes of host memory), and the
// caller copies them to `workspace` in stream order before the launch (for a
// server, one asynchronous copy from pinned memory; nothing blocks). Only a
// copy may write them, never a kernel: the grouped kernel reads them before
// its programmatic grid-dependency wait, which orders it after the previous
// kernel in the stream but not the other way round for what that kernel
// writes; a copy always completes before the next launch starts.
std::unique_ptr<KernelPlan> MakeSm90GroupedPlanDeferred(
    const std::vector<NormalizedProblem>& problems, Sm90Tile tile, int num_sms, void* workspace,
    void* host_image, std::string* error, unsigned long long* cta_clock = nullptr);

}  // namespace gemm_kernels
