#include "kernels/config/heuristic.h"

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace {

constexpr int kH200Sms = 132;

TEST(Heuristic, LargeSquareProblemsUseTheWideTile) {
  for (int s : {2048, 4096, 8192}) {
    EXPECT_EQ(ChooseSm90Tile(s, s, s, 1, kH200Sms), Sm90Tile::k128x256) << s;
  }
}

TEST(Heuristic, NarrowNUsesTheSquareTile) {
  // N = 128 fills only half of a 256-wide tile.
  EXPECT_EQ(ChooseSm90Tile(128, 128, 128, 1024, kH200Sms), Sm90Tile::k128x128);
  // ... but 32 square tiles would leave 100 SMs idle: 64 of 128x64.
  EXPECT_EQ(ChooseSm90Tile(4096, 128, 4096, 1, kH200Sms), Sm90Tile::k128x64);
}

TEST(Heuristic, SingleWavesOnFewSmsUseTheNarrowTile) {
  // 1024^3: 64 square tiles (one wave on 64 of 132 SMs) or 128 of 128x64.
  EXPECT_EQ(ChooseSm90Tile(1024, 1024, 1024, 1, kH200Sms), Sm90Tile::k128x64);
  // K long enough to split: split-K 2 on 128x128 (18.8 us) beats 128x64
  // (22.2 us).
  const Sm90LaunchChoice long_k = ChooseSm90Launch(1024, 1024, 4096, 1, 64, kH200Sms, true);
  EXPECT_EQ(long_k.schedule, Sm90Schedule::kSplitK);
  EXPECT_EQ(long_k.tile, Sm90Tile::k128x128);
  EXPECT_EQ(ChooseSm90Launch(1024, 1024, 1024, 1, 64, kH200Sms, true).tile, Sm90Tile::k128x64);
  // ... but not with a k-tail (1000^3 measured slower on 128x64).
  EXPECT_EQ(ChooseSm90Tile(1000, 1000, 1000, 1, kH200Sms), Sm90Tile::k128x128);
  EXPECT_EQ(ChooseSm90Tile(1024, 1024, 1000, 1, kH200Sms), Sm90Tile::k128x128);
  // 120 wide tiles already fill the SMs: 450 narrow ones would be 4 waves.
  EXPECT_EQ(ChooseSm90Tile(1920, 1920, 8192, 1, kH200Sms), Sm90Tile::k128x256);
  // Batches of small squares: 1024 square tiles are 8 waves, 2048 narrow
  // ones 16 of a third more cost each.
  EXPECT_EQ(ChooseSm90Tile(128, 128, 128, 1024, kH200Sms), Sm90Tile::k128x128);
}

TEST(Heuristic, WaveQuantizationPrefersFewerWaves) {
  // 3072^2: 24 x 12 = 288 wide tiles (3 waves of 128x256 on 132 SMs), 576
  // square ones (5 waves of 128x128) or 256 of 192x192 (2 waves): 3 * 2 >
  // 5 * 1.04 > 2 * 2.27; measured 114.3, 101.3 and 86.6 us.
  EXPECT_EQ(ChooseSm90Tile(3072, 3072, 4096, 1, kH200Sms), Sm90Tile::k192x192);
  // 4224^2: 561 wide tiles (5 waves, the last a quarter full), 1089 square
  // (9 waves) or 484 of 192x192 (4 waves): 5 * 2 > 9 * 1.04 > 4 * 2.27;
  // measured 268.2, 248.5 and 239.1 us.
  EXPECT_EQ(ChooseSm90Tile(4224, 4224, 4224, 1, kH200Sms), Sm90Tile::k192x192);
  // 1536 x 1536: 36 tiles of 192x192 or 72 of 128x256, one wave either way:
  // the smaller tile does less work.
  EXPECT_EQ(ChooseSm90Tile(1536, 1536, 4096, 1, kH200Sms), Sm90Tile::k128x256);
  // 2560^2: 200 wide tiles (2 waves) vs 400 square (4 waves): 2 * 2 < 4 * 1.04.
  EXPECT_EQ(ChooseSm90Tile(2560, 2560, 4096, 1, kH200Sms), Sm90Tile::k128x256);
  // 1536 x 1280: 12 x 5 = 60 wide tiles (1 wave) vs 120 square ones (1 wave,
  // half the work per tile): the square tile wins.
  EXPECT_EQ(ChooseSm90Tile(1536, 1280, 4096, 1, kH200Sms), Sm90Tile::k128x128);
  // Strided batches that fill whole or nearly whole waves keep the wide tile
  // (measured 3-11% faster than the square one on the H200).
  EXPECT_EQ(ChooseSm90Tile(256, 256, 256, 256, kH200Sms), Sm90Tile::k128x256);
  EXPECT_EQ(ChooseSm90Tile(512, 512, 512, 64, kH200Sms), Sm90Tile::k128x256);
  EXPECT_EQ(ChooseSm90Tile(1024, 1024, 1024, 16, kH200Sms), Sm90Tile::k128x256);
}

TEST(Heuristic, TileCostScaleIsAreaTimesPerElementCost) {
  EXPECT_DOUBLE_EQ(TileCostScale(Sm90Tile::k128x256), 1.0);
  EXPECT_DOUBLE_EQ(TileCostScale(Sm90Tile::k128x128), 0.52);
  EXPECT_DOUBLE_EQ(TileCostScale(Sm90Tile::k128x64), 0.45);
  EXPECT_NEAR(TileCostScale(Sm90Tile::k192x192), 1.136, 1e-3);
}

TEST(Heuristic, ChoiceIsDefinedForDegenerateInputs) {
  // One tile either way: the smaller tile does less work (a k-tail rules
  // out 128x64).
  EXPECT_EQ(ChooseSm90Tile(1, 1, 1, 1, 0), Sm90Tile::k128x128);
  EXPECT_EQ(ChooseSm90Tile(1, 1, 64, 1, 0), Sm90Tile::k128x64);
  EXPECT_EQ(ShapeOf(Sm90Tile::k128x64).bn, 64);
  EXPECT_EQ(ShapeOf(Sm90Tile::k128x128).bn, 128);
  EXPECT_EQ(ShapeOf(Sm90Tile::k128x256).bn, 256);
}

// The 192x192 tile: 192 rows on three consumer warpgroups, each with its own
// flag word per workspace slot, and 192 x 192 fp32 partials.
TEST(Heuristic, SquareTileWorkspaceHoldsThreeFlagsAndItsPartials) {
  EXPECT_EQ(ShapeOf(Sm90Tile::k192x192).bm, 192);
  EXPECT_EQ(ShapeOf(Sm90Tile::k192x192).bn, 192);
  EXPECT_EQ(TileCount(Sm90Tile::k192x192, 3072, 3072, 1), 256);
  EXPECT_EQ(TileCount(Sm90Tile::k192x192, 193, 1, 2), 4);
  EXPECT_EQ(ScheduleFlagBytes(int64_t{1}), 256u);
  EXPECT_EQ(ScheduleFlagBytes(int64_t{132}), 1792u);  // 132 x 3 words, in 256-byte units
  const Sm90LaunchChoice c =
      MakeSm90Launch(Sm90Tile::k192x192, Sm90Schedule::kStreamK, 3072, 3072, 3072, 1, 64, 132);
  ASSERT_EQ(c.schedule, Sm90Schedule::kStreamK);
  ASSERT_EQ(c.tile, Sm90Tile::k192x192);
  EXPECT_EQ(ScheduleWorkspaceBytes(c),
            ScheduleFlagBytes(c.workspace_slots) + size_t(c.workspace_slots) * 192 * 192 * 4);
}

// The split-K cost model against split-count sweeps on the H200 (0.7 us per
// iteration; kernels/DESIGN.md, schedule_sweep).
TEST(Heuristic, SplitKCostModel) {
  auto us = [](Sm90Tile t, int64_t m, int64_t n, int64_t k, int s, bool sep) {
    return 0.7 * SplitKCostIters(t, m, n, k, 1, 64, s, sep);
  };
  // 128 x 128 x 65536 through the reduction kernel: 27.8 us at 16 splits,
  // 21.7 at 24, 18.7 at 32, 17.4 at 52 (the per-CTA streaming term, then
  // the DRAM term).
  EXPECT_NEAR(us(Sm90Tile::k128x128, 128, 128, 65536, 16, true), 27.8, 3.0);
  EXPECT_NEAR(us(Sm90Tile::k128x128, 128, 128, 65536, 24, true), 21.7, 3.0);
  EXPECT_NEAR(us(Sm90Tile::k128x128, 128, 128, 65536, 52, true), 17.4, 3.0);
  // In-kernel: each finalizer reads its tile's other partials in series.
  EXPECT_GT(us(Sm90Tile::k128x128, 128, 128, 65536, 24, false),
            1.5 * us(Sm90Tile::k128x128, 128, 128, 65536, 24, true));
  // More CTAs stream faster until every SM has one (measured: 128 splits
  // 18.1 us in two device calls); the model's best is near all SMs.
  double best = 1e30;
  int best_splits = 0;
  for (int s = 2; s <= 132; ++s) {
    const double c = us(Sm90Tile::k128x128, 128, 128, 65536, s, true);
    if (c < best) best = c, best_splits = s;
  }
  EXPECT_GE(best_splits, 96);
  EXPECT_NEAR(best, 18.1, 3.0);
  // 256 x 4096 x 16384: 128x128 tiles split 2 in-kernel measured 58.0 us,
  // 128x256 split 4 65.7 (in-kernel) and 64.6 (reduction kernel).
  EXPECT_LT(us(Sm90Tile::k128x128, 256, 4096, 16384, 2, false),
            us(Sm90Tile::k128x256, 256, 4096, 16384, 4, false));
  EXPECT_LT(us(Sm90Tile::k128x128, 256, 4096, 16384, 2, false),
            us(Sm90Tile::k128x256, 256, 4096, 16384, 4, true));
  // 7 x 8192 x 8192 (streaming B): more CTAs stream faster; 128x256 split 4
  // (128 CTAs) measured 48.4 us against 62.1 for split 2 (64 CTAs) and 61.7
  // for 128x128 split 2 (128 CTAs, half the ring bytes in flight each).
  EXPECT_LT(us(Sm90Tile::k128x256, 7, 8192, 8192, 4, true),
            us(Sm90Tile::k128x256, 7, 8192, 8192, 2, true));
  EXPECT_LT(us(Sm90Tile::k128x256, 7, 8192, 8192, 4, true),
            us(Sm90Tile::k128x128, 7, 8192, 8192, 2, false));
  // The 128x256 finalizer reads whole partials (rows past M included), so
  // its in-kernel reduction loses to the kernel (58.9 vs 48.4 us).
  EXPECT_LT(us(Sm90Tile::k128x256, 7, 8192, 8192, 4, true),
            us(Sm90Tile::k128x256, 7, 8192, 8192, 4, false));
}

TEST(Heuristic, GroupAndGrid) {
  EXPECT_EQ(ChooseGroupM(64, 32), 8);
  EXPECT_EQ(ChooseGroupM(3, 32), 3);
  EXPECT_EQ(PersistentGridSize(1024, kH200Sms), kH200Sms);
  EXPECT_EQ(PersistentGridSize(16, kH200Sms), 16);
  EXPECT_EQ(PersistentGridSize(0, kH200Sms), 1);
}

}  // namespace
}  // namespace gemm_kernels

namespace gemm_kernels {
namespace {

// The issue's three grouped cases (schedule_bench's seeds give M; fixed M
// at the range's middle here): 128x256 measured faster on all three
// (H200). The 64-problem case has 102 wide tiles, one per CTA, against 204
// square ones, of which 72 CTAs would run two.
TEST(GroupedTile, IssueCasesTakeTheWideTile) {
  auto group = [](int count, int64_t m_lo, int64_t m_hi, int64_t n, int64_t k) {
    std::vector<GroupedMemberShape> g;
    for (int i = 0; i < count; ++i) g.push_back({m_lo + (m_hi - m_lo) * i / (count - 1), n, k});
    return g;
  };
  EXPECT_EQ(ChooseSm90GroupedTile(group(32, 16, 2048, 4096, 2048), 132), Sm90Tile::k128x256);
  EXPECT_EQ(ChooseSm90GroupedTile(group(128, 16, 512, 1024, 1024), 132), Sm90Tile::k128x256);
  EXPECT_EQ(ChooseSm90GroupedTile(group(64, 32, 256, 256, 256), 132), Sm90Tile::k128x256);
}

// N of 128 or less leaves half of every wide tile empty: the square tile.
TEST(GroupedTile, NarrowProblemsTakeTheSquareTile) {
  std::vector<GroupedMemberShape> g;
  for (int i = 0; i < 200; ++i) g.push_back({64 + 7 * i, 128, 1024});
  EXPECT_EQ(ChooseSm90GroupedTile(g, 132), Sm90Tile::k128x128);
  // A single square-ish problem of many tiles: the dense choice's reasoning
  // (wide tiles feed the tensor cores better).
  EXPECT_EQ(ChooseSm90GroupedTile({{8192, 8192, 4096}}, 132), Sm90Tile::k128x256);
}

TEST(GroupedTile, DegenerateInputsAreDefined) {
  EXPECT_EQ(ChooseSm90GroupedTile({}, 132), Sm90Tile::k128x256);
  EXPECT_EQ(ChooseSm90GroupedTile({{0, 0, 0}}, 0), Sm90Tile::k128x256);
  // One one-element problem: one tile either way, the square one cheaper.
  EXPECT_EQ(ChooseSm90GroupedTile({{1, 1, 1}}, 1), Sm90Tile::k128x128);
}

// Rows off the 32-byte sector grid (packed K = 3000: 6000-byte rows): each
// box row costs two L2 requests, and A multicast halves A's. Measured
// (H200): 3000^3 192x192 with A multicast 88.3 us against
// 112.2 plain; 8192 x 8192 x 1000 232.2 against 298.4 for 128x256 plain.
TEST(Heuristic, RowsOffTheSectorGridTakeAMulticast) {
  Sm90RowAlignment off;
  off.a_off_sector = off.b_off_sector = true;
  const Sm90LaunchChoice c = ChooseSm90Launch(3000, 3000, 3000, 1, 64, kH200Sms, true, 66, off);
  EXPECT_TRUE(c.multicast_a);
  EXPECT_EQ(c.schedule, Sm90Schedule::kDataParallel);
  EXPECT_EQ(c.tile, Sm90Tile::k192x192);
  EXPECT_EQ(c.grid % 2, 0);
  EXPECT_EQ(ScheduleWorkspaceBytes(c), 0u);
  // Without a workspace too: it needs none.
  EXPECT_TRUE(ChooseSm90Launch(3000, 3000, 3000, 1, 64, kH200Sms, false, 66, off).multicast_a);
  // No co-resident 2-CTA clusters known: no multicast; fewer than SMs / 2:
  // at most that many clusters.
  EXPECT_FALSE(ChooseSm90Launch(3000, 3000, 3000, 1, 64, kH200Sms, true, 0, off).multicast_a);
  const Sm90LaunchChoice capped = ChooseSm90Launch(8192, 8192, 1000, 1, 64, kH200Sms, true, 60, off);
  EXPECT_TRUE(capped.multicast_a);
  EXPECT_LE(capped.grid, 120);
  // Short K over many waves.
  const Sm90LaunchChoice wide = ChooseSm90Launch(8192, 8192, 1000, 1, 64, kH200Sms, true, 66, off);
  EXPECT_TRUE(wide.multicast_a);
  EXPECT_EQ(wide.tile, Sm90Tile::k192x192);
  // The same shapes with rows on the grid: no multicast.
  EXPECT_FALSE(ChooseSm90Launch(3000, 3000, 3000, 1, 64, kH200Sms, true, 66).multicast_a);
  EXPECT_FALSE(ChooseSm90Launch(8192, 8192, 1000, 1, 64, kH200Sms, true, 66).multicast_a);
  // MN-major A cannot split into 96-row halves: not on 192x192.
  Sm90RowAlignment mn = off;
  mn.a_k_major = false;
  const Sm90LaunchChoice c_mn = ChooseSm90Launch(3000, 3000, 3000, 1, 64, kH200Sms, true, 66, mn);
  EXPECT_FALSE(c_mn.multicast_a && c_mn.tile == Sm90Tile::k192x192);
  // Only B off the grid: A multicast does not halve B's requests.
  Sm90RowAlignment b_only;
  b_only.b_off_sector = true;
  EXPECT_FALSE(ChooseSm90Launch(3000, 3000, 3000, 1, 64, kH200Sms, true, 66, b_only).multicast_a);
  // 16 k-blocks in one partial wave: 1000^3 keeps its plain 128x128 launch
  // (multicast measured within noise of it).
  const Sm90LaunchChoice small = ChooseSm90Launch(1000, 1000, 1000, 1, 64, kH200Sms, true, 66, off);
  EXPECT_FALSE(small.multicast_a);
  EXPECT_EQ(small.tile, Sm90Tile::k128x128);
  EXPECT_EQ(small.schedule, Sm90Schedule::kDataParallel);
}

// The request term leaves rows on the sector grid alone: there every tile's
// requests per k-block cost less than its MMAs, so the k-loop estimate is
// the MMA one, as before the term; off the grid the requests exceed the MMAs
// on every tile, and multicast takes a share off.
TEST(Heuristic, RequestsBindOnlyOffTheSectorGrid) {
  Sm90RowAlignment off;
  off.a_off_sector = off.b_off_sector = true;
  for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x64,
                     Sm90Tile::k192x192}) {
    const double mma = TileCostScale(t);
    EXPECT_LT(RequestItersPerKBlock(t, 4096, 4096, {}, false), mma) << int(t);
    EXPECT_LT(RequestItersPerKBlock(t, 4096, 4096, {}, true), mma) << int(t);
    EXPECT_GT(RequestItersPerKBlock(t, 4096, 4096, off, false), mma) << int(t);
    EXPECT_LT(RequestItersPerKBlock(t, 4096, 4096, off, true),
              RequestItersPerKBlock(t, 4096, 4096, off, false))
        << int(t);
  }
}

}  // namespace
}  // namespace gemm_kernels

namespace gemm_kernels {
namespace {

TEST(StreamKSplit, HybridSplitWhereEveryCtaGetsAKBlock) {
  // 264 + 10 tiles on 132 SMs: the partial wave plus one full wave.
  const StreamKSplit s = ChooseStreamKSplit(274, 64, kH200Sms, false);
  EXPECT_EQ(s.sk_tiles, 142);
  EXPECT_EQ(s.grid, kH200Sms);
  // Whole waves: nothing to share.
  EXPECT_EQ(ChooseStreamKSplit(264, 64, kH200Sms, false).sk_tiles, 0);
  // One k-block cannot be shared.
  EXPECT_EQ(ChooseStreamKSplit(274, 1, kH200Sms, true).sk_tiles, 0);
  // Fewer iterations than SMs: only a forced launch, over one CTA each.
  EXPECT_EQ(ChooseStreamKSplit(10, 4, kH200Sms, false).sk_tiles, 0);
  const StreamKSplit forced = ChooseStreamKSplit(10, 4, kH200Sms, true);
  EXPECT_EQ(forced.sk_tiles, 10);
  EXPECT_EQ(forced.grid, 40);
}

TEST(StreamKSplit, HeuristicAndForcedLaunchTakeIt) {
  // 4224^3 on 128x256: 33 x 17 = 561 tiles.
  const StreamKSplit s = ChooseStreamKSplit(561, 66, kH200Sms, true);
  const Sm90LaunchChoice c =
      MakeSm90Launch(Sm90Tile::k128x256, Sm90Schedule::kStreamK, 4224, 4224, 4224, 1, 64, kH200Sms);
  EXPECT_EQ(c.schedule, Sm90Schedule::kStreamK);
  EXPECT_EQ(c.sk_tiles, s.sk_tiles);
  EXPECT_EQ(c.grid, s.grid);
  EXPECT_EQ(c.workspace_slots, s.grid);
}

// Gemm::Initialize(plan) reuses the heuristic's launch made with a
// workspace allowed when none is given, wherever that launch reduces
// nothing: then the launch without a workspace is the same.
TEST(Heuristic, ALaunchThatReducesNothingIsAlsoTheLaunchWithoutAWorkspace) {
  int checked = 0;
  for (int64_t m : {7, 128, 1000, 1024, 2048, 3000, 4096, 8192}) {
    for (int64_t n : {128, 1000, 1024, 4096, 8192}) {
      for (int64_t k : {64, 1000, 2048, 4096, 16384, 65536}) {
        for (int max_pairs : {0, 66}) {
          for (const bool off_sector : {false, true}) {
            Sm90RowAlignment rows;
            rows.a_off_sector = off_sector;
            const Sm90LaunchChoice with =
                ChooseSm90Launch(m, n, k, 1, 64, kH200Sms, true, max_pairs, rows);
            if (with.schedule != Sm90Schedule::kDataParallel) continue;
            const Sm90LaunchChoice without =
                ChooseSm90Launch(m, n, k, 1, 64, kH200Sms, false, max_pairs, rows);
            EXPECT_EQ(without.schedule, with.schedule) << m << " " << n << " " << k;
            EXPECT_EQ(without.tile, with.tile) << m << " " << n << " " << k;
            EXPECT_EQ(without.grid, with.grid) << m << " " << n << " " << k;
            EXPECT_EQ(without.multicast_a, with.multicast_a) << m << " " << n << " " << k;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace gemm_kernels
