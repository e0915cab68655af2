#include "kernels/config/deterministic_plan.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemm_kernels {
namespace {

using ::testing::HasSubstr;

// Ragged and K-heavy shapes alike: small to 16384 on each side, K to 65536.
GroupedMemberShape RandomShape(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 3);
  std::uniform_int_distribution<int64_t> small(1, 300), medium(1, 4096), large(1, 16384),
      deep(2048, 65536);
  switch (kind(rng)) {
    case 0:
      return {small(rng), small(rng), medium(rng)};
    case 1:
      return {medium(rng), medium(rng), medium(rng)};
    case 2:
      return {small(rng), small(rng), deep(rng)};
    default:
      return {large(rng), medium(rng), large(rng)};
  }
}

TEST(DeterministicPlanTest, TileIsOneTheGroupedKernelHasAndNeverSplits) {
  std::mt19937_64 rng(33);
  for (int i = 0; i < 5000; ++i) {
    const GroupedMemberShape s = RandomShape(rng);
    const DeterministicSm90Plan plan = PlanDeterministicSm90(s.m, s.n, s.k);
    EXPECT_TRUE(plan.tile == Sm90Tile::k128x256 || plan.tile == Sm90Tile::k128x128)
        << s.m << "x" << s.n << "x" << s.k;
    EXPECT_EQ(plan.schedule, Sm90Schedule::kDataParallel);
    EXPECT_EQ(plan.splits, 1);
  }
}

TEST(DeterministicPlanTest, BothTilesOccur) {
  // A lone 128 x 128 x 4096 problem fills one 128x128 tile and half of a
  // 128x256 one; a 4096^3 problem fills 128x256 tiles whole.
  EXPECT_EQ(PlanDeterministicSm90(128, 128, 4096).tile, Sm90Tile::k128x128);
  EXPECT_EQ(PlanDeterministicSm90(4096, 4096, 4096).tile, Sm90Tile::k128x256);
}

TEST(DeterministicPlanTest, ColumnMajorDSwapsMAndN) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const GroupedMemberShape s = RandomShape(rng);
    EXPECT_EQ(PlanDeterministicSm90ForLayout(s.m, s.n, s.k, true).tile,
              PlanDeterministicSm90(s.n, s.m, s.k).tile);
    EXPECT_EQ(PlanDeterministicSm90ForLayout(s.m, s.n, s.k, false).tile,
              PlanDeterministicSm90(s.m, s.n, s.k).tile);
  }
}

// The launch a member runs in: whatever the batch count and the device's SM
// count, its tile and schedule are those of the problem alone on any
// device, and nothing splits or multicasts.
TEST(DeterministicPlanTest, LaunchIgnoresBatchAndSmCount) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> batch(1, 512);
  std::uniform_int_distribution<int> sms(1, 264);
  for (int i = 0; i < 4000; ++i) {
    const GroupedMemberShape s = RandomShape(rng);
    const int bk = i % 2 == 0 ? 64 : 32;
    const Sm90LaunchChoice alone = DeterministicSm90Launch(s.m, s.n, s.k, 1, bk, 132);
    const Sm90LaunchChoice in_batch =
        DeterministicSm90Launch(s.m, s.n, s.k, batch(rng), bk, sms(rng));
    EXPECT_EQ(alone.tile, PlanDeterministicSm90(s.m, s.n, s.k).tile);
    for (const Sm90LaunchChoice& c : {alone, in_batch}) {
      EXPECT_EQ(c.tile, alone.tile);
      EXPECT_EQ(c.schedule, Sm90Schedule::kDataParallel);
      EXPECT_EQ(c.splits, 1);
      EXPECT_EQ(c.sk_tiles, 0);
      EXPECT_FALSE(c.multicast_a);
      EXPECT_FALSE(c.cluster_pairs);
      EXPECT_EQ(c.workspace_slots, 0);
      EXPECT_EQ(ScheduleWorkspaceBytes(c), 0u);
    }
  }
}

// A grouped launch of deterministic members takes a tile only where it is
// every member's own; adding random partners never changes a member's tile.
TEST(DeterministicPlanTest, GroupedTileIsEveryMembersOwn) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> count(1, 64);
  int shared = 0, mixed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<GroupedMemberShape> members(count(rng));
    for (auto& m : members) m = RandomShape(rng);
    const std::optional<Sm90Tile> tile = DeterministicGroupedTile(members);
    bool all_same = true;
    for (const auto& m : members)
      all_same &= PlanDeterministicSm90(m.m, m.n, m.k).tile ==
                  PlanDeterministicSm90(members[0].m, members[0].n, members[0].k).tile;
    ASSERT_EQ(tile.has_value(), all_same);
    if (tile) {
      ++shared;
      for (const auto& m : members) EXPECT_EQ(*tile, PlanDeterministicSm90(m.m, m.n, m.k).tile);
    } else {
      ++mixed;
    }
  }
  EXPECT_GT(shared, 0);
  EXPECT_GT(mixed, 0);
  EXPECT_FALSE(DeterministicGroupedTile({}).has_value());
}

TEST(DeterministicPlanTest, TheRecipeIsThePlanForSixteenBitAndTf32AndOneTileForFp8) {
  using ::gemm::DType;
  const std::vector<GroupedMemberShape> shapes = {
      {1, 1, 1}, {77, 4096, 14336}, {4096, 77, 512}, {8192, 8192, 8192}, {300, 5000, 700}};
  for (const GroupedMemberShape& s : shapes) {
    for (const bool col : {false, true}) {
      const Sm90Tile planned = PlanDeterministicSm90ForLayout(s.m, s.n, s.k, col).tile;
      for (const DType t : {DType::kBf16, DType::kFp16, DType::kFp32})
        EXPECT_EQ(DeterministicSm90Recipe(t, s.m, s.n, s.k, col).tile, planned);
      for (const DType t : {DType::kFp8E4m3, DType::kFp8E5m2})
        EXPECT_EQ(DeterministicSm90Recipe(t, s.m, s.n, s.k, col).tile, Sm90Tile::k128x128);
    }
  }
  // The record's words name each kernel's k-blocks and k-steps.
  EXPECT_THAT(DeterministicSm90Recipe(DType::kBf16, 64, 64, 64, false).reduction_order,
              HasSubstr("k-blocks of 64 ascending, wgmma k-steps of 16"));
  EXPECT_THAT(DeterministicSm90Recipe(DType::kFp32, 64, 64, 64, false).reduction_order,
              HasSubstr("k-blocks of 32 ascending, tf32 wgmma k-steps of 8"));
  EXPECT_THAT(DeterministicSm90Recipe(DType::kFp8E4m3, 64, 64, 64, false).reduction_order,
              HasSubstr("promoted into fp32 accumulators every " +
                        std::to_string(kFp8PromoteEvery) + " k-block(s)"));
}

TEST(DeterministicPlanTest, TileNames) {
  EXPECT_STREQ(Sm90TileName(Sm90Tile::k128x256), "128x256");
  EXPECT_STREQ(Sm90TileName(Sm90Tile::k128x128), "128x128");
  EXPECT_STREQ(Sm90TileName(Sm90Tile::k192x192), "192x192");
}

}  // namespace
}  // namespace gemm_kernels
