// The schedule choice of the sm90 heuristic (data-parallel, stream-K,
// split-K, multicast, paired split-K), workspace sizes and the FP8 launch;
// the tile choice is in tile_choice.cc.
#include "kernels/config/heuristic.h"

#include <algorithm>

#include "kernels/config/tile_model.h"
#include "kernels/scheduler/column_pairs.h"
#include "kernels/scheduler/stream_k_scheduler.h"

namespace gemm_kernels {

namespace {

// Costs are in iterations: one k-block of a 128x256 tile at the tensor
// cores' rate, ~0.7 us on an H200 SM (4.2 MFLOP at ~6 TFLOP/s per SM).
//
// NOTES: stream-K fixup. Storing a partial tile is about one iteration of the
// tile at hand; reducing one means a flag wait plus reading it back from L2,
// counted as two. Besides those, a stream-K CTA spends a fixed
// kStreamKFixedIters (~8 us; the same on every tile): fitted to five hybrid
// launches measured together (H200; 4224^3 on 128x256, 128x128 and
// 192x192, 3072^3 on 128x256 and 192x192), which it puts within 1.5% each,
// where the earlier factor of 1.15 on the stream-K part (kernels/DESIGN.md)
// was off by ~10 iterations on the long 192x192 ranges. Per-CTA stamps
// counted ~8.6 us of fixup per stream-K CTA.
constexpr double kStoreIters = 1.0;
constexpr double kReduceIters = 2.0;
constexpr double kStreamKFixedIters = 10.0;
// NOTES: stream-K CTAs work at scattered k positions of their tiles, where
// data-parallel waves move through k in near lockstep, so they reuse operands
// through L2 only while the operands stay resident. Measured (H200): as
// modelled up to 75 MB of A and B (4224^3, 2304 x 2304 x 8192), but 2816 x 2816 x 8192 (92 MB, every tile stream-K) ran 1.13-1.26x
// the modelled stream-K ranges on the three tiles (128x256: 227.6 us
// against 192.6 data-parallel). Past kStreamKResidentBytes the ranges cost
// kStreamKOutOfL2Factor times their iterations.
constexpr double kStreamKResidentBytes = 80e6;
constexpr double kStreamKOutOfL2Factor = 1.25;
// NOTES: a reducing schedule must be estimated 3% faster than data-parallel.
// With the refit above, the stream-K estimates of those five launches came
// within 1.5% of the measured times; 5% (before it) kept 4224^3 and 1920 x
// 1920 x 8192 data-parallel, where stream-K on 192x192 measured 3.6% and 2%
// faster.
constexpr double kReductionMargin = 0.97;
// NOTES: streaming. When a k-loop's operands come from DRAM rather than from
// L2 reuse, each CTA is bound by its ring: `stages` k-blocks in flight, each
// waiting a loaded latency of ~1.65 us, so a k-block costs at least
// latency / stages (TileModel::latency_iters_per_kblock); and the whole grid
// by DRAM, ~3.8 TB/s for these patterns (2.66 MB per iteration). Both
// fitted to split-count sweeps on the
// H200 (kernels/DESIGN.md: 7 x 8192 x 8192 and 128 x 128 x 65536 at 16-132
// CTAs; the time was the per-CTA term plus the DRAM term).
constexpr double kDramBytesPerIter = 2.66e6;
// NOTES: in-kernel split-K: the finalizer of each tile waits for and reads
// splits - 1 partials in series; fitted as 4 iterations to store and 4 per
// partial read (256 x 4096 x 16384 and the skinny sweep), scaled by the rows
// the partials hold where rows past M are skipped.
constexpr double kSplitStoreIters = 4.0;
constexpr double kSplitReduceIters = 4.0;
constexpr int kMaxSplits = 32;
// NOTES: separate reduction kernel (scheduler/split_k_reduce.h): a second
// launch behind programmatic dependent launch (~4 iterations) and the
// partials written and read back through L2 (~7 TB/s: 5 MB per iteration).
// On 128 x 128 x 65536 the model is flat from ~60 splits up; measured, 128
// splits ran 18.1 us in two device calls while 52-88 ranged 17.4-21.1.
constexpr double kReduceLaunchIters = 4.0;
constexpr double kPartialBytesPerIter = 5.0e6;
// NOTES: split-K summed in the grid (reduce_in_grid): the same partial
// bytes, but a grid-wide count and the CTAs' own sums in place of the second
// launch. Only where each CTA's share of the output takes one pass of its
// consumer threads (GridSumOnePass); with several, each pass waits on L2 in
// turn (H200, us, reduction kernel / summed in the grid: 128 x
// 128 x 65536 split-K 128 19.8 / 18.8, 128 x 128 x 65472 19.6 / 18.6; 256 x
// 4096 x 16384 128x128 split-K 2 66.0 / 74.3, 7 x 8192 x 8192 128x256
// split-K 4 42.7 / 49.8). In the one-pass cases of calls 5 and 6 it was
// faster in 9 of 12 same-call pairs (0.7-2.2 us, once 4.8) and slower in 3
// by 0.2-0.3 us (128 x 128 x 65536 split-K 128: 18.8 / 19.8 and 18.5 /
// 18.3): ~1.5 iterations less than the second launch. Not the 2-4 us predicted:
// the partials' 8 MB still go to L2 and back, and the count waits for the
// slowest CTA's stores to drain.
constexpr double kGridSumIters = 2.5;
// Splits of at least this many k-blocks each (pipeline fill per split).
constexpr int64_t kMinKBlocksPerSplit = 4;
// NOTES: below 32 k-blocks (K < 2048 for 16-bit inputs) the fixed costs of a
// unit (pipeline fill, epilogue) dominate and reducing schedules lost on the
// H200 (1000^3: data-parallel 75 TFLOP/s, split-K 70, stream-K 66).
constexpr int64_t kMinReductionKBlocks = 32;
// NOTES: paired split-K (cluster_pairs) keeps the partial in the SM pair:
// the finalizer reads 64 KB from its peer's shared memory, where the
// workspace fixup stores, fences, flags, polls and reads back through L2. It
// was built to remove the 3.0-3.8 us by which in-kernel split-K 2 exceeds
// its halved k-loop (1024 x 1024 x K, H200) and measured no
// faster: 0.35-0.9 us slower than the workspace fixup on 1000^3, 1000 x 1000
// x 2000, 1024 x 1024 x 4096 and 256 x 4096 x 16384 (its partial CTA
// stays resident until the finalizer has read). So those microseconds are
// not the fixup; the likely cause is that a 128-CTA grid leaves no SM free on
// which the next launch can start early (programmatic dependent launch),
// where data-parallel's 64 CTAs leave 68. Its use: split-K where no workspace
// is given (it needs none, and its CTAs wait only on their cluster peer, so
// it is safe beside other kernels). Costed as in-kernel split-K 2 plus the
// measured difference (~0.9 us).
constexpr double kPairExtraIters = 1.5;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The tile pairs an A-multicast launch's clusters walk (column_pairs.h).
int64_t TilePairs(Sm90Tile tile, int64_t m, int64_t n, int64_t batch) {
  const Sm90TileShape s = ShapeOf(tile);
  return batch * CeilDiv(m, s.bm) * PairColumns(static_cast<int>(CeilDiv(n, s.bn)));
}

struct Candidate {
  Sm90LaunchChoice choice;
  double cost;
};

// The problem as the cost model sees it.
struct Problem {
  int64_t m, n, k, batch;
  int bk;
  int sms;
  Sm90RowAlignment rows = {};
  int64_t k_blocks() const { return CeilDiv(k, bk); }
  // Bytes per element: 16-bit inputs when bk == 64, fp32 when bk == 32.
  double elem() const { return 128.0 / (bk < 1 ? 64 : bk); }
  // A and B once: what DRAM must deliver at least.
  double unique_bytes() const { return double(batch) * double(m + n) * double(k) * elem(); }
  int64_t tiles(Sm90Tile tile) const { return TileCount(tile, m, n, batch); }
  // Rows of a tile that hold data (a skinny M fills only these).
  int64_t tile_rows(Sm90Tile tile) const { return std::min<int64_t>(m, ShapeOf(tile).bm); }
  // Fraction of the bytes the tiles' k-loops load that DRAM has to deliver
  // (1: no reuse between tiles; near 0: operands reused from L2).
  double dram_fraction(Sm90Tile tile) const {
    const Sm90TileShape s = ShapeOf(tile);
    const double loaded = double(tiles(tile)) * double(k_blocks()) * bk * elem() *
                          double(tile_rows(tile) + std::min<int64_t>(n, s.bn));
    return loaded > 0 ? std::min(1.0, unique_bytes() / loaded) : 1.0;
  }
};

// One CTA's k-loop over `kb` k-blocks of `tile` (all its waves): the tensor
// cores' time, its L2 requests' time (RequestItersPerKBlock), or the
// streaming time where operands come from DRAM.
double LoopIters(const Problem& p, Sm90Tile tile, int64_t kb, bool multicast_a = false) {
  const double mma =
      double(kb) *
      std::max(TileCostScale(tile), RequestItersPerKBlock(tile, p.m, p.n, p.rows, multicast_a));
  const double stream = p.dram_fraction(tile) * double(kb) * ModelOf(tile).latency_iters_per_kblock +
                        p.unique_bytes() / kDramBytesPerIter;
  return std::max(mma, stream);
}

Candidate DataParallel(const Problem& p, Sm90Tile tile) {
  Candidate c;
  c.choice.tile = tile;
  const int64_t tiles = p.tiles(tile);
  c.choice.grid = PersistentGridSize(tiles, p.sms);
  c.cost = LoopIters(p, tile, CeilDiv(tiles, p.sms) * p.k_blocks());
  return c;
}

}  // namespace

StreamKSplit ChooseStreamKSplit(int64_t tiles, int64_t k_blocks, int sms, bool forced) {
  if (k_blocks < kMinStreamKKBlocks || sms < 1) return {};
  const int64_t sk_tiles = HybridStreamKTiles(tiles, sms);
  // With more CTAs than iterations (split-K's ground) the hybrid split
  // would leave CTAs without a k-block.
  if (sk_tiles > 0 && sk_tiles * k_blocks / sms >= 1) return {sk_tiles, sms};
  if (forced && tiles < sms) {
    return {tiles, static_cast<int>(std::min<int64_t>(tiles * k_blocks, sms))};
  }
  return {};
}

namespace {

// Stream-K on `tile` as ChooseStreamKSplit splits it (data-parallel where it
// does not apply).
Sm90LaunchChoice StreamKChoice(Sm90Tile tile, const StreamKSplit& split, int dp_grid) {
  Sm90LaunchChoice c;
  c.tile = tile;
  c.grid = dp_grid;
  if (split.sk_tiles == 0) return c;
  c.schedule = Sm90Schedule::kStreamK;
  c.sk_tiles = split.sk_tiles;
  c.grid = split.grid;
  c.workspace_slots = split.grid;
  return c;
}

// The hybrid schedule: data-parallel waves, then stream-K over the last
// partial wave plus one full wave (ChooseStreamKSplit), with its cost.
Candidate StreamK(const Problem& p, Sm90Tile tile) {
  Candidate c = DataParallel(p, tile);
  const int64_t tiles = p.tiles(tile), kb = p.k_blocks();
  const int sms = p.sms;
  const StreamKSplit split = ChooseStreamKSplit(tiles, kb, sms, false);
  if (split.sk_tiles == 0) return c;
  const int64_t sk_tiles = split.sk_tiles;
  const int64_t dp_waves = (tiles - sk_tiles) / sms;
  const int64_t per_cta_min = sk_tiles * kb / sms;
  const int64_t per_cta = CeilDiv(sk_tiles * kb, sms);
  const int64_t peers = CeilDiv(kb, per_cta_min);  // CTAs touching one tile, at most
  c.choice = StreamKChoice(tile, split, c.choice.grid);
  const double fixup = kStoreIters + double(peers - 1) * kReduceIters;
  const double range =
      double(per_cta) * (p.unique_bytes() > kStreamKResidentBytes ? kStreamKOutOfL2Factor : 1.0);
  c.cost = (double(dp_waves * kb) + range + fixup) * TileCostScale(tile) + kStreamKFixedIters;
  // Streaming operands from DRAM, stream-K is bound like any k-loop.
  const double streaming =
      LoopIters(p, tile, dp_waves * kb + per_cta) + fixup * TileCostScale(tile) +
      kStreamKFixedIters;
  c.cost = std::max(c.cost, streaming);
  return c;
}

// SplitKCostIters for a Problem (its `sms` plays no part).
double SplitKCost(const Problem& p, Sm90Tile tile, int splits, bool separate_reduction) {
  const double loop = LoopIters(p, tile, CeilDiv(p.k_blocks(), splits));
  const double rows = double(p.tile_rows(tile));
  if (!separate_reduction) {
    // Rows past M are not stored; the 128x256 finalizer still reads them
    // (kernels/sm90/gemm_kernel.cuh, ReducePartials).
    const double row_share = rows / ShapeOf(tile).bm;
    const double read_share = tile == Sm90Tile::k128x256 ? 1.0 : row_share;
    const double reduce = kSplitStoreIters * row_share +
                          double(splits - 1) * kSplitReduceIters * read_share;
    return loop + reduce * TileCostScale(tile);
  }
  const double partial_bytes = double(p.tiles(tile)) * splits * rows * ShapeOf(tile).bn * 4.0;
  return loop + kReduceLaunchIters + 2.0 * partial_bytes / kPartialBytesPerIter;
}

// Whether each CTA of a grid-summed split-K launch sums its share of the
// output (bm x bn / 4 / splits quads) in one pass of its consumer threads.
bool GridSumOnePass(Sm90Tile tile, int splits) {
  const Sm90TileShape s = ShapeOf(tile);
  return s.bm * s.bn / 4 <= int64_t(128) * (s.bm / 64) * splits;
}

// Split-K over one wave (tiles x splits <= SMs). `in_kernel` / `separate` /
// `grid_sum`: which reductions to consider (the last two store every
// split's partial; the reduction kernel or the grid itself sums them).
Candidate SplitK(const Problem& p, Sm90Tile tile, bool in_kernel, bool separate, bool grid_sum) {
  Candidate best = DataParallel(p, tile);
  const int64_t tiles = p.tiles(tile), kb = p.k_blocks();
  auto consider = [&](const Sm90LaunchChoice& choice, double cost) {
    if (best.choice.schedule == Sm90Schedule::kDataParallel || cost < best.cost) {
      best.choice = choice;
      best.cost = cost;
    }
  };
  for (int s = 2; s <= kb && tiles * s <= p.sms; ++s) {
    for (const bool sep : {false, true}) {
      if (sep ? !separate : (!in_kernel || s > kMaxSplits)) continue;
      if (sep && s > 2 && CeilDiv(kb, s) < kMinKBlocksPerSplit) continue;
      const double cost = SplitKCost(p, tile, s, sep);
      consider(SplitKLaunch(tile, tiles, s, sep), cost);
      if (sep && grid_sum && GridSumOnePass(tile, s)) {
        consider(GridSummedSplitKLaunch(tile, tiles, s), cost - kReduceLaunchIters + kGridSumIters);
      }
    }
  }
  return best;
}

// Data-parallel with A multicast (MulticastDataParallelLaunch): the clusters
// walk pairs of n-tiles, each CTA requesting half of A's rows.
Candidate MulticastDataParallel(const Problem& p, Sm90Tile tile, int max_clusters) {
  Candidate c;
  c.choice = MulticastDataParallelLaunch(tile, p.m, p.n, p.batch, p.sms, max_clusters);
  const int64_t waves = CeilDiv(TilePairs(tile, p.m, p.n, p.batch), c.choice.grid / 2);
  c.cost = LoopIters(p, tile, waves * p.k_blocks(), true);
  return c;
}

// Paired split-K (PairedSplitKLaunch), when every tile's pair fits at once.
Candidate PairedSplitK(const Problem& p, int max_pairs) {
  constexpr Sm90Tile kTile = Sm90Tile::k128x128;
  Candidate c = DataParallel(p, kTile);
  const int64_t tiles = p.tiles(kTile);
  if (tiles > max_pairs || 2 * tiles > p.sms) return c;
  c.choice = PairedSplitKLaunch(tiles);
  c.cost = SplitKCost(p, kTile, 2, false) + kPairExtraIters;
  return c;
}

}  // namespace

double SplitKCostIters(Sm90Tile tile, int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                       int splits, bool separate_reduction) {
  return SplitKCost(Problem{m, n, k, batch, bk, 1}, tile, splits, separate_reduction);
}

Sm90LaunchChoice SplitKLaunch(Sm90Tile tile, int64_t tiles, int splits, bool separate_reduction) {
  Sm90LaunchChoice c;
  c.tile = tile;
  c.schedule = Sm90Schedule::kSplitK;
  c.splits = splits;
  c.separate_reduction = separate_reduction;
  c.sk_tiles = tiles;  // launched as stream-K over tiles x splits CTAs
  c.grid = static_cast<int>(tiles * splits);
  c.workspace_slots = tiles * splits;  // one per CTA (stream-K slots)
  return c;
}

Sm90LaunchChoice GridSummedSplitKLaunch(Sm90Tile tile, int64_t tiles, int splits) {
  Sm90LaunchChoice c = SplitKLaunch(tile, tiles, splits, true);
  c.reduce_in_grid = true;
  return c;
}

Sm90LaunchChoice MulticastDataParallelLaunch(Sm90Tile tile, int64_t m, int64_t n, int64_t batch,
                                             int num_sms, int max_clusters) {
  const int64_t pairs = TilePairs(tile, m, n, batch);
  int clusters = std::max(1, num_sms / 2);
  if (max_clusters > 0) clusters = std::min(clusters, max_clusters);
  Sm90LaunchChoice c;
  c.tile = tile;
  c.multicast_a = true;
  c.grid = 2 * PersistentGridSize(pairs, clusters);
  return c;
}

Sm90LaunchChoice PairedSplitKLaunch(int64_t tiles) {
  Sm90LaunchChoice c = SplitKLaunch(Sm90Tile::k128x128, tiles, 2, false);
  c.cluster_pairs = true;
  c.workspace_slots = 0;  // the partials stay in shared memory
  return c;
}

Sm90LaunchChoice ChooseSm90Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                                  int num_sms, bool allow_reduction, int max_pairs,
                                  const Sm90RowAlignment& rows) {
  if (num_sms < 1) num_sms = 1;
  const Problem p{m, n, k, batch, bk, num_sms, rows};
  const Sm90Tile dp_tile = ChooseSm90Tile(m, n, k, batch, num_sms);
  Candidate best = DataParallel(p, dp_tile);
  const double dp_cost = best.cost;
  // Reducing and multicast launches must beat plain data-parallel by the
  // margin.
  auto consider = [&](const Candidate& c) {
    const bool plain = c.choice.schedule == Sm90Schedule::kDataParallel && !c.choice.multicast_a;
    if (!plain && c.cost < kReductionMargin * dp_cost && c.cost < best.cost) best = c;
  };
  // NOTES: A multicast pays where A's rows are off the sector grid (H200;
  // us, plain / multicast): 3000^3 192x192 112.2 / 88.3,
  // 128x128 165.5 / 126.5; 5000^3 192x192 547.7 / 429.8; 2048 x 2048 x 2040
  // (one wave) 41.0 / 33.7; 8192 x 8192 x 1000 (16 k-blocks, 15 waves)
  // 278.9 / 232.2 against 298.4 for the plain choice, 128x256. Elsewhere it
  // costs: aligned 3072^3 128x128 103.6 / 113.0, 128x64 165.6 / 194.1; on
  // 1000^3 (one partial wave of 16 k-blocks) 128x128 11.5 / 11.5 and 128x64
  // 13.7 / 11.4-11.9, within the calls' noise of each other: short K in one
  // wave keeps its plain choice.
  const bool multicast_pays = p.k_blocks() >= kMinReductionKBlocks || p.tiles(dp_tile) > num_sms;
  if (rows.a_off_sector && multicast_pays && max_pairs > 0) {
    for (Sm90Tile tile :
         {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x64, Sm90Tile::k192x192}) {
      if (tile == Sm90Tile::k192x192 && !rows.a_k_major) continue;
      consider(MulticastDataParallel(p, tile, max_pairs));
    }
  }
  if (p.k_blocks() < kMinReductionKBlocks) return best.choice;
  if (!allow_reduction) {
    consider(PairedSplitK(p, max_pairs));
    return best.choice;
  }
  for (Sm90Tile tile : {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k192x192}) {
    consider(StreamK(p, tile));
    consider(SplitK(p, tile, true, true, true));
  }
  return best.choice;
}

Sm90LaunchChoice MakeSm90Launch(Sm90Tile tile, Sm90Schedule schedule, int64_t m, int64_t n,
                                int64_t k, int64_t batch, int bk, int num_sms) {
  if (num_sms < 1) num_sms = 1;
  const Problem p{m, n, k, batch, bk, num_sms};
  const int64_t kb = p.k_blocks();
  const int64_t tiles = p.tiles(tile);
  if (tile == Sm90Tile::k128x128PingPong) schedule = Sm90Schedule::kDataParallel;
  switch (schedule) {
    case Sm90Schedule::kDataParallel:
      break;
    case Sm90Schedule::kStreamK:
      return StreamKChoice(tile, ChooseStreamKSplit(tiles, kb, num_sms, true),
                           DataParallel(p, tile).choice.grid);
    case Sm90Schedule::kSplitK: {
      // Data-parallel where two splits of every tile would not fit one wave.
      return SplitK(p, tile, false, true, false).choice;
    }
  }
  return DataParallel(p, tile).choice;
}

size_t ScheduleFlagBytes(int64_t slots) {
  return static_cast<size_t>((slots * kFlagWordsPerSlot * 4 + 255) / 256 * 256);
}

size_t ScheduleFlagBytes(const Sm90LaunchChoice& c) {
  if (c.schedule == Sm90Schedule::kDataParallel || c.workspace_slots == 0) return 0;
  // No flags, but the first 256 bytes stay reserved (the counters of a
  // grid-summed launch: ScheduleWorkspaceBytes).
  if (c.schedule == Sm90Schedule::kSplitK && c.separate_reduction) return 256;
  return ScheduleFlagBytes(c.workspace_slots);
}

size_t ScheduleWorkspaceBytes(const Sm90LaunchChoice& c) {
  if (c.schedule == Sm90Schedule::kDataParallel || c.workspace_slots == 0) return 0;
  const Sm90TileShape s = ShapeOf(c.tile);
  return ScheduleFlagBytes(c) +
         static_cast<size_t>(c.workspace_slots) * s.bm * s.bn * sizeof(float);
}

int ChooseGroupM(int64_t tiles_m, int64_t tiles_n) {
  // Groups of 8 tile-rows: 8 A panels and the B panels they meet stay in L2
  // for the large square problems; smaller grids fit in L2 anyway. Groups of
  // 16 read 21% less from DRAM on 4096^3 but ran no faster, alone at the
  // power cap or interleaved (kernels/DESIGN.md), so 8 stays.
  (void)tiles_n;
  return static_cast<int>(std::min<int64_t>(8, std::max<int64_t>(1, tiles_m)));
}

int PersistentGridSize(int64_t total_tiles, int num_sms) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(total_tiles, num_sms)));
}

Sm90Fp8Launch ChooseSm90Fp8Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int num_sms,
                                  bool block_scales, const Sm90Tile* tile) {
  constexpr int kFp8Bk = 128;
  Sm90Fp8Launch out;
  const Sm90Tile chosen = tile != nullptr ? *tile : Sm90Tile::k128x128;
  out.launch = MakeSm90Launch(chosen, Sm90Schedule::kDataParallel, m, n, k, batch, kFp8Bk,
                              num_sms);
  // The direct 128x256 kernel has no temporary; block scales need a
  // promotion per k-block whatever the policy.
  out.promote_every = block_scales ? 1 : kFp8PromoteEvery;
  return out;
}

}  // namespace gemm_kernels
