#include "kernels/scheduler/tile_scheduler.h"

#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace {

// Walks the schedule of every CTA of a persistent grid and checks that each
// (batch, m, n) tile is visited exactly once.
void ExpectExactCover(int tiles_m, int tiles_n, int batch, int group_m, int grid) {
  std::vector<int> seen(size_t(tiles_m) * tiles_n * batch, 0);
  for (int cta = 0; cta < grid; ++cta) {
    PersistentTileScheduler s(tiles_m, tiles_n, batch, group_m, cta, grid);
    for (; s.is_valid(); s.advance()) {
      const TileCoord t = s.get();
      ASSERT_GE(t.m_block, 0);
      ASSERT_LT(t.m_block, tiles_m);
      ASSERT_GE(t.n_block, 0);
      ASSERT_LT(t.n_block, tiles_n);
      ASSERT_GE(t.batch, 0);
      ASSERT_LT(t.batch, batch);
      ++seen[(size_t(t.batch) * tiles_m + t.m_block) * tiles_n + t.n_block];
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "tile " << i;
}

TEST(TileScheduler, CoversEveryTileOnce) {
  for (int tm : {1, 2, 7, 8, 9, 33, 64}) {
    for (int tn : {1, 3, 8, 32}) {
      for (int batch : {1, 3}) {
        for (int group : {1, 4, 8}) {
          for (int grid : {1, 5, 132}) {
            SCOPED_TRACE(testing::Message() << tm << "x" << tn << " b" << batch << " g" << group
                                            << " grid" << grid);
            ExpectExactCover(tm, tn, batch, group, grid);
          }
        }
      }
    }
  }
}

TEST(TileScheduler, LargeBatchOfSingleTiles) { ExpectExactCover(1, 1, 1024, 8, 132); }

TEST(TileScheduler, GroupsWalkColumnsWithinABandOfRows) {
  // 16 x 4 tiles, groups of 8 rows: the first 8 tiles are column 0 of rows 0-7.
  PersistentTileScheduler s(16, 4, 1, 8, 0, 1);
  for (int i = 0; i < 8; ++i) {
    const TileCoord t = s.TileAt(i);
    EXPECT_EQ(t.m_block, i);
    EXPECT_EQ(t.n_block, 0);
  }
  EXPECT_EQ(s.TileAt(8).m_block, 0);
  EXPECT_EQ(s.TileAt(8).n_block, 1);
  // Second band starts after 8 * 4 tiles.
  EXPECT_EQ(s.TileAt(32).m_block, 8);
  EXPECT_EQ(s.TileAt(32).n_block, 0);
}

TEST(TileScheduler, PartialLastGroup) {
  // 10 rows in groups of 8: the last band has 2 rows and walks them column-wise.
  PersistentTileScheduler s(10, 3, 1, 8, 0, 1);
  const TileCoord t0 = s.TileAt(24), t1 = s.TileAt(25), t2 = s.TileAt(26);
  EXPECT_EQ(t0.m_block, 8);
  EXPECT_EQ(t1.m_block, 9);
  EXPECT_EQ(t2.m_block, 8);
  EXPECT_EQ(t2.n_block, 1);
}

TEST(TileScheduler, BatchMajorOrder) {
  PersistentTileScheduler s(2, 2, 3, 8, 0, 1);
  EXPECT_EQ(s.TileAt(3).batch, 0);
  EXPECT_EQ(s.TileAt(4).batch, 1);
  EXPECT_EQ(s.TileAt(11).batch, 2);
  EXPECT_FALSE(PersistentTileScheduler(2, 2, 3, 8, 12, 1).is_valid());
}

}  // namespace
}  // namespace gemm_kernels
