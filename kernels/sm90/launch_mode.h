// How one launch of the Hopper GEMM kernel walks and reduces its tiles: one
// enum, carried in KernelParams::mode, with what each mode needs stated once
// as compile-time traits. Plain C++ (constexpr), for the host code that
// builds a plan (sm90_gemm.cu) and the device code that branches on it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GEMM_MODE_FN __host__ __device__ __forceinline__ constexpr
#else
#define GEMM_MODE_FN inline constexpr
#endif

namespace gemm_kernels::sm90 {

// The modes are ordered so that those sharing a device-side branch are
// adjacent (one range test each): the two that store every partial, the two
// launched as 2-CTA clusters.
enum class LaunchMode : int32_t {
  // Whole tiles, one CTA each in turn (PersistentTileScheduler order). The
  // ping-pong kernels run only this mode.
  kDataParallel = 0,
  // Hybrid stream-K: data-parallel waves, then the last sk_tiles tiles
  // shared out by k-ranges; partial tiles go through the workspace and the
  // holder of a tile's last k-block adds them (flag words per slot).
  kStreamK = 1,
  // Split-K reduced in the kernel: stream-K over exactly tiles x splits
  // CTAs (CTA t * splits + s holds split s of tile t), same fixup.
  kSplitK = 2,
  // Split-K whose every split stores its partial (no flags); a second
  // kernel sums them (scheduler/split_k_reduce.h).
  kSplitKReduceKernel = 3,
  // As kSplitKReduceKernel, but the GEMM grid sums the partials itself
  // after a grid-wide count (grid_counters); no second kernel.
  kSplitKGridSum = 4,
  // Split-K in two, 128-wide cooperative kernels, 2-CTA clusters: CTA 2t
  // holds tile t's first k-range, 2t + 1 its second and the epilogue; the
  // partial goes through distributed shared memory (no workspace).
  kSplitKPaired = 5,
  // Data-parallel in 2-CTA clusters over neighbouring n-tiles of one
  // m-tile, each CTA loading half of every A k-block into both rings.
  kMulticastA = 6,
  // Many problems in one launch (the kGrouped kernels).
  kGrouped = 7,
};

struct LaunchModeTraits {
  int cluster;             // CTAs per cluster (1 or 2)
  bool k_ranges;           // units may hold part of a tile's k-blocks (sk_tiles > 0)
  bool workspace;          // needs the reducing workspace (partials)
  bool flags;              // flag words per workspace slot (in-kernel fixup)
  bool partials_only;      // every unit stores its partial (StreamKScheduler::partials_only)
  bool grid_counters;      // the grid's two counters at the workspace's start
  bool reduction_kernel;   // a second kernel sums the partials
  bool all_resident;       // every CTA waits on others: grid <= SMs
  bool cooperative_only;   // not on ping-pong kernels
  bool grouped;            // the kGrouped kernels
};

GEMM_MODE_FN LaunchModeTraits TraitsOf(LaunchMode m) {
  switch (m) {
    case LaunchMode::kDataParallel:
      return {1, false, false, false, false, false, false, false, false, false};
    case LaunchMode::kStreamK:
      return {1, true, true, true, false, false, false, true, true, false};
    case LaunchMode::kSplitK:
      return {1, true, true, true, false, false, false, true, true, false};
    case LaunchMode::kSplitKReduceKernel:
      return {1, true, true, false, true, false, true, false, true, false};
    case LaunchMode::kSplitKGridSum:
      return {1, true, true, false, true, true, false, true, true, false};
    case LaunchMode::kSplitKPaired:
      return {2, true, false, false, false, false, false, false, true, false};
    case LaunchMode::kMulticastA:
      return {2, false, false, false, false, false, false, false, true, false};
    case LaunchMode::kGrouped:
      return {1, false, false, false, false, false, false, false, true, true};
  }
  return {1, false, false, false, false, false, false, false, false, false};
}

// The device-side branches, as range tests over the adjacent modes above.
GEMM_MODE_FN bool StoresEveryPartial(LaunchMode m) {
  return m == LaunchMode::kSplitKReduceKernel || m == LaunchMode::kSplitKGridSum;
}
GEMM_MODE_FN bool LaunchedAsPairs(LaunchMode m) {
  return m == LaunchMode::kSplitKPaired || m == LaunchMode::kMulticastA;
}

// The traits table agrees with itself and with the branches above.
namespace launch_mode_checks {
constexpr LaunchMode kAll[] = {
    LaunchMode::kDataParallel,       LaunchMode::kStreamK,       LaunchMode::kSplitK,
    LaunchMode::kSplitKReduceKernel, LaunchMode::kSplitKGridSum, LaunchMode::kSplitKPaired,
    LaunchMode::kMulticastA,         LaunchMode::kGrouped};
constexpr bool Consistent() {
  for (LaunchMode m : kAll) {
    const LaunchModeTraits t = TraitsOf(m);
    if (t.partials_only != StoresEveryPartial(m)) return false;
    if ((t.cluster == 2) != LaunchedAsPairs(m)) return false;
    // A fixup through the workspace either flags each slot or stores every
    // partial for someone else to sum; never both.
    if (t.workspace != (t.flags || t.partials_only)) return false;
    if (t.partials_only && t.flags) return false;
    // Stored partials are summed by exactly one of: a second kernel, the grid.
    if (t.partials_only != (t.reduction_kernel || t.grid_counters)) return false;
    if (t.reduction_kernel && t.grid_counters) return false;
    // Whoever waits on other CTAs' flags or counters needs them all resident.
    if ((t.flags || t.grid_counters) && !t.all_resident) return false;
    // Partial tiles exist only where units hold k-ranges.
    if (t.workspace && !t.k_ranges) return false;
    // Only data-parallel runs on the ping-pong kernels.
    if (!t.cooperative_only && m != LaunchMode::kDataParallel) return false;
  }
  return true;
}
static_assert(Consistent(), "LaunchModeTraits table");
static_assert(TraitsOf(LaunchMode::kSplitKPaired).cluster == 2 &&
                  !TraitsOf(LaunchMode::kSplitKPaired).workspace,
              "paired split-K keeps its partials in the cluster's shared memory");
}  // namespace launch_mode_checks

}  // namespace gemm_kernels::sm90

#undef GEMM_MODE_FN
