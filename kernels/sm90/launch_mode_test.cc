#include "kernels/sm90/launch_mode.h"

#include "gtest/gtest.h"

namespace gemm_kernels::sm90 {
namespace {

TEST(LaunchModeTest, ClusterModesAreThePairedOnes) {
  EXPECT_EQ(TraitsOf(LaunchMode::kSplitKPaired).cluster, 2);
  EXPECT_EQ(TraitsOf(LaunchMode::kMulticastA).cluster, 2);
  EXPECT_EQ(TraitsOf(LaunchMode::kStreamK).cluster, 1);
  EXPECT_TRUE(LaunchedAsPairs(LaunchMode::kSplitKPaired));
  EXPECT_FALSE(LaunchedAsPairs(LaunchMode::kGrouped));
}

TEST(LaunchModeTest, StoredPartialsAreSummedOnce) {
  for (LaunchMode m : launch_mode_checks::kAll) {
    const LaunchModeTraits t = TraitsOf(m);
    EXPECT_EQ(t.partials_only, StoresEveryPartial(m));
    if (t.partials_only) EXPECT_NE(t.reduction_kernel, t.grid_counters);
    if (t.flags || t.grid_counters) EXPECT_TRUE(t.all_resident);
  }
  EXPECT_TRUE(TraitsOf(LaunchMode::kSplitKReduceKernel).reduction_kernel);
  EXPECT_TRUE(TraitsOf(LaunchMode::kSplitKGridSum).grid_counters);
}

TEST(LaunchModeTest, OnlyDataParallelRunsOnPingPong) {
  for (LaunchMode m : launch_mode_checks::kAll) {
    EXPECT_EQ(TraitsOf(m).cooperative_only, m != LaunchMode::kDataParallel);
  }
}

}  // namespace
}  // namespace gemm_kernels::sm90
