// CPU walk of every reducing and grouped schedule: each (tile, k-block) is
// computed exactly once, each partial is stored once and reduced exactly once
// by the finalizer of its own tile, the pieces of a tile are reduced in a
// fixed order that covers its k-range, and a simulated persistent grid (all
// CTAs resident, each running its units in order, a finalizer blocked until
// its peers' flags are up) always runs to completion.
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/config/heuristic.h"
#include "kernels/scheduler/column_pairs.h"
#include "kernels/scheduler/grouped_tile_scheduler.h"
#include "kernels/scheduler/split_k_reduce.h"
#include "kernels/scheduler/split_k_scheduler.h"
#include "kernels/scheduler/stream_k_scheduler.h"

namespace gemm_kernels {
namespace {

struct ProblemGrid {
  int tiles_m, tiles_n, k_blocks;
};

// Each CTA's units, in the order it runs them.
using Schedule = std::vector<std::vector<WorkUnit>>;

template <class MakeScheduler>
Schedule Walk(int grid, MakeScheduler make) {
  Schedule s(grid);
  for (int cta = 0; cta < grid; ++cta) {
    auto sched = make(cta);
    WorkUnit w;
    while (sched.Next(&w)) {
      s[cta].push_back(w);
      if (s[cta].size() > 10000000) ADD_FAILURE() << "runaway schedule";
    }
  }
  return s;
}

// problems[b] describes batch member / problem b.
void CheckSchedule(const Schedule& s, const std::vector<ProblemGrid>& problems, int64_t max_slots,
                   int grid, int num_sms) {
  ASSERT_LE(grid, num_sms) << "persistent grid larger than the SMs: residency not guaranteed";
  std::vector<int64_t> tile_base(problems.size() + 1, 0);
  for (size_t p = 0; p < problems.size(); ++p) {
    tile_base[p + 1] = tile_base[p] + int64_t(problems[p].tiles_m) * problems[p].tiles_n;
  }
  auto tile_id = [&](const TileCoord& t) {
    const ProblemGrid& g = problems[t.batch];
    return tile_base[t.batch] + int64_t(t.m_block) * g.tiles_n + t.n_block;
  };
  // (tile, k-block) coverage.
  std::vector<std::vector<int>> covered(problems.size());
  for (size_t p = 0; p < problems.size(); ++p) {
    covered[p].assign(size_t(problems[p].tiles_m) * problems[p].tiles_n * problems[p].k_blocks, 0);
  }
  struct SlotInfo {
    int64_t tile = -1;
    int k_begin = 0, k_end = 0;
    int stored = 0, reduced = 0;
  };
  std::map<int, SlotInfo> slots;
  std::vector<int> finalized(tile_base.back(), 0);
  for (const auto& units : s) {
    for (const WorkUnit& w : units) {
      ASSERT_GE(w.tile.batch, 0);
      ASSERT_LT(w.tile.batch, int(problems.size()));
      const ProblemGrid& g = problems[w.tile.batch];
      ASSERT_GE(w.tile.m_block, 0);
      ASSERT_LT(w.tile.m_block, g.tiles_m);
      ASSERT_GE(w.tile.n_block, 0);
      ASSERT_LT(w.tile.n_block, g.tiles_n);
      ASSERT_GE(w.k_begin, 0);
      ASSERT_GT(w.k_end, w.k_begin);
      ASSERT_LE(w.k_end, g.k_blocks);
      for (int k = w.k_begin; k < w.k_end; ++k) {
        ++covered[w.tile.batch][(size_t(w.tile.m_block) * g.tiles_n + w.tile.n_block) * g.k_blocks + k];
      }
      if (w.role == UnitRole::kFull) {
        ASSERT_EQ(w.k_begin, 0);
        ASSERT_EQ(w.k_end, g.k_blocks);
        ++finalized[tile_id(w.tile)];
      } else if (w.role == UnitRole::kPartial) {
        ASSERT_GE(w.slot, 0);
        ASSERT_LT(w.slot, max_slots);
        SlotInfo& si = slots[w.slot];
        ++si.stored;
        si.tile = tile_id(w.tile);
        si.k_begin = w.k_begin;
        si.k_end = w.k_end;
      } else {
        ++finalized[tile_id(w.tile)];
      }
    }
  }
  for (size_t p = 0; p < problems.size(); ++p) {
    for (size_t i = 0; i < covered[p].size(); ++i) {
      ASSERT_EQ(covered[p][i], 1) << "problem " << p << " (tile, k-block) " << i;
    }
  }
  for (size_t t = 0; t < finalized.size(); ++t) ASSERT_EQ(finalized[t], 1) << "tile " << t;
  for (const auto& kv : slots) ASSERT_EQ(kv.second.stored, 1) << "slot " << kv.first;

  // Each finalizer's own range plus its peers' cover the tile's k-blocks
  // exactly, every peer being a partial of the same tile.
  for (const auto& units : s) {
    for (const WorkUnit& w : units) {
      if (w.role != UnitRole::kFinalize) continue;
      ASSERT_GE(w.num_peers, 1);
      std::vector<int> ks(problems[w.tile.batch].k_blocks, 0);
      for (int k = w.k_begin; k < w.k_end; ++k) ++ks[k];
      for (int i = 0; i < w.num_peers; ++i) {
        auto it = slots.find(w.first_peer + i);
        ASSERT_NE(it, slots.end()) << "finalizer reduces slot " << w.first_peer + i
                                   << " that nothing stores";
        ASSERT_EQ(it->second.tile, tile_id(w.tile)) << "slot of another tile";
        ++it->second.reduced;
        for (int k = it->second.k_begin; k < it->second.k_end; ++k) ++ks[k];
      }
      for (int c : ks) ASSERT_EQ(c, 1);
    }
  }
  for (const auto& kv : slots) ASSERT_EQ(kv.second.reduced, 1) << "slot " << kv.first;

  // Residency simulation: every CTA is running (grid <= SMs); a CTA's next
  // unit completes unless it is a finalizer whose peers are not all stored.
  std::vector<size_t> pos(s.size(), 0);
  std::map<int, bool> flag;
  size_t remaining = 0;
  for (const auto& u : s) remaining += u.size();
  while (remaining > 0) {
    bool progress = false;
    for (size_t c = 0; c < s.size(); ++c) {
      while (pos[c] < s[c].size()) {
        const WorkUnit& w = s[c][pos[c]];
        if (w.role == UnitRole::kFinalize) {
          bool ready = true;
          for (int i = 0; i < w.num_peers; ++i) ready = ready && flag[w.first_peer + i];
          if (!ready) break;
        }
        if (w.role == UnitRole::kPartial) flag[w.slot] = true;
        ++pos[c];
        --remaining;
        progress = true;
      }
    }
    ASSERT_TRUE(progress) << "deadlock: every unfinished CTA waits on a flag";
  }
}

// Split-K with a separate reduction kernel: CTA t * splits + s runs exactly
// one unit, a kPartial of tile t (in tile order) into slot t * splits + s,
// and the slots t * splits .. t * splits + splits - 1 cover tile t's k-blocks
// in ascending order (the order the reduction kernel sums them in).
void CheckSeparateSplitK(int tm, int tn, int batch, int kb, int splits) {
  const int64_t tiles = int64_t(tm) * tn * batch;
  const int grid = static_cast<int>(tiles * splits);
  const PersistentTileScheduler order(tm, tn, batch, 8, 0, 1);
  for (int64_t t = 0; t < tiles; ++t) {
    const TileCoord want = order.TileAt(t);
    int next_k = 0;
    for (int sp = 0; sp < splits; ++sp) {
      const int cta = static_cast<int>(t * splits + sp);
      StreamKScheduler sched(tm, tn, batch, 8, kb, tiles, grid, cta, /*partials_only=*/true);
      WorkUnit w;
      ASSERT_TRUE(sched.Next(&w)) << "CTA " << cta << " has no unit";
      ASSERT_EQ(w.role, UnitRole::kPartial);
      ASSERT_EQ(w.slot, cta);
      ASSERT_EQ(w.tile.m_block, want.m_block);
      ASSERT_EQ(w.tile.n_block, want.n_block);
      ASSERT_EQ(w.tile.batch, want.batch);
      ASSERT_EQ(w.k_begin, next_k) << "split " << sp << " of tile " << t;
      ASSERT_GT(w.k_end, w.k_begin);
      next_k = w.k_end;
      ASSERT_FALSE(sched.Next(&w)) << "CTA " << cta << " has a second unit";
    }
    ASSERT_EQ(next_k, kb) << "tile " << t;
  }
}

// Paired split-K (cluster_pairs) is split-K in two over exactly 2 CTAs per
// tile, and the kernel relies on the pairing: CTA 2t (cluster rank 0) holds
// one partial of tile t and nothing else, CTA 2t + 1 (rank 1) finalizes tile
// t from that one peer and nothing else, so each CTA's partner is its
// cluster peer and every partial is reduced once.
void CheckPairedSplitK(int tiles_m, int tiles_n, int batch, int kb) {
  SCOPED_TRACE(testing::Message() << "paired " << tiles_m << "x" << tiles_n << " b" << batch
                                  << " kb " << kb);
  const int64_t tiles = int64_t(tiles_m) * tiles_n * batch;
  const Sm90LaunchChoice c = PairedSplitKLaunch(tiles);
  ASSERT_TRUE(c.cluster_pairs);
  ASSERT_EQ(c.grid, 2 * tiles);
  const Schedule s = Walk(c.grid, [&](int cta) {
    return StreamKScheduler(tiles_m, tiles_n, batch, 8, kb, c.sk_tiles, c.grid, cta);
  });
  for (int cta = 0; cta < c.grid; ++cta) {
    ASSERT_EQ(s[cta].size(), 1u) << "CTA " << cta;
    const WorkUnit& w = s[cta][0];
    if (cta % 2 == 0) {
      ASSERT_EQ(w.role, UnitRole::kPartial) << "CTA " << cta;
      ASSERT_EQ(w.slot, cta);
      ASSERT_EQ(w.k_begin, 0);
    } else {
      ASSERT_EQ(w.role, UnitRole::kFinalize) << "CTA " << cta;
      ASSERT_EQ(w.first_peer, cta - 1);
      ASSERT_EQ(w.num_peers, 1);
      ASSERT_EQ(w.k_end, kb);
      const WorkUnit& peer = s[cta - 1][0];
      ASSERT_EQ(peer.tile.m_block, w.tile.m_block);
      ASSERT_EQ(peer.tile.n_block, w.tile.n_block);
      ASSERT_EQ(peer.tile.batch, w.tile.batch);
      ASSERT_EQ(peer.k_end, w.k_begin);
    }
  }
  CheckSchedule(s, std::vector<ProblemGrid>(batch, {tiles_m, tiles_n, kb}), c.grid, c.grid,
                c.grid);
}

TEST(SplitKSeparateReduction, OneUnitPerCtaInSlotOrder) {
  std::mt19937 rng(17);
  for (int iter = 0; iter < 1500; ++iter) {
    const int tm = 1 + rng() % 6, tn = 1 + rng() % 6, batch = 1 + rng() % 2;
    const int kb = 2 + rng() % (iter % 5 == 0 ? 3000 : 100);
    const int splits = 2 + rng() % std::min(kb - 1, 140);
    SCOPED_TRACE(testing::Message() << tm << "x" << tn << "x" << batch << " kb " << kb
                                    << " splits " << splits);
    CheckSeparateSplitK(tm, tn, batch, kb, splits);
    if (HasFatalFailure()) return;
  }
}

// The reduction kernel's threads: every float4 of every tile is summed by
// one thread per split group, the groups cut [0, splits) into contiguous
// non-empty ranges, and the fragment quads of a tile cover its bm x bn
// elements exactly once.
TEST(SplitKSeparateReduction, PlanCoversEveryOutputOnce) {
  for (int bn : {128, 256}) {
    std::vector<int> hit(size_t(128) * bn, 0);
    for (int f = 0; f < 128 * bn / 4; ++f) {
      const FragmentQuad q = FragmentQuadAt(f, bn);
      ASSERT_GE(q.row, 0);
      ASSERT_LT(q.row + 8, 128);
      ASSERT_GE(q.col, 0);
      ASSERT_LT(q.col + 1, bn);
      for (int dr : {0, 8})
        for (int dc : {0, 1}) ++hit[size_t(q.row + dr) * bn + q.col + dc];
    }
    for (size_t i = 0; i < hit.size(); ++i) ASSERT_EQ(hit[i], 1) << "bn " << bn << " element " << i;
  }
  // Thread t of a consumer holds rows 16 (t / 32) + (t % 32) / 4 (+ 8) and
  // columns 8 i + 2 (t % 4) (+ 1) of its 64-row half in float4 i.
  EXPECT_EQ(FragmentQuadAt(0, 128).row, 0);
  EXPECT_EQ(FragmentQuadAt(5, 128).row, 1);
  EXPECT_EQ(FragmentQuadAt(5, 128).col, 2);
  EXPECT_EQ(FragmentQuadAt(128 + 37, 128).row, 16 + 1);
  EXPECT_EQ(FragmentQuadAt(128 + 37, 128).col, 8 + 2);
  EXPECT_EQ(FragmentQuadAt(16 * 256 + 3, 256).row, 64);
  EXPECT_EQ(FragmentQuadAt(16 * 256 + 3, 256).col, 6);

  std::mt19937 rng(23);
  for (int iter = 0; iter < 400; ++iter) {
    const int bn = rng() % 2 ? 128 : 256;
    const int64_t tiles = 1 + rng() % (iter % 4 == 0 ? 200 : 8);
    const int splits = 2 + rng() % 140;
    const int sms = 1 + rng() % 160;
    SCOPED_TRACE(testing::Message() << tiles << " tiles of 128x" << bn << ", " << splits
                                    << " splits, " << sms << " SMs");
    const SplitKReducePlan p = PlanSplitKReduce(tiles, 128, bn, splits, sms);
    ASSERT_GE(p.groups, 1);
    ASSERT_LE(p.groups, 32);
    ASSERT_LE(p.groups, splits);
    ASSERT_EQ(p.groups & (p.groups - 1), 0);
    ASSERT_EQ(p.quads_per_block * p.groups, kSplitKReduceThreads);
    ASSERT_EQ(p.quads, tiles * 128 * bn / 4);
    ASSERT_GE(p.blocks * p.quads_per_block, p.quads);
    ASSERT_LT((p.blocks - 1) * p.quads_per_block, p.quads);
    // Split groups: contiguous, ascending, non-empty, covering every split.
    ASSERT_EQ(SplitGroupBegin(0, p.groups, splits), 0);
    ASSERT_EQ(SplitGroupBegin(p.groups, p.groups, splits), splits);
    for (int g = 0; g < p.groups; ++g) {
      ASSERT_LT(SplitGroupBegin(g, p.groups, splits), SplitGroupBegin(g + 1, p.groups, splits));
    }
    // More groups only while the blocks are fewer than two per SM.
    if (p.groups > 1) {
      const int64_t fewer = (p.quads + 2 * p.quads_per_block - 1) / (2 * p.quads_per_block);
      ASSERT_LT(fewer, 2 * int64_t(sms));
    }
    // Every quad is reached by exactly one thread of each group.
    std::vector<uint8_t> seen(size_t(p.quads) * p.groups, 0);
    for (int64_t b = 0; b < p.blocks; ++b) {
      for (int t = 0; t < kSplitKReduceThreads; ++t) {
        const int64_t q = b * p.quads_per_block + t % p.quads_per_block;
        if (q >= p.quads) continue;
        ASSERT_EQ(seen[size_t(q) * p.groups + t / p.quads_per_block]++, 0);
      }
    }
    for (uint8_t v : seen) ASSERT_EQ(v, 1);
  }
  // 128 x 128 x 65536's launch: one tile, many splits: spread over >= 2
  // blocks per SM.
  const SplitKReducePlan one = PlanSplitKReduce(1, 128, 128, 54, 132);
  EXPECT_EQ(one.groups, 32);
  EXPECT_EQ(one.blocks, 512);
}

TEST(StreamKScheduler, HybridSplit) {
  EXPECT_EQ(HybridStreamKTiles(264, 132), 0);
  EXPECT_EQ(HybridStreamKTiles(120, 132), 120);
  EXPECT_EQ(HybridStreamKTiles(200, 132), 200);
  EXPECT_EQ(HybridStreamKTiles(288, 132), 24 + 132);
}

TEST(StreamKScheduler, RandomShapesAndGrids) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    const int tm = 1 + rng() % 40, tn = 1 + rng() % 40, batch = 1 + rng() % 3;
    const int kb = 1 + (rng() % 4 == 0 ? rng() % 2000 : rng() % 70);
    const int sms = 1 + rng() % 160;
    const int64_t tiles = int64_t(tm) * tn * batch;
    const int64_t sk = rng() % 3 == 0 ? HybridStreamKTiles(tiles, sms) : rng() % (tiles + 1);
    const int grid = sms;
    SCOPED_TRACE(testing::Message() << tm << "x" << tn << "x" << batch << " kb " << kb << " sms "
                                    << sms << " sk_tiles " << sk);
    const Schedule s = Walk(grid, [&](int cta) {
      return StreamKScheduler(tm, tn, batch, 8, kb, sk, grid, cta);
    });
    StreamKScheduler probe(tm, tn, batch, 8, kb, sk, grid, 0);
    CheckSchedule(s, std::vector<ProblemGrid>(batch, {tm, tn, kb}), probe.NumSlots(), grid, sms);
    if (HasFatalFailure()) return;
  }
}

TEST(SplitKScheduler, RandomShapesAndGrids) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 3000; ++iter) {
    const int tm = 1 + rng() % 12, tn = 1 + rng() % 12, batch = 1 + rng() % 2;
    const int kb = 1 + rng() % 500;
    const int splits = 1 + rng() % std::min(kb, 40);
    const int sms = 1 + rng() % 160;
    const int64_t units = int64_t(tm) * tn * batch * splits;
    const int grid = static_cast<int>(std::min<int64_t>(units, sms));
    SCOPED_TRACE(testing::Message() << tm << "x" << tn << "x" << batch << " kb " << kb
                                    << " splits " << splits << " grid " << grid);
    const Schedule s = Walk(grid, [&](int cta) {
      return SplitKScheduler(tm, tn, batch, 8, kb, splits, grid, cta);
    });
    SplitKScheduler probe(tm, tn, batch, 8, kb, splits, grid, 0);
    CheckSchedule(s, std::vector<ProblemGrid>(batch, {tm, tn, kb}), probe.NumSlots(), grid, sms);
    if (HasFatalFailure()) return;
  }
}

// Split-K in one wave is stream-K over tiles x splits CTAs: same tiles, same
// k-ranges (the kernel relies on this to launch split-K through stream-K).
TEST(SplitKScheduler, OneWaveEqualsStreamKRanges) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 2000; ++iter) {
    const int tm = 1 + rng() % 6, tn = 1 + rng() % 6, kb = 1 + rng() % 3000;
    const int splits = 1 + rng() % std::min(kb, 32);
    const int grid = tm * tn * splits;
    for (int cta = 0; cta < grid; ++cta) {
      SplitKScheduler a(tm, tn, 1, 8, kb, splits, grid, cta);
      StreamKScheduler b(tm, tn, 1, 8, kb, int64_t(tm) * tn, grid, cta);
      WorkUnit wa, wb;
      ASSERT_TRUE(a.Next(&wa));
      ASSERT_TRUE(b.Next(&wb));
      ASSERT_EQ(wa.tile.m_block, wb.tile.m_block);
      ASSERT_EQ(wa.tile.n_block, wb.tile.n_block);
      ASSERT_EQ(wa.k_begin, wb.k_begin);
      ASSERT_EQ(wa.k_end, wb.k_end);
      ASSERT_FALSE(a.Next(&wa));
      ASSERT_FALSE(b.Next(&wb));
    }
  }
}

TEST(GroupedTileScheduler, RandomProblemLists) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const int n = 1 + rng() % (iter % 10 == 0 ? 512 : 40);
    std::vector<GroupedProblemShape> shapes(n);
    std::vector<ProblemGrid> grids(n);
    int64_t total = 0;
    for (int p = 0; p < n; ++p) {
      const int tm = 1 + rng() % 17, tn = 1 + rng() % 9, kb = 1 + rng() % 40;
      shapes[p] = {tm, tn, kb, std::min(8, tm), total};
      grids[p] = {tm, tn, kb};
      total += int64_t(tm) * tn;
    }
    const int sms = 1 + rng() % 160;
    const int grid = static_cast<int>(std::min<int64_t>(total, sms));
    SCOPED_TRACE(testing::Message() << n << " problems, grid " << grid);
    const Schedule s = Walk(grid, [&](int cta) {
      return GroupedTileScheduler(shapes.data(), n, total, grid, cta);
    });
    CheckSchedule(s, grids, 0, grid, sms);
    if (HasFatalFailure()) return;
  }
}

// ProblemOf (a binary search from the cursor) agrees with a linear walk for
// every tile at or after the cursor, with one-tile problems (each step of a
// CTA skips grid problems) and with mixed sizes.
TEST(GroupedTileScheduler, ProblemOfMatchesALinearWalk) {
  const int n = 512;
  std::vector<GroupedProblemShape> ones(n);
  for (int p = 0; p < n; ++p) ones[p] = {1, 1, 4, 1, p};
  GroupedTileScheduler s(ones.data(), n, n, 132, 5);
  WorkUnit w;
  int64_t expected = 5;
  while (s.Next(&w)) {
    EXPECT_EQ(w.tile.batch, expected);
    expected += 132;
  }
  EXPECT_EQ(expected, 5 + 4 * 132);
  std::mt19937 rng(11);
  std::vector<GroupedProblemShape> mixed(300);
  int64_t total = 0;
  for (auto& m : mixed) {
    const int tiles = 1 + rng() % 9;
    m = {tiles, 1, 2, 1, total};
    total += tiles;
  }
  GroupedTileScheduler g(mixed.data(), 300, total, 7, 0);
  for (int64_t t = 0; t < total; t += 1 + rng() % 20) {
    int linear = g.problem;
    while (linear + 1 < 300 && mixed[linear + 1].tile_start <= t) ++linear;
    ASSERT_EQ(g.ProblemOf(t), linear) << "tile " << t;
    g.problem = linear;
  }
}

// A multicast: `clusters` 2-CTA clusters walk the halved tile grid; both
// ranks of a cluster hold the same m-tile, batch member and k-range at every
// step, every real tile is computed exactly once over its whole k-range, and
// the only other tiles are phantoms of rank 1 one column past N when the
// tile columns are odd.
void CheckMulticastPairs(int tm, int tn, int batch, int kb, int clusters) {
  ASSERT_GE(clusters, 1);
  ASSERT_LE(clusters, int64_t(tm) * PairColumns(tn) * batch);
  std::vector<int> covered(size_t(tm) * tn * batch, 0);
  int phantoms = 0;
  for (int cl = 0; cl < clusters; ++cl) {
    StreamKScheduler sched(tm, PairColumns(tn), batch, ChooseGroupM(tm, tn), kb, 0, clusters, cl);
    WorkUnit w;
    while (sched.Next(&w)) {
      ASSERT_EQ(w.role, UnitRole::kFull);
      ASSERT_EQ(w.k_begin, 0);
      ASSERT_EQ(w.k_end, kb);
      for (int rank = 0; rank < 2; ++rank) {
        const TileCoord tc = PairMember(w.tile, rank);
        ASSERT_EQ(tc.m_block, w.tile.m_block);
        ASSERT_EQ(tc.batch, w.tile.batch);
        if (tc.n_block >= tn) {
          ASSERT_EQ(rank, 1);
          ASSERT_EQ(tc.n_block, tn);
          ASSERT_EQ(tn % 2, 1);
          ++phantoms;
          continue;
        }
        ++covered[(size_t(tc.batch) * tm + tc.m_block) * tn + tc.n_block];
      }
    }
  }
  for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "tile " << i;
  EXPECT_EQ(phantoms, tn % 2 == 1 ? tm * batch : 0);
}

// The schedules the heuristic actually launches, for random GEMM shapes and
// SM counts: same checks, with the heuristic's own grid.
TEST(Heuristic, ChosenSchedulesAreSound) {
  std::mt19937 rng(2024);
  int reducing = 0, separate = 0, paired = 0, multicast = 0;
  for (int iter = 0; iter < 2500; ++iter) {
    auto dim = [&]() -> int64_t {
      switch (rng() % 4) {
        case 0: return 1 + rng() % 64;
        case 1: return 1 + rng() % 1024;
        case 2: return 1 + rng() % 8192;
        default: return 128 * (1 + rng() % 40);
      }
    };
    const int64_t m = dim(), n = dim(), k = rng() % 5 == 0 ? 1 + rng() % 65536 : dim();
    const int64_t batch = rng() % 6 == 0 ? 1 + rng() % 4 : 1;
    const int sms = 1 + rng() % 160;
    // Co-resident 2-CTA clusters: none, all SMs paired, or fewer.
    const int max_pairs = rng() % 3 == 0 ? 0 : rng() % 2 ? sms / 2 : int(rng() % (sms / 2 + 1));
    // Rows off the 32-byte sector grid (A, B or both) in half the cases.
    Sm90RowAlignment rows;
    if (rng() % 2 == 0) {
      rows.a_off_sector = rng() % 3 != 0;
      rows.b_off_sector = !rows.a_off_sector || rng() % 2 == 0;
      rows.a_k_major = rng() % 4 != 0;
    }
    Sm90LaunchChoice c =
        ChooseSm90Launch(m, n, k, batch, 64, sms, rng() % 2 != 0, max_pairs, rows);
    if (rng() % 3 == 0) {
      const Sm90Schedule forced = rng() % 2 ? Sm90Schedule::kStreamK : Sm90Schedule::kSplitK;
      const Sm90Tile tiles[] = {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k192x192};
      c = MakeSm90Launch(tiles[rng() % 3], forced, m, n, k, batch, 64, sms);
    }
    SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << " b" << batch << " sms " << sms
                                    << " schedule " << int(c.schedule));
    const Sm90TileShape shape = ShapeOf(c.tile);
    const int tm = int((m + shape.bm - 1) / shape.bm), tn = int((n + shape.bn - 1) / shape.bn);
    const int kb = int((k + 63) / 64);
    Schedule s;
    switch (c.schedule) {
      case Sm90Schedule::kDataParallel:
        if (c.multicast_a) {
          ++multicast;
          ASSERT_TRUE(rows.a_off_sector);
          ASSERT_TRUE(c.tile != Sm90Tile::k192x192 || rows.a_k_major);
          ASSERT_EQ(c.grid % 2, 0);
          ASSERT_LE(c.grid, std::max(2, sms - sms % 2));
          ASSERT_GT(max_pairs, 0);
          ASSERT_LE(c.grid / 2, max_pairs);
          ASSERT_EQ(ScheduleWorkspaceBytes(c), 0u);
          CheckMulticastPairs(tm, tn, int(batch), kb, c.grid / 2);
          if (HasFatalFailure()) return;
          continue;
        }
        s = Walk(c.grid, [&](int cta) {
          return StreamKScheduler(tm, tn, int(batch), 8, kb, 0, c.grid, cta);
        });
        break;
      case Sm90Schedule::kStreamK:
        ++reducing;
        s = Walk(c.grid, [&](int cta) {
          return StreamKScheduler(tm, tn, int(batch), 8, kb, c.sk_tiles, c.grid, cta);
        });
        break;
      case Sm90Schedule::kSplitK:
        ++reducing;
        ASSERT_EQ(c.grid, int64_t(tm) * tn * batch * c.splits);
        ASSERT_EQ(c.sk_tiles, int64_t(tm) * tn * batch);
        ASSERT_LE(c.grid, sms);
        if (c.cluster_pairs) {
          ++paired;
          ASSERT_EQ(c.tile, Sm90Tile::k128x128);
          ASSERT_EQ(c.splits, 2);
          ASSERT_FALSE(c.separate_reduction);
          ASSERT_LE(c.sk_tiles, max_pairs);
          ASSERT_EQ(ScheduleWorkspaceBytes(c), 0u);
          CheckPairedSplitK(tm, tn, int(batch), kb);
          if (HasFatalFailure()) return;
          continue;
        }
        ASSERT_EQ(c.workspace_slots, c.grid);
        if (c.separate_reduction) {
          ++separate;
          // No flags: 256 reserved bytes (a grid-summed launch's counters),
          // then the slots.
          ASSERT_EQ(ScheduleWorkspaceBytes(c), 256 + size_t(c.grid) * shape.bm * shape.bn * 4);
          CheckSeparateSplitK(tm, tn, int(batch), kb, c.splits);
          if (HasFatalFailure()) return;
          continue;
        }
        ASSERT_EQ(ScheduleWorkspaceBytes(c),
                  ScheduleFlagBytes(c.grid) + size_t(c.grid) * shape.bm * shape.bn * 4);
        s = Walk(c.grid, [&](int cta) {
          return StreamKScheduler(tm, tn, int(batch), 8, kb, c.sk_tiles, c.grid, cta);
        });
        break;
    }
    CheckSchedule(s, std::vector<ProblemGrid>(batch, {tm, tn, kb}), c.workspace_slots, c.grid, sms);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(reducing, 100);
  EXPECT_GT(separate, 50);
  EXPECT_GT(paired, 20);
  EXPECT_GT(multicast, 20);
}

// Paired split-K at the edges: K of 2 and 3 k-blocks (odd: the halves
// differ by one), one tile, and as many tiles as pairs of SMs.
TEST(PairedSplitK, EveryTileIsOneClusterOfTwo) {
  for (int kb : {2, 3, 8, 15, 1000})
    for (int tiles_m : {1, 3, 8})
      for (int tiles_n : {1, 5, 8}) {
        CheckPairedSplitK(tiles_m, tiles_n, 1, kb);
        if (HasFatalFailure()) return;
      }
}

// Shapes whose tiles fill whole waves, or many waves, never take a reducing
// schedule (the "no loss on shapes that tile well" rule).
TEST(Heuristic, WholeWavesStayDataParallel) {
  std::mt19937 rng(31);
  for (int iter = 0; iter < 3000; ++iter) {
    const int sms = 1 + rng() % 160;
    const int64_t waves = 1 + rng() % 12;
    // A 128 x 256-tiled grid of exactly waves x sms tiles.
    const int64_t tiles = waves * sms;
    int64_t tm = 1 + rng() % tiles;
    while (tiles % tm != 0) --tm;
    const int64_t m = 128 * tm, n = 256 * (tiles / tm), k = 64 * (1 + rng() % 512);
    const Sm90LaunchChoice c = ChooseSm90Launch(m, n, k, 1, 64, sms, true);
    ASSERT_EQ(c.schedule, Sm90Schedule::kDataParallel)
        << m << "x" << n << "x" << k << " on " << sms << " SMs";
  }
}

TEST(Heuristic, IssueShapes) {
  const int sms = 132;
  // Whole waves or many waves: data-parallel.
  EXPECT_EQ(ChooseSm90Launch(8192, 8192, 8192, 1, 64, sms, true).schedule,
            Sm90Schedule::kDataParallel);
  EXPECT_EQ(ChooseSm90Launch(4096, 4096, 4096, 1, 64, sms, true).schedule,
            Sm90Schedule::kDataParallel);
  // Wave quantization (H200, us): 3072^3 in two waves of
  // 192x192 tiles, data-parallel (86.6; its stream-K 95.7, 128x256 stream-K
  // 93.4); 4224^3 and 1920 x 1920 x 8192 stream-K on 192x192 (230.4 and
  // 93.7; data-parallel 239.1 and 106.4 there, 128x256 data-parallel 268.2
  // and 95.6).
  const Sm90LaunchChoice sq3072 = ChooseSm90Launch(3072, 3072, 3072, 1, 64, sms, true);
  EXPECT_EQ(sq3072.schedule, Sm90Schedule::kDataParallel);
  EXPECT_EQ(sq3072.tile, Sm90Tile::k192x192);
  const Sm90LaunchChoice sq4224 = ChooseSm90Launch(4224, 4224, 4224, 1, 64, sms, true);
  EXPECT_EQ(sq4224.schedule, Sm90Schedule::kStreamK);
  EXPECT_EQ(sq4224.tile, Sm90Tile::k192x192);
  const Sm90LaunchChoice wide1920 = ChooseSm90Launch(1920, 1920, 8192, 1, 64, sms, true);
  EXPECT_EQ(wide1920.schedule, Sm90Schedule::kStreamK);
  EXPECT_EQ(wide1920.tile, Sm90Tile::k192x192);
  // K-heavy: split-K.
  EXPECT_EQ(ChooseSm90Launch(256, 4096, 16384, 1, 64, sms, true).schedule,
            Sm90Schedule::kSplitK);
  EXPECT_EQ(ChooseSm90Launch(7, 8192, 8192, 1, 64, sms, true).schedule, Sm90Schedule::kSplitK);
  EXPECT_EQ(ChooseSm90Launch(128, 128, 65536, 1, 64, sms, true).schedule, Sm90Schedule::kSplitK);
  // One tile, K huge: many splits, every partial stored and summed by the
  // grid itself; with DRAM the limit, about one CTA per SM (measured 18.8 us
  // at 128 splits, 19.8 through the reduction kernel).
  const Sm90LaunchChoice one_tile = ChooseSm90Launch(128, 128, 65536, 1, 64, sms, true);
  EXPECT_TRUE(one_tile.separate_reduction);
  EXPECT_TRUE(one_tile.reduce_in_grid);
  // Few splits per tile leave each CTA several passes of sums: the
  // reduction kernel, or the in-kernel fixup.
  EXPECT_FALSE(ChooseSm90Launch(7, 8192, 8192, 1, 64, sms, true).reduce_in_grid);
  EXPECT_FALSE(ChooseSm90Launch(256, 4096, 16384, 1, 64, sms, true).reduce_in_grid);
  EXPECT_EQ(one_tile.tile, Sm90Tile::k128x128);
  EXPECT_GE(one_tile.splits, 96);
  EXPECT_EQ(ScheduleFlagBytes(one_tile), 256u);
  EXPECT_EQ(ScheduleWorkspaceBytes(one_tile), 256 + size_t(one_tile.splits) * 128 * 128 * 4);
  // 256 x 4096 x 16384: 64 square tiles split 2 in-kernel (measured 58.0 us
  // against 65.7 for 32 wide tiles split 4).
  const Sm90LaunchChoice wide = ChooseSm90Launch(256, 4096, 16384, 1, 64, sms, true);
  EXPECT_EQ(wide.tile, Sm90Tile::k128x128);
  EXPECT_EQ(wide.splits, 2);
  EXPECT_FALSE(wide.separate_reduction);
  // Skinny 7 x 8192 x 8192: B streams from DRAM; 128 CTAs of wide tiles
  // (split 4), whose partials hold 7 rows, reduced by the separate kernel
  // (measured 48.4 us against 58.9 in-kernel before rows were skipped).
  const Sm90LaunchChoice skinny = ChooseSm90Launch(7, 8192, 8192, 1, 64, sms, true);
  EXPECT_EQ(skinny.tile, Sm90Tile::k128x256);
  EXPECT_EQ(skinny.splits, 4);
  EXPECT_TRUE(skinny.separate_reduction);
  // Forced split-K (tests, benchmarks) always takes the reduction kernel.
  const Sm90LaunchChoice forced =
      MakeSm90Launch(Sm90Tile::k128x128, Sm90Schedule::kSplitK, 1000, 1000, 1000, 1, 64, sms);
  EXPECT_EQ(forced.schedule, Sm90Schedule::kSplitK);
  EXPECT_TRUE(forced.separate_reduction);
  EXPECT_EQ(forced.splits, 2);
  EXPECT_EQ(forced.grid, 128);
  // Short K without 2-CTA clusters: the fixed cost per unit dominates
  // (measured), data-parallel.
  EXPECT_EQ(ChooseSm90Launch(1000, 1000, 1000, 1, 64, sms, true).schedule,
            Sm90Schedule::kDataParallel);
  // ... with 2-CTA clusters too (split-K 2 measured slower at 16 k-blocks,
  // its fixup in shared memory or not: kernels/DESIGN.md).
  EXPECT_EQ(ChooseSm90Launch(1000, 1000, 1000, 1, 64, sms, false, 66).schedule,
            Sm90Schedule::kDataParallel);
  // Without a workspace, K-heavy: paired split-K, which needs none.
  const Sm90LaunchChoice pairs = ChooseSm90Launch(256, 4096, 16384, 1, 64, sms, false, 66);
  EXPECT_TRUE(pairs.cluster_pairs);
  EXPECT_EQ(pairs.grid, 128);
  EXPECT_EQ(ScheduleWorkspaceBytes(pairs), 0u);
  // Not when the device holds fewer pairs than there are tiles, nor where a
  // workspace allows the faster in-kernel split-K.
  EXPECT_FALSE(ChooseSm90Launch(256, 4096, 16384, 1, 64, sms, false, 63).cluster_pairs);
  EXPECT_FALSE(ChooseSm90Launch(256, 4096, 16384, 1, 64, sms, true, 66).cluster_pairs);
  // No workspace and no pairs: data-parallel always.
  EXPECT_EQ(ChooseSm90Launch(128, 128, 65536, 1, 64, sms, false).schedule,
            Sm90Schedule::kDataParallel);
}

// MulticastDataParallelLaunch's grids, every cooperative tile.
TEST(MulticastPairs, ClustersCoverEveryTileOnceInStep) {
  std::mt19937_64 rng(20261201);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const Sm90Tile tiles[] = {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x64,
                            Sm90Tile::k192x192};
  for (int t = 0; t < 3000; ++t) {
    const Sm90Tile tile = tiles[pick(0, 3)];
    const Sm90TileShape shape = ShapeOf(tile);
    const int64_t m = pick(1, 3000), n = pick(1, 5000), batch = pick(0, 3) == 0 ? pick(2, 9) : 1;
    const int sms = int(pick(2, 132)), kb = int(pick(1, 40));
    // The device's co-resident clusters: unknown (0) or fewer than sms / 2.
    const int max_clusters = pick(0, 1) ? 0 : int(pick(1, 66));
    const Sm90LaunchChoice c = MulticastDataParallelLaunch(tile, m, n, batch, sms, max_clusters);
    SCOPED_TRACE(testing::Message() << m << "x" << n << " batch " << batch << " tile "
                                    << shape.bm << "x" << shape.bn << " on " << sms << " SMs");
    ASSERT_TRUE(c.multicast_a);
    ASSERT_EQ(c.schedule, Sm90Schedule::kDataParallel);
    ASSERT_EQ(c.grid % 2, 0);
    ASSERT_LE(c.grid, std::max(2, sms - sms % 2));
    if (max_clusters > 0) ASSERT_LE(c.grid / 2, max_clusters);
    const int tm = int((m + shape.bm - 1) / shape.bm), tn = int((n + shape.bn - 1) / shape.bn);
    CheckMulticastPairs(tm, tn, int(batch), kb, c.grid / 2);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace gemm_kernels
